package lb

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

func lbService(ns, name string, etp v1.ServiceExternalTrafficPolicy, ips ...string) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: etp},
	}
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
	}
	return s
}

func node(name string, ready bool, ips ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	st := v1.ConditionFalse
	if ready {
		st = v1.ConditionTrue
	}
	n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: st}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	return n
}

func slice(svc string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		Endpoints:  eps,
	}
}

func ep(nodeName string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{NodeName: ptr.To(nodeName), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestDesired(t *testing.T) {
	pool := &config.AddressPool{Name: "public", Communities: []string{"65000:100"}, LargeCommunities: []string{"65000:1:2"}, LocalPreference: ptr.To[uint32](200)}
	poolOf := func(ip netip.Addr) (*config.AddressPool, bool) {
		if netip.MustParsePrefix("192.0.2.0/24").Contains(ip) || netip.MustParsePrefix("2001:db8::/64").Contains(ip) || ip == netip.MustParseAddr("198.51.100.7") {
			return pool, true
		}
		return nil, false
	}
	excluded := node("n3", true, "10.0.0.3")
	excluded.Labels[LabelExcludeFromLB] = ""
	nodes := []*v1.Node{node("n1", true, "10.0.0.1", "fd00::1"), node("n2", true, "10.0.0.2", "fd00::2"), excluded, node("n4", false, "10.0.0.4")}
	slices := map[string][]*discoveryv1.EndpointSlice{
		"local": {slice("local", ep("n2", true), ep("n1", false), ep("n4", true))},
	}
	withClass := lbService("default", "other", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.99")
	withClass.Spec.LoadBalancerClass = ptr.To("example.com/other")
	annotated := lbService("default", "annotated", v1.ServiceExternalTrafficPolicyCluster, "198.51.100.7")
	annotated.Annotations = map[string]string{AnnotationCommunities: "65000:7, bogus", AnnotationLargeCommunities: "1:2:3"}
	orphan := lbService("default", "orphan", v1.ServiceExternalTrafficPolicyCluster, "203.0.113.5") // its pool was removed
	services := []*v1.Service{
		lbService("default", "web", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.10", "2001:db8::10"),
		lbService("default", "local", v1.ServiceExternalTrafficPolicyLocal, "192.0.2.11"),
		lbService("default", "pending", v1.ServiceExternalTrafficPolicyCluster),
		withClass,
		annotated,
		orphan,
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "clusterip"}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeClusterIP}},
	}
	state := func(mode, self string) State {
		return State{
			Services:       services,
			EndpointSlices: func(_, name string) []*discoveryv1.EndpointSlice { return slices[name] },
			Nodes:          nodes,
			Pool:           poolOf,
			NextHop:        mode,
			Self:           self,
		}
	}

	t.Run("self mode on a host without local endpoints", func(t *testing.T) {
		got, problems := Desired(state(config.NextHopSelf, "n1"))
		prefixes := map[string]Announcement{}
		for _, a := range got {
			prefixes[a.Prefix.String()] = a
		}
		want := []string{"192.0.2.10/32", "198.51.100.7/32", "2001:db8::10/128"}
		if keys := sortedKeys(prefixes); !reflect.DeepEqual(keys, want) {
			t.Fatalf("prefixes = %v, want %v (Local service without a ready endpoint on n1 is not announced; classed and pending ones never)", keys, want)
		}
		web := prefixes["192.0.2.10/32"]
		if len(web.NextHops) != 0 || !reflect.DeepEqual(web.Communities, []string{"65000:100"}) || *web.LocalPref != 200 {
			t.Errorf("web announcement = %+v, want self next hop with the pool's community and local preference", web)
		}
		a := prefixes["198.51.100.7/32"]
		if !reflect.DeepEqual(a.Communities, []string{"65000:100", "65000:7"}) || !reflect.DeepEqual(a.LargeCommunities, []string{"65000:1:2", "1:2:3"}) {
			t.Errorf("annotated announcement = %+v, want the pool's and the valid annotation communities", a)
		}
		if len(problems) != 2 || problems[0].Service != annotated || !strings.Contains(problems[0].Err.Error(), `"bogus"`) ||
			problems[1].Service != orphan || !strings.Contains(problems[1].Err.Error(), "203.0.113.5 is in no configured pool") {
			t.Errorf("problems = %v, want the bad community of default/annotated and the pool-less IP of default/orphan", problems)
		}
	})

	t.Run("self mode on a host with a local endpoint", func(t *testing.T) {
		got, _ := Desired(state(config.NextHopSelf, "n2"))
		found := false
		for _, a := range got {
			found = found || a.Prefix.String() == "192.0.2.11/32"
		}
		if !found {
			t.Fatalf("Local service not announced from n2, which has its ready endpoint: %v", got)
		}
	})

	t.Run("nodes mode", func(t *testing.T) {
		got, _ := Desired(state(config.NextHopNodes, "n1"))
		hops := map[string][]netip.Addr{}
		for _, a := range got {
			hops[a.Prefix.String()] = a.NextHops
		}
		if want := addrs("10.0.0.1", "10.0.0.2"); !reflect.DeepEqual(hops["192.0.2.10/32"], want) {
			t.Errorf("Cluster service next hops = %v, want the Ready, not excluded nodes %v", hops["192.0.2.10/32"], want)
		}
		if want := addrs("fd00::1", "fd00::2"); !reflect.DeepEqual(hops["2001:db8::10/128"], want) {
			t.Errorf("IPv6 next hops = %v, want %v", hops["2001:db8::10/128"], want)
		}
		if want := addrs("10.0.0.2"); !reflect.DeepEqual(hops["192.0.2.11/32"], want) {
			t.Errorf("Local service next hops = %v, want only n2 (ready endpoint and Ready node; n4 is NotReady, n1's endpoint not ready)", hops["192.0.2.11/32"])
		}
	})

	t.Run("nodes mode without eligible nodes withdraws", func(t *testing.T) {
		s := state(config.NextHopNodes, "")
		s.Nodes = []*v1.Node{node("n4", false, "10.0.0.4")}
		got, _ := Desired(s)
		if len(got) != 0 {
			t.Fatalf("announcements = %v, want none: no node can take the traffic", got)
		}
	})
}

func TestDesiredSharedIP(t *testing.T) {
	a := lbService("default", "dns-tcp", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.53")
	b := lbService("default", "dns-udp", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.53")
	got, _ := Desired(State{Services: []*v1.Service{a, b}, NextHop: config.NextHopNodes,
		Nodes:          []*v1.Node{node("n1", true, "10.0.0.1"), node("n2", true, "10.0.0.2")},
		EndpointSlices: func(string, string) []*discoveryv1.EndpointSlice { return nil }})
	if len(got) != 1 || !reflect.DeepEqual(got[0].NextHops, addrs("10.0.0.1", "10.0.0.2")) {
		t.Fatalf("shared IP announcements = %+v, want one prefix with both next hops", got)
	}
}

// BGPAdvertisements (State.Advertise): a covered address goes to its peers only,
// with the advertisement's communities and the higher local preference; a shared IP
// goes to the union of its Services' peers, and to every peer when one of them is
// uncovered.
func TestDesiredAdvertise(t *testing.T) {
	pool := &config.AddressPool{Name: "edge", Communities: []string{"65000:1"}, LocalPreference: ptr.To[uint32](100)}
	r1, r2 := netip.MustParseAddr("10.0.255.1"), netip.MustParseAddr("10.0.255.2")
	adv := map[string]Advertising{
		"a": {Peers: []netip.Addr{r1}, Communities: []string{"65000:9"}, LocalPref: ptr.To[uint32](200)},
		"b": {Peers: []netip.Addr{r2}},
	}
	st := func(svcs ...*v1.Service) State {
		return State{Services: svcs, NextHop: config.NextHopSelf,
			Pool:           func(netip.Addr) (*config.AddressPool, bool) { return pool, true },
			EndpointSlices: func(string, string) []*discoveryv1.EndpointSlice { return nil },
			Advertise: func(svc *v1.Service, p string) (Advertising, bool) {
				if p != "edge" {
					t.Errorf("Advertise asked about pool %q", p)
				}
				a, ok := adv[svc.Name]
				return a, ok
			}}
	}
	got, _ := Desired(st(lbService("default", "a", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.1")))
	if len(got) != 1 || !slices.Equal(got[0].Peers, []netip.Addr{r1}) || !slices.Equal(got[0].Communities, []string{"65000:1", "65000:9"}) || *got[0].LocalPref != 200 {
		t.Fatalf("covered: %+v", got)
	}
	got, _ = Desired(st(lbService("default", "a", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.1"), lbService("default", "b", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.1")))
	if len(got) != 1 || !slices.Equal(got[0].Peers, []netip.Addr{r1, r2}) || *got[0].LocalPref != 200 {
		t.Fatalf("shared by two covered Services: %+v", got)
	}
	got, _ = Desired(st(lbService("default", "b", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.1"), lbService("default", "a", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.1")))
	if len(got) != 1 || *got[0].LocalPref != 200 {
		t.Fatalf("the other order: %+v, want the highest local preference", got)
	}
	got, _ = Desired(st(lbService("default", "a", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.1"), lbService("default", "c", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.1")))
	if len(got) != 1 || got[0].Peers != nil {
		t.Fatalf("shared with an uncovered Service: %+v, want every peer", got)
	}
}

func TestEligible(t *testing.T) {
	deleting := node("d", true, "10.0.0.9")
	deleting.DeletionTimestamp = &metav1.Time{}
	noReady := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	withPower := func(name string, st v1.ConditionStatus) *v1.Node {
		n := node(name, true, "10.0.0.8")
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: ConditionPoweredOn, Status: st})
		return n
	}
	for _, tc := range []struct {
		n    *v1.Node
		want bool
	}{{node("a", true), true}, {node("b", false), false}, {deleting, false}, {noReady, false},
		{withPower("off", v1.ConditionFalse), false}, {withPower("on", v1.ConditionTrue), true}, {withPower("unknown", v1.ConditionUnknown), true}} {
		if got := Eligible(tc.n); got != tc.want {
			t.Errorf("Eligible(%s) = %v, want %v", tc.n.Name, got, tc.want)
		}
	}
}

func sortedKeys(m map[string]Announcement) []string { return slices.Sorted(maps.Keys(m)) }

// In next-hop mode nodes, a node whose health endpoint for the Service fails is left
// out of its next hops; the other Services keep it.
func TestDesiredNodeHealth(t *testing.T) {
	web := lbService("default", "web", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.80")
	dns := lbService("default", "dns", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.53")
	got, _ := Desired(State{Services: []*v1.Service{web, dns}, NextHop: config.NextHopNodes,
		Nodes:          []*v1.Node{node("n1", true, "10.0.0.1"), node("n2", true, "10.0.0.2")},
		EndpointSlices: func(string, string) []*discoveryv1.EndpointSlice { return nil },
		Healthy:        func(n *v1.Node, svc *v1.Service) bool { return !(n.Name == "n2" && svc.Name == "web") },
	})
	byPrefix := map[string][]netip.Addr{}
	for _, a := range got {
		byPrefix[a.Prefix.String()] = a.NextHops
	}
	if !reflect.DeepEqual(byPrefix["192.0.2.80/32"], addrs("10.0.0.1")) || !reflect.DeepEqual(byPrefix["192.0.2.53/32"], addrs("10.0.0.1", "10.0.0.2")) {
		t.Errorf("next hops = %v, want web via n1 only and dns via both", byPrefix)
	}
}
