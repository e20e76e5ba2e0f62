//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestKubeletHelm installs the chart charts/baremetal-ccm with `helm install` (Helm 4,
// built by hack/build-helm.sh) into a cluster that has none of our objects, not even
// the RBAC: as TestKubeletDeployment, kube-scheduler places the CCM's pod on the only
// control-plane Node while that Node is uninitialized, not-ready and tainted
// control-plane; the pod runs as the chart's ServiceAccount with exactly the chart's
// RBAC, from the ConfigMap, and initializes the Node; the chart's agent DaemonSet runs
// on the worker only and its Node is initialized. `helm uninstall` then removes every
// object the release created and the pods stop. Last, Helm 3 installs the same chart
// into the same cluster: its pod takes the leader Lease, and Helm 3 uninstalls it.
func TestKubeletHelm(t *testing.T) {
	helms := framework.Helms(t)
	lab := framework.NewKubeLabWith(t, framework.KubeLabOptions{NoRBAC: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	img := framework.CCMImage(t)
	node := lab.NewKubeNode(t, framework.KubeNodeOptions{
		Name: "kl-helm-1", Images: []framework.Image{img},
		RegisterWithTaints: []string{manifests.LabelControlPlane + ":NoSchedule"},
	})
	worker := lab.NewKubeNode(t, framework.KubeNodeOptions{Name: "kl-helm-w1", Images: []framework.Image{img}})
	// The garbage collector and the namespace controller: what uninstalling relies on
	// to remove the pods and the namespace's contents.
	lab.StartControllerManager(t, "deployment,replicaset,daemonset,root-ca-cert-publisher,node-lifecycle-controller,taint-eviction-controller,garbage-collector-controller,namespace-controller")
	lab.StartScheduler(t)
	site := newCCMSite(t, t.TempDir(), nil, node, worker)
	for name, data := range map[string]map[string]string{
		manifests.DefaultDeploymentOptions().ConfigMap:     site.files("/etc/baremetal-ccm"),
		manifests.DefaultAgentDaemonSetOptions().ConfigMap: {"cloud-config.yaml": "apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\nroutes: {table: 201}\n"},
	} {
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: manifests.Namespace}, Data: data}
		if _, err := lab.CP.Client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	root, err := framework.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(root, "charts", "baremetal-ccm")
	// The node's API server: this lab has no kube-proxy for the kubernetes Service.
	install := []string{"install", "baremetal-ccm", chart, "--namespace", manifests.Namespace,
		"--set", "deployment.image=" + img.Ref, "--set", "deployment.apiServer=127.0.0.1:6443",
		"--set-json", `deployment.extraArgs=["--v=2"]`,
		"--set", "agent.enabled=true", "--set", "agent.apiServer=127.0.0.1:6443"}
	const ccmSelector = "app.kubernetes.io/name=baremetal-ccm,app.kubernetes.io/component=cloud-controller-manager"
	const agentSelector = "app.kubernetes.io/name=baremetal-ccm,app.kubernetes.io/component=agent"

	h := helms[0]
	var release []objectRef
	step(t, "install with Helm "+h.Version, func(t *testing.T) {
		start := time.Now()
		out, err := h.Run(ctx, lab.CP, install...)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("TIMING helm install: %s\n%s", time.Since(start).Round(10*time.Millisecond), out)
		manifest, err := h.Run(ctx, lab.CP, "get", "manifest", "baremetal-ccm", "--namespace", manifests.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		if release, err = releaseObjects(manifest); err != nil {
			t.Fatal(err)
		}
		t.Logf("the release holds %d objects", len(release))
	})

	step(t, "the chart's CCM initializes its Node", func(t *testing.T) {
		rec := framework.RecordNodes(t, lab.CP.Client)
		node.StartKubelet()
		if _, err := rec.WaitFirst(ctx, time.Minute, node.Name, "registered", func(framework.NodeEvent) bool { return true }); err != nil {
			t.Fatal(err)
		}
		// As kubeadm labels its control-plane Nodes once they registered.
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, manifests.LabelControlPlane)
		if _, err := lab.CP.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		running, _ := waitPodReadyOn(ctx, t, lab, ccmSelector, node)
		t.Logf("TIMING kubelet start to the chart's CCM pod Ready: %s", time.Since(node.KubeletStarted).Round(100*time.Millisecond))
		if running.Spec.ServiceAccountName != manifests.ServiceAccount || !running.Spec.HostNetwork {
			t.Errorf("pod runs as %q, hostNetwork %v", running.Spec.ServiceAccountName, running.Spec.HostNetwork)
		}
		checkContainer(ctx, t, node, running, img)
		registered, initialized := waitInitializedNode(ctx, t, rec, node)
		t.Logf("TIMING %s registered to initialized: %s", node.Name, initialized.At.Sub(registered.At).Round(10*time.Millisecond))
		site.checkInitialized(t, initialized.Node, node)
		if holder, err := leaseHolder(ctx, lab); err != nil || holder == "" {
			t.Errorf("no leader: %q, %v", holder, err)
		}
		checkNoDenials(t, "the CCM", podLog(t, node, running))
	})

	step(t, "the chart's agent on the worker", func(t *testing.T) {
		rec := framework.RecordNodes(t, lab.CP.Client)
		worker.StartKubelet()
		pod, _ := waitPodReadyOn(ctx, t, lab, agentSelector, worker)
		t.Logf("TIMING kubelet start to the chart's agent pod Ready: %s", time.Since(worker.KubeletStarted).Round(100*time.Millisecond))
		if pod.Spec.ServiceAccountName != manifests.AgentServiceAccount || !pod.Spec.HostNetwork {
			t.Errorf("agent pod runs as %q, hostNetwork %v", pod.Spec.ServiceAccountName, pod.Spec.HostNetwork)
		}
		checkContainer(ctx, t, worker, pod, img)
		waitInitializedNode(ctx, t, rec, worker)
		ds, err := lab.CP.Client.AppsV1().DaemonSets(manifests.Namespace).Get(ctx, manifests.AgentName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ds.Status.DesiredNumberScheduled != 1 {
			t.Errorf("the DaemonSet wants %d pods, want 1 (the worker's; none on the control plane)", ds.Status.DesiredNumberScheduled)
		}
		checkNoDenials(t, "the agent", podLog(t, worker, pod))
	})

	step(t, "uninstall with Helm "+h.Version, func(t *testing.T) {
		uninstall(ctx, t, lab, h, release, ccmSelector+" "+agentSelector)
	})

	if len(helms) < 2 {
		return
	}
	h3 := helms[1]
	step(t, "install and uninstall with Helm "+h3.Version, func(t *testing.T) {
		before, err := leaseHolder(ctx, lab)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h3.Run(ctx, lab.CP, install...); err != nil {
			t.Fatal(err)
		}
		running, _ := waitPodReadyOn(ctx, t, lab, ccmSelector, node)
		checkContainer(ctx, t, node, running, img)
		err = framework.WaitFor(ctx, time.Minute, "the new pod to take the Lease", func(ctx context.Context) (bool, error) {
			h, err := leaseHolder(ctx, lab)
			return err == nil && h != "" && h != before, err
		})
		if err != nil {
			t.Error(err)
		}
		checkNoDenials(t, "the CCM", podLog(t, node, running))
		manifest, err := h3.Run(ctx, lab.CP, "get", "manifest", "baremetal-ccm", "--namespace", manifests.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := releaseObjects(manifest)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != len(release) {
			t.Errorf("Helm %s's release holds %d objects, Helm %s's %d", h3.Version, len(objs), h.Version, len(release))
		}
		uninstall(ctx, t, lab, h3, objs, ccmSelector+" "+agentSelector)
	})
}

// uninstall runs helm uninstall and checks that every object of the release is gone,
// with the pods of the selectors (space-separated), and that no release or record of
// one is left.
func uninstall(ctx context.Context, t *testing.T, lab *framework.KubeLab, h *framework.Helm, release []objectRef, selectors string) {
	t.Helper()
	start := time.Now()
	if _, err := h.Run(ctx, lab.CP, "uninstall", "baremetal-ccm", "--namespace", manifests.Namespace, "--wait", "--timeout", "2m"); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING helm uninstall --wait: %s", time.Since(start).Round(10*time.Millisecond))
	err := framework.WaitFor(ctx, 2*time.Minute, "the release's objects and pods gone", func(ctx context.Context) (bool, error) {
		var left []string
		for _, o := range release {
			gone, err := o.gone(ctx, lab.CP)
			if err != nil {
				return false, err
			}
			if !gone {
				left = append(left, o.String())
			}
		}
		for _, sel := range strings.Fields(selectors) {
			pods, err := lab.CP.Client.CoreV1().Pods(manifests.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				return false, err
			}
			for _, p := range pods.Items {
				left = append(left, "Pod "+p.Name)
			}
		}
		if len(left) > 0 {
			return false, fmt.Errorf("left: %s", strings.Join(left, ", "))
		}
		return true, nil
	})
	if err != nil {
		t.Error(err)
	}
	if out, err := h.Run(ctx, lab.CP, "list", "--all-namespaces", "--short"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("helm list after uninstall: %q, %v", out, err)
	}
	// Helm's record of the release (both Helms keep it in Secrets labeled owner=helm).
	records, err := lab.CP.Client.CoreV1().Secrets(manifests.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil || len(records.Items) != 0 {
		t.Errorf("Helm's release records left after uninstall: %d, %v", len(records.Items), err)
	}
}

// objectRef names an object of a release.
type objectRef struct{ kind, namespace, name string }

func (o objectRef) String() string { return o.kind + " " + o.namespace + "/" + o.name }

// releaseObjects returns the objects of a release's manifest (helm get manifest).
func releaseObjects(manifest string) ([]objectRef, error) {
	objs, err := framework.DecodeManifests([]byte(manifest))
	if err != nil {
		return nil, err
	}
	var refs []objectRef
	for _, o := range objs {
		m, ok := o.(metav1.ObjectMetaAccessor)
		if !ok {
			return nil, fmt.Errorf("%T has no metadata", o)
		}
		kind := fmt.Sprintf("%T", o)
		kind = kind[strings.LastIndexByte(kind, '.')+1:]
		refs = append(refs, objectRef{kind, m.GetObjectMeta().GetNamespace(), m.GetObjectMeta().GetName()})
	}
	return refs, nil
}

// gone reports whether the object no longer exists.
func (o objectRef) gone(ctx context.Context, cp *framework.ControlPlane) (bool, error) {
	c, get := cp.Client, metav1.GetOptions{}
	var err error
	switch o.kind {
	case "Deployment":
		_, err = c.AppsV1().Deployments(o.namespace).Get(ctx, o.name, get)
	case "DaemonSet":
		_, err = c.AppsV1().DaemonSets(o.namespace).Get(ctx, o.name, get)
	case "ServiceAccount":
		_, err = c.CoreV1().ServiceAccounts(o.namespace).Get(ctx, o.name, get)
	case "Namespace":
		_, err = c.CoreV1().Namespaces().Get(ctx, o.name, get)
	case "ClusterRole":
		_, err = c.RbacV1().ClusterRoles().Get(ctx, o.name, get)
	case "ClusterRoleBinding":
		_, err = c.RbacV1().ClusterRoleBindings().Get(ctx, o.name, get)
	case "Role":
		_, err = c.RbacV1().Roles(o.namespace).Get(ctx, o.name, get)
	case "RoleBinding":
		_, err = c.RbacV1().RoleBindings(o.namespace).Get(ctx, o.name, get)
	case "ValidatingAdmissionPolicy":
		_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, o.name, get)
	case "ValidatingAdmissionPolicyBinding":
		_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, o.name, get)
	default:
		return false, fmt.Errorf("unexpected kind %s in the release", o.kind)
	}
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}
