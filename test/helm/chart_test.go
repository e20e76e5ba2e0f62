//go:build helm

// Package helm checks the chart charts/baremetal-ccm with every Helm that
// hack/build-helm.sh builds (Helm 4 and Helm 3): `helm lint --strict`, values the ctl
// refuses refused by the chart too, and `helm template` for several value sets equal,
// object by object and decoded, to what `baremetal-ccmctl manifests` prints with the
// equivalent flags. With the templates generated from pkg/manifests (kept up to date by
// TestChartUpToDate there), the chart and the ctl cannot drift apart.
//
// Run: hack/build-helm.sh && go test -tags helm -count=1 ./test/helm/ (make lint does).
package helm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const root = "../.."

var chart = filepath.Join(root, "charts", "baremetal-ccm")

// A helmBin is one Helm of hack/build-helm.sh.
type helmBin struct{ version, path string }

var (
	ctlPath string    // baremetal-ccmctl, built by TestMain
	helms   []helmBin // found by TestMain
	setup   error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "helm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	setup = prepare(dir)
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// prepare builds the ctl into dir, finds the Helms (never building one) and points
// Helm's own directories into dir, so a test run leaves nothing in $HOME.
func prepare(dir string) error {
	ctlPath = filepath.Join(dir, "baremetal-ccmctl")
	build := exec.Command("go", "build", "-o", ctlPath, "./cmd/baremetal-ccmctl")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build baremetal-ccmctl: %w\n%s", err, out)
	}
	list := exec.Command("bash", filepath.Join(root, "hack", "build-helm.sh"))
	list.Env = append(os.Environ(), "HELM_NO_BUILD=1")
	var stderr bytes.Buffer
	list.Stderr = &stderr
	out, err := list.Output()
	if err != nil {
		return fmt.Errorf("hack/build-helm.sh: %w: %s", err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		v, p, ok := strings.Cut(line, " ")
		if !ok {
			return fmt.Errorf("hack/build-helm.sh printed %q", line)
		}
		helms = append(helms, helmBin{v, p})
	}
	for _, env := range []string{"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"} {
		if err := os.Setenv(env, filepath.Join(dir, env)); err != nil {
			return err
		}
	}
	return nil
}

// eachHelm runs f as a subtest per Helm.
func eachHelm(t *testing.T, f func(t *testing.T, h helmBin)) {
	t.Helper()
	if setup != nil {
		t.Fatal(setup)
	}
	for _, h := range helms {
		t.Run(h.version, func(t *testing.T) { f(t, h) })
	}
}

// run runs a program and returns its stdout, or an error with its stderr.
func run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// A valueSet is chart values and the ctl invocations that print the same objects.
type valueSet struct {
	name   string
	values string // YAML; empty: the chart's defaults
	ctl    [][]string
}

var valueSets = []valueSet{
	{
		name: "defaults",
		ctl:  [][]string{{"manifests", "rbac"}, {"manifests", "agent-rbac"}, {"manifests", "deployment"}},
	},
	{
		name: "everything set",
		values: `deployment:
  image: reg.example/ccm:v2
  replicas: 3
  configMap: ccm-conf
  configDir: /srv/ccm/
  securePort: 10300
  apiServer: 127.0.0.1:6443
  extraArgs: ["--v=2", "--controllers=service-lb-controller", "--cluster-cidr=10.244.0.0/16"]
agent:
  enabled: true
  configMap: agent-conf
  configDir: /srv/agent
  hostDir: /var/lib/ccm-host/
  servingPort: 10400
  apiServer: ":6443"
  extraArgs: ["--bgp-password-file=/host/var/lib/ccm-host/bgp-password", "--v=3"]
rbac:
  metallb: {enabled: true, namespace: mlb}
`,
		ctl: [][]string{
			{"manifests", "rbac"}, {"manifests", "agent-rbac"}, {"manifests", "rbac-metallb", "--namespace", "mlb"},
			{"manifests", "deployment", "--image", "reg.example/ccm:v2", "--replicas", "3", "--config-map", "ccm-conf", "--config-dir", "/srv/ccm/",
				"--secure-port", "10300", "--api-server", "127.0.0.1:6443", "--", "--v=2", "--controllers=service-lb-controller", "--cluster-cidr=10.244.0.0/16"},
			{"manifests", "agent-daemonset", "--image", "reg.example/ccm:v2", "--config-map", "agent-conf", "--config-dir", "/srv/agent",
				"--host-dir", "/var/lib/ccm-host/", "--serving-port", "10400", "--api-server", ":6443", "--",
				"--bgp-password-file=/host/var/lib/ccm-host/bgp-password", "--v=3"},
		},
	},
	{
		name: "agent with its own image and no host dir; IPv6 API server; no RBAC",
		values: `deployment:
  apiServer: "[fd00::1]:6443"
agent:
  enabled: true
  image: reg.example/agent:v3
  hostDir: ""
  apiServer: api.example:443
rbac:
  create: false
  agent: false
`,
		ctl: [][]string{
			{"manifests", "deployment", "--api-server", "[fd00::1]:6443"},
			{"manifests", "agent-daemonset", "--image", "reg.example/agent:v3", "--host-dir", "", "--api-server", "api.example:443"},
		},
	},
	{
		name: "agent with the defaults and its host dir",
		values: `agent:
  enabled: true
`,
		ctl: [][]string{{"manifests", "rbac"}, {"manifests", "agent-rbac"}, {"manifests", "deployment"}, {"manifests", "agent-daemonset"}},
	},
}

// TestChartEqualsManifests: for every value set and every Helm, helm template prints
// the same objects as the ctl with the equivalent flags: the same kinds, names and
// namespaces, each decoded object equal field by field.
func TestChartEqualsManifests(t *testing.T) {
	eachHelm(t, func(t *testing.T, h helmBin) {
		for _, vs := range valueSets {
			t.Run(vs.name, func(t *testing.T) {
				args := []string{"template", "baremetal-ccm", chart, "--namespace", "kube-system"}
				if vs.values != "" {
					args = append(args, "--values", valuesFile(t, vs.values))
				}
				rendered, err := run(h.path, args...)
				if err != nil {
					t.Fatal(err)
				}
				got, err := decode(rendered)
				if err != nil {
					t.Fatalf("helm template's output: %v", err)
				}
				want := map[string]map[string]any{}
				for _, args := range vs.ctl {
					out, err := run(ctlPath, args...)
					if err != nil {
						t.Fatal(err)
					}
					objs, err := decode(out)
					if err != nil {
						t.Fatalf("baremetal-ccmctl %v: %v", args, err)
					}
					for k, o := range objs {
						want[k] = o
					}
				}
				if g, w := keys(got), keys(want); !reflect.DeepEqual(g, w) {
					t.Fatalf("helm template printed\n  %s\nthe ctl\n  %s", strings.Join(g, "\n  "), strings.Join(w, "\n  "))
				}
				for k := range want {
					if d := firstDiff("", got[k], want[k]); d != "" {
						t.Errorf("%s differs from the ctl's at %s", k, d)
					}
				}
			})
		}
	})
}

// TestChartLint: helm lint --strict passes with the defaults and every value set.
func TestChartLint(t *testing.T) {
	eachHelm(t, func(t *testing.T, h helmBin) {
		for _, vs := range valueSets {
			args := []string{"lint", "--strict", chart}
			if vs.values != "" {
				args = append(args, "--values", valuesFile(t, vs.values))
			}
			out, err := run(h.path, args...)
			if err != nil {
				t.Errorf("%s: %v", vs.name, err)
				continue
			}
			if !bytes.Contains(out, []byte("0 chart(s) failed")) {
				t.Errorf("%s: helm lint:\n%s", vs.name, out)
			}
		}
	})
}

// TestChartRefuses: values the ctl refuses as flags are refused by the chart, with the
// value named (the schema or the templates' checks).
func TestChartRefuses(t *testing.T) {
	cases := map[string]struct{ values, want string }{
		"no replicas":             {"deployment: {replicas: 0}", "replicas"},
		"fractional replicas":     {"deployment: {replicas: 1.5}", "replicas"},
		"port too large":          {"deployment: {securePort: 70000}", "securePort"},
		"relative config dir":     {"deployment: {configDir: etc/ccm}", "configDir"},
		"bad config map":          {"deployment: {configMap: Not_A_Name}", "configMap"},
		"API server without port": {"deployment: {apiServer: 127.0.0.1}", "deployment.apiServer"},
		"API server port 0":       {`deployment: {apiServer: ":0"}`, "deployment.apiServer"},
		"API server named port":   {"deployment: {apiServer: 127.0.0.1:http}", "deployment.apiServer"},
		"agent API server":        {"agent: {enabled: true, apiServer: \"6443\"}", "agent.apiServer"},
		"agent dirs nested":       {"agent: {enabled: true, configDir: /host/etc/baremetal-ccm/x}", "neither may contain the other"},
		"agent config dir root":   {"agent: {enabled: true, configDir: /}", "neither may contain the other"},
		"unknown value":           {"deployment: {replica: 3}", "replica"},
	}
	eachHelm(t, func(t *testing.T, h helmBin) {
		for name, c := range cases {
			_, err := run(h.path, "template", "baremetal-ccm", chart, "--values", valuesFile(t, c.values))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s (%s): %v, want an error naming %q", name, c.values, err, c.want)
			}
		}
	})
}

// valuesFile writes values to a file whose path has no comma (helm splits --values
// at commas, and t.TempDir names a directory after the test).
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "helm-values-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	f, err := os.CreateTemp(dir, "values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(values); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// decode returns the objects of a YAML stream as JSON values by
// "kind namespace/name"; a name twice is an error.
func decode(data []byte) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("%w in\n%s", err, doc)
		}
		if obj == nil {
			continue // comments only
		}
		meta, _ := obj["metadata"].(map[string]any)
		key := fmt.Sprintf("%v %v/%v", obj["kind"], meta["namespace"], meta["name"])
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s twice", key)
		}
		out[key] = obj
	}
}

func keys(m map[string]map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// firstDiff returns the path of the first difference of two JSON values and both
// values there, or "" when they are equal.
func firstDiff(path string, got, want any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			break
		}
		for _, k := range unionKeys(g, w) {
			if d := firstDiff(path+"."+k, g[k], w[k]); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			break
		}
		for i := range w {
			if d := firstDiff(fmt.Sprintf("%s[%d]", path, i), g[i], w[i]); d != "" {
				return d
			}
		}
		return ""
	}
	if reflect.DeepEqual(got, want) {
		return ""
	}
	return fmt.Sprintf("%s: chart %#v, ctl %#v", path, got, want)
}

func unionKeys(a, b map[string]any) []string {
	seen := map[string]bool{}
	var ks []string
	for _, m := range []map[string]any{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				ks = append(ks, k)
			}
		}
	}
	sort.Strings(ks)
	return ks
}
