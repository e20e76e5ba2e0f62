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
