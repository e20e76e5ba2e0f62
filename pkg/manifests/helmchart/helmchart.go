// Package helmchart generates the Helm chart in charts/baremetal-ccm from pkg/manifests,
// so the chart and `baremetal-ccmctl manifests` cannot drift apart.
//
// Every template is the YAML that pkg/manifests renders (what the ctl prints), made with
// sentinel options whose values are then replaced by template expressions of the
// chart's values. What an option adds only when set (the API server's environment, the
// agent's host directory) is found by rendering with and without it and comparing the
// lines: the added lines are wrapped in a condition, so the template yields exactly the
// one or the other rendering. values.yaml is generated from the ctl's defaults. A test
// here keeps the checked-in files equal to Files (go test ./pkg/manifests/helmchart
// -update rewrites them); test/helm renders the chart with helm for several value sets
// and compares every object with the ctl's output for the equivalent flags.
package helmchart

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"strings"
	"text/template"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
)

// Sentinels are option values that cannot occur in a rendering otherwise; each is
// replaced by a template expression. Numbers are in no default and no fixed field.
const (
	sImage         = "sentinel.invalid/ccm:image"
	sConfigMap     = "sentinel-configmap"
	sConfigDir     = "/sentinel-configdir"
	sReplicas      = 47101
	sSecurePort    = 47102
	sAPIHost       = "sentinel-apihost"
	sAPIPort       = "47103"
	sExtraArg      = "sentinel-extra-arg"
	sAgentImage    = "sentinel.invalid/agent:image"
	sAgentCM       = "sentinel-agent-configmap"
	sAgentDir      = "/sentinel-agent-configdir"
	sHostDir       = "/sentinel-hostdir"
	sServingPort   = 47111
	sMetalLBNSName = "sentinel-metallb-namespace"
)

// Files returns the generated files of the chart by their path in the chart's
// directory: values.yaml, the templates and the CRDs. It fails when a sentinel survives or a
// rendering cannot be expressed as the base rendering plus conditional lines.
func Files() (map[string][]byte, error) {
	files := map[string][]byte{}
	var err error
	if files["values.yaml"], err = values(); err != nil {
		return nil, err
	}
	files["templates/_helpers.tpl"] = []byte(helpers)
	// Helm installs crds/ before the templates (and never upgrades or deletes them:
	// docs/install.md says how to apply a new version's).
	files["crds/baremetal-ccm.io.yaml"] = manifests.CRDs()
	for name, gen := range map[string]func() ([]byte, error){
		"templates/rbac.yaml":            rbacTemplate,
		"templates/rbac-agent.yaml":      agentRBACTemplate,
		"templates/rbac-metallb.yaml":    metalLBRBACTemplate,
		"templates/deployment.yaml":      deploymentTemplate,
		"templates/agent-daemonset.yaml": agentDaemonSetTemplate,
	} {
		data, err := gen()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if leftover := sentinelRE.Find(data); leftover != nil {
			return nil, fmt.Errorf("%s: sentinel %q left in the template", name, leftover)
		}
		files[name] = data
	}
	return files, nil
}

var sentinelRE = regexp.MustCompile(`sentinel[-.][a-z.-]*|4710[0-9]|4711[0-9]`)

// header is the first line of every template (a template comment: it is not rendered).
func header(cmd string) string {
	return "{{- /* Generated from pkg/manifests, the source of `baremetal-ccmctl manifests " + cmd +
		"`.\n     Do not edit: change the generator (pkg/manifests/helmchart) and run\n     go test ./pkg/manifests/helmchart -update. */}}\n"
}

func rbacTemplate() ([]byte, error) {
	data, err := manifests.YAML(manifests.RBAC()...)
	if err != nil {
		return nil, err
	}
	return wrap(header("rbac")+"{{- if .Values.rbac.create }}\n", data, "{{- end }}\n"), nil
}

func agentRBACTemplate() ([]byte, error) {
	data, err := manifests.YAML(manifests.AgentRBAC()...)
	if err != nil {
		return nil, err
	}
	return wrap(header("agent-rbac")+"{{- if .Values.rbac.agent }}\n", data, "{{- end }}\n"), nil
}

func metalLBRBACTemplate() ([]byte, error) {
	data, err := manifests.YAML(manifests.MetalLBRBAC(sMetalLBNSName)...)
	if err != nil {
		return nil, err
	}
	data, err = substitute(data, []sub{{token: sMetalLBNSName, expr: "{{ .Values.rbac.metallb.namespace | quote }}", scalar: true}})
	if err != nil {
		return nil, err
	}
	return wrap(header("rbac-metallb --namespace NS")+"{{- if .Values.rbac.metallb.enabled }}\n", data, "{{- end }}\n"), nil
}

func wrap(head string, body []byte, tail string) []byte {
	return []byte(head + "---\n" + string(body) + tail)
}

func deploymentTemplate() ([]byte, error) {
	opts := func(apiServer string) manifests.DeploymentOptions {
		return manifests.DeploymentOptions{
			Image: sImage, Replicas: sReplicas, ConfigMap: sConfigMap, ConfigDir: sConfigDir,
			SecurePort: sSecurePort, APIServer: apiServer, ExtraArgs: []string{sExtraArg},
		}
	}
	render := func(o manifests.DeploymentOptions) ([]string, error) {
		d, err := manifests.Deployment(o)
		if err != nil {
			return nil, err
		}
		return yamlLines(d)
	}
	body, err := conditional(func() ([]string, error) { return render(opts("")) }, []feature{
		apiServerFeature(func(api string) ([]string, error) { return render(opts(api)) }),
	})
	if err != nil {
		return nil, err
	}
	body, err = substitute(body, append([]sub{
		{token: sImage, expr: "{{ $d.image | quote }}", scalar: true},
		{token: sConfigDir + "/cloud-config.yaml", expr: `{{ clean (printf "%s/cloud-config.yaml" $d.configDir) }}`},
		{token: sConfigDir, expr: "{{ $d.configDir }}"},
		{token: sConfigMap, expr: "{{ $d.configMap | quote }}", scalar: true},
		{token: fmt.Sprint(sReplicas), expr: "{{ int $d.replicas }}"},
		{token: fmt.Sprint(sSecurePort), expr: "{{ int $d.securePort }}"},
	}, apiServerSubs...))
	if err != nil {
		return nil, err
	}
	body, err = extraArgs(body, "$d.extraArgs")
	if err != nil {
		return nil, err
	}
	head := header("deployment") + `{{- $d := .Values.deployment }}
{{- include "baremetal-ccm.positive" (list "deployment.replicas" $d.replicas 1000) }}
{{- include "baremetal-ccm.positive" (list "deployment.securePort" $d.securePort 65535) }}
{{- include "baremetal-ccm.absolute" (list "deployment.configDir" $d.configDir) }}
{{- $api := include "baremetal-ccm.apiServer" (list "deployment.apiServer" $d.apiServer) }}
{{- $apiPort := regexFind "[0-9]+$" $api }}
{{- $apiHost := trimSuffix (printf ":%s" $apiPort) $api | trimPrefix "[" | trimSuffix "]" }}
---
`
	return []byte(head + string(body)), nil
}

func agentDaemonSetTemplate() ([]byte, error) {
	opts := func(hostDir, apiServer string) manifests.AgentDaemonSetOptions {
		return manifests.AgentDaemonSetOptions{
			Image: sAgentImage, ConfigMap: sAgentCM, ConfigDir: sAgentDir, HostDir: hostDir,
			ServingPort: sServingPort, APIServer: apiServer, ExtraArgs: []string{sExtraArg},
		}
	}
	render := func(o manifests.AgentDaemonSetOptions) ([]string, error) {
		d, err := manifests.AgentDaemonSet(o)
		if err != nil {
			return nil, err
		}
		return yamlLines(d)
	}
	body, err := conditional(func() ([]string, error) { return render(opts("", "")) }, []feature{
		{name: "hostDir", variants: []variant{{cond: "$a.hostDir", render: func() ([]string, error) { return render(opts(sHostDir, "")) }}}},
		apiServerFeature(func(api string) ([]string, error) { return render(opts("", api)) }),
	})
	if err != nil {
		return nil, err
	}
	body, err = substitute(body, append([]sub{
		{token: sAgentImage, expr: "{{ $image | quote }}", scalar: true},
		{token: sAgentDir + "/cloud-config.yaml", expr: `{{ clean (printf "%s/cloud-config.yaml" $a.configDir) }}`},
		{token: sAgentDir, expr: "{{ $a.configDir }}"},
		{token: sAgentCM, expr: "{{ $a.configMap | quote }}", scalar: true},
		{token: path.Join(manifests.HostMountPrefix, sHostDir), expr: "{{ $hostMount }}"},
		{token: sHostDir, expr: "{{ $a.hostDir }}"},
		{token: fmt.Sprint(sServingPort), expr: "{{ int $a.servingPort }}"},
	}, apiServerSubs...))
	if err != nil {
		return nil, err
	}
	body, err = extraArgs(body, "$a.extraArgs")
	if err != nil {
		return nil, err
	}
	head := header("agent-daemonset") + `{{- if .Values.agent.enabled }}
{{- $a := .Values.agent }}
{{- $image := $a.image | default .Values.deployment.image }}
{{- include "baremetal-ccm.positive" (list "agent.servingPort" $a.servingPort 65535) }}
{{- include "baremetal-ccm.absolute" (list "agent.configDir" $a.configDir) }}
{{- $hostMount := "" }}
{{- if $a.hostDir }}
{{- include "baremetal-ccm.absolute" (list "agent.hostDir" $a.hostDir) }}
{{- $hostMount = clean (printf "%s/%s" "` + manifests.HostMountPrefix + `" $a.hostDir) }}
{{- include "baremetal-ccm.apart" (list $a.configDir $hostMount) }}
{{- end }}
{{- $api := include "baremetal-ccm.apiServer" (list "agent.apiServer" $a.apiServer) }}
{{- $apiPort := regexFind "[0-9]+$" $api }}
{{- $apiHost := trimSuffix (printf ":%s" $apiPort) $api | trimPrefix "[" | trimSuffix "]" }}
---
`
	return []byte(head + string(body) + "{{- end }}\n"), nil
}

// apiServerFeature is the API server option: "host:port" sets the in-cluster
// configuration's variables to them, ":port" the host to the node's address.
func apiServerFeature(render func(apiServer string) ([]string, error)) feature {
	return feature{name: "apiServer", variants: []variant{
		{cond: `hasPrefix ":" $api`, render: func() ([]string, error) { return render(":" + sAPIPort) }},
		{cond: "$api", render: func() ([]string, error) { return render(sAPIHost + ":" + sAPIPort) }},
	}}
}

var apiServerSubs = []sub{
	{token: sAPIHost, expr: "{{ $apiHost | quote }}", scalar: true},
	{token: sAPIPort, expr: "{{ $apiPort }}"},
}

// yamlLines renders an object as manifests.YAML does, split into lines.
func yamlLines(obj any) ([]string, error) {
	data, err := manifests.YAML(obj)
	if err != nil {
		return nil, err
	}
	lines := strings.SplitAfter(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines, nil
}

// A feature is an option whose variants each add lines to the base rendering (the
// one without the feature); variants are tried in order (if, else if).
type feature struct {
	name     string
	variants []variant
}

type variant struct {
	cond   string // a template expression
	render func() ([]string, error)
}

// conditional returns the base rendering with each feature's added lines inserted
// under their conditions. A variant's rendering must be the base plus inserted lines;
// two features may not insert at the same place (their order would be undefined).
func conditional(base func() ([]string, error), features []feature) ([]byte, error) {
	b, err := base()
	if err != nil {
		return nil, err
	}
	// at[i] is what goes before base line i (i == len(b): at the end).
	type block struct {
		feature string
		hunks   []string // per variant
		conds   []string
	}
	at := map[int]*block{}
	for _, f := range features {
		for vi, v := range f.variants {
			on, err := v.render()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.name, err)
			}
			ins, err := insertions(b, on)
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", f.name, v.cond, err)
			}
			for i, lines := range ins {
				blk := at[i]
				if blk == nil {
					blk = &block{feature: f.name, hunks: make([]string, len(f.variants)), conds: make([]string, len(f.variants))}
					at[i] = blk
				}
				if blk.feature != f.name {
					return nil, fmt.Errorf("%s and %s add lines at the same place (before %q)", blk.feature, f.name, lineAt(b, i))
				}
				blk.hunks[vi] = strings.Join(lines, "")
				blk.conds[vi] = v.cond
			}
		}
	}
	var out strings.Builder
	for i := 0; i <= len(b); i++ {
		if blk := at[i]; blk != nil {
			first := true
			for vi, h := range blk.hunks {
				if h == "" {
					continue
				}
				kw := "else if"
				if first {
					kw, first = "if", false
				}
				fmt.Fprintf(&out, "{{- %s %s }}\n%s", kw, blk.conds[vi], h)
			}
			out.WriteString("{{- end }}\n")
		}
		if i < len(b) {
			out.WriteString(b[i])
		}
	}
	return []byte(out.String()), nil
}

func lineAt(lines []string, i int) string {
	if i >= len(lines) {
		return "the end"
	}
	return strings.TrimSpace(lines[i])
}

// insertions returns the lines of on that are not in base, keyed by the index of the
// base line they precede, when on is base with lines inserted (a longest common
// subsequence that keeps every base line); otherwise an error.
func insertions(base, on []string) (map[int][]string, error) {
	n, m := len(base), len(on)
	// lcs[i][j]: the longest common subsequence of base[i:] and on[j:].
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if base[i] == on[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	if lcs[0][0] != n {
		return nil, fmt.Errorf("the rendering changes %d base lines instead of only adding lines", n-lcs[0][0])
	}
	ins := map[int][]string{}
	i, j := 0, 0
	for j < m {
		if i < n && base[i] == on[j] && lcs[i][j] == lcs[i+1][j+1]+1 {
			i, j = i+1, j+1
			continue
		}
		ins[i] = append(ins[i], on[j])
		j++
	}
	return ins, nil
}

// A sub replaces a sentinel by a template expression; a scalar sentinel must be a
// whole YAML value (after "key: " or "- "), where the expression quotes it.
type sub struct {
	token, expr string
	scalar      bool
}

func substitute(data []byte, subs []sub) ([]byte, error) {
	s := string(data)
	for _, r := range subs {
		if !strings.Contains(s, r.token) {
			return nil, fmt.Errorf("sentinel %q not in the rendering", r.token)
		}
		if r.scalar {
			re := regexp.MustCompile(`(: |- )` + regexp.QuoteMeta(r.token) + `\n`)
			if strings.Count(s, r.token) != len(re.FindAllString(s, -1)) {
				return nil, fmt.Errorf("sentinel %q is not always a whole value", r.token)
			}
			s = re.ReplaceAllStringFunc(s, func(m string) string { return m[:2] + r.expr + "\n" })
			continue
		}
		s = strings.ReplaceAll(s, r.token, r.expr)
	}
	return []byte(s), nil
}

// extraArgs replaces the extra-arguments sentinel's line of the command by a loop over
// the list value expr, at the same indentation.
func extraArgs(data []byte, expr string) ([]byte, error) {
	re := regexp.MustCompile(`(?m)^( *)- ` + regexp.QuoteMeta(sExtraArg) + `\n`)
	if len(re.FindAll(data, -1)) != 1 {
		return nil, fmt.Errorf("extra arguments sentinel: want one line")
	}
	return re.ReplaceAllFunc(data, func(line []byte) []byte {
		indent := line[:bytes.IndexByte(line, '-')]
		return []byte("{{- range " + expr + " }}\n" + string(indent) + "- {{ . | quote }}\n{{- end }}\n")
	}), nil
}

// values renders values.yaml with the ctl's defaults.
func values() ([]byte, error) {
	var b bytes.Buffer
	err := valuesTemplate.Execute(&b, map[string]any{
		"D": manifests.DefaultDeploymentOptions(), "A": manifests.DefaultAgentDaemonSetOptions(), "MetalLBNamespace": "metallb-system",
	})
	return b.Bytes(), err
}

var valuesTemplate = template.Must(template.New("values").Parse(`# Values of the baremetal-ccm chart. Generated from pkg/manifests' defaults (the
# defaults of ` + "`baremetal-ccmctl manifests`" + `); each value names the ctl flag it equals.
# Do not edit: go test ./pkg/manifests/helmchart -update.

# The CCM as a Deployment on the control-plane nodes (baremetal-ccmctl manifests deployment).
# Its objects live in kube-system whatever the release's namespace.
deployment:
  # --image: the CCM image (it must contain ipmitool).
  image: {{ .D.Image }}
  # --replicas: at most one per control-plane node.
  replicas: {{ .D.Replicas }}
  # --config-map: the ConfigMap in kube-system with cloud-config.yaml, the inventory
  # and CA files (not created by the chart).
  configMap: {{ .D.ConfigMap }}
  # --config-dir: where the ConfigMap is mounted (the paths in cloud-config.yaml).
  configDir: {{ .D.ConfigDir }}
  # --secure-port: /healthz and /metrics on the node's 127.0.0.1.
  securePort: {{ .D.SecurePort }}
  # --api-server: HOST:PORT of the API server instead of the kubernetes Service;
  # ":PORT" is the node's own at the node's address. Empty: the Service.
  apiServer: "{{ .D.APIServer }}"
  # The arguments after --: appended to the CCM's command line.
  extraArgs: []

# The worker agent as a DaemonSet on every Node but the control plane's
# (baremetal-ccmctl manifests agent-daemonset).
agent:
  enabled: false
  # --image; empty: deployment.image.
  image: ""
  # --config-map: the ConfigMap in kube-system with the agents' cloud-config.yaml.
  configMap: {{ .A.ConfigMap }}
  # --config-dir: where that ConfigMap is mounted.
  configDir: {{ .A.ConfigDir }}
  # --host-dir: each host's directory of its own files, mounted read-only at
  # /host<dir>; empty: none.
  hostDir: {{ .A.HostDir }}
  # --serving-port: /metrics, /healthz and /readyz on the node's 127.0.0.1.
  servingPort: {{ .A.ServingPort }}
  # --api-server, as deployment.apiServer.
  apiServer: "{{ .A.APIServer }}"
  # The arguments after --: appended to the agent's command line.
  extraArgs: []

rbac:
  # The CCM's ServiceAccount, ClusterRole, bindings, and the namespace baremetal-ccm
  # with its Roles (baremetal-ccmctl manifests rbac).
  create: true
  # The agents' ServiceAccount, ClusterRole and binding (baremetal-ccmctl manifests
  # agent-rbac): needed by agents as a DaemonSet and as systemd units.
  agent: true
  # The Role and RoleBinding of the metallb announcer in MetalLB's namespace
  # (baremetal-ccmctl manifests rbac-metallb --namespace NS).
  metallb:
    enabled: false
    namespace: {{ .MetalLBNamespace }}
`))

// helpers are the checks of the values that the ctl makes of its flags.
const helpers = `{{- /* Generated by pkg/manifests/helmchart: the checks baremetal-ccmctl makes of its flags.
     Do not edit: go test ./pkg/manifests/helmchart -update. */}}

{{- /* baremetal-ccm.positive (list NAME VALUE MAX): VALUE is an integer in 1..MAX. */}}
{{- define "baremetal-ccm.positive" }}
{{- $v := index . 1 }}
{{- if not (or (kindIs "float64" $v) (kindIs "int64" $v) (kindIs "int" $v)) }}
{{- fail (printf "%s: %v: want an integer from 1 to %v" (index . 0) $v (index . 2)) }}
{{- else if or (lt (float64 $v) 1.0) (gt (float64 $v) (float64 (index . 2))) (ne (float64 $v) (float64 (int64 $v))) }}
{{- fail (printf "%s: %v: want an integer from 1 to %v" (index . 0) $v (index . 2)) }}
{{- end }}
{{- end }}

{{- /* baremetal-ccm.absolute (list NAME PATH): PATH is absolute. */}}
{{- define "baremetal-ccm.absolute" }}
{{- if not (isAbs (toString (index . 1))) }}
{{- fail (printf "%s %q: want an absolute path" (index . 0) (index . 1)) }}
{{- end }}
{{- end }}

{{- /* baremetal-ccm.apart (list DIR MOUNT): neither directory contains the other. */}}
{{- define "baremetal-ccm.apart" }}
{{- $a := clean (index . 0) }}
{{- $b := clean (index . 1) }}
{{- if or (eq $a $b) (eq $a "/") (eq $b "/") (hasPrefix (printf "%s/" $a) $b) (hasPrefix (printf "%s/" $b) $a) }}
{{- fail (printf "agent.configDir %s and the host dir's mount %s: neither may contain the other" $a $b) }}
{{- end }}
{{- end }}

{{- /* baremetal-ccm.apiServer (list NAME VALUE): VALUE checked as host:port or :port
     (a port from 1 to 65535), printed; empty stays empty. */}}
{{- define "baremetal-ccm.apiServer" }}
{{- $v := toString (index . 1 | default "") }}
{{- if $v }}
{{- $port := regexFind "[0-9]+$" $v }}
{{- if or (not (regexMatch "^(\\[[^\\]]*\\]|[^:\\[\\]]*):[0-9]+$" $v)) (lt (atoi $port) 1) (gt (atoi $port) 65535) }}
{{- fail (printf "%s %q: want host:port, or :port for the node's own" (index . 0) $v) }}
{{- end }}
{{- end }}
{{- $v }}
{{- end }}
`
