//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
	"github.com/baremetal-ccm/baremetal-ccm/test/frr"
)

// lbLab is a load-balancer test: BIRD as the top-of-rack router in its own network
// namespace, CCM processes each peering with it from their own address (one
// "control-plane host" each), and a namespace for the test's Services.
type lbLab struct {
	*lab
	// router is BIRD; tor the router the CCMs peer with (BIRD or FRR).
	router *bird.Router
	tor    tor
	ns     string
	lease  string
	ccms   []*framework.CCM
	pools  string // the loadBalancer.pools section
	// invExtra and bgpExtra are appended to the inventory and bgp sections (each line
	// indented by two spaces); extra to the whole CloudConfig.
	invExtra, bgpExtra, extra string
}

const lbPools = `  pools:
  - name: public
    addresses: [192.0.2.0/28, "2001:db8:5::/124"]
    communities: ["65000:100"]
    largeCommunities: ["65000:1:2"]
  - name: tiny
    addresses: [198.51.100.1-198.51.100.2]
    autoAssign: false
`

func newLBLab(t *testing.T, speakers int, hosts ...host) *lbLab {
	t.Helper()
	r := bird.Start(t, bird.Options{Speakers: make([]bird.Speaker, speakers)})
	l := newLBLabWith(t, birdTor(r, speakers), hosts...)
	l.router = r
	return l
}

// newLBLabWith is newLBLab with another router.
func newLBLabWith(t *testing.T, r tor, hosts ...host) *lbLab {
	t.Helper()
	l := &lbLab{lab: newLabNoCCM(t, hosts...), tor: r, ns: "lb-" + rand.String(6), lease: "bccm-lb-" + rand.String(6), pools: lbPools}
	if _, err := l.cp.Client.CoreV1().Namespaces().Create(l.ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: l.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runs after the test's CCMs stopped: a Service still carrying the cleanup
		// finalizer would stay Terminating with its address, and the next test's CCM
		// would count that address as in use; and without a namespace controller in
		// this control plane, deleting the namespace deletes nothing in it. Drop the
		// finalizers and delete the Services, then the namespace.
		ctx := context.Background()
		if svcs, err := l.cp.Client.CoreV1().Services(l.ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, s := range svcs.Items {
				if len(s.Finalizers) > 0 {
					_, _ = l.cp.Client.CoreV1().Services(l.ns).Patch(ctx, s.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
				}
				_ = l.cp.Client.CoreV1().Services(l.ns).Delete(ctx, s.Name, metav1.DeleteOptions{})
			}
		}
		_ = l.cp.Client.CoreV1().Namespaces().Delete(ctx, l.ns, metav1.DeleteOptions{})
	})
	return l
}

// tor is the top-of-rack router of an lbLab, BIRD (test/bird) or FRR (test/frr).
type tor struct {
	name                 string
	v4, v6               netip.Addr
	asn                  uint32
	speakerV4, speakerV6 func(i int) netip.Addr
	// fromSpeakers returns the speakers (by index) from which the router holds a path
	// for prefix, one entry per path.
	fromSpeakers func(ctx context.Context, prefix netip.Prefix) ([]int, error)
}

func birdTor(r *bird.Router, speakers int) tor {
	return tor{name: "BIRD", v4: r.RouterV4, v6: r.RouterV6, asn: r.ASN, speakerV4: r.SpeakerV4, speakerV6: r.SpeakerV6,
		fromSpeakers: func(ctx context.Context, p netip.Prefix) ([]int, error) {
			rs, err := r.RoutesFor(ctx, p)
			var out []int
			for _, rt := range rs {
				for i := range speakers {
					if rt.Protocol == r.Protocol(i, false) || rt.Protocol == r.Protocol(i, true) {
						out = append(out, i)
					}
				}
			}
			return out, err
		}}
}

func frrTor(r *frr.Router, speakers int) tor {
	return tor{name: "FRR", v4: r.RouterV4, v6: r.RouterV6, asn: r.ASN, speakerV4: r.SpeakerV4, speakerV6: r.SpeakerV6,
		fromSpeakers: func(ctx context.Context, p netip.Prefix) ([]int, error) {
			rs, err := r.RoutesFor(ctx, p)
			var out []int
			for _, rt := range rs {
				for i := range speakers {
					if rt.Peer == r.SpeakerV4(i) || rt.Peer == r.SpeakerV6(i) {
						out = append(out, i)
					}
				}
			}
			return out, err
		}}
}

// config writes the CloudConfig of speaker i (its own source address and router ID).
func (l *lbLab) config(i int, nextHop string) string {
	path := filepath.Join(l.dir, fmt.Sprintf("cloud-config-%d.yaml", i))
	writeFile(l.t, path, fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: %s, pollInterval: 1s}
  deletionGuard: {acknowledgeFile: %s}
%sloadBalancer:
%sbgp:
  localASN: 65000
  routerID: %s
  nextHop: %s
  peers:
  - {address: %s, asn: %d, sourceAddress: %s, holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s}
  - {address: "%s", asn: %d, sourceAddress: "%s", holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s}
%s%s`, l.inventory, l.ack, l.invExtra, l.pools, l.tor.speakerV4(i), nextHop,
		l.tor.v4, l.tor.asn, l.tor.speakerV4(i), l.tor.v6, l.tor.asn, l.tor.speakerV6(i), l.bgpExtra, l.extra))
	return path
}

// shortLeaseArgs are the Lease timings of lbLab.start: a leader that stops renewing
// is replaced within ~4 s.
var shortLeaseArgs = []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s"}

// start runs CCM i: the service controller only, leader election on a lease of its
// own test (so several replicas are safe).
func (l *lbLab) start(i int, nextHop string) *framework.CCM {
	l.t.Helper()
	args := append([]string{"--controllers=service-lb-controller", "--leader-elect=true", "--leader-elect-resource-name=" + l.lease},
		shortLeaseArgs...)
	c := framework.StartCCM(l.t, l.cp, l.config(i, nextHop), append(args, fmt.Sprintf("--node-name=cp-%d", i))...)
	if err := c.WaitHealthy(l.ctx); err != nil {
		l.t.Fatal(err)
	}
	for len(l.ccms) <= i {
		l.ccms = append(l.ccms, nil)
	}
	l.ccms[i] = c
	return c
}

func (l *lbLab) createService(name string, mutate func(*v1.Service)) {
	l.t.Helper()
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:     v1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
			Ports:    []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
	if mutate != nil {
		mutate(s)
	}
	if _, err := l.cp.Client.CoreV1().Services(l.ns).Create(l.ctx, s, metav1.CreateOptions{}); err != nil {
		l.t.Fatal(err)
	}
}

// waitIPs waits until the Service has n ingress IPs and returns them.
func (l *lbLab) waitIPs(name string, n int) []netip.Addr {
	l.t.Helper()
	var ips []netip.Addr
	err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("%d load-balancer IPs on %s", n, name), func(ctx context.Context) (bool, error) {
		s, err := l.cp.Client.CoreV1().Services(l.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ips = nil
		for _, in := range s.Status.LoadBalancer.Ingress {
			if in.IPMode == nil || *in.IPMode != v1.LoadBalancerIPModeVIP {
				return false, fmt.Errorf("ingress %s has ipMode %v, want VIP", in.IP, in.IPMode)
			}
			ips = append(ips, netip.MustParseAddr(in.IP))
		}
		return len(ips) == n, nil
	})
	if err != nil {
		l.t.Fatal(err)
	}
	return ips
}

// waitPaths waits until BIRD holds exactly the wanted paths for ip: from the given
// speakers (self next hop) when hops is nil, else with these BGP next hops.
func (l *lbLab) waitPaths(ip netip.Addr, speakers []int, hops []netip.Addr) []bird.Route {
	l.t.Helper()
	prefix := netip.PrefixFrom(ip, ip.BitLen())
	var got []bird.Route
	what := fmt.Sprintf("BIRD to hold %s from speakers %v with next hops %v", prefix, speakers, hops)
	err := framework.WaitFor(l.ctx, 60*time.Second, what, func(ctx context.Context) (bool, error) {
		routes, err := l.router.RoutesFor(ctx, prefix)
		if err != nil {
			return false, err
		}
		got = routes
		if hops != nil {
			var have []netip.Addr // as received over speaker 0's session of the prefix's family
			for _, r := range routes {
				if r.Protocol == l.router.Protocol(0, ip.Is6()) {
					have = append(have, r.BGPNextHop[0])
				}
			}
			slices.SortFunc(have, func(a, b netip.Addr) int { return a.Compare(b) })
			return slices.Equal(have, hops), nil
		}
		var from []string
		for _, r := range routes {
			from = append(from, r.Protocol)
		}
		var want []string
		for _, s := range speakers {
			want = append(want, l.router.Protocol(s, ip.Is6())) // IPv6 prefixes come over the IPv6 sessions
		}
		slices.Sort(from)
		slices.Sort(want)
		return slices.Equal(from, want), nil
	})
	if err != nil {
		l.t.Fatalf("%v; last seen: %+v", err, got)
	}
	return got
}

// TestLoadBalancerBGP: Services get IPs from the pools and every CCM replica announces
// them to the router (ECMP across replicas); deletion and SIGTERM withdraw; a killed
// replica's paths go while the other's stay; a restart keeps every IP; an exhausted
// pool leaves the Service pending with an event.
func TestLoadBalancerBGP(t *testing.T) {
	l := newLBLab(t, 2)
	l.start(0, "self")
	l.start(1, "self")

	l.createService("web", nil)
	web := l.waitIPs("web", 1)[0]
	if !netip.MustParsePrefix("192.0.2.0/28").Contains(web) {
		t.Fatalf("web got %v, want an address of pool public (192.0.2.0/28)", web)
	}
	if s, err := l.cp.Client.CoreV1().Services(l.ns).Get(l.ctx, "web", metav1.GetOptions{}); err != nil || !slices.Contains(s.Finalizers, lbCleanupFinalizer) {
		t.Errorf("web's finalizers = %v (%v), want %s with its first status", s.Finalizers, err, lbCleanupFinalizer)
	}
	paths := l.waitPaths(web, []int{0, 1}, nil)
	for _, p := range paths {
		if !slices.Contains(p.Communities, "65000:100") || !slices.Contains(p.LargeCommunities, "65000:1:2") {
			t.Errorf("path %+v lacks the pool's communities 65000:100 / 65000:1:2", p)
		}
	}
	err := framework.WaitFor(l.ctx, 30*time.Second, "an ECMP route in the router's kernel", func(ctx context.Context) (bool, error) {
		out, err := l.router.KernelRoutes(ctx, false)
		return strings.Contains(out, web.String()) && strings.Count(out, "nexthop via") >= 2, err
	})
	if err != nil {
		t.Fatal(err)
	}

	// Dual stack: one ingress per family, the IPv6 one announced over the IPv6 sessions.
	l.createService("dual", func(s *v1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	})
	dual := l.waitIPs("dual", 2)
	if !dual[0].Is4() || !dual[1].Is6() {
		t.Fatalf("dual-stack Service got %v, want an IPv4 then an IPv6 ingress", dual)
	}
	l.waitPaths(dual[1], []int{0, 1}, nil)

	// Deletion withdraws.
	if err := l.cp.Client.CoreV1().Services(l.ns).Delete(l.ctx, "dual", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	l.waitPaths(dual[0], nil, []netip.Addr{})
	l.waitPaths(dual[1], nil, []netip.Addr{})
	l.waitGone("dual") // the finalizer is removed once the addresses are released

	// A type change away from LoadBalancer: addresses released and withdrawn, status
	// and finalizer cleared, the Service stays.
	l.createService("typed", nil)
	typed := l.waitIPs("typed", 1)[0]
	l.waitPaths(typed, []int{0, 1}, nil)
	patch := []byte(`{"spec":{"type":"ClusterIP","externalTrafficPolicy":null,"allocateLoadBalancerNodePorts":null,"ports":[{"name":"http","protocol":"TCP","port":80,"nodePort":null}]}}`)
	if _, err := l.cp.Client.CoreV1().Services(l.ns).Patch(l.ctx, "typed", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	l.waitPaths(typed, nil, []netip.Addr{})
	if err := framework.WaitFor(l.ctx, 30*time.Second, "typed's status and finalizer cleared", func(ctx context.Context) (bool, error) {
		s, err := l.cp.Client.CoreV1().Services(l.ns).Get(ctx, "typed", metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) == 0 && !slices.Contains(s.Finalizers, lbCleanupFinalizer), err
	}); err != nil {
		t.Error(err)
	}

	// Exhausted pool: tiny has two addresses and is used only on request.
	for _, name := range []string{"tiny-1", "tiny-2", "tiny-3"} {
		l.createService(name, func(s *v1.Service) { s.Annotations = map[string]string{"baremetal-ccm.io/address-pool": "tiny"} })
	}
	l.waitIPs("tiny-1", 1)
	l.waitIPs("tiny-2", 1)
	msg := l.waitEvent(l.ns, "Service", "tiny-3", "AddressPoolExhausted")
	if !strings.Contains(msg, "tiny") {
		t.Errorf("AddressPoolExhausted message %q does not name the pool", msg)
	}
	if s, _ := l.cp.Client.CoreV1().Services(l.ns).Get(l.ctx, "tiny-3", metav1.GetOptions{}); len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("tiny-3 got %v from an exhausted pool", s.Status.LoadBalancer.Ingress)
	}

	// SIGTERM on replica 0: its paths are withdrawn at once (the session is closed
	// with a Cease, not left to the hold timer), replica 1's stay.
	l.ccms[0].Stop()
	if err := l.ccms[0].ExitErr(); err != nil {
		t.Errorf("replica 0 after SIGTERM: %v, want a clean exit (withdrawals and session close within the grace period)", err)
	}
	l.waitPaths(web, []int{1}, nil)
	st, err := l.router.ProtocolState(l.ctx, l.router.Protocol(0, false))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(st.Info, "Hold timer") {
		t.Errorf("replica 0's session ended by hold timer (%q), want a Cease from the SIGTERMed speaker", st.Info)
	}

	// Replica 0 comes back: both paths again, the same IP.
	l.start(0, "self")
	l.waitPaths(web, []int{0, 1}, nil)

	// Replica 1 is killed without a chance to withdraw: the router drops its paths
	// when the hold timer expires, the route stays via replica 0.
	l.ccms[1].Kill()
	l.waitPaths(web, []int{0}, nil)

	// Restart of every replica: the same IPs, none handed out twice.
	before := l.allIPs()
	l.ccms[0].Stop()
	l.start(0, "self")
	l.createService("after-restart", nil)
	fresh := l.waitIPs("after-restart", 1)[0]
	after := l.allIPs()
	for name, ip := range before {
		if after[name] != ip {
			t.Errorf("Service %s had %v before the restart and %v after", name, ip, after[name])
		}
		if ip == fresh.String() {
			t.Errorf("after-restart got %v, which %s holds", fresh, name)
		}
	}
	l.waitPaths(fresh, []int{0}, nil)

	// Pool tiny is removed: its Services keep their IPs (reported by an event), and
	// the IPs are withdrawn; the other pool's are still announced.
	tiny := l.waitIPs("tiny-1", 1)[0]
	l.waitPaths(tiny, []int{0}, nil)
	l.ccms[0].Stop()
	l.pools = lbPools[:strings.Index(lbPools, "  - name: tiny")]
	l.start(0, "self")
	msg = l.waitEvent(l.ns, "Service", "tiny-1", "LoadBalancerIPOutsidePools")
	if !strings.Contains(msg, tiny.String()) {
		t.Errorf("LoadBalancerIPOutsidePools message %q does not name %v", msg, tiny)
	}
	l.waitPaths(tiny, nil, []netip.Addr{})
	l.waitPaths(fresh, []int{0}, nil)
	if got := l.waitIPs("tiny-1", 1)[0]; got != tiny {
		t.Errorf("tiny-1 has %v after its pool was removed, want its %v left alone", got, tiny)
	}
}

// lbCleanupFinalizer is the service controller's finalizer (the upstream one's name).
const lbCleanupFinalizer = "service.kubernetes.io/load-balancer-cleanup"

// waitGone waits until the Service no longer exists (its finalizer was removed).
func (l *lbLab) waitGone(name string) {
	l.t.Helper()
	err := framework.WaitFor(l.ctx, 30*time.Second, "Service "+name+" gone", func(ctx context.Context) (bool, error) {
		_, err := l.cp.Client.CoreV1().Services(l.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		l.t.Fatal(err)
	}
}

// allIPs maps each Service of the test to its ingress IPs.
func (l *lbLab) allIPs() map[string]string {
	l.t.Helper()
	list, err := l.cp.Client.CoreV1().Services(l.ns).List(l.ctx, metav1.ListOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	out := map[string]string{}
	seen := map[string]string{}
	for _, s := range list.Items {
		var ips []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			ips = append(ips, in.IP)
			if other, dup := seen[in.IP]; dup {
				l.t.Errorf("%s is assigned to both %s and %s", in.IP, other, s.Name)
			}
			seen[in.IP] = s.Name
		}
		out[s.Name] = strings.Join(ips, ",")
	}
	return out
}

// TestLoadBalancerNodeNextHops: in next-hop mode nodes, a Service with
// externalTrafficPolicy Local is announced with one ADD-PATH path per node that has a
// ready endpoint, and the next hops follow the EndpointSlices and node readiness.
func TestLoadBalancerNodeNextHops(t *testing.T) {
	l := newLBLab(t, 1)
	var nodes []string
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("lb-node-%d-%s", i, rand.String(4))
		nodes = append(nodes, name)
		l.nodes = append(l.nodes, name)
		if _, err := framework.CreateNode(l.ctx, l.cp.Client, framework.NodeSpec{
			Name: name, InternalIPs: []string{l.router.NodeAddr(i, false).String()}, Ready: ready(v1.ConditionTrue),
			Labels: map[string]string{},
		}); err != nil {
			t.Fatal(err)
		}
	}
	l.start(0, "nodes")

	l.createService("local", func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	})
	ip := l.waitIPs("local", 1)[0]
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "local-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: "local", discoveryv1.LabelManagedBy: "e2e.baremetal-ccm.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.0.10"}, NodeName: ptr.To(nodes[0]), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.244.1.10"}, NodeName: ptr.To(nodes[1]), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		},
	}
	slice, err := l.cp.Client.DiscoveryV1().EndpointSlices(l.ns).Create(l.ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.waitPaths(ip, nil, []netip.Addr{l.router.NodeAddr(0, false)})

	// The endpoint on node 1 becomes ready, one on node 2 appears: three paths.
	slice.Endpoints[1].Conditions.Ready = ptr.To(true)
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.2.10"}, NodeName: ptr.To(nodes[2]), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	if _, err = l.cp.Client.DiscoveryV1().EndpointSlices(l.ns).Update(l.ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.waitPaths(ip, nil, []netip.Addr{l.router.NodeAddr(0, false), l.router.NodeAddr(1, false), l.router.NodeAddr(2, false)})

	// Node 0 goes NotReady and node 2 is excluded from load balancers: only node 1.
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, nodes[0], v1.ConditionFalse); err != nil {
		t.Fatal(err)
	}
	n2, err := l.cp.Client.CoreV1().Nodes().Get(l.ctx, nodes[2], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n2.Labels == nil {
		n2.Labels = map[string]string{}
	}
	n2.Labels["node.kubernetes.io/exclude-from-external-load-balancers"] = "true"
	if _, err := l.cp.Client.CoreV1().Nodes().Update(l.ctx, n2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.waitPaths(ip, nil, []netip.Addr{l.router.NodeAddr(1, false)})

	// The endpoints move away entirely: withdrawn.
	if err := l.cp.Client.DiscoveryV1().EndpointSlices(l.ns).Delete(l.ctx, "local-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	l.waitPaths(ip, nil, []netip.Addr{})

	// SIGTERM: a clean exit, sessions to both routers' addresses closed in time.
	l.ccms[0].Stop()
	if err := l.ccms[0].ExitErr(); err != nil {
		t.Errorf("CCM after SIGTERM: %v, want a clean exit", err)
	}
}
