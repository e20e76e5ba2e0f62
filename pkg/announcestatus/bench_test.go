package announcestatus

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// BenchmarkCompute10000Services: one pass's conditions (each, as pass calls it) at 5000 Nodes and 10,000
// Services (next hop self, three replicas), the work the leader repeats every
// Interval.
func BenchmarkCompute10000Services(b *testing.B) {
	nodes := make([]*v1.Node, 5000)
	for i := range nodes {
		nodes[i] = replicaNode(fmt.Sprintf("n-%04d", i), fmt.Sprintf("10.1.%d.%d", i/250, i%250+1))
	}
	svcs := make([]*v1.Service, 10000)
	for i := range svcs {
		svcs[i] = service(fmt.Sprintf("s-%05d", i), fmt.Sprintf("198.18.%d.%d", i/250, i%250+1), false)
	}
	states := slices.Concat(replica("n-0000", up), replica("n-0001", up), replica("n-0002", down))
	c, _ := fixture(b, bgpConfig(config.NextHopSelf))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		n := 0
		c.each(svcs, nodes, states, func(*v1.Service, metav1.Condition) { n++ })
		if n != len(svcs) {
			b.Fatalf("%d conditions", n)
		}
	}
}

// TestSharedCondition: Services whose condition depends on nothing of their own get
// the same condition as when computed alone; the others still get their own.
func TestSharedCondition(t *testing.T) {
	nodes := []*v1.Node{replicaNode("cp-1", "10.0.0.1"), replicaNode("cp-2", "10.0.0.2")}
	states := slices.Concat(replica("cp-1", up), replica("cp-2", down))
	c, _ := fixture(t, bgpConfig(config.NextHopSelf))
	a, loc, b := service("a", "192.0.2.1", false), service("loc", "192.0.2.2", true), service("b", "192.0.2.3", false)
	all := c.Compute([]*v1.Service{a, loc, b}, nodes, states)
	for _, svc := range []*v1.Service{a, loc, b} {
		alone := c.Compute([]*v1.Service{svc}, nodes, states)["ns/"+svc.Name]
		if got := all["ns/"+svc.Name]; got != alone {
			t.Errorf("%s: %+v in a pass over all, %+v alone", svc.Name, got, alone)
		}
	}
	if all["ns/loc"].Message == all["ns/a"].Message {
		t.Errorf("the Local Service got the shared condition: %q", all["ns/loc"].Message)
	}
}
