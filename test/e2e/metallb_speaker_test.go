//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/metallb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// configurationStatesGVR is MetalLB's per-speaker report on the configuration it read.
var configurationStatesGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "configurationstates"}

// metallbSpeakerBinary returns MetalLB's speaker built from the Go module (the version
// go.mod pins for MetalLB's API types) by hack/build-metallb-speaker.sh, which
// `make deps` runs and which returns at once when the build is cached.
func metallbSpeakerBinary(t *testing.T) string {
	t.Helper()
	root, err := framework.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-metallb-speaker.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("building MetalLB's speaker (hack/build-metallb-speaker.sh): %v\n%s", err, stderr.String())
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "speaker")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("MetalLB speaker: %v", err)
	}
	return bin
}

// applyMetalLBSpeakerRBAC creates, from MetalLB's own manifest in the module
// (config/manifests/metallb-native.yaml), the speaker's ServiceAccount and the roles
// bound to it, and writes a kubeconfig for that ServiceAccount to path. The speaker
// then runs with exactly the permissions MetalLB ships it with.
func applyMetalLBSpeakerRBAC(ctx context.Context, t *testing.T, path string) {
	t.Helper()
	cp := framework.Shared()
	dir, err := framework.ModuleDir(ctx, "go.universe.tf/metallb")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "config", "manifests", "metallb-native.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const sa = "speaker"
	objs, err := framework.DecodeManifestsOf(data, func(kind string) bool {
		switch kind {
		case "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding":
			return true
		}
		return false // CRDs, workloads, webhooks: not ours to create here
	})
	if err != nil {
		t.Fatalf("%s: %v", "metallb-native.yaml", err)
	}
	// Keep the speaker's ServiceAccount, its bindings and the roles they refer to.
	boundToSpeaker := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == metallb.DefaultNamespace
		})
	}
	roles, clusterRoles := map[string]bool{}, map[string]bool{}
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.RoleBinding:
			if boundToSpeaker(o.Subjects) {
				roles[o.RoleRef.Name] = true
			}
		case *rbacv1.ClusterRoleBinding:
			if boundToSpeaker(o.Subjects) {
				clusterRoles[o.RoleRef.Name] = true
			}
		}
	}
	c := cp.Client
	created := 0
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.ServiceAccount:
			if o.Name == sa {
				_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
				created++
			}
		case *rbacv1.Role:
			if roles[o.Name] {
				_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
				created++
			}
		case *rbacv1.ClusterRole:
			if clusterRoles[o.Name] {
				_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
				created++
			}
		case *rbacv1.RoleBinding:
			if boundToSpeaker(o.Subjects) {
				_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
				created++
			}
		case *rbacv1.ClusterRoleBinding:
			if boundToSpeaker(o.Subjects) {
				_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
				created++
			}
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("MetalLB speaker RBAC: %v", err)
		}
		err = nil
	}
	if created < 5 {
		t.Fatalf("MetalLB's manifest gave %d speaker RBAC objects, want the ServiceAccount, two roles and two bindings", created)
	}
	if err := framework.WriteTokenKubeconfig(ctx, cp, metallb.DefaultNamespace, sa, path); err != nil {
		t.Fatal(err)
	}
}

// applyMetalLBAnnouncerRBAC creates packaging/kubernetes/rbac-metallb.yaml's objects
// (the announcer's Role in MetalLB's namespace for the packaged ServiceAccount).
func applyMetalLBAnnouncerRBAC(ctx context.Context, t *testing.T) {
	t.Helper()
	c := framework.Shared().Client
	for _, o := range manifests.MetalLBRBAC(metallb.DefaultNamespace) {
		var err error
		switch o := o.(type) {
		case *rbacv1.Role:
			_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("rbac-metallb: unexpected %T", o)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// deleteOurMetalLBObjects removes what the CCM wrote to MetalLB's namespace (the CCM
// leaves its objects when it stops, so that MetalLB keeps announcing).
func deleteOurMetalLBObjects(t *testing.T) {
	admin, err := dynamic.NewForConfig(framework.Shared().RESTConfig)
	if err != nil {
		t.Error(err)
		return
	}
	for _, gvr := range []schema.GroupVersionResource{poolsGVR, peersGVR, advsGVR, metallb.SecretsGVR} {
		_ = admin.Resource(gvr).Namespace(metallb.DefaultNamespace).DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: metallb.LabelManagedBy + "=" + metallb.ManagedBy})
	}
}

// TestMetalLBSpeaker is the announcer end to end with a real MetalLB speaker (built
// from the Go module, native BGP mode) running as a process in a network namespace
// standing for a node, with the RBAC MetalLB ships for it:
//
//   - the CCM (packaged RBAC) initializes the Node from the inventory, which labels it
//     with its rack, and writes MetalLB's objects: the rack's router as a BGPPeer
//     selecting that label, its TCP-MD5 password in a Secret, the pool and its
//     advertisement with communities;
//   - the speaker peers with BIRD only because of that node selector and password;
//   - a Service's IP, assigned by the CCM, reaches BIRD's table through the speaker,
//     with the pool's and the global communities;
//   - a changed IP request moves the announcement; deleting the Service withdraws it.
func TestMetalLBSpeaker(t *testing.T) {
	cp := framework.Shared()
	h := framework.NewHost(t, cp) // skips when not root
	speaker := metallbSpeakerBinary(t)
	const password = "rack-r1-md5"
	router := bird.Start(t, bird.Options{Speakers: []bird.Speaker{{ASN: 64512, Password: password}}, SpeakerNetns: h.Name})

	l := newLabNoCCM(t)
	setupMetalLB(l.ctx, t)
	applyMetalLBAnnouncerRBAC(l.ctx, t)
	t.Cleanup(func() { deleteOurMetalLBObjects(t) })
	speakerKubeconfig := filepath.Join(l.dir, "metallb-speaker.kubeconfig")
	applyMetalLBSpeakerRBAC(l.ctx, t, speakerKubeconfig)

	node := "mlb-node-" + rand.String(5)
	pwFile := filepath.Join(l.dir, "rack-r1.password")
	writeFile(t, pwFile, password+"\n")
	l.setInventory(fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
racks:
- name: r1
  bgpPeers:
  - {address: %s, asn: %d, passwordFile: %s, holdTime: 9s}
hosts:
- name: %s
  rack: r1
  addresses: [{type: InternalIP, address: %s}]
`, router.RouterV4, router.ASN, pwFile, node, router.SpeakerV4(0)))
	l.writeConfig("", `loadBalancer:
  announcer: metallb
  metallb: {bgpMode: native}
  pools:
  - {name: mlb-e2e, addresses: [198.51.100.0/28], communities: ["65000:100"]}
bgp:
  localASN: 64512
  communities: ["65000:1"]
`)
	l.ccm = framework.StartCCM(t, cp, l.config, "--controllers=cloud-node-controller,service-lb-controller")
	if err := l.ccm.WaitHealthy(l.ctx); err != nil {
		t.Fatal(err)
	}
	l.createNode(framework.NodeSpec{Name: node, InternalIPs: []string{router.SpeakerV4(0).String()}, Ready: ready(v1.ConditionTrue)})
	if got := l.waitInitialized(node).Labels[inventory.LabelRack]; got != "r1" {
		t.Fatalf("Node %s label %s = %q, want r1 (the rack peer selects it)", node, inventory.LabelRack, got)
	}

	// The speaker's Pod object (the speaker reads itself to own its status objects);
	// no kubelet runs it: the process below is the speaker.
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metallb.DefaultNamespace, Name: "speaker-" + rand.String(5), Labels: map[string]string{"app": "metallb", "component": "speaker"}},
		Spec: v1.PodSpec{NodeName: node, ServiceAccountName: "speaker", AutomountServiceAccountToken: ptr.To(false),
			Containers: []v1.Container{{Name: "speaker", Image: "metallb/speaker:v0.15.3"}}},
	}
	if _, err := cp.Client.CoreV1().Pods(pod.Namespace).Create(l.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	sp := framework.StartIn(t, h, "metallb-speaker", nil, speaker,
		"--kubeconfig="+h.KubeconfigFor(t, speakerKubeconfig),
		"--namespace="+metallb.DefaultNamespace, "--node-name="+node, "--pod-name="+pod.Name,
		"--host="+h.HostAddr.String(), "--log-level=debug")

	// The session comes up only through the rack peer's node selector and password.
	proto := router.Protocol(0, false)
	err := framework.WaitFor(l.ctx, 90*time.Second, "MetalLB's speaker to establish BGP with BIRD ("+proto+")", func(ctx context.Context) (bool, error) {
		select {
		case <-sp.Done():
			return false, fmt.Errorf("the speaker exited")
		default:
		}
		st, err := router.ProtocolState(ctx, proto)
		if errors.Is(err, bird.ErrNotFound) {
			return false, nil
		}
		return err == nil && st.Established(), err
	})
	if err != nil {
		t.Fatal(err)
	}

	// MetalLB's own verdict on the configuration the CCM wrote: the speaker reports it
	// in its ConfigurationState (result Valid, or Invalid with the errors).
	admin, err := dynamic.NewForConfig(cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	stateName := "speaker-" + node
	err = framework.WaitFor(l.ctx, 60*time.Second, "MetalLB's ConfigurationState "+stateName+" to say Valid", func(ctx context.Context) (bool, error) {
		st, err := admin.Resource(configurationStatesGVR).Namespace(metallb.DefaultNamespace).Get(ctx, stateName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		result, _, _ := unstructured.NestedString(st.Object, "status", "result")
		if result == "Invalid" {
			summary, _, _ := unstructured.NestedString(st.Object, "status", "errorSummary")
			return false, fmt.Errorf("MetalLB rejects the configuration: %s", summary)
		}
		return result == "Valid", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.Resource(configurationStatesGVR).Namespace(metallb.DefaultNamespace).Delete(context.Background(), stateName, metav1.DeleteOptions{})
	})

	ns := "mlb-" + rand.String(6)
	if _, err := cp.Client.CoreV1().Namespaces().Create(l.ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}}},
	}
	if _, err := cp.Client.CoreV1().Services(ns).Create(l.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// MetalLB announces only Services with a ready endpoint (no kubelet or endpoint
	// controller runs here, so the test writes the EndpointSlice).
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "e2e.baremetal-ccm.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](80)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.10"}, NodeName: ptr.To(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	if _, err := cp.Client.DiscoveryV1().EndpointSlices(ns).Create(l.ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	waitIP := func(want string) netip.Addr {
		t.Helper()
		var ip netip.Addr
		err := framework.WaitFor(l.ctx, 60*time.Second, "web's IP in status and in metallb.io/loadBalancerIPs", func(ctx context.Context) (bool, error) {
			s, err := cp.Client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil || len(s.Status.LoadBalancer.Ingress) != 1 {
				return false, err
			}
			got := s.Status.LoadBalancer.Ingress[0].IP
			if want != "" && got != want {
				return false, nil
			}
			if a := s.Annotations[metallb.AnnotationLoadBalancerIPs]; a != got {
				return false, nil // the annotation follows the status
			}
			ip = netip.MustParseAddr(got)
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return ip
	}
	// waitRoute waits until BIRD holds ip/32 from the speaker's session (present) or
	// no path for it at all (!present).
	waitRoute := func(ip netip.Addr, present bool) []bird.Route {
		t.Helper()
		prefix := netip.PrefixFrom(ip, 32)
		var got []bird.Route
		err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("BIRD: %s present=%v", prefix, present), func(ctx context.Context) (bool, error) {
			rs, err := router.RoutesFor(ctx, prefix)
			got = rs
			if err != nil {
				return false, err
			}
			if !present {
				return len(rs) == 0, nil
			}
			return len(rs) == 1 && rs[0].Protocol == proto, nil
		})
		if err != nil {
			t.Fatalf("%v; last seen %+v (the speaker's log follows at cleanup)", err, got)
		}
		return got
	}

	ip := waitIP("")
	if !netip.MustParsePrefix("198.51.100.0/28").Contains(ip) {
		t.Fatalf("web got %s, want an address of pool mlb-e2e (198.51.100.0/28)", ip)
	}
	routes := waitRoute(ip, true)
	if hops := routes[0].BGPNextHop; len(hops) == 0 || hops[0] != router.SpeakerV4(0) {
		t.Errorf("next hop %v, want the speaker node's address %s", hops, router.SpeakerV4(0))
	}
	for _, c := range []string{"65000:100", "65000:1"} {
		if !slices.Contains(routes[0].Communities, c) {
			t.Errorf("route %+v lacks community %s (pool and bgp.communities, via the BGPAdvertisement)", routes[0], c)
		}
	}
	if err := framework.WaitFor(l.ctx, 30*time.Second, "the route in the router's kernel", func(ctx context.Context) (bool, error) {
		out, err := router.KernelRoutes(ctx, false)
		return strings.Contains(out, ip.String()+" via "+router.SpeakerV4(0).String()), err
	}); err != nil {
		t.Error(err)
	}

	// A changed request: the CCM moves the IP and the annotation, the speaker follows.
	moved := "198.51.100.9"
	if ip.String() == moved {
		moved = "198.51.100.10"
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"baremetal-ccm.io/load-balancer-ips":%q}}}`, moved)
	if _, err := cp.Client.CoreV1().Services(ns).Patch(l.ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	next := waitIP(moved)
	waitRoute(next, true)
	waitRoute(ip, false)

	// Deleting the Service withdraws its IP.
	if err := cp.Client.CoreV1().Services(ns).Delete(l.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRoute(next, false)

}
