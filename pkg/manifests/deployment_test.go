package manifests

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
)

func TestDeploymentGolden(t *testing.T) {
	d, err := Deployment(DefaultDeploymentOptions())
	if err != nil {
		t.Fatal(err)
	}
	data, err := YAML(d)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "../../packaging/kubernetes/deployment.yaml", append([]byte(strings.Replace(header, "%s", "deployment", 1)), data...))
}

// TestDeploymentShape: the shape the Kubernetes documentation recommends for a cloud
// controller manager, and the same container as the static pod.
func TestDeploymentShape(t *testing.T) {
	o := DefaultDeploymentOptions()
	o.APIServer = "127.0.0.1:6443"
	o.ExtraArgs = []string{"--v=2"}
	d, err := Deployment(o)
	if err != nil {
		t.Fatal(err)
	}
	spec := d.Spec.Template.Spec
	if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("selector %v does not select the template's labels %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	if !spec.HostNetwork || spec.DNSPolicy != v1.DNSDefault || spec.ServiceAccountName != ServiceAccount {
		t.Errorf("hostNetwork %v, dnsPolicy %s, serviceAccount %q", spec.HostNetwork, spec.DNSPolicy, spec.ServiceAccountName)
	}
	if v, ok := spec.NodeSelector[LabelControlPlane]; !ok || v != "" || len(spec.NodeSelector) != 1 {
		t.Errorf("nodeSelector = %v, want the control-plane label only", spec.NodeSelector)
	}
	anti := spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(anti) != 1 || anti[0].TopologyKey != "kubernetes.io/hostname" ||
		!labels.SelectorFromSet(anti[0].LabelSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("anti-affinity = %+v, want one replica per node", anti)
	}
	// A Node the CCM has not initialized, not Ready (no CNI yet), on the control plane.
	node := []v1.Taint{
		{Key: TaintUninitialized, Value: "true", Effect: v1.TaintEffectNoSchedule},
		{Key: TaintNotReady, Effect: v1.TaintEffectNoSchedule},
		{Key: TaintNotReady, Effect: v1.TaintEffectNoExecute},
		{Key: LabelControlPlane, Effect: v1.TaintEffectNoSchedule},
	}
	for _, taint := range node {
		tolerated := slices.ContainsFunc(spec.Tolerations, func(tol v1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &taint, false) })
		if !tolerated {
			t.Errorf("taint %s:%s is not tolerated", taint.Key, taint.Effect)
		}
	}
	other := v1.Taint{Key: "node.kubernetes.io/unreachable", Effect: v1.TaintEffectNoExecute}
	if slices.ContainsFunc(spec.Tolerations, func(tol v1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &other, false) }) {
		t.Error("an unreachable node's pods should move: that taint must not be tolerated")
	}
	ru := d.Spec.Strategy.RollingUpdate
	if ru.MaxSurge.IntValue() != 0 || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("rolling update %+v, want maxSurge 0, maxUnavailable 1", ru)
	}
	c := spec.Containers[0]
	pod, _ := StaticPod(DefaultStaticPodOptions())
	sc := pod.Spec.Containers[0]
	if c.Image != o.Image || !slices.Equal(c.SecurityContext.Capabilities.Add, sc.SecurityContext.Capabilities.Add) ||
		!*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation ||
		c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Port.IntValue() != o.SecurePort {
		t.Errorf("container differs from the static pod's: %+v", c)
	}
	for _, arg := range append([]string{"--leader-elect=true", "--cloud-config=/etc/baremetal-ccm/cloud-config.yaml"}, LifecycleArgs...) {
		if !slices.Contains(c.Command, arg) {
			t.Errorf("command lacks %s: %v", arg, c.Command)
		}
	}
	for _, arg := range c.Command {
		if strings.HasPrefix(arg, "--kubeconfig") || strings.HasPrefix(arg, "--authentication-kubeconfig") {
			t.Errorf("the Deployment runs with its ServiceAccount, not %s", arg)
		}
	}
	if c.Command[len(c.Command)-1] != "--v=2" {
		t.Errorf("extra args not appended: %v", c.Command)
	}
	env := map[string]v1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["KUBERNETES_SERVICE_HOST"].Value != "127.0.0.1" || env["KUBERNETES_SERVICE_PORT"].Value != "6443" {
		t.Errorf("API server env = %v", c.Env)
	}
	if env["NODE_NAME"].ValueFrom == nil || env["NODE_NAME"].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME = %+v", env["NODE_NAME"])
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != int32(o.SecurePort) {
		t.Errorf("ports = %+v: the secure port is declared so the scheduler keeps replicas apart", c.Ports)
	}
	if v := spec.Volumes[0].ConfigMap; v == nil || v.Name != o.ConfigMap || c.VolumeMounts[0].MountPath != o.ConfigDir || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("config volume %+v mounted %+v", spec.Volumes, c.VolumeMounts)
	}

	o.APIServer = ":6443" // the node's own
	d, err = Deployment(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "KUBERNETES_SERVICE_HOST" && (e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "status.hostIP") {
			t.Errorf(":6443 must mean the node's address, got %+v", e)
		}
	}

	d, err = Deployment(DefaultDeploymentOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if strings.HasPrefix(e.Name, "KUBERNETES_SERVICE_") {
			t.Errorf("without an API server option the Service is used, got %s", e.Name)
		}
	}
}

func TestDeploymentOptionErrors(t *testing.T) {
	for name, mutate := range map[string]func(*DeploymentOptions){
		"no image":           func(o *DeploymentOptions) { o.Image = "" },
		"no replicas":        func(o *DeploymentOptions) { o.Replicas = 0 },
		"bad config map":     func(o *DeploymentOptions) { o.ConfigMap = "Not_A_Name" },
		"relative dir":       func(o *DeploymentOptions) { o.ConfigDir = "etc" },
		"bad port":           func(o *DeploymentOptions) { o.SecurePort = 0 },
		"api server no port": func(o *DeploymentOptions) { o.APIServer = "127.0.0.1" },
		"api server empty":   func(o *DeploymentOptions) { o.APIServer = ":" },
		"api server port":    func(o *DeploymentOptions) { o.APIServer = "127.0.0.1:http" },
	} {
		o := DefaultDeploymentOptions()
		mutate(&o)
		if _, err := Deployment(o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestAgentDaemonSetGolden(t *testing.T) {
	d, err := AgentDaemonSet(DefaultAgentDaemonSetOptions())
	if err != nil {
		t.Fatal(err)
	}
	data, err := YAML(d)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "../../packaging/kubernetes/agent-daemonset.yaml", append([]byte(strings.Replace(header, "%s", "agent-daemonset", 1)), data...))
}

// TestAgentDaemonSetShape: the agent on every Node but the control plane's, on the host
// network, as the agents' ServiceAccount, with the CCM's container restrictions and
// probes on its own serving address.
func TestAgentDaemonSetShape(t *testing.T) {
	o := DefaultAgentDaemonSetOptions()
	o.APIServer = ":6443"
	o.ExtraArgs = []string{"--bgp-password-file=/host/etc/baremetal-ccm/bgp-password"}
	d, err := AgentDaemonSet(o)
	if err != nil {
		t.Fatal(err)
	}
	spec := d.Spec.Template.Spec
	if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("selector %v does not select the template's labels %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	if labels.SelectorFromSet(deploymentLabels()).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Error("the CCM Deployment's selector selects the agents' pods")
	}
	if !spec.HostNetwork || spec.ServiceAccountName != AgentServiceAccount || spec.PriorityClassName != "system-node-critical" {
		t.Errorf("hostNetwork %v, serviceAccount %q, priority %q", spec.HostNetwork, spec.ServiceAccountName, spec.PriorityClassName)
	}
	// Not on control-plane Nodes (the CCM's agent is there), on every other.
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 || terms[0].MatchExpressions[0].Key != LabelControlPlane || terms[0].MatchExpressions[0].Operator != v1.NodeSelectorOpDoesNotExist {
		t.Errorf("node affinity %+v, want only: no control-plane label", terms)
	}
	for _, taint := range []v1.Taint{
		{Key: TaintUninitialized, Value: "true", Effect: v1.TaintEffectNoSchedule},
		{Key: TaintNotReady, Effect: v1.TaintEffectNoExecute},
		{Key: "node.kubernetes.io/unschedulable", Effect: v1.TaintEffectNoSchedule},
		{Key: "example.com/dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule},
	} {
		if !slices.ContainsFunc(spec.Tolerations, func(tol v1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &taint, false) }) {
			t.Errorf("taint %s:%s is not tolerated: every worker needs its routes", taint.Key, taint.Effect)
		}
	}
	c := spec.Containers[0]
	pod, _ := StaticPod(DefaultStaticPodOptions())
	sc := pod.Spec.Containers[0]
	if c.Image != o.Image || !slices.Equal(c.SecurityContext.Capabilities.Add, sc.SecurityContext.Capabilities.Add) ||
		!slices.Equal(c.SecurityContext.Capabilities.Drop, sc.SecurityContext.Capabilities.Drop) ||
		!*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("container restrictions differ from the static pod's: %+v", c.SecurityContext)
	}
	if !slices.Equal(c.Command[:4], []string{"/usr/bin/baremetal-cloud-controller-manager", "agent", "--cloud-config=/etc/baremetal-ccm/cloud-config.yaml", "--serving-address=127.0.0.1:10268"}) ||
		c.Command[len(c.Command)-1] != o.ExtraArgs[0] {
		t.Errorf("command %q", c.Command)
	}
	for _, p := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if g := p.HTTPGet; g.Host != "127.0.0.1" || g.Port.IntValue() != 10268 || g.Scheme != v1.URISchemeHTTP {
			t.Errorf("probe %+v: want HTTP on 127.0.0.1:10268, where the agent serves", g)
		}
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes %s / %s", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	env := map[string]v1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["NODE_NAME"].ValueFrom.FieldRef.FieldPath != "spec.nodeName" || env["KUBERNETES_SERVICE_HOST"].ValueFrom.FieldRef.FieldPath != "status.hostIP" || env["KUBERNETES_SERVICE_PORT"].Value != "6443" {
		t.Errorf("env %+v", c.Env)
	}
	mounts := map[string]v1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
		if !m.ReadOnly {
			t.Errorf("mount %s is writable", m.Name)
		}
	}
	if mounts["config"].MountPath != "/etc/baremetal-ccm" || mounts["host"].MountPath != "/host/etc/baremetal-ccm" {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	for _, v := range spec.Volumes {
		if v.Name == "host" && (v.HostPath == nil || v.HostPath.Path != "/etc/baremetal-ccm") {
			t.Errorf("host volume %+v", v)
		}
	}

	for _, bad := range []func(*AgentDaemonSetOptions){
		func(o *AgentDaemonSetOptions) { o.Image = "" },
		func(o *AgentDaemonSetOptions) { o.ServingPort = 70000 },
		func(o *AgentDaemonSetOptions) { o.ConfigDir = "etc" },
		func(o *AgentDaemonSetOptions) { o.ConfigMap = "Bad_Name" },
		func(o *AgentDaemonSetOptions) { o.ConfigDir = "/host/etc/baremetal-ccm/x" },
		func(o *AgentDaemonSetOptions) { o.ConfigDir = "/host" },
		func(o *AgentDaemonSetOptions) { o.APIServer = "6443" },
	} {
		o := DefaultAgentDaemonSetOptions()
		bad(&o)
		if _, err := AgentDaemonSet(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}
