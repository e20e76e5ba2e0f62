package agent

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/hostinfo"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
)

// fleet is a cluster of n Ready nodes, each running an agent, with cluster Services
// of policy Cluster and local Services of policy Local, each Local one with an
// endpoint on each of endpointsPer nodes.
type fleet struct {
	nodes        []*v1.Node
	byName       map[string]*v1.Node
	services     []*v1.Service
	slices       map[string][]*discoveryv1.EndpointSlice
	endpointsPer int
}

func newFleet(n, cluster, local, endpointsPer int) *fleet {
	f := &fleet{byName: map[string]*v1.Node{}, slices: map[string][]*discoveryv1.EndpointSlice{}, endpointsPer: endpointsPer}
	for i := range n {
		node := readyNode(fmt.Sprintf("n%04d", i), fmt.Sprintf("10.%d.%d.%d", 10+i/65536, i/256%256, i%256), fmt.Sprintf("10.%d.%d.0/24", 128+i/256, i%256))
		f.nodes = append(f.nodes, node)
		f.byName[node.Name] = node
	}
	for i := range cluster + local {
		isLocal := i >= cluster
		svc := lbService(fmt.Sprintf("s%05d", i), fmt.Sprintf("192.%d.%d.%d", 168+i/65536, i/256%256, i%256), isLocal)
		f.services = append(f.services, svc)
		if isLocal {
			for e := range endpointsPer {
				f.slices[svc.Name] = append(f.slices[svc.Name], endpointOn(svc.Name, f.nodes[(i*7+e*13)%n].Name))
			}
		}
	}
	return f
}

// paths is the number of paths the ToR holds when every node's agent announces:
// one per (prefix, next hop) a speaker sends (next hop self counts once).
func (f *fleet) paths(selfOnly bool, nextHop string, agents int) int {
	total := 0
	for i := range agents {
		self := f.nodes[i%len(f.nodes)]
		want, _ := lb.Desired(lb.State{
			Services:       f.services,
			EndpointSlices: func(_, name string) []*discoveryv1.EndpointSlice { return f.slices[name] },
			Node:           func(name string) (*v1.Node, bool) { n, ok := f.byName[name]; return n, ok },
			Nodes:          f.nodes,
			NextHop:        nextHop,
			Self:           self.Name,
			SelfOnly:       selfOnly,
		})
		for _, a := range want {
			total += max(1, len(a.NextHops))
		}
		announced := f.nodes
		if selfOnly {
			announced = []*v1.Node{self}
		}
		total += len(PodCIDRPaths(announced))
	}
	return total
}

// In agent mode the ToR's table is linear in the nodes: each node's pod CIDR once,
// each Cluster IP once per node, each Local IP once per node with an endpoint. The
// same fleet with every agent in next-hop mode nodes (before agents announced only
// themselves) multiplies that by the number of agents.
func TestToRPathsPerNodeModel(t *testing.T) {
	const nodes, cluster, local, endpoints = 200, 30, 10, 3
	f := newFleet(nodes, cluster, local, endpoints)
	got := f.paths(true, config.NextHopNodes, nodes)
	if want := nodes + cluster*nodes + local*endpoints; got != want {
		t.Errorf("agent mode: %d paths at the ToR, want %d (pod CIDRs + Cluster IPs x nodes + Local IPs x endpoint nodes)", got, want)
	}
	if before := f.paths(false, config.NextHopNodes, nodes); before != nodes*(nodes+cluster*nodes+local*endpoints) {
		t.Errorf("next-hop mode nodes on every agent: %d paths, want agents x the above", before)
	}
}

// BenchmarkToRPaths1000Agents reports the paths a ToR holds with 1000 nodes each
// running the agent, 1000 Cluster and 100 Local Services (3 endpoint nodes each):
// tor-paths in agent mode, tor-paths-nodes-mode with every agent in next-hop mode
// nodes (agents x nodes), and the time to compute one agent's announcements.
func BenchmarkToRPaths1000Agents(b *testing.B) {
	const nodes = 1000
	f := newFleet(nodes, 1000, 100, 3)
	one := f.paths(false, config.NextHopNodes, 1) // identical on every agent in that mode
	var total int
	b.ResetTimer()
	for range b.N {
		total = f.paths(true, config.NextHopNodes, nodes)
	}
	b.StopTimer()
	b.ReportMetric(float64(total), "tor-paths")
	b.ReportMetric(float64(one*nodes), "tor-paths-nodes-mode")
	b.ReportMetric(float64(total)/float64(len(f.services)+nodes), "paths-per-prefix")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*nodes), "us-per-agent-pass")
}

// BenchmarkPass5000Nodes10000Services is one agent pass (agent mode, speaker calls
// not included) in a cluster of 5000 Nodes and 10,000 Services: full (every
// ResyncInterval) and incremental (one Service changed, as each status write of a
// burst makes it).
func BenchmarkPass5000Nodes10000Services(b *testing.B) {
	f := newFleet(5000, 10000, 0, 0)
	var objs []runtime.Object
	for _, n := range f.nodes {
		objs = append(objs, n)
	}
	for _, s := range f.services {
		objs = append(objs, s)
	}
	self := f.nodes[0].DeepCopy()
	self.Annotations = map[string]string{hostinfo.Annotation: `{"host":"` + self.Name + `","routerID":"10.0.0.1"}`}
	objs[0] = self
	factory := informers.NewSharedInformerFactory(fake.NewClientset(objs...), 0)
	cfg := &config.CloudConfig{
		BGP:          &config.BGPConfig{LocalASN: 65000, NextHop: config.NextHopSelf},
		LoadBalancer: &config.LoadBalancerConfig{Announcer: config.AnnouncerBGP},
	}
	a, err := New(Options{Config: cfg, Self: self.Name, SelfOnly: true, Informers: factory})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	sp := &countingSpeaker{fakeSpeaker: newFakeSpeaker()}
	a.speaker = sp
	ctx = klog.NewContext(ctx, klog.Background().V(1))
	a.sync(ctx, pending{full: true})
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			a.sync(ctx, pending{full: true})
		}
	})
	b.Run("one-service", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			s := f.services[i%len(f.services)]
			a.sync(ctx, pending{services: map[string]struct{}{s.Namespace + "/" + s.Name: {}}})
		}
	})
	if sp.last != 10000 {
		b.Fatalf("%d paths in the last full pass, want 10000", sp.last)
	}
}

// countingSpeaker keeps only the number of paths of the last Announce (the speaker's
// own cost is measured in package bgp).
type countingSpeaker struct {
	*fakeSpeaker
	last int
}

func (c *countingSpeaker) Announce(source string, paths []bgp.Path) {
	if source == SourceLoadBalancers {
		c.last = len(paths)
	}
}

func (c *countingSpeaker) Update(string, []netip.Prefix, []bgp.Path) {}
