package announcestatus

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	v1alpha1listers "github.com/baremetal-ccm/baremetal-ccm/pkg/generated/listers/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/speakerstatus"
)

var now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func replicaNode(name, ip string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
}

// peer is a session of a speaker: address and state.
type peer struct {
	addr, state, bfdProblem string
}

var (
	up   = peer{addr: "10.0.0.254", state: "established"}
	down = peer{addr: "10.0.0.254", state: "active"}
)

// sessionStates are node's BGPSessionState objects, written at updated.
func sessionStates(node, speaker string, updated time.Time, peers ...peer) []*v1alpha1.BGPSessionState {
	var out []*v1alpha1.BGPSessionState
	for _, p := range peers {
		out = append(out, &v1alpha1.BGPSessionState{
			ObjectMeta: metav1.ObjectMeta{Name: speakerstatus.ObjectName(node, netip.MustParseAddr(p.addr))},
			Spec:       v1alpha1.BGPSessionStateSpec{Node: node, Peer: p.addr, Speaker: speaker},
			Status:     v1alpha1.BGPSessionStateStatus{BGPState: p.state, BFDProblem: p.bfdProblem, Updated: &metav1.Time{Time: updated}},
		})
	}
	return out
}

func replica(node string, peers ...peer) []*v1alpha1.BGPSessionState {
	return sessionStates(node, v1alpha1.SpeakerReplica, now.Add(-time.Minute), peers...)
}

func service(name, ip string, local bool) *v1.Service {
	s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
		Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: ip}}}}}
	if local {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	}
	return s
}

func fixture(t testing.TB, cfg *config.CloudConfig, objs ...runtime.Object) (*Controller, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	f := informers.NewSharedInformerFactory(client, 0)
	c, err := New(Options{Client: client, Informers: f, Config: cfg, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return c, client
}

func bgpConfig(nextHop string) *config.CloudConfig {
	return &config.CloudConfig{LoadBalancer: &config.LoadBalancerConfig{Announcer: config.AnnouncerBGP}, BGP: &config.BGPConfig{LocalASN: 65000, NextHop: nextHop}}
}

func TestComputeSelf(t *testing.T) {
	nodes := []*v1.Node{replicaNode("cp-1", "10.0.0.1"), replicaNode("cp-2", "10.0.0.2"), replicaNode("cp-3", "10.0.0.3"), replicaNode("worker", "10.0.0.9")}
	states := slices.Concat(replica("cp-1", up), replica("cp-2", up), replica("cp-3", down))
	web, loc := service("web", "192.0.2.1", false), service("loc", "192.0.2.2", true)
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "loc-1", Labels: map[string]string{discoveryv1.LabelServiceName: "loc"}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}, NodeName: ptr.To("cp-2"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}}
	c, _ := fixture(t, bgpConfig(config.NextHopSelf), slice)
	got := c.Compute([]*v1.Service{web, loc, service("pending", "", false)}, nodes, states)
	w := got["ns/web"]
	if w.Status != metav1.ConditionTrue || w.Reason != ReasonBGP || !strings.Contains(w.Message, "2 of 3 CCM replicas") || !strings.Contains(w.Message, "not by cp-3") {
		t.Errorf("web: %+v", w)
	}
	l := got["ns/loc"]
	if l.Status != metav1.ConditionTrue || !strings.Contains(l.Message, "1 of 3") || !strings.Contains(l.Message, "cp-1 (no ready local endpoint)") {
		t.Errorf("loc: %+v", l)
	}
	if _, ok := got["ns/pending"]; ok {
		t.Error("a Service without an address got the condition")
	}
	// Every session down: False, naming the cause.
	nodes = []*v1.Node{replicaNode("cp-1", "10.0.0.1")}
	if g := c.Compute([]*v1.Service{web}, nodes, replica("cp-1", down))["ns/web"]; g.Status != metav1.ConditionFalse || g.Reason != ReasonNoSessionUp {
		t.Errorf("all down: %+v", g)
	}
	// A session up without the BFD it is configured with says so.
	noBFD := peer{addr: "10.0.0.254", state: "established", bfdProblem: "BFD is not up: the router sends no BFD packets"}
	if g := c.Compute([]*v1.Service{web}, nodes, replica("cp-1", noBFD))["ns/web"]; g.Status != metav1.ConditionTrue || !strings.Contains(g.Message, "sessions up: 10.0.0.254 without BFD") {
		t.Errorf("without BFD: %+v", g)
	}
	// A stale report counts as none.
	stale := sessionStates("cp-1", v1alpha1.SpeakerReplica, now.Add(-time.Hour), up)
	if g := c.Compute([]*v1.Service{web}, nodes, stale)["ns/web"]; g.Reason != ReasonNoReplica {
		t.Errorf("stale: %+v", g)
	}
}

func TestComputeNodesAndOtherAnnouncers(t *testing.T) {
	nodes := []*v1.Node{replicaNode("cp-1", "10.0.0.1"), replicaNode("n1", "10.0.0.11"), replicaNode("n2", "10.0.0.12")}
	states := replica("cp-1", up)
	nodes[2].Status.Conditions = append(nodes[2].Status.Conditions, v1.NodeCondition{Type: lb.ConditionPoweredOn, Status: v1.ConditionFalse})
	web := service("web", "192.0.2.1", false)
	c, _ := fixture(t, bgpConfig(config.NextHopNodes))
	g := c.Compute([]*v1.Service{web}, nodes, states)["ns/web"]
	if g.Status != metav1.ConditionTrue || !strings.Contains(g.Message, "next hops: cp-1, n1") || strings.Contains(g.Message, "n2") {
		t.Errorf("nodes mode: %+v", g)
	}
	loc := service("loc", "192.0.2.2", true)
	if g := c.Compute([]*v1.Service{loc}, nodes, states)["ns/loc"]; g.Reason != ReasonNoEligibleNode {
		t.Errorf("Local without endpoints, nodes mode: %+v", g)
	}
	for announcer, reason := range map[string]string{config.AnnouncerNone: ReasonNoAnnouncer, config.AnnouncerMetalLB: ReasonMetalLB} {
		cfg := bgpConfig(config.NextHopSelf)
		cfg.LoadBalancer.Announcer = announcer
		c, _ := fixture(t, cfg)
		if g := c.Compute([]*v1.Service{web}, nodes, states)["ns/web"]; g.Reason != reason {
			t.Errorf("%s: %+v", announcer, g)
		}
	}
	// An address in no pool is not announced.
	c.o.Pool = func(netip.Addr) (*config.AddressPool, bool) { return nil, false }
	if g := c.Compute([]*v1.Service{web}, nodes, states)["ns/web"]; g.Reason != ReasonNotInPool {
		t.Errorf("no pool: %+v", g)
	}
}

// With bgp.gracefulShutdown, a draining node is named apart while its path is kept
// marked, and leaves the message once its time has passed.
func TestComputeDraining(t *testing.T) {
	nodes := []*v1.Node{replicaNode("cp-1", "10.0.0.1"), replicaNode("n1", "10.0.0.11")}
	states := replica("cp-1", up)
	nodes[1].Spec.Unschedulable = true
	nodes[1].Status.Conditions = append(nodes[1].Status.Conditions, v1.NodeCondition{Type: v1.NodeDrainInProgress, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Now())})
	cfg := bgpConfig(config.NextHopNodes)
	cfg.BGP.GracefulShutdown = &config.GracefulShutdown{Time: &metav1.Duration{Duration: time.Minute}}
	c, _ := fixture(t, cfg)
	web := service("web", "192.0.2.1", false)
	g := c.Compute([]*v1.Service{web}, nodes, states)["ns/web"]
	if g.Status != metav1.ConditionTrue || !strings.Contains(g.Message, "next hops: cp-1; draining (GRACEFUL_SHUTDOWN, least preferred until withdrawn): n1") {
		t.Errorf("draining: %+v", g)
	}
	c.o.Clock = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if g := c.Compute([]*v1.Service{web}, nodes, states)["ns/web"]; strings.Contains(g.Message, "n1") {
		t.Errorf("after gracefulShutdown.time: %+v", g)
	}
}

// A pass writes a condition that changed, once, and keeps the transition time while
// the status stays.
func TestPassWritesChanges(t *testing.T) {
	web := service("web", "192.0.2.1", false)
	c, client := fixture(t, bgpConfig(config.NextHopSelf), web, replicaNode("cp-1", "10.0.0.1"))
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range replica("cp-1", up) {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	c.o.Sessions = v1alpha1listers.NewBGPSessionStateLister(idx)
	ctx := context.Background()
	for range 3 {
		c.pass(ctx)
	}
	patches := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" {
			patches++
		}
	}
	if patches != 1 {
		t.Errorf("%d patches for one change, want 1", patches)
	}
	// Once the cache shows the condition, the controller no longer holds its own copy.
	waitFor := func(cond func() bool) bool {
		for range 500 {
			if cond() {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	if !waitFor(func() bool {
		s, _ := c.services.Services("ns").Get("web")
		return s != nil && meta.FindStatusCondition(s.Status.Conditions, lb.ConditionAnnounced) != nil
	}) {
		t.Fatal("the cache never showed the written condition")
	}
	c.pass(ctx)
	c.mu.Lock()
	held := len(c.written)
	c.mu.Unlock()
	if held != 0 {
		t.Errorf("%d written conditions held after the cache showed them, want 0", held)
	}
	s, err := client.CoreV1().Services("ns").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(s.Status.Conditions, lb.ConditionAnnounced); cond == nil || cond.Status != metav1.ConditionTrue || cond.LastTransitionTime.IsZero() {
		t.Errorf("stored %+v", s.Status.Conditions)
	}
}

// Worker agents announce their own node while it takes traffic (and, for Local, has
// a ready endpoint); they count when no replica speaks; stale ones and those of a
// Node that is gone do not.
func TestComputeAgents(t *testing.T) {
	nodes := []*v1.Node{replicaNode("cp-1", "10.0.0.1"), replicaNode("w1", "10.0.1.1"), replicaNode("w2", "10.0.1.2"), replicaNode("w3", "10.0.1.3")}
	nodes[2].Labels = map[string]string{lb.LabelExcludeFromLB: ""}
	agent := func(node string, p peer) []*v1alpha1.BGPSessionState {
		return sessionStates(node, v1alpha1.SpeakerAgent, now.Add(-time.Minute), p)
	}
	states := slices.Concat(replica("cp-1", up), agent("w1", up), agent("w2", up), agent("w3", down),
		sessionStates("w4", v1alpha1.SpeakerAgent, now.Add(-time.Hour), up), agent("gone", up))
	web, loc := service("web", "192.0.2.1", false), service("loc", "192.0.2.2", true)
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "loc-1", Labels: map[string]string{discoveryv1.LabelServiceName: "loc"}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To("w1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}}
	c, _ := fixture(t, bgpConfig(config.NextHopSelf), slice)
	got := c.Compute([]*v1.Service{web, loc}, nodes, states)
	w := got["ns/web"]
	if w.Status != metav1.ConditionTrue || !strings.Contains(w.Message, "1 of 1 CCM replicas") || !strings.Contains(w.Message, "by 1 of 3 worker agents: w1 (sessions up: 10.0.0.254)") ||
		!strings.Contains(w.Message, "not by agents w2 (node takes no traffic), w3 (down: 10.0.0.254)") || strings.Contains(w.Message, "w4") || strings.Contains(w.Message, "gone") {
		t.Errorf("web: %+v", w)
	}
	if l := got["ns/loc"]; !strings.HasPrefix(l.Message, "announced over BGP; by 1 of 3 worker agents: w1") || !strings.Contains(l.Message, "not by cp-1 (no ready local endpoint)") {
		t.Errorf("loc: %+v", l)
	}
	// Agents alone: announced by them.
	if g := c.Compute([]*v1.Service{loc}, nodes, agent("w1", up))["ns/loc"]; g.Status != metav1.ConditionTrue || !strings.Contains(g.Message, "announced over BGP; by 1 of 1 worker agents: w1") {
		t.Errorf("agents only: %+v", g)
	}
	// An agent whose node has no ready endpoint of a Local Service does not announce it.
	if g := c.Compute([]*v1.Service{loc}, nodes, agent("w3", up))["ns/loc"]; g.Status != metav1.ConditionFalse || !strings.Contains(g.Message, "w3 (no ready local endpoint)") {
		t.Errorf("Local, agent without endpoint: %+v", g)
	}
}

// The condition writes take a quarter of the client's budget, never less than the
// defaults' 20/s and 50.
func TestWriteLimits(t *testing.T) {
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	for _, tc := range []struct {
		qps   float32
		burst int
		want  float32
	}{{0, 0, 20}, {20, 30, 20}, {500, 1000, 125}} {
		c, err := New(Options{Client: client, Informers: f, Config: bgpConfig(""), ClientQPS: tc.qps, ClientBurst: tc.burst})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.limiter.QPS(); got != tc.want {
			t.Errorf("client %v/s: condition writes %v/s, want %v", tc.qps, got, tc.want)
		}
		if want := max(50, tc.burst/4); c.o.WriteBurst != want {
			t.Errorf("client burst %d: condition burst %d, want %d", tc.burst, c.o.WriteBurst, want)
		}
	}
	// rest.Config's QPS < 0: the client is not rate-limited, nor are the conditions.
	c, err := New(Options{Client: client, Informers: f, Config: bgpConfig(""), ClientQPS: -1, ClientBurst: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if !c.limiter.TryAccept() {
			t.Fatalf("unlimited client: condition write %d refused", i)
		}
	}
}
