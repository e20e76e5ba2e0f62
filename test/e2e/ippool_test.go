//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestIPPools: IP pools added, changed and removed with kubectl while Services churn,
// without a restart, with two replicas. A new pool is accepted and serves at once (its
// Service's /32 at BIRD, from both replicas); a grown pool serves its new range; the
// leader stops and the other replica decides from then on; an invalid change gets an Invalid
// condition naming the field and changes nothing; a shrink and a deletion that
// would take a Service's address are held with a condition until it is released;
// no Service's address changes; kubectl get ippools shows the use per family.
func TestIPPools(t *testing.T) {
	l := newLBLab(t, 2)
	for i := range 2 {
		l.createNode(framework.NodeSpec{Name: fmt.Sprintf("cp-%d", i), InternalIPs: []string{l.router.SpeakerV4(i).String()}, Ready: ready(v1.ConditionTrue)})
		l.start(i, "self")
	}
	leader := l.leaderIndex()
	other := 1 - leader
	pools := versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig)).BaremetalCCMV1alpha1().IPPools()
	name := "e2e-" + strings.ToLower(l.ns)
	t.Cleanup(func() { framework.DeleteIPPool(l.cp, name) })
	apply := func(addrs ...string) {
		t.Helper()
		path := filepath.Join(l.dir, "ippool.yaml")
		// autoAssign false: only the Services that ask for it (not the churn) use it.
		writeFile(t, path, fmt.Sprintf("apiVersion: baremetal-ccm.io/v1alpha1\nkind: IPPool\nmetadata: {name: %s}\nspec:\n  addresses: [%s]\n  autoAssign: false\n  communities: [\"65000:300\"]\n",
			name, strings.Join(addrs, ", ")))
		if out, err := framework.Kubectl(l.ctx, l.cp, "apply", "-f", path); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	waitPool := func(status metav1.ConditionStatus, reason string, words ...string) *v1alpha1.IPPool {
		t.Helper()
		return waitAccepted(t, l.ctx, "IPPool "+name, func(ctx context.Context) (*v1alpha1.IPPool, metav1.Object, []metav1.Condition, error) {
			p, err := pools.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, nil, nil, err
			}
			return p, p, p.Status.Conditions, nil
		}, status, reason, words...)
	}

	// Services that live through the whole test, and churn beside them.
	for i := range 3 {
		l.createService(fmt.Sprintf("steady-%d", i), nil)
	}
	for i := range 3 {
		l.waitIPs(fmt.Sprintf("steady-%d", i), 1)
	}
	steady := l.allIPs()
	churnCtx, stopChurn := context.WithCancel(l.ctx)
	var churn sync.WaitGroup
	churned := 0
	churn.Go(func() {
		for i := 0; churnCtx.Err() == nil; i++ {
			s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: fmt.Sprintf("churn-%d", i)},
				Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Port: 80}}}}
			if _, err := l.cp.Client.CoreV1().Services(l.ns).Create(churnCtx, s, metav1.CreateOptions{}); err != nil {
				continue
			}
			time.Sleep(300 * time.Millisecond)
			_ = l.cp.Client.CoreV1().Services(l.ns).Delete(churnCtx, s.Name, metav1.DeleteOptions{})
			churned++
		}
	})

	// A new pool: accepted, and a Service naming it (created with it) is announced.
	start := time.Now()
	apply("203.0.113.64/29")
	l.createService("x", func(s *v1.Service) { s.Annotations = map[string]string{ipam.AnnotationAddressPool: name} })
	xIP := l.waitIPs("x", 1)[0]
	// Both replicas announce it: an address in no pool is not announced, so the
	// replica that does not lead has the pool in force too.
	l.waitAnnounced(xIP, leader)
	l.waitAnnounced(xIP, other)
	t.Logf("TIMING new IPPool applied to its Service's %s at BIRD: %s (polled; the CCM started just before)", xIP, time.Since(start).Round(100*time.Millisecond))
	if !netip.MustParsePrefix("203.0.113.64/29").Contains(xIP) {
		t.Fatalf("x got %s, not an address of the new pool", xIP)
	}
	p := waitPool(metav1.ConditionTrue, v1alpha1.PoolReasonAccepted)
	if p.Status.IPv4 == nil || p.Status.IPv4.Size != "8" {
		t.Errorf("the pool's IPv4 use: %+v", p.Status.IPv4)
	}
	if routes, err := l.router.RoutesFor(l.ctx, netip.PrefixFrom(xIP, 32)); err != nil || len(routes) == 0 || !strings.Contains(strings.Join(routes[0].Communities, " "), "65000:300") {
		t.Errorf("x's path at BIRD: %+v, %v; want the pool's community 65000:300", routes, err)
	}

	// Grown: a Service asking for an address of the new range gets it.
	start = time.Now()
	apply("203.0.113.64/29", "203.0.113.80/30")
	l.createService("y", func(s *v1.Service) {
		s.Annotations = map[string]string{ipam.AnnotationLoadBalancerIPs: "203.0.113.81"}
	})
	if ip := l.waitIPs("y", 1)[0]; ip.String() != "203.0.113.81" {
		t.Errorf("y got %s, want 203.0.113.81 from the grown pool", ip)
	}
	l.waitAnnounced(netip.MustParseAddr("203.0.113.81"), leader)
	t.Logf("TIMING grown IPPool applied to its new address 203.0.113.81 at BIRD: %s (polled; the leader running)", time.Since(start).Round(100*time.Millisecond))
	waitPool(metav1.ConditionTrue, v1alpha1.PoolReasonAccepted)

	// Invalid: named, and nothing changes (the applied spec stays).
	apply("203.0.113.64/29", "203.0.113.300")
	p = waitPool(metav1.ConditionFalse, v1alpha1.PoolReasonInvalid, "spec.addresses[1]", "203.0.113.300", "stays in force")
	if p.Status.Applied == nil || len(p.Status.Applied.Addresses) != 2 {
		t.Errorf("an invalid change touched status.applied: %+v", p.Status.Applied)
	}
	// The API server refuses what the schema can tell (an empty list) outright.
	bad := p.DeepCopy()
	bad.Spec.Addresses = nil
	if _, err := pools.Update(l.ctx, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("an IPPool without addresses: %v, want Invalid from the API server", err)
	}

	// The leader stops: the other replica leads, and decides from here on.
	if err := l.ccms[leader].Stop(); err != nil {
		t.Errorf("stopping the leader: %v", err)
	}
	if l.leaderIndex() != other {
		t.Fatal("the other replica does not lead")
	}
	ccm := l.ccms[other]

	// A shrink that takes y's address: held, y keeps it and its path.
	apply("203.0.113.64/29")
	waitPool(metav1.ConditionFalse, v1alpha1.PoolReasonShrinkHeld, "203.0.113.81")
	time.Sleep(2 * time.Second)
	if ip := l.waitIPs("y", 1)[0]; ip.String() != "203.0.113.81" {
		t.Errorf("y's address moved to %s under a held shrink", ip)
	}
	l.waitAnnounced(netip.MustParseAddr("203.0.113.81"), other)
	// y goes: the shrink applies.
	if err := l.cp.Client.CoreV1().Services(l.ns).Delete(l.ctx, "y", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p = waitPool(metav1.ConditionTrue, v1alpha1.PoolReasonAccepted)
	if len(p.Status.Applied.Addresses) != 1 {
		t.Errorf("after y left, applied %v", p.Status.Applied.Addresses)
	}

	// kubectl get ippools: the use per family.
	row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+True\s+Accepted\s+8\s+1\s+7\s`)
	var out string
	if err := framework.WaitFor(l.ctx, 20*time.Second, "kubectl get ippools to show 8 IPv4 addresses, 1 used, 7 free", func(ctx context.Context) (bool, error) {
		var err error
		out, err = framework.Kubectl(ctx, l.cp, "get", "ippools", name)
		return err == nil && row.MatchString(out), nil
	}); err != nil {
		t.Errorf("%v:\n%s", err, out)
	}

	// Deleted while x holds an address: held; x keeps its address; once x goes, the
	// pool goes.
	if out, err := framework.Kubectl(l.ctx, l.cp, "delete", "ippool", name, "--wait=false"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitPool(metav1.ConditionFalse, v1alpha1.PoolReasonDeletionHeld, xIP.String())
	l.waitAnnounced(xIP, other)
	if ip := l.waitIPs("x", 1)[0]; ip != xIP {
		t.Errorf("x's address moved to %s while its pool was being deleted", ip)
	}
	if err := l.cp.Client.CoreV1().Services(l.ns).Delete(l.ctx, "x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(l.ctx, 30*time.Second, "the IPPool gone once x released its address", func(ctx context.Context) (bool, error) {
		_, err := pools.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal(err)
	}

	stopChurn()
	churn.Wait()
	t.Logf("%d Services churned meanwhile", churned)
	if churned == 0 {
		t.Error("no Service churned during the test")
	}
	now := l.allIPs()
	for svc, ips := range steady {
		if now[svc] != ips {
			t.Errorf("%s's addresses changed from %s to %s", svc, ips, now[svc])
		}
	}
	select {
	case <-ccm.Done():
		t.Error("the CCM exited")
	default:
	}
}

// TestIPPoolsFromMetalLB: MetalLB's own example objects (the configsamples of the
// MetalLB module this project builds against) imported with `baremetal-ccmctl pools
// import-metallb` and applied with kubectl serve the addresses MetalLB would: a
// Service of pool example gets its first address, one asking for an address of its
// range gets it, and the routers hold them (the CloudConfig's, and the sample
// BGPPeer's, a BIRD in its place); the restricted pool admits only the namespaces
// MetalLB's did.
func TestIPPoolsFromMetalLB(t *testing.T) {
	l := newLBLab(t, 1)
	l.createNode(framework.NodeSpec{Name: "cp-0", InternalIPs: []string{l.router.SpeakerV4(0).String()}, Ready: ready(v1.ConditionTrue)})
	l.start(0, "self")
	dir, err := framework.ModuleDir(l.ctx, "go.universe.tf/metallb")
	if err != nil {
		t.Fatal(err)
	}
	ctlBin, err := framework.CtlBinary(l.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, f := range []string{"simple_pool_adv_bgp.yaml", "ipaddresspool_with_selector.yaml", "bgppeer_simple.yaml"} {
		args = append(args, "-f", filepath.Join(dir, "configsamples", f))
	}
	cmd := exec.CommandContext(l.ctx, ctlBin, append([]string{"pools", "import-metallb"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("import-metallb: %v\n%s", err, stderr.String())
	}
	t.Logf("import-metallb warnings:\n%s", stderr.String())
	if !strings.Contains(stderr.String(), "namespaceSelectors not imported") {
		t.Errorf("the selector sample's namespaceSelectors are not named among the warnings")
	}
	// The sample's BGPPeer, imported as a BGPPeer: its router stands at 172.30.0.3,
	// which no test may reach, so a BIRD of the sample's ASN takes its place (the
	// one field changed before kubectl apply).
	const samplePeer = "peer\nspec:\n  address: 172.30.0.3\n  asn: 64512\n"
	if !strings.Contains(string(out), "kind: BGPPeer\nmetadata:\n  name: "+samplePeer) {
		t.Fatalf("import-metallb did not make the sample's BGPPeer a BGPPeer of 172.30.0.3, ASN 64512:\n%s", out)
	}
	r2 := bird.Start(t, bird.Options{RouterASN: 64512, Speakers: []bird.Speaker{{ASN: 65000}}})
	out = []byte(strings.Replace(string(out), "address: 172.30.0.3", "address: "+r2.RouterV4.String(), 1))
	path := filepath.Join(l.dir, "imported.yaml")
	writeFile(t, path, string(out))
	objects := versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig)).BaremetalCCMV1alpha1()
	pools := objects.IPPools()
	names := []string{"example", "ippool-ns-service-alloc-sample"}
	t.Cleanup(func() {
		for _, name := range names {
			framework.DeleteIPPool(l.cp, name)
		}
		_ = objects.BGPPeers().Delete(context.Background(), "peer", metav1.DeleteOptions{})
		_ = objects.BGPAdvertisements().Delete(context.Background(), "empty", metav1.DeleteOptions{})
	})
	if o, err := framework.Kubectl(l.ctx, l.cp, "apply", "-f", path); err != nil {
		t.Fatalf("%v\n%s", err, o)
	}
	for _, name := range names {
		if err := framework.WaitFor(l.ctx, 30*time.Second, "IPPool "+name+" accepted", func(ctx context.Context) (bool, error) {
			p, err := pools.Get(ctx, name, metav1.GetOptions{})
			return err == nil && meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.PoolConditionAccepted), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// MetalLB gives the lowest free address of the pool: 192.168.10.0 (no avoidBuggyIPs).
	l.createService("first", func(s *v1.Service) { s.Annotations = map[string]string{ipam.AnnotationAddressPool: "example"} })
	if ip := l.waitIPs("first", 1)[0]; ip.String() != "192.168.10.0" {
		t.Errorf("first got %s, want 192.168.10.0 as MetalLB serves it", ip)
	}
	l.createService("ranged", func(s *v1.Service) { s.Annotations = map[string]string{ipam.AnnotationLoadBalancerIPs: "192.168.9.3"} })
	if ip := l.waitIPs("ranged", 1)[0]; ip.String() != "192.168.9.3" {
		t.Errorf("ranged got %s, want 192.168.9.3", ip)
	}
	l.waitAnnounced(netip.MustParseAddr("192.168.10.0"), 0)
	l.waitAnnounced(netip.MustParseAddr("192.168.9.3"), 0)
	// The sample's BGPAdvertisement (every pool, every peer) is accepted as such.
	if err := framework.WaitFor(l.ctx, 30*time.Second, "BGPAdvertisement empty accepted for every pool and peer", func(ctx context.Context) (bool, error) {
		a, err := objects.BGPAdvertisements().Get(ctx, "empty", metav1.GetOptions{})
		return err == nil && meta.IsStatusConditionTrue(a.Status.Conditions, v1alpha1.PoolConditionAccepted) && a.Status.AllPools && a.Status.AllPeers, nil
	}); err != nil {
		t.Fatal(err)
	}
	// The imported peer is accepted, and its router gets the same addresses.
	if err := framework.WaitFor(l.ctx, 30*time.Second, "BGPPeer peer accepted", func(ctx context.Context) (bool, error) {
		p, err := objects.BGPPeers().Get(ctx, "peer", metav1.GetOptions{})
		return err == nil && meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.PoolConditionAccepted), nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{"192.168.10.0", "192.168.9.3"} {
		if err := framework.WaitFor(l.ctx, 30*time.Second, "the sample peer's router to hold "+ip, func(ctx context.Context) (bool, error) {
			rs, err := r2.RoutesFor(ctx, netip.MustParsePrefix(ip+"/32"))
			return err == nil && len(rs) == 1, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The restricted pool admits namespaces namespace-a and namespace-b only.
	l.createService("restricted", func(s *v1.Service) {
		s.Annotations = map[string]string{ipam.AnnotationAddressPool: "ippool-ns-service-alloc-sample"}
		s.Labels = map[string]string{"app": "bar"}
	})
	c := l.waitServiceCondition("restricted", lb.ConditionAddressAssigned, metav1.ConditionFalse, lb.ReasonNoPoolAllowed)
	if !strings.Contains(c.Message, "namespace-a") {
		t.Errorf("restricted: %q does not name the namespaces the pool admits", c.Message)
	}
}
