package routes

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
)

// testNS is a network namespace created by a test, with a veth pair whose end v0
// carries this host's addresses, so gateways in its subnets are on-link.
type testNS struct {
	name string
	h    *netlink.Handle
}

// Addresses of the namespace's host: gateways 192.0.2.0/24, 172.16.0.0/16 and
// 2001:db8::/64 are on-link; 198.51.100.0/24 is not.
var nsAddrs = []string{"192.0.2.1/24", "172.16.0.1/16", "2001:db8::1/64"}

func newTestNS(t testing.TB) *testNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	name := fmt.Sprintf("bccm-rt-%08x", rand.Uint32())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "v0"}, PeerName: "v1"}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	v0, err := h.LinkByName("v0")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range nsAddrs {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			t.Fatal(err)
		}
		addr.Flags = unix.IFA_F_NODAD
		if err := h.AddrAdd(v0, addr); err != nil {
			t.Fatalf("add %s: %v", a, err)
		}
	}
	for _, l := range []string{"v0", "v1"} {
		link, err := h.LinkByName(l)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
	}
	return &testNS{name: name, h: h}
}

// ip runs ip(8) in the namespace.
func (n *testNS) ip(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", n.name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip -n %s %s: %v: %s", n.name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kernelRoutes returns "table/proto dst via gw" for every route with a gateway.
func (n *testNS) kernelRoutes(t testing.TB) map[string]bool {
	t.Helper()
	rs, err := n.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, r := range rs {
		if r.Gw == nil || r.Dst == nil {
			continue
		}
		gw, _ := netip.AddrFromSlice(r.Gw)
		out[fmt.Sprintf("%d/%d %s via %s", r.Table, r.Protocol, prefixOf(r.Dst), gw.Unmap())] = true
	}
	return out
}

func TestNetnsProviderCreateListDelete(t *testing.T) {
	n := newTestNS(t)
	_, ctx := ktesting.NewTestContext(t)
	// Foreign routes: same table other protocol (one with a pod-CIDR-like prefix in
	// another table with our protocol), all must survive.
	n.ip(t, "route", "add", "10.99.0.0/16", "via", "192.0.2.50", "proto", "static")
	n.ip(t, "route", "add", "10.244.1.0/24", "via", "192.0.2.51", "table", "100", "proto", "196")
	n.ip(t, "-6", "route", "add", "fd00:99::/64", "via", "2001:db8::50", "proto", "bird")
	foreign := n.kernelRoutes(t)

	k, err := NewKernel(n.h, 254, 196)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.CheckAccess(ctx); err != nil {
		t.Fatalf("CheckAccess as root: %v", err)
	}
	self := node("self", []string{"10.244.0.0/24", "fd00:244::/64"}, "192.0.2.1", "2001:db8::1")
	a := node("a", []string{"10.244.1.0/24", "fd00:244:0:1::/64"}, "192.0.2.11", "2001:db8::11")
	b := node("b", []string{"10.244.2.0/24"}, "192.0.2.12")
	p := NewProvider(k, lister(t, self, a, b), ProviderOptions{NodeName: "self"})
	for _, nd := range []*v1.Node{self, a, b} {
		for _, c := range nd.Spec.PodCIDRs {
			for range 2 { // idempotent
				if err := p.CreateRoute(ctx, "c", string(nd.UID), createFor(nd, c)); err != nil {
					t.Fatalf("CreateRoute %s %s: %v", nd.Name, c, err)
				}
			}
		}
	}
	got := n.kernelRoutes(t)
	for _, w := range []string{ours("10.244.1.0/24", "192.0.2.11"), ours("fd00:244:0:1::/64", "2001:db8::11"), ours("10.244.2.0/24", "192.0.2.12")} {
		if !got[w] {
			t.Errorf("missing %s in %v", w, got)
		}
	}
	if len(got) != len(foreign)+3 {
		t.Errorf("kernel has %d routes with a gateway, want %d: %v", len(got), len(foreign)+3, got)
	}
	if out := n.ip(t, "route", "show", "table", "254", "proto", "196"); !strings.Contains(out, "10.244.1.0/24 via 192.0.2.11 dev v0") {
		t.Errorf("ip route show:\n%s", out)
	}

	// A node moves: CreateRoute replaces our route.
	a.Status.Addresses[1].Address = "192.0.2.21"
	if err := p.CreateRoute(ctx, "c", "", createFor(a, "10.244.1.0/24")); err != nil {
		t.Fatal(err)
	}
	if got := n.kernelRoutes(t); !got[ours("10.244.1.0/24", "192.0.2.21")] || got[ours("10.244.1.0/24", "192.0.2.11")] {
		t.Errorf("after move: %v", got)
	}

	list, err := p.ListRoutes(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	byc := byCIDR(list)
	if len(list) != 5 || byc["10.244.2.0/24"].TargetNode != "b" || byc["fd00:244:0:1::/64"].TargetNode != "a" || byc["10.244.0.0/24"].Name != "self/10.244.0.0/24 via local" {
		t.Errorf("ListRoutes: %v", byc)
	}
	for _, r := range list {
		for range 2 {
			if err := p.DeleteRoute(ctx, "c", r); err != nil {
				t.Fatalf("DeleteRoute %s: %v", r.Name, err)
			}
		}
	}
	if got := n.kernelRoutes(t); len(got) != len(foreign) {
		t.Errorf("after delete: %v, want only %v", got, foreign)
	}
	for w := range foreign {
		if !n.kernelRoutes(t)[w] {
			t.Errorf("foreign route %s was touched", w)
		}
	}
}

func TestNetnsOffLinkAndForeign(t *testing.T) {
	n := newTestNS(t)
	_, ctx := ktesting.NewTestContext(t)
	k, _ := NewKernel(n.h, 254, 196)
	far := node("far", []string{"10.244.5.0/24", "fd00:244:0:5::/64"}, "198.51.100.5", "2001:db9::5")
	p := NewProvider(k, lister(t, far), ProviderOptions{})
	for _, c := range far.Spec.PodCIDRs {
		err := p.CreateRoute(ctx, "c", "", createFor(far, c))
		if !errors.Is(err, ErrGatewayNotOnLink) {
			t.Errorf("%s: the kernel's refusal of an off-link gateway maps to %v", c, err)
		}
	}
	n.ip(t, "route", "add", "10.244.6.0/24", "via", "192.0.2.60", "proto", "static")
	taken := node("taken", []string{"10.244.6.0/24"}, "192.0.2.16")
	if err := p.CreateRoute(ctx, "c", "", createFor(taken, "10.244.6.0/24")); !errors.Is(err, ErrForeignRoute) {
		t.Errorf("foreign: %v", err)
	}
	if !n.kernelRoutes(t)["254/4 10.244.6.0/24 via 192.0.2.60"] {
		t.Error("the foreign route was changed")
	}
}

func TestNetnsMirrorDualStackAndDriftRepair(t *testing.T) {
	n := newTestNS(t)
	_, ctx := ktesting.NewTestContext(t)
	n.ip(t, "route", "add", "10.99.0.0/16", "via", "192.0.2.50", "proto", "static")
	k, _ := NewKernel(n.h, 254, 196)
	m := NewMirror(k, MirrorOptions{NodeName: "self"})
	nodes := []*v1.Node{
		node("self", []string{"10.244.0.0/24", "fd00:244::/64"}, "192.0.2.1", "2001:db8::1"),
		node("a", []string{"10.244.1.0/24", "fd00:244:0:1::/64"}, "192.0.2.11", "2001:db8::11"),
		node("b", []string{"10.244.2.0/24", "fd00:244:0:2::/64"}, "192.0.2.12", "2001:db8::12"),
		node("far", []string{"10.244.5.0/24"}, "198.51.100.5"),
	}
	res, err := m.Reconcile(ctx, nodes)
	if err != nil || res.Added != 4 || res.SkippedSelf != 2 || res.SkippedOffLink != 1 {
		t.Fatalf("first: %+v, %v", res, err)
	}
	if res, err := m.Reconcile(ctx, nodes); err != nil || res.Changed() || res.Unchanged != 4 {
		t.Fatalf("idempotent: %+v, %v", res, err)
	}
	// Drift: a route deleted by hand, one changed by hand.
	n.ip(t, "-6", "route", "del", "fd00:244:0:2::/64", "proto", "196")
	n.ip(t, "route", "replace", "10.244.1.0/24", "via", "192.0.2.99", "proto", "196")
	res, err = m.Reconcile(ctx, nodes)
	if err != nil || res.Added != 1 || res.Updated != 1 {
		t.Fatalf("repair: %+v, %v", res, err)
	}
	got := n.kernelRoutes(t)
	for _, w := range []string{ours("10.244.1.0/24", "192.0.2.11"), ours("fd00:244:0:1::/64", "2001:db8::11"), ours("10.244.2.0/24", "192.0.2.12"), ours("fd00:244:0:2::/64", "2001:db8::12"), "254/4 10.99.0.0/16 via 192.0.2.50"} {
		if !got[w] {
			t.Errorf("missing %s: %v", w, got)
		}
	}
	// Node b deleted.
	res, err = m.Reconcile(ctx, nodes[:2])
	if err != nil || res.Deleted != 2 {
		t.Fatalf("delete: %+v, %v", res, err)
	}
	if got := n.kernelRoutes(t); len(got) != 3 {
		t.Errorf("after delete: %v", got)
	}
}

// TestNetnsCheckAccessWithoutCapability runs CheckAccess in a child process that
// has dropped every capability.
func TestNetnsCheckAccessWithoutCapability(t *testing.T) {
	if os.Getenv("BCCM_RT_CHILD_NS") != "" {
		ns, err := netns.GetFromName(os.Getenv("BCCM_RT_CHILD_NS"))
		if err != nil {
			t.Fatal(err)
		}
		h, err := netlink.NewHandleAt(ns)
		if err != nil {
			t.Fatal(err)
		}
		k, _ := NewKernel(h, 254, 196)
		_, ctx := ktesting.NewTestContext(t)
		err = k.CheckAccess(ctx)
		if !errors.Is(err, ErrNoCapability) {
			t.Fatalf("CheckAccess without CAP_NET_ADMIN = %v", err)
		}
		fmt.Println("CHILD-OK:", err)
		return
	}
	n := newTestNS(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv to drop capabilities")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Keep CAP_SYS_ADMIN (to enter the namespace) but drop CAP_NET_ADMIN.
	cmd := exec.Command("setpriv", "--inh-caps=-all", "--bounding-set=-net_admin", "--", exe, "-test.run=^TestNetnsCheckAccessWithoutCapability$", "-test.v")
	cmd.Env = append(os.Environ(), "BCCM_RT_CHILD_NS="+n.name)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CHILD-OK:") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func TestOpenInThisNamespace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	k, err := Open(254, 196)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	// Read-only: this namespace's routes are not the test's to change, so no
	// CheckAccess probe here (the netns tests run it).
	if _, _, err := k.List(ctx); err != nil {
		t.Fatal(err)
	}
}
