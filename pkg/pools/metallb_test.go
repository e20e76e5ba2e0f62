package pools

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	metallbv1beta1 "go.universe.tf/metallb/api/v1beta1"
	metallbv1beta2 "go.universe.tf/metallb/api/v1beta2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/peers"
)

func TestFromMetalLB(t *testing.T) {
	f := false
	m := MetalLB{
		Pools: []metallbv1beta1.IPAddressPool{
			{ObjectMeta: metav1.ObjectMeta{Name: "public", Namespace: "metallb-system", Labels: map[string]string{"tier": "edge"}},
				Spec: metallbv1beta1.IPAddressPoolSpec{Addresses: []string{"192.0.2.0/24", "192.0.3.1 - 192.0.3.5"}, AutoAssign: &f, AvoidBuggyIPs: true,
					AllocateTo: &metallbv1beta1.ServiceAllocation{Priority: 5, Namespaces: []string{"web"},
						NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"a": "b"}}},
						ServiceSelectors:   []metav1.LabelSelector{{MatchLabels: map[string]string{"app": "x"}}, {MatchLabels: map[string]string{"app": "y"}}}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "quiet", Namespace: "metallb-system"}, Spec: metallbv1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/28"}}},
		},
		Advertisements: []metallbv1beta1.BGPAdvertisement{
			{ObjectMeta: metav1.ObjectMeta{Name: "by-name", Namespace: "metallb-system"},
				Spec: metallbv1beta1.BGPAdvertisementSpec{IPAddressPools: []string{"public", "gone"}, Communities: []string{"NO_ADVERTISE", "65000:1", "large:65000:1:2"}, LocalPref: 150}},
			{ObjectMeta: metav1.ObjectMeta{Name: "by-label", Namespace: "metallb-system"},
				Spec: metallbv1beta1.BGPAdvertisementSpec{IPAddressPoolSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "edge"}}},
					Communities: []string{"65000:1"}, LocalPref: 200, Peers: []string{"tor-a"}}},
		},
		Communities: []metallbv1beta1.Community{{Spec: metallbv1beta1.CommunitySpec{Communities: []metallbv1beta1.CommunityAlias{{Name: "NO_ADVERTISE", Value: "65535:65282"}}}}},
		Peers: []metallbv1beta2.BGPPeer{
			{ObjectMeta: metav1.ObjectMeta{Name: "tor-a", Namespace: "metallb-system"}, Spec: metallbv1beta2.BGPPeerSpec{MyASN: 64512, ASN: 65001, Address: "10.0.0.1", EBGPMultiHop: true, Password: "secret"}},
			{ObjectMeta: metav1.ObjectMeta{Name: "tor-b", Namespace: "metallb-system"}, Spec: metallbv1beta2.BGPPeerSpec{MyASN: 64513, ASN: 65001, Address: "10.0.0.2", BFDProfile: "fast",
				NodeSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"rack": "b"}}}, EnableGracefulRestart: true}},
			{ObjectMeta: metav1.ObjectMeta{Name: "tor-c", Namespace: "metallb-system"}, Spec: metallbv1beta2.BGPPeerSpec{MyASN: 64512, ASN: 65001, Address: "10.0.0.3", BFDProfile: "missing", Port: 1179}},
		},
		BFDProfiles: []metallbv1beta1.BFDProfile{{ObjectMeta: metav1.ObjectMeta{Name: "fast", Namespace: "metallb-system"},
			Spec: metallbv1beta1.BFDProfileSpec{ReceiveInterval: ptr.To[uint32](100), TransmitInterval: ptr.To[uint32](150), DetectMultiplier: ptr.To[uint32](4)}}},
	}
	got := FromMetalLB(m)
	if len(got.Pools) != 2 || got.Pools[0].Name != "public" || got.Pools[1].Name != "quiet" {
		t.Fatalf("pools %+v", got.Pools)
	}
	if got.Pools[0].Labels["tier"] != "edge" {
		t.Errorf("public's labels %v: an advertisement selects it by them", got.Pools[0].Labels)
	}
	p := got.Pools[0].Spec
	if !slices.Equal(p.Addresses, []string{"192.0.2.0/24", "192.0.3.1-192.0.3.5"}) || p.AutoAssign == nil || *p.AutoAssign || !p.AvoidBuggyIPs || p.Priority != 5 ||
		!slices.Equal(p.Namespaces, []string{"web"}) || p.ServiceSelector.MatchLabels["app"] != "x" {
		t.Errorf("public: %+v", p)
	}
	if len(got.Advertisements) != 2 {
		t.Fatalf("advertisements %+v", got.Advertisements)
	}
	byLabel, byName := got.Advertisements[0].Spec, got.Advertisements[1].Spec
	if !slices.Equal(byName.IPPools, []string{"public", "gone"}) || !slices.Equal(byName.Communities, []string{"65535:65282", "65000:1"}) ||
		!slices.Equal(byName.LargeCommunities, []string{"65000:1:2"}) || *byName.LocalPreference != 150 {
		t.Errorf("by-name: %+v", byName)
	}
	if byLabel.IPPoolSelector == nil || byLabel.IPPoolSelector.MatchLabels["tier"] != "edge" || !slices.Equal(byLabel.Peers, []string{"tor-a"}) || *byLabel.LocalPreference != 200 {
		t.Errorf("by-label: %+v", byLabel)
	}
	if got.Pools[1].Spec.Priority != unsetPriority {
		t.Errorf("a pool without priority: %d, want after every pool with one", got.Pools[1].Spec.Priority)
	}
	if got.LocalASN != 64512 || len(got.Peers) != 3 {
		t.Fatalf("peers: %d %+v", got.LocalASN, got.Peers)
	}
	if a := got.Peers[0]; a.Name != "tor-a" || a.Spec.Address != "10.0.0.1" || a.Spec.ASN != 65001 || a.Spec.EBGPMultihop != 255 || a.Spec.PasswordFile != "" || a.Spec.NodeSelector != nil {
		t.Errorf("tor-a: %+v", a)
	}
	b := got.Peers[1].Spec
	if b.BFD == nil || b.BFD.MinRx.Duration != 100*time.Millisecond || b.BFD.MinTx.Duration != 150*time.Millisecond || b.BFD.Multiplier != 4 ||
		b.NodeSelector == nil || b.NodeSelector.MatchLabels["rack"] != "b" || b.GracefulRestart == nil {
		t.Errorf("tor-b: %+v (bfd %+v)", b, b.BFD)
	}
	if c := got.Peers[2].Spec; c.BFD == nil || c.BFD.MinTx != nil || c.Port != 1179 {
		t.Errorf("tor-c: %+v", c)
	}
	for _, o := range got.Peers {
		p := peers.ToConfig(&o.Spec)
		if errs := config.ValidateBGPPeer(&p, nil); len(errs) > 0 {
			t.Errorf("%s does not pass the leader's check: %v", o.Name, errs)
		}
	}
	all := strings.Join(got.Warnings, "\n")
	for _, want := range []string{
		"namespaceSelectors not imported", "2 serviceAllocation.serviceSelectors",
		"IPAddressPool metallb-system/quiet: no BGPAdvertisement selects it", "names IPAddressPool gone", "password is not copied",
		"myASN 64513 differs from 64512", "BFDProfile missing is not among the imported objects", "restricted pools",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning says %q:\n%s", want, all)
		}
	}
	// What it makes is valid as pools, and together.
	for _, o := range got.Pools {
		if r, msg := check(&o, nil, nil); r != "" {
			t.Errorf("%s does not pass the leader's check: %s %s", o.Name, r, msg)
		}
	}
}
