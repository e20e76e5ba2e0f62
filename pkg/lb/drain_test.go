package lb

import (
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

var drainStart = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func withCondition(n *v1.Node, t v1.NodeConditionType, st v1.ConditionStatus, at time.Time) *v1.Node {
	n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: t, Status: st, LastTransitionTime: metav1.NewTime(at)})
	return n
}

func cordoned(n *v1.Node) *v1.Node { n.Spec.Unschedulable = true; return n }

func TestDraining(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n         *v1.Node
		onCordon  bool
		want      bool
		wantSince time.Time
	}{
		{"plain", node("a", true), true, false, time.Time{}},
		{"cordoned only", cordoned(node("a", true)), false, false, time.Time{}},
		{"cordoned, onCordon", cordoned(node("a", true)), true, true, time.Time{}},
		{"DrainInProgress without cordon", withCondition(node("a", true), v1.NodeDrainInProgress, v1.ConditionTrue, drainStart), false, false, time.Time{}},
		{"cordoned and DrainInProgress", withCondition(cordoned(node("a", true)), v1.NodeDrainInProgress, v1.ConditionTrue, drainStart), false, true, drainStart},
		{"cordoned, DrainInProgress False", withCondition(cordoned(node("a", true)), v1.NodeDrainInProgress, v1.ConditionFalse, drainStart), false, false, time.Time{}},
		{"graceful node shutdown", withCondition(node("a", true), v1.NodeGracefulNodeShutdownInProgress, v1.ConditionTrue, drainStart), false, true, drainStart},
	} {
		since, ok := Draining(tc.n, tc.onCordon)
		if ok != tc.want || !since.Equal(tc.wantSince) {
			t.Errorf("%s: Draining = %v, %v; want %v, %v", tc.name, since, ok, tc.want, tc.wantSince)
		}
	}
}

// A draining node's paths are marked with GRACEFUL_SHUTDOWN first, then withdrawn
// once its time has passed and it serves no endpoint of the Service; the other
// nodes' paths are untouched, and a node that stops draining gets plain paths again.
func TestDesiredGracefulShutdownNodesMode(t *testing.T) {
	web := lbService("default", "web", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.80")
	local := lbService("default", "local", v1.ServiceExternalTrafficPolicyLocal, "192.0.2.81")
	terminating := discoveryv1.Endpoint{NodeName: ptr.To("n1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}}
	gone := discoveryv1.Endpoint{NodeName: ptr.To("n1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}}
	draining := func() *v1.Node {
		return withCondition(cordoned(node("n1", true, "10.0.0.1")), v1.NodeDrainInProgress, v1.ConditionTrue, drainStart)
	}
	state := func(n1 *v1.Node, n1Endpoint *discoveryv1.Endpoint, now time.Time) State {
		eps := map[string][]*discoveryv1.EndpointSlice{}
		for _, svc := range []string{"web", "local"} {
			sl := slice(svc, ep("n2", true))
			if n1Endpoint != nil {
				sl.Endpoints = append(sl.Endpoints, *n1Endpoint)
			}
			eps[svc] = []*discoveryv1.EndpointSlice{sl}
		}
		return State{
			Services:       []*v1.Service{web, local},
			EndpointSlices: func(_, name string) []*discoveryv1.EndpointSlice { return eps[name] },
			Nodes:          []*v1.Node{n1, node("n2", true, "10.0.0.2")},
			NextHop:        config.NextHopNodes,
			GracefulShutdown: &GracefulShutdown{
				Draining: func(n *v1.Node) (time.Time, bool) { return Draining(n, false) },
				Time:     30 * time.Second,
				Now:      now,
			},
		}
	}
	type hops struct{ plain, gshut []string }
	check := func(t *testing.T, name string, s State, want map[string]hops) {
		t.Helper()
		got, _ := Desired(s)
		have := map[string]hops{}
		for _, a := range got {
			var h hops
			for _, x := range a.NextHops {
				h.plain = append(h.plain, x.String())
			}
			for _, x := range a.GracefulShutdown {
				h.gshut = append(h.gshut, x.String())
			}
			have[a.Prefix.Addr().String()] = h
		}
		if !reflect.DeepEqual(have, want) {
			t.Errorf("%s: announcements = %+v, want %+v", name, have, want)
		}
	}
	ready := ep("n1", true)
	check(t, "not draining", state(node("n1", true, "10.0.0.1"), &ready, drainStart),
		map[string]hops{"192.0.2.80": {plain: []string{"10.0.0.1", "10.0.0.2"}}, "192.0.2.81": {plain: []string{"10.0.0.1", "10.0.0.2"}}})
	check(t, "drain begins", state(draining(), &ready, drainStart.Add(time.Second)),
		map[string]hops{"192.0.2.80": {plain: []string{"10.0.0.2"}, gshut: []string{"10.0.0.1"}}, "192.0.2.81": {plain: []string{"10.0.0.2"}, gshut: []string{"10.0.0.1"}}})
	check(t, "endpoint terminating but serving", state(draining(), &terminating, drainStart.Add(time.Minute)),
		map[string]hops{"192.0.2.80": {plain: []string{"10.0.0.2"}, gshut: []string{"10.0.0.1"}}, "192.0.2.81": {plain: []string{"10.0.0.2"}, gshut: []string{"10.0.0.1"}}})
	check(t, "endpoint no longer serving, time not passed", state(draining(), &gone, drainStart.Add(10*time.Second)),
		map[string]hops{"192.0.2.80": {plain: []string{"10.0.0.2"}, gshut: []string{"10.0.0.1"}}, "192.0.2.81": {plain: []string{"10.0.0.2"}}})
	check(t, "endpoint removed, time passed", state(draining(), nil, drainStart.Add(30*time.Second)),
		map[string]hops{"192.0.2.80": {plain: []string{"10.0.0.2"}}, "192.0.2.81": {plain: []string{"10.0.0.2"}}})
	notReady := draining()
	notReady.Status.Conditions[0].Status = v1.ConditionFalse
	check(t, "draining node goes NotReady", state(notReady, &ready, drainStart.Add(time.Second)),
		map[string]hops{"192.0.2.80": {plain: []string{"10.0.0.2"}}, "192.0.2.81": {plain: []string{"10.0.0.2"}}})
	uncordoned := draining()
	uncordoned.Spec.Unschedulable = false
	check(t, "uncordoned", state(uncordoned, &ready, drainStart.Add(time.Minute)),
		map[string]hops{"192.0.2.80": {plain: []string{"10.0.0.1", "10.0.0.2"}}, "192.0.2.81": {plain: []string{"10.0.0.1", "10.0.0.2"}}})

	s := state(draining(), &ready, drainStart.Add(time.Second))
	if next := s.GracefulShutdown.Next(s.Nodes); !next.Equal(drainStart.Add(30 * time.Second)) {
		t.Errorf("Next = %v, want the drain start + 30s", next)
	}
	s.GracefulShutdown.Now = drainStart.Add(time.Hour)
	if next := s.GracefulShutdown.Next(s.Nodes); !next.IsZero() {
		t.Errorf("Next after the time ran out = %v, want zero", next)
	}
}

// With next hop self (a replica, or an agent on its host), the host's own path is
// marked while its Node drains, and withdrawn like a next hop of mode nodes.
func TestDesiredGracefulShutdownSelf(t *testing.T) {
	web := lbService("default", "web", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.80")
	self := withCondition(node("n1", true, "10.0.0.1"), v1.NodeGracefulNodeShutdownInProgress, v1.ConditionTrue, drainStart)
	for _, selfOnly := range []bool{false, true} {
		s := State{
			Services:       []*v1.Service{web},
			EndpointSlices: func(string, string) []*discoveryv1.EndpointSlice { return nil },
			Node:           func(string) (*v1.Node, bool) { return self, true },
			Nodes:          []*v1.Node{self},
			NextHop:        config.NextHopSelf,
			Self:           "n1",
			SelfOnly:       selfOnly,
			GracefulShutdown: &GracefulShutdown{
				Draining: func(n *v1.Node) (time.Time, bool) { return Draining(n, false) },
				Time:     30 * time.Second,
				Now:      drainStart.Add(time.Second),
			},
		}
		got, _ := Desired(s)
		if len(got) != 1 || !got[0].SelfGracefulShutdown || len(got[0].NextHops) != 0 {
			t.Errorf("selfOnly=%v: shutting down = %+v, want one path via self marked", selfOnly, got)
		}
		s.GracefulShutdown.Now = drainStart.Add(31 * time.Second)
		if got, _ := Desired(s); len(got) != 0 {
			t.Errorf("selfOnly=%v: after the time = %+v, want withdrawn", selfOnly, got)
		}
		s.GracefulShutdown = nil
		if got, _ := Desired(s); len(got) != 1 || got[0].SelfGracefulShutdown {
			t.Errorf("selfOnly=%v: without gracefulShutdown = %+v, want one plain path", selfOnly, got)
		}
	}
}

// Two Services sharing an IP: a node one of them still announces plainly is not
// marked for the other.
func TestDesiredGracefulShutdownSharedIP(t *testing.T) {
	a := lbService("default", "a", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.53")
	b := lbService("default", "b", v1.ServiceExternalTrafficPolicyCluster, "192.0.2.53")
	n1 := withCondition(cordoned(node("n1", true, "10.0.0.1")), v1.NodeDrainInProgress, v1.ConditionTrue, drainStart)
	got, _ := Desired(State{Services: []*v1.Service{a, b}, NextHop: config.NextHopNodes,
		Nodes:          []*v1.Node{n1, node("n2", true, "10.0.0.2")},
		EndpointSlices: func(string, string) []*discoveryv1.EndpointSlice { return nil },
		GracefulShutdown: &GracefulShutdown{
			Draining: func(n *v1.Node) (time.Time, bool) { return Draining(n, false) },
			Time:     30 * time.Second, Now: drainStart,
		}})
	if len(got) != 1 || !reflect.DeepEqual(got[0].NextHops, addrs("10.0.0.2")) || !reflect.DeepEqual(got[0].GracefulShutdown, addrs("10.0.0.1")) {
		t.Fatalf("shared IP = %+v", got)
	}
}
