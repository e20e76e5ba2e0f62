package agent

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
)

func TestPathsMarkDrainingNextHops(t *testing.T) {
	a := addrs("10.0.0.1", "10.0.0.2")
	lp := uint32(200)
	got := Paths([]lb.Announcement{
		{Prefix: pfx("192.0.2.1/32"), NextHops: a[:1], GracefulShutdown: a[1:], Communities: []string{"65000:1"}, LocalPref: &lp},
		{Prefix: pfx("192.0.2.2/32"), GracefulShutdown: a[1:]},
		{Prefix: pfx("192.0.2.3/32"), SelfGracefulShutdown: true},
		{Prefix: pfx("192.0.2.4/32")},
	})
	marked := func(p bgp.Path) bool {
		return slices.Contains(p.Communities, "graceful-shutdown") && p.LocalPref != nil && *p.LocalPref == 0
	}
	if len(got) != 5 {
		t.Fatalf("paths = %+v, want 5", got)
	}
	if p := got[0]; marked(p) || !slices.Equal(p.NextHops, a[:1]) || *p.LocalPref != 200 || !slices.Equal(p.Communities, []string{"65000:1"}) {
		t.Errorf("plain part = %+v", p)
	}
	if p := got[1]; !marked(p) || !slices.Equal(p.NextHops, a[1:]) || !slices.Contains(p.Communities, "65000:1") {
		t.Errorf("draining part = %+v", p)
	}
	if p := got[2]; !marked(p) || len(p.NextHops) != 1 {
		t.Errorf("only draining next hops = %+v: must not become a path via self", p)
	}
	if p := got[3]; !marked(p) || len(p.NextHops) != 0 {
		t.Errorf("draining self = %+v", p)
	}
	if p := got[4]; marked(p) || len(p.NextHops) != 0 {
		t.Errorf("plain self = %+v", p)
	}
}

// A cordoned host (onCordon) announces its path marked, withdraws it when the time
// has passed without any API event, and announces it plainly again once uncordoned.
func TestGracefulShutdownTimerWithdraws(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n1 := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:       v1.NodeSpec{Unschedulable: true},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}},
	}
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
		Status:     v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "192.0.2.10"}}}},
	}
	client := fake.NewClientset(n1, svc)
	sp := newFakeSpeaker()
	cfg := &config.CloudConfig{
		BGP: &config.BGPConfig{LocalASN: 65000, RouterID: "10.0.0.1", NextHop: config.NextHopSelf,
			GracefulShutdown: &config.GracefulShutdown{Time: &metav1.Duration{Duration: 500 * time.Millisecond}, OnCordon: true}},
		LoadBalancer: &config.LoadBalancerConfig{Announcer: config.AnnouncerBGP},
	}
	a, err := New(Options{Config: cfg, Self: "n1", Informers: informers.NewSharedInformerFactory(client, 0),
		NewSpeaker: func(Identity) (Speaker, error) { return sp, nil }, ResyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.Run(ctx) }()
	path := func() (bgp.Path, bool) {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		for _, p := range sp.paths[SourceLoadBalancers] {
			return p, true
		}
		return bgp.Path{}, false
	}
	waitUntil(t, "the cordoned host's path announced with GRACEFUL_SHUTDOWN", func() bool {
		p, ok := path()
		return ok && slices.Contains(p.Communities, lb.CommunityGracefulShutdown) && p.LocalPref != nil && *p.LocalPref == 0
	})
	waitUntil(t, "the path withdrawn once the time has passed", func() bool { _, ok := path(); return !ok })
	n1.Spec.Unschedulable = false
	if _, err := client.CoreV1().Nodes().Update(ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the path announced plainly after uncordon", func() bool {
		p, ok := path()
		return ok && !slices.Contains(p.Communities, lb.CommunityGracefulShutdown) && p.LocalPref == nil
	})
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
