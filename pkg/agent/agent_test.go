package agent

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bfd"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/hostinfo"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/routes"
)

// fakeSpeaker records the latest announcements per source.
type fakeSpeaker struct {
	mu      sync.Mutex
	paths   map[string][]bgp.Path
	peers   []config.BGPPeer
	refresh int
	// synced counts Synced calls; notReady, when set, is why Ready says no.
	synced   int
	notReady string
	ran      chan struct{}
	stopped  chan struct{}
	// announces and updates count the calls; updated are the prefixes of the
	// latest Update.
	announces, updates int
	updated            []netip.Prefix
}

func newFakeSpeaker() *fakeSpeaker {
	return &fakeSpeaker{paths: map[string][]bgp.Path{}, ran: make(chan struct{}), stopped: make(chan struct{})}
}

func (f *fakeSpeaker) Run(ctx context.Context) error {
	close(f.ran)
	<-ctx.Done()
	close(f.stopped)
	return nil
}

func (f *fakeSpeaker) Announce(source string, paths []bgp.Path) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paths[source] = paths
	f.announces++
}

// Update applies the delta as bgp.Speaker does: the source's paths of prefixes are
// replaced by those of paths.
func (f *fakeSpeaker) Update(source string, prefixes []netip.Prefix, paths []bgp.Path) {
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := slices.DeleteFunc(slices.Clone(f.paths[source]), func(p bgp.Path) bool { return slices.Contains(prefixes, p.Prefix) })
	for _, p := range paths {
		if slices.Contains(prefixes, p.Prefix) {
			kept = append(kept, p)
		}
	}
	f.paths[source] = kept
	f.updates++
	f.updated = slices.Clone(prefixes)
}

func (f *fakeSpeaker) SetPeers(peers []config.BGPPeer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peers = peers
	return nil
}

func (f *fakeSpeaker) RefreshPasswords() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refresh++
	return nil
}

func (f *fakeSpeaker) Synced() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.synced++
	return nil
}

func (f *fakeSpeaker) Ready() (bool, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.notReady != "" {
		return false, []string{f.notReady}
	}
	return true, nil
}

func (f *fakeSpeaker) Peers() []bgp.PeerStatus         { return nil }
func (f *fakeSpeaker) BFDSessions() []bfd.SessionState { return nil }
func (f *fakeSpeaker) AppliedPaths() int               { return 0 }

func (f *fakeSpeaker) currentPeers() []config.BGPPeer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peers
}

func (f *fakeSpeaker) prefixes(source string) map[string][]netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]netip.Addr{}
	for _, p := range f.paths[source] {
		out[p.Prefix.String()] = p.NextHops
	}
	return out
}

type fakeMirror struct {
	mu    sync.Mutex
	nodes int
	calls int
	// fail is how many of the next calls fail.
	fail int
}

func (m *fakeMirror) Reconcile(_ context.Context, nodes []*v1.Node) (routes.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nodes, m.calls = len(nodes), m.calls+1
	if m.fail > 0 {
		m.fail--
		return routes.Result{}, errors.New("netlink: operation not permitted")
	}
	return routes.Result{}, nil
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAgentAnnouncesAndMirrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n1 := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:       v1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24", "fd10:244:1::/64"}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeInternalIP, Address: "fd00::1"},
		}, Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}},
	}
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
		Status:     v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "192.0.2.10"}}}},
	}
	local := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "local"},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal},
		Status:     v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "192.0.2.11"}}}},
	}
	localNoEndpoint := local.DeepCopy()
	localNoEndpoint.Name, localNoEndpoint.Status.LoadBalancer.Ingress[0].IP = "local-elsewhere", "192.0.2.12"
	onN1 := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "local-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "local"}},
		Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To("n1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	onOther := onN1.DeepCopy()
	onOther.Name, onOther.Labels[discoveryv1.LabelServiceName], onOther.Endpoints[0].NodeName = "elsewhere-abc", "local-elsewhere", ptr.To("n2")
	client := fake.NewClientset(n1, svc, local, localNoEndpoint, onN1, onOther)
	factory := informers.NewSharedInformerFactory(client, 0)
	sp, mirror := newFakeSpeaker(), &fakeMirror{}
	cfg := &config.CloudConfig{
		BGP:          &config.BGPConfig{LocalASN: 65000, RouterID: "10.0.0.1", NextHop: config.NextHopSelf, AnnouncePodCIDRs: true},
		LoadBalancer: &config.LoadBalancerConfig{Announcer: config.AnnouncerBGP},
	}
	var gotID Identity
	a, err := New(Options{
		Config: cfg, Self: "n1", Informers: factory, Mirror: mirror,
		NewSpeaker: func(id Identity) (Speaker, error) { gotID = id; return sp, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	waitUntil(t, "the LB IP to be announced", func() bool { _, ok := sp.prefixes(SourceLoadBalancers)["192.0.2.10/32"]; return ok })
	if want := (Identity{RouterID: netip.MustParseAddr("10.0.0.1"), IPv4: netip.MustParseAddr("10.0.0.1"), IPv6: netip.MustParseAddr("fd00::1")}); gotID != want {
		t.Errorf("identity = %+v, want %+v (router ID from bgp.routerID, addresses from the Node)", gotID, want)
	}
	waitUntil(t, "the Local Service with an endpoint on this host to be announced", func() bool { _, ok := sp.prefixes(SourceLoadBalancers)["192.0.2.11/32"]; return ok })
	if _, ok := sp.prefixes(SourceLoadBalancers)["192.0.2.12/32"]; ok {
		t.Error("a Local Service whose only endpoint is on another node is announced in next-hop mode self")
	}
	waitUntil(t, "pod CIDRs to be announced", func() bool { return len(sp.prefixes(SourcePodCIDRs)) == 2 })
	if hops := sp.prefixes(SourcePodCIDRs)["fd10:244:1::/64"]; len(hops) != 1 || hops[0] != netip.MustParseAddr("fd00::1") {
		t.Errorf("IPv6 pod CIDR next hops = %v, want the node's IPv6 InternalIP", hops)
	}
	waitUntil(t, "the mirror to see the node", func() bool { mirror.mu.Lock(); defer mirror.mu.Unlock(); return mirror.nodes == 1 })

	// The Service is deleted: its IP is withdrawn.
	if err := client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the LB IP to be withdrawn", func() bool { _, ok := sp.prefixes(SourceLoadBalancers)["192.0.2.10/32"]; return !ok })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	select {
	case <-sp.stopped:
	default:
		t.Fatal("Run returned before the speaker stopped (its withdrawals could be lost)")
	}
}

// Without any router ID source the speaker does not start (and nothing fails); it
// starts once the Node shows an IPv4 InternalIP.
func TestSpeakerWaitsForRouterID(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	started := make(chan Identity, 1)
	a, err := New(Options{
		Config: &config.CloudConfig{BGP: &config.BGPConfig{LocalASN: 65000}}, Self: "late", Informers: factory,
		SelfOnly:   true,
		NewSpeaker: func(id Identity) (Speaker, error) { started <- id; return newFakeSpeaker(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	time.Sleep(300 * time.Millisecond)
	select {
	case id := <-started:
		t.Fatalf("speaker started with %+v before any router ID source existed", id)
	case err := <-done:
		t.Fatalf("Run returned %v, want it to wait", err)
	default:
	}
	// Agent mode (no inventory) also waits for the published annotation.
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "late", Annotations: map[string]string{hostinfo.Annotation: `{"host":"late","routerID":"10.9.9.9"}`}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.7"}}}}
	if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-started:
		if id.RouterID != netip.MustParseAddr("10.9.9.9") || id.IPv4 != netip.MustParseAddr("10.0.0.7") {
			t.Errorf("identity = %+v, want the published router ID and the Node's address", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the speaker did not start once the annotation was published")
	}
}

// The speaker's sessions open only after the first full pass (Synced once); the
// agent is ready only when the speaker is, or bgp.readyTimeout after its informers
// synced, with the reason kept.
func TestReadiness(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}}}}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(node), 0)
	sp := newFakeSpeaker()
	sp.notReady = "10.0.0.254: active"
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a, err := New(Options{
		Config: &config.CloudConfig{BGP: &config.BGPConfig{LocalASN: 65000, ReadyTimeout: &metav1.Duration{Duration: time.Minute}}},
		Self:   "n1", Informers: factory, Clock: clock,
		NewSpeaker: func(Identity) (Speaker, error) { return sp, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := a.Ready(ctx); ok || why != "informers not synced yet" {
		t.Errorf("before Run: Ready = %v %q", ok, why)
	}
	go func() { _ = a.Run(ctx) }()
	waitUntil(t, "the speaker told the first pass is complete", func() bool { sp.mu.Lock(); defer sp.mu.Unlock(); return sp.synced > 0 })
	if ok, why := a.Ready(ctx); ok || !strings.Contains(why, "10.0.0.254: active") {
		t.Errorf("speaker not ready: Ready = %v %q, want not ready naming the peer", ok, why)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	if ok, why := a.Ready(ctx); !ok || !strings.Contains(why, "bgp.readyTimeout") || !strings.Contains(why, "10.0.0.254") {
		t.Errorf("after bgp.readyTimeout: Ready = %v %q, want ready with the reason", ok, why)
	}
	sp.mu.Lock()
	sp.notReady = ""
	sp.mu.Unlock()
	if ok, why := a.Ready(ctx); !ok || why != "" {
		t.Errorf("speaker ready: Ready = %v %q", ok, why)
	}
	time.Sleep(200 * time.Millisecond) // more passes
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.synced != 1 {
		t.Errorf("Synced called %d times, want once", sp.synced)
	}
}
