package agent

import (
	"context"
	"fmt"
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

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/hostinfo"
)

func readyNode(name, ip, podCIDR string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.NodeSpec{PodCIDRs: []string{podCIDR}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}},
	}
}

func lbService(name, ip string, local bool) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
		Status:     v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: ip}}}},
	}
	if local {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	}
	return s
}

func endpointOn(svc, node string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.244.9.9"}, NodeName: ptr.To(node), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
}

// An agent in SelfOnly mode (worker hosts) announces this host alone: its own pod
// CIDR, and the LB IPs it can take traffic for with itself as next hop, even in
// next-hop mode nodes. Its rack peers come from the Node's annotation, each peer that
// expects a password with this host's password file.
func TestSelfOnlyAnnouncesThisHostOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w1 := readyNode("w1", "10.0.0.1", "10.244.1.0/24")
	w1.Annotations = map[string]string{hostinfo.Annotation: hostinfo.Encode(hostinfo.Info{Host: "w1", Rack: "r1", RouterID: "10.0.0.1", Peers: []hostinfo.Peer{
		{BGPPeer: config.BGPPeer{Address: "10.0.0.254", ASN: 65001}, Password: true},
		{BGPPeer: config.BGPPeer{Address: "10.0.0.253", ASN: 65001}},
	}})}
	w2 := readyNode("w2", "10.0.0.2", "10.244.2.0/24")
	client := fake.NewClientset(w1, w2,
		lbService("cluster", "192.0.2.10", false),
		lbService("local-here", "192.0.2.11", true), endpointOn("local-here", "w1"),
		lbService("local-there", "192.0.2.12", true), endpointOn("local-there", "w2"))
	factory := informers.NewSharedInformerFactory(client, 0)
	sp := newFakeSpeaker()
	cfg := &config.CloudConfig{
		BGP:          &config.BGPConfig{LocalASN: 65000, NextHop: config.NextHopNodes, AnnouncePodCIDRs: true},
		LoadBalancer: &config.LoadBalancerConfig{Announcer: config.AnnouncerBGP},
	}
	a, err := New(Options{
		Config: cfg, Self: "w1", Informers: factory, SelfOnly: true,
		Passwords:  Passwords{Default: "/etc/baremetal-ccm/bgp-password"},
		NewSpeaker: func(Identity) (Speaker, error) { return sp, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.Run(ctx) }()

	waitUntil(t, "the Cluster Service and the Local one with an endpoint here", func() bool {
		p := sp.prefixes(SourceLoadBalancers)
		return len(p) == 2
	})
	lbs := sp.prefixes(SourceLoadBalancers)
	for _, want := range []string{"192.0.2.10/32", "192.0.2.11/32"} {
		hops, ok := lbs[want]
		if !ok || len(hops) != 0 {
			t.Errorf("%s: announced=%v next hops=%v, want announced with next hop self", want, ok, hops)
		}
	}
	if _, ok := lbs["192.0.2.12/32"]; ok {
		t.Error("a Local Service whose endpoint is on another host is announced by this one")
	}
	waitUntil(t, "this host's pod CIDR", func() bool { return len(sp.prefixes(SourcePodCIDRs)) == 1 })
	if _, ok := sp.prefixes(SourcePodCIDRs)["10.244.1.0/24"]; !ok {
		t.Errorf("pod CIDRs = %v, want only this host's 10.244.1.0/24", sp.prefixes(SourcePodCIDRs))
	}
	peers := sp.currentPeers()
	if len(peers) != 2 || peers[0].PasswordFile != "/etc/baremetal-ccm/bgp-password" || peers[1].PasswordFile != "" {
		t.Errorf("peers = %+v, want the published two, the first with this host's password file", peers)
	}
	sp.mu.Lock()
	refreshed := sp.refresh
	sp.mu.Unlock()
	if refreshed == 0 {
		t.Error("the static peers' passwords were never re-read")
	}

	// The host goes NotReady: it takes no traffic, so it announces no LB IP.
	w1 = w1.DeepCopy()
	w1.Status.Conditions[0].Status = v1.ConditionFalse
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, w1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the LB IPs withdrawn from a NotReady host", func() bool { return len(sp.prefixes(SourceLoadBalancers)) == 0 })
}

// A published peer that expects a password, on a host without a password file for it,
// is left out (and said so); the other peers are set.
func TestSelfOnlyPeerWithoutPasswordFile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w1 := readyNode("w1", "10.0.0.1", "10.244.1.0/24")
	w1.Annotations = map[string]string{hostinfo.Annotation: hostinfo.Encode(hostinfo.Info{Host: "w1", Rack: "r1", Peers: []hostinfo.Peer{
		{BGPPeer: config.BGPPeer{Address: "10.0.0.254", ASN: 65001}, Password: true},
		{BGPPeer: config.BGPPeer{Address: "10.0.0.253", ASN: 65001}},
	}})}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(w1), 0)
	sp := newFakeSpeaker()
	a, err := New(Options{
		Config: &config.CloudConfig{BGP: &config.BGPConfig{LocalASN: 65000}}, Self: "w1", Informers: factory, SelfOnly: true,
		Passwords:  Passwords{ByPeer: map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "/x"}},
		NewSpeaker: func(Identity) (Speaker, error) { return sp, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.Run(ctx) }()
	waitUntil(t, "the peer without a password", func() bool { p := sp.currentPeers(); return len(p) == 1 && p[0].Address == "10.0.0.253" })
	a.mu.Lock()
	logged := a.peersLog
	a.mu.Unlock()
	if want := "--bgp-password-file=10.0.0.254=FILE"; !contains(logged, want) {
		t.Errorf("the problem %q does not say how to fix it (%s)", logged, want)
	}
}

func TestParsePasswords(t *testing.T) {
	p, err := ParsePasswords([]string{"/etc/all", "10.0.0.254=/etc/tor-a", "fd00::1=/etc/tor-v6"})
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]string{"10.0.0.254": "/etc/tor-a", "fd00::1": "/etc/tor-v6", "10.0.0.253": "/etc/all"} {
		if got, ok := p.For(addr); !ok || got != want {
			t.Errorf("For(%s) = %q, %v; want %q", addr, got, ok, want)
		}
	}
	if _, ok := (Passwords{}).For("10.0.0.1"); ok {
		t.Error("an empty Passwords has a file")
	}
	for _, bad := range [][]string{{"relative"}, {"/a", "/b"}, {"nohost=/a"}, {"10.0.0.1=/a", "10.0.0.1=/b"}, {"10.0.0.1=rel"}} {
		if _, err := ParsePasswords(bad); err == nil || !contains(err.Error(), "--bgp-password-file") {
			t.Errorf("ParsePasswords(%q) = %v, want an error naming the flag", bad, err)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// The cluster's peers for this host's Node join its rack peers (a rack peer wins its
// address), and PeersChanged applies a change without waiting for the peer resync.
func TestClusterPeersJoinRackPeers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w1 := readyNode("w1", "10.0.0.1", "10.244.1.0/24")
	w1.Labels = map[string]string{"rack": "r1"}
	w1.Annotations = map[string]string{hostinfo.Annotation: hostinfo.Encode(hostinfo.Info{Host: "w1", Rack: "r1", Peers: []hostinfo.Peer{
		{BGPPeer: config.BGPPeer{Address: "10.0.0.254", ASN: 65001}},
	}})}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(w1), 0)
	sp := newFakeSpeaker()
	var mu sync.Mutex
	cluster := []config.BGPPeer{{Address: "10.0.0.254", ASN: 65099}, {Address: "192.0.2.1", ASN: 65002}}
	var seen *v1.Node
	a, err := New(Options{
		Config: &config.CloudConfig{BGP: &config.BGPConfig{LocalASN: 65000}}, Self: "w1", Informers: factory, SelfOnly: true,
		NewSpeaker:         func(Identity) (Speaker, error) { return sp, nil },
		PeerResyncInterval: time.Hour,
		ClusterPeers: func(self *v1.Node, rack []config.BGPPeer) []config.BGPPeer {
			mu.Lock()
			defer mu.Unlock()
			seen = self
			return slices.DeleteFunc(slices.Clone(cluster), func(p config.BGPPeer) bool {
				return slices.ContainsFunc(rack, func(r config.BGPPeer) bool { return r.Address == p.Address })
			})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.Run(ctx) }()
	addrs := func() string {
		var s []string
		for _, p := range sp.currentPeers() {
			s = append(s, fmt.Sprintf("%s/%d", p.Address, p.ASN))
		}
		return strings.Join(s, ",")
	}
	waitUntil(t, "rack and cluster peers", func() bool { return addrs() == "10.0.0.254/65001,192.0.2.1/65002" })
	mu.Lock()
	if seen == nil || seen.Name != "w1" {
		t.Errorf("ClusterPeers was given %v, want this host's Node", seen)
	}
	cluster = []config.BGPPeer{{Address: "192.0.2.7", ASN: 65007}}
	mu.Unlock()
	a.PeersChanged()
	waitUntil(t, "the changed cluster peer", func() bool { return addrs() == "10.0.0.254/65001,192.0.2.7/65007" })
}
