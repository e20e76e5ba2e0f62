package routes

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2/ktesting"
)

func lister(t testing.TB, nodes ...*v1.Node) corelisters.NodeLister {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewNodeLister(idx)
}

func newTestProvider(t *testing.T, opts ProviderOptions, nodes ...*v1.Node) (*Provider, *fakeNetlink) {
	f := newFake("192.0.2.1/24", "2001:db8::1/64")
	k, err := NewKernel(f, tbl, proto)
	if err != nil {
		t.Fatal(err)
	}
	return NewProvider(k, lister(t, nodes...), opts), f
}

func createFor(n *v1.Node, cidr string) *cloudprovider.Route {
	return &cloudprovider.Route{TargetNode: types.NodeName(n.Name), TargetNodeAddresses: n.Status.Addresses, DestinationCIDR: cidr}
}

func byCIDR(routes []*cloudprovider.Route) map[string]*cloudprovider.Route {
	out := map[string]*cloudprovider.Route{}
	for _, r := range routes {
		out[r.DestinationCIDR] = r
	}
	return out
}

func TestProviderCreateListDelete(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	self := node("self", []string{"10.244.0.0/24", "fd00:244::/64"}, "192.0.2.1", "2001:db8::1")
	a := node("a", []string{"10.244.1.0/24", "fd00:244:0:1::/64"}, "192.0.2.11", "2001:db8::11")
	p, f := newTestProvider(t, ProviderOptions{NodeName: "self"}, self, a)
	f.put(tbl, 4, "10.99.0.0/16", "192.0.2.50")

	// Dual stack: two routes for one node with one name hint; self needs none.
	for _, r := range []*cloudprovider.Route{createFor(a, "10.244.1.0/24"), createFor(a, "fd00:244:0:1::/64"), createFor(self, "10.244.0.0/24"), createFor(self, "fd00:244::/64")} {
		for range 2 { // idempotent
			if err := p.CreateRoute(ctx, "c", string(a.UID), r); err != nil {
				t.Fatalf("CreateRoute(%s): %v", r.DestinationCIDR, err)
			}
		}
	}
	want := map[string]bool{ours("10.244.1.0/24", "192.0.2.11"): true, ours("fd00:244:0:1::/64", "2001:db8::11"): true, "254/4 10.99.0.0/16 via 192.0.2.50": true}
	if got := f.state(); !maps.Equal(got, want) {
		t.Fatalf("kernel = %v", slices.Sorted(maps.Keys(got)))
	}

	list, err := p.ListRoutes(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	got := byCIDR(list)
	if len(list) != 4 {
		t.Fatalf("ListRoutes = %d routes, want 4 (two kernel, two local): %v", len(list), got)
	}
	r := got["10.244.1.0/24"]
	if r.TargetNode != "a" || r.Blackhole || r.Name != "a/10.244.1.0/24 via 192.0.2.11" || !r.EnableNodeAddresses || len(r.TargetNodeAddresses) != len(a.Status.Addresses) {
		t.Errorf("v4 route = %+v", r)
	}
	if r := got["fd00:244:0:1::/64"]; r.TargetNode != "a" || r.Name != "a/fd00:244:0:1::/64 via 2001:db8::11" {
		t.Errorf("v6 route = %+v", r)
	}
	if r := got["10.244.0.0/24"]; r.TargetNode != "self" || r.Name != "self/10.244.0.0/24 via local" {
		t.Errorf("self route = %+v", r)
	}
	if _, ok := got["10.99.0.0/16"]; ok {
		t.Error("a foreign route was listed")
	}

	// Delete exactly the listed routes; deleting twice and deleting local ones succeed.
	for _, r := range list {
		for range 2 {
			if err := p.DeleteRoute(ctx, "c", r); err != nil {
				t.Fatalf("DeleteRoute(%s): %v", r.Name, err)
			}
		}
	}
	if got := f.state(); len(got) != 1 || !got["254/4 10.99.0.0/16 via 192.0.2.50"] {
		t.Fatalf("after delete: %v", got)
	}
}

func TestProviderListRecoversTargetsAndBlackholes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	a := node("a", []string{"10.244.1.0/24"}, "192.0.2.11", "192.0.2.21") // second InternalIP
	p, f := newTestProvider(t, ProviderOptions{}, a)
	f.put(tbl, proto, "10.244.1.0/24", "192.0.2.21") // via a's non-primary IP: must be updated
	f.put(tbl, proto, "10.244.7.0/24", "192.0.2.77") // via no node: blackhole
	f.put(tbl, 12, "10.244.8.0/24", "192.0.2.11")    // foreign: not listed
	list, err := p.ListRoutes(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	got := byCIDR(list)
	if len(list) != 2 {
		t.Fatalf("listed %v", got)
	}
	if r := got["10.244.1.0/24"]; r.TargetNode != "a" || len(r.TargetNodeAddresses) != 1 || r.TargetNodeAddresses[0].Address != "192.0.2.21" {
		t.Errorf("stale-gateway route = %+v: TargetNodeAddresses must differ from the Node's so the controller updates it", r)
	}
	r := got["10.244.7.0/24"]
	if !r.Blackhole || r.TargetNode != "" || !strings.Contains(r.Name, "unknown-node") {
		t.Errorf("unresolvable route = %+v", r)
	}
	if err := p.DeleteRoute(ctx, "c", r); err != nil {
		t.Fatal(err)
	}
	if f.state()[ours("10.244.7.0/24", "192.0.2.77")] {
		t.Error("blackhole route not deleted")
	}
}

func TestProviderDeleteTakesOnlyThatGateway(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	a := node("a", []string{"10.244.1.0/24"}, "192.0.2.12")
	p, f := newTestProvider(t, ProviderOptions{}, a)
	// The controller deletes the route listed via the old gateway while the new one
	// was already created: the new route must stay.
	if err := p.CreateRoute(ctx, "c", "", createFor(a, "10.244.1.0/24")); err != nil {
		t.Fatal(err)
	}
	old := &cloudprovider.Route{Name: RouteName("", netip.MustParsePrefix("10.244.1.0/24"), "192.0.2.99"), DestinationCIDR: "10.244.1.0/24", Blackhole: true}
	if err := p.DeleteRoute(ctx, "c", old); err != nil {
		t.Fatal(err)
	}
	if !f.state()[ours("10.244.1.0/24", "192.0.2.12")] {
		t.Fatalf("the current route was deleted: %v", f.state())
	}
}

func TestProviderCreateReplacesOursAndRefusesForeign(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	a := node("a", []string{"10.244.1.0/24"}, "192.0.2.12")
	b := node("b", []string{"10.244.2.0/24"}, "192.0.2.13")
	p, f := newTestProvider(t, ProviderOptions{}, a, b)
	f.put(tbl, proto, "10.244.1.0/24", "192.0.2.99")
	f.put(tbl, 4, "10.244.2.0/24", "192.0.2.50")
	if err := p.CreateRoute(ctx, "c", "", createFor(a, "10.244.1.0/24")); err != nil {
		t.Fatal(err)
	}
	err := p.CreateRoute(ctx, "c", "", createFor(b, "10.244.2.0/24"))
	if !errors.Is(err, ErrForeignRoute) || !strings.Contains(err.Error(), `node "b"`) {
		t.Fatalf("foreign: %v", err)
	}
	want := map[string]bool{ours("10.244.1.0/24", "192.0.2.12"): true, "254/4 10.244.2.0/24 via 192.0.2.50": true}
	if got := f.state(); !maps.Equal(got, want) {
		t.Fatalf("kernel = %v", got)
	}
}

func TestProviderCreateErrors(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	v4only := node("v4only", []string{"10.244.3.0/24", "fd00:244:0:3::/64"}, "192.0.2.13")
	far := node("far", []string{"10.244.5.0/24"}, "198.51.100.5")
	p, f := newTestProvider(t, ProviderOptions{}, v4only, far)

	err := p.CreateRoute(ctx, "c", "", createFor(v4only, "fd00:244:0:3::/64"))
	if !errors.Is(err, ErrNoNodeAddress) || !strings.Contains(err.Error(), `"v4only"`) || !strings.Contains(err.Error(), "fd00:244:0:3::/64") {
		t.Errorf("no v6 address: %v", err)
	}
	// Addresses from the lister when the controller passes none.
	if err := p.CreateRoute(ctx, "c", "", &cloudprovider.Route{TargetNode: "v4only", DestinationCIDR: "10.244.3.0/24"}); err != nil {
		t.Errorf("from lister: %v", err)
	}
	if err := p.CreateRoute(ctx, "c", "", &cloudprovider.Route{TargetNode: "ghost", DestinationCIDR: "10.244.4.0/24"}); err == nil || !strings.Contains(err.Error(), `"ghost"`) {
		t.Errorf("unknown node: %v", err)
	}
	err = p.CreateRoute(ctx, "c", "", createFor(far, "10.244.5.0/24"))
	if !errors.Is(err, ErrGatewayNotOnLink) || !strings.Contains(err.Error(), `"far"`) {
		t.Errorf("off-link: %v", err)
	}
	f.denied = true
	err = p.CreateRoute(ctx, "c", "", createFor(v4only, "10.244.3.0/24"))
	if !errors.Is(err, ErrNoCapability) {
		t.Errorf("denied: %v", err)
	}
}

func TestProviderOffLinkViaFabric(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	far := node("far", []string{"10.244.5.0/24"}, "198.51.100.5")
	p, f := newTestProvider(t, ProviderOptions{OffLinkViaFabric: true}, far)
	if err := p.CreateRoute(ctx, "c", "", createFor(far, "10.244.5.0/24")); err != nil {
		t.Fatal(err)
	}
	if len(f.state()) != 0 {
		t.Fatalf("kernel = %v", f.state())
	}
	list, err := p.ListRoutes(ctx, "c")
	if err != nil || len(list) != 1 || list[0].TargetNode != "far" || list[0].Name != "far/10.244.5.0/24 via fabric" {
		t.Fatalf("list = %v, %v", list, err)
	}
	if err := p.DeleteRoute(ctx, "c", list[0]); err != nil {
		t.Fatal(err)
	}
	if list, _ := p.ListRoutes(ctx, "c"); len(list) != 0 {
		t.Fatalf("after delete: %v", list)
	}
}

func TestRouteNameRoundTrip(t *testing.T) {
	for _, c := range []struct{ node, cidr, via string }{{"a", "10.0.0.0/24", "192.0.2.1"}, {"n-1.example", "fd00::/64", "2001:db8::1"}, {"", "10.0.0.0/24", "none"}} {
		name := RouteName(types.NodeName(c.node), netip.MustParsePrefix(c.cidr), c.via)
		n, via, ok := parseRouteName(name)
		wantNode := c.node
		if wantNode == "" {
			wantNode = unknownNode
		}
		if !ok || n != wantNode || via != c.via {
			t.Errorf("%q parsed to %q %q %v", name, n, via, ok)
		}
	}
}

// TestProviderConcurrentCreate calls CreateRoute from many goroutines, as the route
// controller does (run with -race).
func TestProviderConcurrentCreate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var nodes []*v1.Node
	for i := range 50 {
		nodes = append(nodes, node(fmt.Sprintf("n%d", i), []string{fmt.Sprintf("10.244.%d.0/24", i)}, fmt.Sprintf("192.0.2.%d", 10+i)))
	}
	p, f := newTestProvider(t, ProviderOptions{}, nodes...)
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(nodes))
	for range 2 {
		for _, n := range nodes {
			wg.Go(func() { errs <- p.CreateRoute(ctx, "c", "", createFor(n, n.Spec.PodCIDRs[0])) })
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if len(f.state()) != len(nodes) {
		t.Errorf("kernel has %d routes, want %d", len(f.state()), len(nodes))
	}
}

func TestProviderListWaitsForNodeSync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	synced := false
	p, f := newTestProvider(t, ProviderOptions{NodesSynced: func() bool { return synced }})
	f.put(tbl, proto, "10.244.1.0/24", "192.0.2.11")
	if _, err := p.ListRoutes(ctx, "c"); !errors.Is(err, ErrNodesNotSynced) {
		t.Fatalf("before sync: %v", err)
	}
	synced = true
	if list, err := p.ListRoutes(ctx, "c"); err != nil || len(list) != 1 || !list[0].Blackhole {
		t.Fatalf("after sync: %v, %v", list, err)
	}
}
