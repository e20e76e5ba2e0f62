//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/powermon"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/ipmi"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// The capabilities the packaged pods keep: CAP_NET_BIND_SERVICE (10) and CAP_NET_ADMIN (12).
const wantCaps = 1<<10 | 1<<12

// TestKubeletStaticPod runs the CCM the way it ships, as the packaged static pod of
// `make image`'s image, under a real kubelet (v1.37, containerd 2, runc) whose own Node
// it must initialize: the chicken-and-egg case of the Kubernetes documentation.
//
//  1. The manifest of `baremetal-ccmctl manifests static-pod --image <image>` is in the
//     kubelet's staticPodPath before the kubelet starts: the mirror pod appears, Ready
//     with no restart, on the host network, its process with exactly NET_ADMIN and
//     NET_BIND_SERVICE, a read-only root, no new privileges, seccomp; the kubelet's
//     probes succeed and never fail.
//  2. The kubelet's Node (--cloud-provider=external, --node-ip, no CNI: NotReady with
//     the uninitialized taint) is initialized by that pod: providerID, addresses with
//     the provided node IP, the inventory's labels, no taint. A CNI then makes it Ready.
//     The pod reads the host's BMC (ipmi_sim) with the image's ipmitool.
//  3. A second kubelet, a worker, registers; the agent runs there as a process (as the
//     packages' baremetal-ccm-agent service does), and the worker is initialized.
//  4. Upgrade: the manifest names a new build of the image; the kubelet replaces the
//     pod, the new one (the new version) takes the lease, and meanwhile no Node is
//     deleted, loses its providerID or labels, or gets the uninitialized taint back.
func TestKubeletStaticPod(t *testing.T) {
	lab := framework.NewKubeLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	img := framework.CCMImage(t)
	t.Logf("image %s (%s) from %s", img.Ref, img.Digest, img.Path)
	cpNode := lab.NewKubeNode(t, framework.KubeNodeOptions{
		Name: "kl-cp-1", Images: []framework.Image{img},
		RegisterWithTaints: []string{manifests.LabelControlPlane + ":NoSchedule"},
	})
	worker := lab.NewKubeNode(t, framework.KubeNodeOptions{Name: "kl-worker-1"})
	// The control-plane host's BMC: ipmi_sim on the node's own loopback, which the CCM
	// in the pod reads with the image's ipmitool. The machine's SMBIOS UUID is the
	// BMC's system GUID, and the inventory says so too: one machine.
	bmc := startNodeBMC(ctx, t, cpNode)
	if err := cpNode.SetSystemUUID(ctx, bmc.SystemGUID()); err != nil {
		t.Fatal(err)
	}
	// The rack's router, peered from the control-plane node's namespace (where the
	// static pod's host network is), with graceful restart: the CCM runs with
	// bgp.onStop retain, so an upgrade keeps the LoadBalancer paths at the router.
	router := bird.Start(t, bird.Options{SpeakerNetns: cpNode.Host.Name, GracefulRestart: true})
	site := newCCMSite(t, cpNode.EtcDir, map[string]*ipmi.BMC{cpNode.Name: bmc}, cpNode, worker)
	site.extra = fmt.Sprintf(`loadBalancer:
  pools:
  - name: public
    addresses: [192.0.2.64/28]
bgp:
  localASN: 65000
  onStop: retain
  peers:
  - {address: %s, asn: %d, sourceAddress: %s, holdTime: 9s, connectRetry: 1s, gracefulRestart: 120s}
`, router.RouterV4, router.ASN, router.SpeakerV4(0))
	site.write(t)
	kubeconfig := filepath.Join(cpNode.EtcDir, "kubernetes", "baremetal-ccm.conf")
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		t.Fatal(err)
	}
	// As docs/install.md installs it: a client certificate for the user the packaged RBAC
	// binds, and this node's own API server.
	if err := framework.WriteClientKubeconfig(lab.CP, kubeconfig, cpNode.APIServer, manifests.UserName); err != nil {
		t.Fatal(err)
	}
	staticPod := func(image string) []byte {
		t.Helper()
		return ctl(t, lab, "manifests", "static-pod", "--image", image, "--kubeconfig", kubeconfig, "--config-dir", site.dir, "--", "--v=2",
			"--controllers=service-lb-controller") // added to the node controllers: the LoadBalancer announced over BGP
	}
	const manifestFile = "baremetal-cloud-controller-manager.yaml"
	if err := cpNode.WriteStaticPod(manifestFile, staticPod(img.Ref)); err != nil {
		t.Fatal(err)
	}
	rec := framework.RecordNodes(t, lab.CP.Client)
	cpNode.StartKubelet()

	top := t // what a step starts that must outlive the step
	var pod *v1.Pod
	step(t, "static pod runs", func(t *testing.T) {
		var err error
		pod, err = waitMirrorPodReady(ctx, cpNode, img, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("TIMING kubelet start to CCM pod Ready: %s (Ready condition at %s)", time.Since(cpNode.KubeletStarted).Round(100*time.Millisecond), readySince(pod))
		checkStaticPod(ctx, t, cpNode, pod, img)
	})

	step(t, "own Node initialized", func(t *testing.T) {
		registered, initialized := waitInitializedNode(ctx, t, rec, cpNode)
		t.Logf("TIMING %s registered to initialized: %s", cpNode.Name, initialized.At.Sub(registered.At).Round(10*time.Millisecond))
		if r := framework.NodeReady(initialized.Node); r == v1.ConditionTrue {
			t.Errorf("%s was Ready when initialized: the chicken-and-egg case was not exercised", cpNode.Name)
		}
		site.checkInitialized(t, initialized.Node, cpNode)
		// The CNI comes once the Node is initialized; only then does the Node turn Ready.
		cni := time.Now()
		if err := cpNode.EnableCNI(netip.MustParsePrefix("10.88.1.0/24")); err != nil {
			t.Fatal(err)
		}
		ready, err := rec.WaitFirst(ctx, 90*time.Second, cpNode.Name, "Ready", func(e framework.NodeEvent) bool {
			return framework.NodeReady(e.Node) == v1.ConditionTrue
		})
		if err != nil {
			t.Fatal(err)
		}
		if ready.At.Before(cni) {
			t.Errorf("%s was Ready at %s, before it had a CNI (%s)", cpNode.Name, ready.At.Format(time.StampMilli), cni.Format(time.StampMilli))
		}
		t.Logf("TIMING CNI configured to Node Ready: %s", ready.At.Sub(cni).Round(10*time.Millisecond))
	})

	step(t, "BMC read with the image's ipmitool", func(t *testing.T) {
		// The leader's power monitor reads the BMC of each Node (bmclib's IPMI driver
		// runs ipmitool), in the pod: read-only root, two capabilities.
		err := framework.WaitFor(ctx, 2*time.Minute, cpNode.Name+"'s BMC conditions", func(ctx context.Context) (bool, error) {
			n, err := lab.CP.Client.CoreV1().Nodes().Get(ctx, cpNode.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			reach, on := condition(n, powermon.ConditionBMCReachable), condition(n, powermon.ConditionPoweredOn)
			if reach == nil || on == nil || reach.Reason != powermon.ReasonBMCReachable || reach.Status != v1.ConditionTrue || on.Status != v1.ConditionTrue {
				return false, fmt.Errorf("conditions %+v, %+v", reach, on)
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		calls, err := bmc.Calls()
		if err != nil || !slices.Contains(calls, "get power") {
			t.Errorf("the BMC was not asked for the power state: %v, %v", calls, err)
		}
	})

	var agent *framework.Process
	step(t, "worker with the agent", func(t *testing.T) {
		if err := framework.ApplyAgentRBAC(ctx, lab.CP); err != nil {
			t.Fatal(err)
		}
		agentConfig := filepath.Join(worker.EtcDir, "baremetal-ccm", "cloud-config.yaml")
		if err := os.MkdirAll(filepath.Dir(agentConfig), 0o700); err != nil {
			t.Fatal(err)
		}
		// No inventory, no credentials: the agent mirrors pod-CIDR routes into the
		// worker's own kernel (its network namespace), in a table of its own.
		writeFile(t, agentConfig, "apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\nroutes: {table: 201}\n")
		agentKubeconfig := framework.AgentKubeconfig(t, lab.CP, worker.Host, worker.Name)
		notify := listenNotify(t)
		agent = worker.Start(top, "agent-"+worker.Name, []string{"NOTIFY_SOCKET=" + notify.path}, framework.CCMBinary(), "agent",
			"--kubeconfig="+agentKubeconfig, "--cloud-config="+agentConfig, "--node-name="+worker.Name, "--v=2")
		worker.StartKubelet()
		registered, initialized := waitInitializedNode(ctx, t, rec, worker)
		t.Logf("TIMING %s registered to initialized: %s", worker.Name, initialized.At.Sub(registered.At).Round(10*time.Millisecond))
		site.checkInitialized(t, initialized.Node, worker)
		if err := notify.wait("READY=1", time.Minute); err != nil {
			t.Fatalf("the worker's agent: %v", err)
		}
		checkNoDenials(t, "the CCM", podLog(t, cpNode, pod))
	})

	step(t, "upgrade", func(t *testing.T) {
		_, tag, _ := strings.Cut(img.Ref[strings.LastIndexByte(img.Ref, '/'):], ":")
		version := tag + "-upgrade"
		start := time.Now()
		img2, err := framework.BuildCCMImage(ctx, version)
		if err != nil {
			t.Fatal(err)
		}
		if img2.Digest == img.Digest {
			t.Fatalf("the new build has the old digest %s", img.Digest)
		}
		if err := cpNode.ImportImage(ctx, img2); err != nil {
			t.Fatal(err)
		}
		t.Logf("new build %s (%s) in %s", img2.Ref, img2.Digest, time.Since(start).Round(time.Second))
		oldHolder, err := leaseHolder(ctx, lab)
		if err != nil || oldHolder == "" {
			t.Fatalf("lease holder before the upgrade: %q, %v", oldHolder, err)
		}
		nodesBefore := map[string]*v1.Node{}
		for _, n := range []*framework.KubeNode{cpNode, worker} {
			if nodesBefore[n.Name], err = lab.CP.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// A LoadBalancer Service announced by the CCM in the pod: its path must stay at
		// the router throughout (polled every 50 ms), though the kubelet stops the old
		// pod before it starts the new one.
		svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubelet-e2e-web"},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Port: 80}}}}
		if _, err := lab.CP.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var prefix netip.Prefix
		err = framework.WaitFor(ctx, 2*time.Minute, "the Service's address at the router", func(ctx context.Context) (bool, error) {
			s, err := lab.CP.Client.CoreV1().Services("default").Get(ctx, svc.Name, metav1.GetOptions{})
			if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
				return false, err
			}
			prefix = netip.PrefixFrom(netip.MustParseAddr(s.Status.LoadBalancer.Ingress[0].IP), 32)
			rs, err := router.RoutesFor(ctx, prefix)
			return len(rs) == 1, err
		})
		if err != nil {
			t.Fatalf("%v\nbird.log:\n%s", err, router.Log())
		}
		gaps := watchGaps(ctx, func(ctx context.Context, p netip.Prefix) (int, error) {
			rs, err := router.RoutesFor(ctx, p)
			return len(rs), err
		}, []netip.Prefix{prefix})
		since := time.Now()
		// When the old pod released the Lease and the new one took it (polled every
		// 100 ms; the checks below take longer than the hand-over).
		var released, taken time.Time
		var leaseMu sync.Mutex
		leaseCtx, stopLease := context.WithCancel(ctx)
		defer stopLease()
		go func() {
			for leaseCtx.Err() == nil {
				if h, err := leaseHolder(leaseCtx, lab); err == nil {
					leaseMu.Lock()
					switch {
					case h == "" && released.IsZero():
						released = time.Now()
					case h != "" && h != oldHolder && taken.IsZero():
						taken = time.Now()
					}
					leaseMu.Unlock()
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		if err := cpNode.WriteStaticPod(manifestFile, staticPod(img2.Ref)); err != nil {
			t.Fatal(err)
		}
		newPod, err := waitMirrorPodReady(ctx, cpNode, img2, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("TIMING manifest changed to new pod Ready: %s", time.Since(since).Round(100*time.Millisecond))
		if newPod.Annotations["kubernetes.io/config.mirror"] == pod.Annotations["kubernetes.io/config.mirror"] {
			t.Error("the kubelet kept the old pod")
		}
		if _, err := cpNode.ContainerPID(ctx, pod.Status.ContainerStatuses[0].ContainerID); err == nil {
			t.Error("the old pod's container still runs beside the new one")
		}
		checkStaticPod(ctx, t, cpNode, newPod, img2)
		var newHolder string
		err = framework.WaitFor(ctx, time.Minute, "the new pod to take the lease", func(ctx context.Context) (bool, error) {
			newHolder, err = leaseHolder(ctx, lab)
			return newHolder != "" && newHolder != oldHolder, err
		})
		if err != nil {
			t.Fatal(err)
		}
		leaseMu.Lock()
		rel, tk := released, taken
		leaseMu.Unlock()
		if rel.IsZero() || !tk.IsZero() && tk.Before(rel) {
			t.Errorf("the old pod did not release the Lease when it stopped (released %v, taken %v)", rel, tk)
		}
		if !tk.IsZero() {
			t.Logf("TIMING manifest changed to Lease released by the old pod: %s, to Lease taken by the new pod: %s (%s -> %s)",
				rel.Sub(since).Round(100*time.Millisecond), tk.Sub(since).Round(100*time.Millisecond), oldHolder, newHolder)
		}
		if log := podLog(t, cpNode, newPod); !strings.Contains(log, `version="`+version+`"`) {
			t.Errorf("the new pod does not run version %s; its log:\n%s", version, tailLines(log, 20))
		}
		// Give the new leader's controllers a full pass over the Nodes.
		time.Sleep(10 * time.Second)
		for _, n := range []*framework.KubeNode{cpNode, worker} {
			before := nodesBefore[n.Name]
			for _, e := range rec.Events(n.Name, since) {
				switch {
				case e.Type == "DELETED" || e.Node.UID != before.UID:
					t.Errorf("%s: %s at %s during the upgrade", n.Name, e.Type, e.At.Format(time.RFC3339Nano))
				case framework.HasTaint(e.Node, cloudproviderapi.TaintExternalCloudProvider):
					t.Errorf("%s got the uninitialized taint back during the upgrade", n.Name)
				case e.Node.Spec.ProviderID != before.Spec.ProviderID:
					t.Errorf("%s: providerID %q -> %q during the upgrade", n.Name, before.Spec.ProviderID, e.Node.Spec.ProviderID)
				case !sameLabels(before.Labels, e.Node.Labels):
					t.Errorf("%s: labels %v -> %v during the upgrade", n.Name, before.Labels, e.Node.Labels)
				}
			}
		}
		checkNoDenials(t, "the new CCM", podLog(t, cpNode, newPod))
		missing, polls := gaps.stop()
		if len(missing) > 0 {
			t.Errorf("the Service's path was missing from the router in %d of %d polls during the upgrade: %v", len(missing), polls, missing[:min(len(missing), 10)])
		}
		t.Logf("BGP: %s at the router in all %d polls (50 ms) during the upgrade", prefix, polls)
		select {
		case <-agent.Done():
			t.Errorf("the worker's agent exited: %v", agent.ExitErr())
		default:
			checkNoDenials(t, "the worker's agent", agent.Log())
		}
	})
}

// TestKubeletDeployment runs `baremetal-ccmctl manifests deployment` under a real
// kubelet, scheduled by kube-scheduler onto the only control-plane Node while that Node
// is tainted uninitialized, not-ready (kube-controller-manager's node lifecycle: no CNI)
// and control-plane: the pod runs as the packaged ServiceAccount (a bound token) with its
// configuration from a ConfigMap, and initializes the Node. The second replica stays
// Pending: one per node (the secure port on the host, and the pod anti-affinity).
//
// Then `baremetal-ccmctl manifests agent-daemonset` with a second, worker kubelet: the
// agent's pod runs on the worker only (none on the control-plane Node), as the agents'
// ServiceAccount with the CCM's container restrictions, is Ready by its /readyz, and
// mirrors the control-plane Node's pod CIDR into the worker's kernel.
func TestKubeletDeployment(t *testing.T) {
	lab := framework.NewKubeLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	img := framework.CCMImage(t)
	node := lab.NewKubeNode(t, framework.KubeNodeOptions{
		Name: "kl-dp-1", Images: []framework.Image{img},
		RegisterWithTaints: []string{manifests.LabelControlPlane + ":NoSchedule"},
	})
	worker := lab.NewKubeNode(t, framework.KubeNodeOptions{Name: "kl-dp-w1", Images: []framework.Image{img}})
	lab.StartControllerManager(t, "deployment,replicaset,daemonset,root-ca-cert-publisher,node-lifecycle-controller,taint-eviction-controller")
	lab.StartScheduler(t)
	site := newCCMSite(t, t.TempDir(), nil, node, worker)
	const configDir = "/etc/baremetal-ccm"
	cm := &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: manifests.DefaultDeploymentOptions().ConfigMap, Namespace: manifests.Namespace},
		Data:       site.files(configDir),
	}
	if _, err := lab.CP.Client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node's API server: this lab has no kube-proxy for the kubernetes Service.
	objs, err := framework.DecodeManifests(ctl(t, lab, "manifests", "deployment", "--image", img.Ref, "--api-server", "127.0.0.1:6443", "--", "--v=2"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 {
		t.Fatalf("manifests deployment printed %d objects", len(objs))
	}
	deploy, err := lab.CP.Client.AppsV1().Deployments(manifests.Namespace).Create(ctx, deploymentOf(t, objs[0]), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("deployment %s: %d replicas", deploy.Name, *deploy.Spec.Replicas)

	rec := framework.RecordNodes(t, lab.CP.Client)
	node.StartKubelet()
	// kubeadm labels its control-plane Nodes once they registered (a kubelet may not
	// set node-role labels itself).
	if _, err := rec.WaitFirst(ctx, time.Minute, node.Name, "registered", func(framework.NodeEvent) bool { return true }); err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, manifests.LabelControlPlane)
	if _, err := lab.CP.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	selector := "app.kubernetes.io/name=baremetal-ccm,app.kubernetes.io/component=cloud-controller-manager"
	running, bound := waitPodReadyOn(ctx, t, lab, selector, node)
	t.Logf("TIMING kubelet start to Deployment pod Ready: %s", time.Since(node.KubeletStarted).Round(100*time.Millisecond))
	if running.Spec.ServiceAccountName != manifests.ServiceAccount || !running.Spec.HostNetwork {
		t.Errorf("pod runs as %q, hostNetwork %v", running.Spec.ServiceAccountName, running.Spec.HostNetwork)
	}
	checkContainer(ctx, t, node, running, img)

	registered, initialized := waitInitializedNode(ctx, t, rec, node)
	t.Logf("TIMING %s registered to initialized: %s", node.Name, initialized.At.Sub(registered.At).Round(10*time.Millisecond))
	site.checkInitialized(t, initialized.Node, node)
	// The pod was scheduled onto the Node while the Node carried every taint the pod
	// tolerates (the CCM in the pod cannot have removed one before it ran).
	at, ok := rec.At(node.Name, bound)
	if !ok || !framework.HasTaint(at.Node, manifests.TaintUninitialized) || !framework.HasTaint(at.Node, manifests.TaintNotReady) ||
		!framework.HasTaint(at.Node, manifests.LabelControlPlane) || framework.NodeReady(at.Node) == v1.ConditionTrue {
		t.Errorf("when the pod was bound (%s) the Node had taints %v, Ready %s; want the uninitialized, not-ready and control-plane taints, not Ready",
			bound.Format(time.StampMilli), at.Node.Spec.Taints, framework.NodeReady(at.Node))
	}
	if holder, err := leaseHolder(ctx, lab); err != nil || holder == "" {
		t.Errorf("no leader: %q, %v", holder, err)
	}
	checkNoDenials(t, "the CCM", podLog(t, node, running))

	// The second replica cannot go to the same node.
	err = framework.WaitFor(ctx, time.Minute, "the second replica to be unschedulable", func(ctx context.Context) (bool, error) {
		pods, err := lab.CP.Client.CoreV1().Pods(manifests.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Name == running.Name {
				continue
			}
			if p.Spec.NodeName != "" {
				return false, fmt.Errorf("%s was scheduled to %s", p.Name, p.Spec.NodeName)
			}
			// The scheduler names the first constraint that fails: the host port, which
			// the anti-affinity would catch if the port were not declared.
			if c := podCondition(p, v1.PodScheduled); c.Reason == v1.PodReasonUnschedulable &&
				(strings.Contains(c.Message, "anti-affinity") || strings.Contains(c.Message, "free ports")) {
				t.Logf("%s: %s", p.Name, c.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Error(err)
	}

	step(t, "agent DaemonSet", func(t *testing.T) {
		checkAgentDaemonSet(ctx, t, lab, img, node, worker)
	})
}

// checkAgentDaemonSet applies the agents' RBAC, a ConfigMap with their CloudConfig and
// the packaged DaemonSet, starts the worker's kubelet, and checks the agent's pod on it.
func checkAgentDaemonSet(ctx context.Context, t *testing.T, lab *framework.KubeLab, img framework.Image, cpNode, worker *framework.KubeNode) {
	// The control-plane Node's pod CIDR, which the worker's agent mirrors (no IPAM
	// controller runs here).
	const podCIDR = "10.88.7.0/24"
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, podCIDR, podCIDR)
	if _, err := lab.CP.Client.CoreV1().Nodes().Patch(ctx, cpNode.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.ApplyAgentRBAC(ctx, lab.CP); err != nil {
		t.Fatal(err)
	}
	o := manifests.DefaultAgentDaemonSetOptions()
	cm := &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: o.ConfigMap, Namespace: manifests.Namespace},
		// No inventory, no credentials: routes into the host's kernel, a table of
		// their own.
		Data: map[string]string{"cloud-config.yaml": "apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\nroutes: {table: 201}\n"},
	}
	if _, err := lab.CP.Client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs, err := framework.DecodeManifests(ctl(t, lab, "manifests", "agent-daemonset", "--image", img.Ref, "--api-server", "127.0.0.1:6443", "--", "--v=2"))
	if err != nil {
		t.Fatal(err)
	}
	ds, ok := objs[0].(*appsv1.DaemonSet)
	if len(objs) != 1 || !ok {
		t.Fatalf("manifests agent-daemonset printed %d objects, the first a %T", len(objs), objs[0])
	}
	if _, err := lab.CP.Client.AppsV1().DaemonSets(manifests.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The lab's nodes each sit on a /30 of their own; a rack shares one subnet. Make
	// the control-plane Node's address on-link for the worker, as it would be there
	// (else the mirror rightly leaves the route to the fabric).
	if out, err := worker.Exec(ctx, "ip", "route", "add", cpNode.IP.String()+"/32", "dev", "uplink", "scope", "link"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}

	rec := framework.RecordNodes(t, lab.CP.Client)
	worker.StartKubelet()
	pod, _ := waitPodReadyOn(ctx, t, lab, labels.SelectorFromSet(ds.Spec.Selector.MatchLabels).String(), worker)
	t.Logf("TIMING kubelet start to agent pod Ready: %s", time.Since(worker.KubeletStarted).Round(100*time.Millisecond))
	if pod.Spec.ServiceAccountName != manifests.AgentServiceAccount || !pod.Spec.HostNetwork {
		t.Errorf("agent pod runs as %q, hostNetwork %v", pod.Spec.ServiceAccountName, pod.Spec.HostNetwork)
	}
	checkContainer(ctx, t, worker, pod, img)
	registered, initialized := waitInitializedNode(ctx, t, rec, worker)
	t.Logf("TIMING %s registered to initialized: %s", worker.Name, initialized.At.Sub(registered.At).Round(10*time.Millisecond))

	// The agent's work: the control-plane Node's pod CIDR via its address, in the
	// worker's own kernel.
	want := podCIDR + " via " + cpNode.IP.String()
	var routes string
	err = framework.WaitFor(ctx, time.Minute, "the pod CIDR route in "+worker.Name+"'s kernel", func(ctx context.Context) (bool, error) {
		routes, err = worker.Exec(ctx, "ip", "route", "show", "table", "201")
		return err == nil && strings.Contains(routes, want), nil
	})
	if err != nil {
		t.Errorf("%v; table 201: %q; the agent's log:\n%s", err, routes, tailLines(podLog(t, worker, pod), 40))
	}
	// One pod, on the worker: none on the control-plane Node, where the CCM runs the
	// agent itself.
	got, err := lab.CP.Client.AppsV1().DaemonSets(manifests.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.DesiredNumberScheduled != 1 || got.Status.NumberReady != 1 {
		t.Errorf("DaemonSet status %+v, want one pod (the worker's), ready", got.Status)
	}
	log := podLog(t, worker, pod)
	checkNoDenials(t, "the agent", log)
	if !strings.Contains(log, "Serving /metrics, /healthz and /readyz") {
		t.Errorf("the agent's log does not say where it serves:\n%s", tailLines(log, 20))
	}
}

// waitPodReadyOn waits until a pod in kube-system matching selector is Ready on kn, and
// returns it and when a matching pod was first seen bound to kn.
func waitPodReadyOn(ctx context.Context, t *testing.T, lab *framework.KubeLab, selector string, kn *framework.KubeNode) (*v1.Pod, time.Time) {
	t.Helper()
	var ready *v1.Pod
	var bound time.Time
	err := framework.WaitFor(ctx, 4*time.Minute, "a pod of "+selector+" Ready on "+kn.Name, func(ctx context.Context) (bool, error) {
		pods, err := lab.CP.Client.CoreV1().Pods(manifests.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			states = append(states, fmt.Sprintf("%s on %q: %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, podConditions(p)))
			if p.Spec.NodeName == kn.Name && bound.IsZero() {
				bound = time.Now()
			}
			if p.Spec.NodeName == kn.Name && podReady(p) {
				ready = p
				return true, nil
			}
		}
		return false, fmt.Errorf("pods: %s", strings.Join(states, "; "))
	})
	if err != nil {
		t.Fatal(err)
	}
	return ready, bound
}

// step runs a subtest and stops the test when it fails: later steps build on it.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}

// ccmSite is the CCM's configuration for the lab's nodes: a CloudConfig and an inventory
// with one host per node (its address the node's IP).
type ccmSite struct {
	dir       string // where newCCMSite wrote the files
	inventory string // the inventory document
	extra     string // appended to the CloudConfig (write rewrites the files)
}

// write rewrites the files (after a change of extra).
func (s *ccmSite) write(t *testing.T) {
	t.Helper()
	for name, content := range s.files(s.dir) {
		writeFile(t, filepath.Join(s.dir, name), content)
	}
}

// newCCMSite writes the files into etc/baremetal-ccm; hosts with a BMC in bmcs get it
// (credentials files in the credentials directory, mode 0600) and its system UUID.
func newCCMSite(t *testing.T, etc string, bmcs map[string]*ipmi.BMC, nodes ...*framework.KubeNode) *ccmSite {
	t.Helper()
	s := &ccmSite{dir: filepath.Join(etc, "baremetal-ccm")}
	if err := os.MkdirAll(filepath.Join(s.dir, "bmc"), 0o700); err != nil {
		t.Fatal(err)
	}
	var inv strings.Builder
	inv.WriteString("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n")
	for i, n := range nodes {
		fmt.Fprintf(&inv, `- name: %s
  addresses: [{type: InternalIP, address: %s}, {type: Hostname, address: %s}]
  instanceType: e2e-%d
  region: lab
  zone: lab-%c
  labels: {lab-node: %s}
`, n.Name, n.IP, n.Name, i, 'a'+i, n.Name)
		if b := bmcs[n.Name]; b != nil {
			creds := filepath.Join(s.dir, "bmc", n.Name)
			writeFile(t, creds, fmt.Sprintf("username: %s\npassword: %s\n", b.Username(), b.Password()))
			fmt.Fprintf(&inv, "  systemUUID: %s\n  bmc: {protocol: ipmi, address: %s, port: %d, credentialsFile: %s}\n", b.SystemGUID(), b.Host(), b.Port(), creds)
		}
	}
	s.inventory = inv.String()
	for name, content := range s.files(s.dir) {
		writeFile(t, filepath.Join(s.dir, name), content)
	}
	return s
}

// startNodeBMC starts an ipmi_sim BMC on the node's loopback (in its namespaces).
func startNodeBMC(ctx context.Context, t *testing.T, kn *framework.KubeNode) *ipmi.BMC {
	t.Helper()
	sim, err := kn.Wrapper("ipmi_sim", "ipmi_sim")
	if err != nil {
		t.Fatal(err)
	}
	tool, err := kn.Wrapper("ipmitool", "ipmitool")
	if err != nil {
		t.Fatal(err)
	}
	lab, err := ipmi.Start(ctx, filepath.Join(t.TempDir(), "ipmi"), 1, ipmi.Options{
		Username: "admin", Password: "kubelet-e2e-pw", IPMISimPath: sim, IPMIToolPath: tool,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Stop)
	return lab.BMCs()[0]
}

// files returns the configuration files for a CCM that finds them in dir.
func (s *ccmSite) files(dir string) map[string]string {
	return map[string]string{
		"inventory.yaml": s.inventory,
		"cloud-config.yaml": fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: %s, pollInterval: 1s}
  credentialsDir: %s
  deletionGuard: {acknowledgeFile: %s}
`, filepath.Join(dir, "inventory.yaml"), filepath.Join(dir, "bmc"), filepath.Join(dir, "inventory-ack")) + s.extra,
	}
}

// checkInitialized checks what the CCM set on the node's Node from the inventory.
func (s *ccmSite) checkInitialized(t *testing.T, n *v1.Node, kn *framework.KubeNode) {
	t.Helper()
	if n.Spec.ProviderID != "baremetal://"+kn.Name {
		t.Errorf("%s: providerID %q", kn.Name, n.Spec.ProviderID)
	}
	if got := n.Annotations[cloudproviderapi.AnnotationAlphaProvidedIPAddr]; got != kn.IP.String() {
		t.Errorf("%s: provided node IP annotation %q, want %s (kubelet --node-ip)", kn.Name, got, kn.IP)
	}
	if !slices.Contains(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: kn.IP.String()}) ||
		!slices.Contains(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeHostName, Address: kn.Name}) {
		t.Errorf("%s: addresses %v, want InternalIP %s and Hostname %s", kn.Name, n.Status.Addresses, kn.IP, kn.Name)
	}
	for k, v := range map[string]string{v1.LabelTopologyRegion: "lab", "baremetal-ccm.io/lab-node": kn.Name} {
		if n.Labels[k] != v {
			t.Errorf("%s: label %s=%q, want %q", kn.Name, k, n.Labels[k], v)
		}
	}
	if !strings.HasPrefix(n.Labels[v1.LabelInstanceTypeStable], "e2e-") || !strings.HasPrefix(n.Labels[v1.LabelTopologyZone], "lab-") {
		t.Errorf("%s: labels %v lack the instance type and zone", kn.Name, n.Labels)
	}
}

// waitInitializedNode waits until the node's kubelet registered its Node and the CCM
// initialized it; it checks the Node was registered as kubelet --cloud-provider=external
// does, with the uninitialized taint.
func waitInitializedNode(ctx context.Context, t *testing.T, rec *framework.NodeRecorder, kn *framework.KubeNode) (registered, initialized framework.NodeEvent) {
	t.Helper()
	registered, err := rec.WaitFirst(ctx, 2*time.Minute, kn.Name, "registered", func(framework.NodeEvent) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if !framework.HasTaint(registered.Node, cloudproviderapi.TaintExternalCloudProvider) || registered.Node.Spec.ProviderID != "" {
		t.Errorf("%s registered with taints %v, providerID %q: want the uninitialized taint and no providerID", kn.Name, registered.Node.Spec.Taints, registered.Node.Spec.ProviderID)
	}
	initialized, err = rec.WaitFirst(ctx, 2*time.Minute, kn.Name, "initialized", func(e framework.NodeEvent) bool {
		return !framework.HasTaint(e.Node, cloudproviderapi.TaintExternalCloudProvider)
	})
	if err != nil {
		t.Fatal(err)
	}
	return registered, initialized
}

// waitMirrorPodReady waits for the CCM's static pod on the node to run img, Ready.
func waitMirrorPodReady(ctx context.Context, kn *framework.KubeNode, img framework.Image, timeout time.Duration) (*v1.Pod, error) {
	var pod *v1.Pod
	err := framework.WaitFor(ctx, timeout, "the CCM's mirror pod Ready with "+img.Ref, func(ctx context.Context) (bool, error) {
		p, err := kn.MirrorPod(ctx, manifests.Namespace, manifests.Name)
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("no mirror pod yet")
		}
		if err != nil {
			return false, err
		}
		if p.Spec.Containers[0].Image != img.Ref {
			return false, fmt.Errorf("mirror pod runs %s", p.Spec.Containers[0].Image)
		}
		if !podReady(p) {
			return false, fmt.Errorf("mirror pod %s %s", p.Status.Phase, podConditions(p))
		}
		pod = p
		return true, nil
	})
	return pod, err
}

// checkStaticPod checks the static pod as it runs: a mirror of a file source, on the
// host network, the image's digest, no restart, its container's privileges, its probes.
func checkStaticPod(ctx context.Context, t *testing.T, kn *framework.KubeNode, pod *v1.Pod, img framework.Image) {
	t.Helper()
	if pod.Annotations["kubernetes.io/config.source"] != "file" || pod.Annotations["kubernetes.io/config.mirror"] == "" {
		t.Errorf("not the mirror of a static pod: annotations %v", pod.Annotations)
	}
	if !pod.Spec.HostNetwork || pod.Spec.NodeName != kn.Name || pod.Spec.PriorityClassName != "system-node-critical" {
		t.Errorf("hostNetwork %v, node %q, priority class %q", pod.Spec.HostNetwork, pod.Spec.NodeName, pod.Spec.PriorityClassName)
	}
	if pod.Status.PodIP != kn.IP.String() {
		t.Errorf("pod IP %s, want the node's %s (host network)", pod.Status.PodIP, kn.IP)
	}
	checkContainer(ctx, t, kn, pod, img)
	// Probes: both kinds succeeded, liveness never failed (the kubelet counts them).
	// Readiness (/readyz) may fail until the BGP sessions are up with this host's
	// paths at the router: that is what it is for.
	uid := pod.Annotations["kubernetes.io/config.mirror"]
	err := framework.WaitFor(ctx, 45*time.Second, "liveness and readiness probes to succeed", func(ctx context.Context) (bool, error) {
		metrics, err := kn.KubeletGet(ctx, "/metrics/probes")
		if err != nil {
			return false, err
		}
		counts := probeCounts(metrics, uid)
		for key, n := range counts {
			if strings.HasPrefix(key, "Liveness/") && !strings.HasSuffix(key, "/successful") && n > 0 {
				return false, fmt.Errorf("probe results %v", counts)
			}
		}
		if counts["Liveness/successful"] == 0 || counts["Readiness/successful"] == 0 {
			return false, fmt.Errorf("probe results so far %v", counts)
		}
		return true, nil
	})
	if err != nil {
		t.Error(err)
	}
}

// checkContainer checks the CCM container of pod: running the image (its digest), no
// restart, and its process: the image's binary, exactly NET_ADMIN and
// NET_BIND_SERVICE, no new privileges, seccomp, a read-only root.
func checkContainer(ctx context.Context, t *testing.T, kn *framework.KubeNode, pod *v1.Pod, img framework.Image) {
	t.Helper()
	if len(pod.Status.ContainerStatuses) != 1 {
		t.Fatalf("container statuses %+v", pod.Status.ContainerStatuses)
	}
	cs := pod.Status.ContainerStatuses[0]
	if cs.RestartCount != 0 || !cs.Ready || cs.State.Running == nil {
		t.Errorf("container: restarts %d, ready %v, state %+v", cs.RestartCount, cs.Ready, cs.State)
	}
	if cs.Image != img.Ref || cs.ImageID != img.ID {
		t.Errorf("container image %s (ID %s), want %s with the archive's image ID %s", cs.Image, cs.ImageID, img.Ref, img.ID)
	}
	pid, err := kn.ContainerPID(ctx, cs.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if exe != "/usr/bin/baremetal-cloud-controller-manager" {
		t.Errorf("container process %d runs %q", pid, exe)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	for _, k := range []string{"CapPrm", "CapEff", "CapBnd"} {
		caps, err := strconv.ParseUint(fields[k], 16, 64)
		if err != nil || caps != wantCaps {
			t.Errorf("%s = %s, want %016x (NET_ADMIN and NET_BIND_SERVICE only)", k, fields[k], wantCaps)
		}
	}
	for k, want := range map[string]string{"CapInh": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2", "Uid": "0\t0\t0\t0"} {
		if fields[k] != want {
			t.Errorf("%s = %q, want %q", k, fields[k], want)
		}
	}
	mountinfo, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	rootRO := false
	for _, line := range strings.Split(string(mountinfo), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			rootRO = slices.Contains(strings.Split(f[5], ","), "ro")
		}
	}
	if !rootRO {
		t.Errorf("the container's root is writable:\n%s", mountinfo)
	}
}

// podLog returns the log of the CCM container of pod, as the kubelet keeps it.
func podLog(t *testing.T, kn *framework.KubeNode, pod *v1.Pod) string {
	t.Helper()
	uid := string(pod.UID)
	if m := pod.Annotations["kubernetes.io/config.mirror"]; m != "" {
		uid = m // a static pod's own UID
	}
	log, err := kn.ContainerLog(pod.Namespace, pod.Name, uid, pod.Spec.Containers[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// checkNoDenials fails the test when the log shows a request the API server denied:
// the processes run with the packaged RBAC only, which must be enough.
func checkNoDenials(t *testing.T, who, log string) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, " is forbidden: ") {
			t.Errorf("%s was denied (the packaged RBAC lacks a permission): %s", who, line)
			return
		}
	}
}

// probeCounts sums the kubelet's prober_probe_total of the pod with this UID by
// "<probe type>/<result>".
func probeCounts(metrics, uid string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(line, "prober_probe_total{") || !strings.Contains(line, `pod_uid="`+uid+`"`) {
			continue
		}
		labels, value, _ := strings.Cut(strings.TrimPrefix(line, "prober_probe_total{"), "} ")
		var typ, result string
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "probe_type":
				typ = strings.Trim(v, `"`)
			case "result":
				result = strings.Trim(v, `"`)
			}
		}
		n, _ := strconv.ParseFloat(strings.TrimSpace(value), 64)
		out[typ+"/"+result] += n
	}
	return out
}

func podReady(p *v1.Pod) bool { return podCondition(p, v1.PodReady).Status == v1.ConditionTrue }

func podCondition(p *v1.Pod, typ v1.PodConditionType) v1.PodCondition {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return v1.PodCondition{}
}

func podConditions(p *v1.Pod) string {
	var parts []string
	for _, c := range p.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s %s", c.Type, c.Status, c.Message))
	}
	return strings.Join(parts, ", ")
}

func readySince(p *v1.Pod) string {
	return podCondition(p, v1.PodReady).LastTransitionTime.Format(time.RFC3339)
}

// leaseHolder returns the holder of the CCM's leader election lease.
func leaseHolder(ctx context.Context, lab *framework.KubeLab) (string, error) {
	l, err := lab.CP.Client.CoordinationV1().Leases("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return holderOf(l), nil
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// ctl runs baremetal-ccmctl and returns its output.
func ctl(t *testing.T, lab *framework.KubeLab, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(lab.Ctl, args...).Output()
	if err != nil {
		t.Fatalf("baremetal-ccmctl %v: %v", args, err)
	}
	return out
}

func deploymentOf(t *testing.T, obj any) *appsv1.Deployment {
	t.Helper()
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		t.Fatalf("manifests deployment printed a %T", obj)
	}
	return d
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// notifyListener is a systemd notify socket (NOTIFY_SOCKET) for a process under test.
type notifyListener struct {
	path string
	msgs chan string
}

func listenNotify(t *testing.T) *notifyListener {
	t.Helper()
	n := &notifyListener{path: filepath.Join(t.TempDir(), "notify.sock"), msgs: make(chan string, 100)}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				close(n.msgs)
				return
			}
			for _, line := range strings.Split(strings.TrimSpace(string(buf[:k])), "\n") {
				n.msgs <- line
			}
		}
	}()
	return n
}

func (n *notifyListener) wait(want string, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case m, ok := <-n.msgs:
			if !ok {
				return fmt.Errorf("notify socket closed before %s", want)
			}
			if m == want {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("no %s on the notify socket within %s", want, timeout)
		}
	}
}
