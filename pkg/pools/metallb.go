package pools

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	metallbv1beta1 "go.universe.tf/metallb/api/v1beta1"
	metallbv1beta2 "go.universe.tf/metallb/api/v1beta2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// MetalLB is a set of MetalLB objects to import.
type MetalLB struct {
	Pools          []metallbv1beta1.IPAddressPool
	Advertisements []metallbv1beta1.BGPAdvertisement
	Communities    []metallbv1beta1.Community
	Peers          []metallbv1beta2.BGPPeer
	BFDProfiles    []metallbv1beta1.BFDProfile
}

// Imported is what MetalLB's objects become: IPPools, BGPPeers (with their
// BFDProfiles' timers; LocalASN is their myASN, for the CloudConfig's bgp.localASN),
// BGPAdvertisements (pools, peers, communities with their aliases resolved, local
// preference), and a warning for everything that has no equivalent (so nothing is
// dropped silently).
type Imported struct {
	Pools          []v1alpha1.IPPool
	LocalASN       uint32
	Peers          []v1alpha1.BGPPeer
	Advertisements []v1alpha1.BGPAdvertisement
	Warnings       []string
}

// FromMetalLB converts m. MetalLB serves an IPAddressPool's addresses to the Services
// it admits in the same order baremetal-ccm does (the lowest free address of the
// first pool by priority), so the imported pools give the same IPs.
func FromMetalLB(m MetalLB) Imported {
	var out Imported
	warn := func(format string, args ...any) { out.Warnings = append(out.Warnings, fmt.Sprintf(format, args...)) }
	aliases := map[string]string{}
	for _, c := range m.Communities {
		for _, a := range c.Spec.Communities {
			aliases[a.Name] = a.Value
		}
	}
	for _, p := range m.Pools {
		name := "IPAddressPool " + p.Namespace + "/" + p.Name
		s := v1alpha1.IPPoolSpec{AvoidBuggyIPs: p.Spec.AvoidBuggyIPs}
		for _, a := range p.Spec.Addresses {
			s.Addresses = append(s.Addresses, strings.ReplaceAll(a, " ", ""))
		}
		if p.Spec.AutoAssign != nil && !*p.Spec.AutoAssign {
			f := false
			s.AutoAssign = &f
		}
		// MetalLB tries pools with a priority (lower first) before those without (0),
		// and restricted pools before open ones at equal priority; here lower goes
		// first and 0 is the default, so unset becomes last.
		s.Priority = unsetPriority
		if al := p.Spec.AllocateTo; al != nil {
			if al.Priority > 0 {
				s.Priority = int32(min(al.Priority, unsetPriority-1))
			}
			s.Namespaces = slices.Clone(al.Namespaces)
			if len(al.NamespaceSelectors) > 0 {
				warn("%s: serviceAllocation.namespaceSelectors not imported (an IPPool restricts by namespace names): list the namespaces in spec.namespaces", name)
			}
			switch len(al.ServiceSelectors) {
			case 0:
			case 1:
				s.ServiceSelector = al.ServiceSelectors[0].DeepCopy()
			default:
				s.ServiceSelector = al.ServiceSelectors[0].DeepCopy()
				warn("%s: %d serviceAllocation.serviceSelectors (MetalLB admits a Service matching any); only the first is imported, so fewer Services may use the pool: merge them into one selector", name, len(al.ServiceSelectors))
			}
		}
		var advs []string
		for _, a := range m.Advertisements {
			if selects(&a, &p) {
				advs = append(advs, a.Name)
			}
		}
		if len(advs) == 0 {
			warn("%s: no BGPAdvertisement selects it, so MetalLB did not announce it over BGP; imported, baremetal-ccm announces it to every peer", name)
		}
		out.Pools = append(out.Pools, v1alpha1.IPPool{
			TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "IPPool"},
			// The labels too: a BGPAdvertisement may select the pool by them.
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: maps.Clone(p.Labels)},
			Spec:       s,
		})
	}
	sort.Slice(out.Pools, func(i, j int) bool { return out.Pools[i].Name < out.Pools[j].Name })
	if len(m.Pools) > 1 && slices.ContainsFunc(m.Pools, func(p metallbv1beta1.IPAddressPool) bool {
		return p.Spec.AllocateTo != nil && (len(p.Spec.AllocateTo.Namespaces) > 0 || len(p.Spec.AllocateTo.ServiceSelectors) > 0)
	}) {
		warn("MetalLB tries restricted pools (serviceAllocation namespaces or selectors) before open ones of the same priority; baremetal-ccm orders by priority, then name: give the restricted pools a lower priority to keep MetalLB's order")
	}
	for _, a := range m.Advertisements {
		name := "BGPAdvertisement " + a.Namespace + "/" + a.Name
		for _, pool := range a.Spec.IPAddressPools {
			if !slices.ContainsFunc(m.Pools, func(p metallbv1beta1.IPAddressPool) bool { return p.Name == pool }) {
				warn("%s names IPAddressPool %s, which is not among the imported objects", name, pool)
			}
		}
		for _, peer := range a.Spec.Peers {
			if !slices.ContainsFunc(m.Peers, func(p metallbv1beta2.BGPPeer) bool { return p.Name == peer }) {
				warn("%s names BGPPeer %s, which is not among the imported objects", name, peer)
			}
		}
		s := v1alpha1.BGPAdvertisementSpec{IPPools: slices.Clone(a.Spec.IPAddressPools), Peers: slices.Clone(a.Spec.Peers)}
		switch len(a.Spec.IPAddressPoolSelectors) {
		case 0:
		case 1:
			s.IPPoolSelector = a.Spec.IPAddressPoolSelectors[0].DeepCopy()
		default:
			s.IPPoolSelector = a.Spec.IPAddressPoolSelectors[0].DeepCopy()
			warn("%s: %d ipAddressPoolSelectors (MetalLB covers a pool matching any); only the first is imported: merge them into one selector", name, len(a.Spec.IPAddressPoolSelectors))
		}
		for _, c := range a.Spec.Communities {
			v := c
			if alias, ok := aliases[c]; ok {
				v = alias
			}
			if large, ok := strings.CutPrefix(v, "large:"); ok {
				s.LargeCommunities = appendNew(s.LargeCommunities, large)
			} else {
				s.Communities = appendNew(s.Communities, v)
			}
		}
		if a.Spec.LocalPref != 0 {
			lp := int64(a.Spec.LocalPref)
			s.LocalPreference = &lp
		}
		if l := a.Spec.AggregationLength; l != nil && *l != 32 {
			warn("%s aggregates to /%d; baremetal-ccm announces each address (/32)", name, *l)
		}
		if l := a.Spec.AggregationLengthV6; l != nil && *l != 128 {
			warn("%s aggregates IPv6 to /%d; baremetal-ccm announces each address (/128)", name, *l)
		}
		if len(a.Spec.NodeSelectors) > 0 {
			warn("%s selects nodes; baremetal-ccm's announcers are its replicas and agents (a BGPPeer's nodeSelector picks which hosts peer, bgp.nextHop which nodes take the traffic)", name)
		}
		out.Advertisements = append(out.Advertisements, v1alpha1.BGPAdvertisement{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BGPAdvertisement"},
			ObjectMeta: metav1.ObjectMeta{Name: a.Name},
			Spec:       s,
		})
	}
	sort.Slice(out.Advertisements, func(i, j int) bool { return out.Advertisements[i].Name < out.Advertisements[j].Name })
	profiles := map[string]*metallbv1beta1.BFDProfile{}
	for i := range m.BFDProfiles {
		profiles[m.BFDProfiles[i].Name] = &m.BFDProfiles[i]
	}
	for _, p := range m.Peers {
		name := "BGPPeer " + p.Namespace + "/" + p.Name
		if out.LocalASN == 0 {
			out.LocalASN = p.Spec.MyASN
		} else if p.Spec.MyASN != out.LocalASN {
			warn("%s: myASN %d differs from %d; baremetal-ccm speaks with one local ASN (bgp.localASN)", name, p.Spec.MyASN, out.LocalASN)
		}
		s := v1alpha1.BGPPeerSpec{Address: p.Spec.Address, ASN: int64(p.Spec.ASN), SourceAddress: p.Spec.SrcAddress,
			HoldTime: p.Spec.HoldTime, KeepaliveTime: p.Spec.KeepaliveTime, ConnectRetry: p.Spec.ConnectTime}
		if p.Spec.Port != 0 && p.Spec.Port != config.DefaultBGPPort {
			s.Port = int32(p.Spec.Port)
		}
		if p.Spec.ASN == 0 {
			warn("%s: no peerASN (dynamicASN %q); set spec.asn", name, p.Spec.DynamicASN)
		}
		if p.Spec.EBGPMultiHop {
			s.EBGPMultihop = 255
		}
		if p.Spec.EnableGracefulRestart {
			// MetalLB's FRR mode uses FRR's default restart time.
			s.GracefulRestart = &metav1.Duration{Duration: 120 * time.Second}
		}
		switch len(p.Spec.NodeSelectors) {
		case 0:
		case 1:
			s.NodeSelector = p.Spec.NodeSelectors[0].DeepCopy()
		default:
			s.NodeSelector = p.Spec.NodeSelectors[0].DeepCopy()
			warn("%s: %d nodeSelectors (MetalLB peers from a node matching any); only the first is imported, so fewer nodes peer: merge them into one selector", name, len(p.Spec.NodeSelectors))
		}
		if bp := p.Spec.BFDProfile; bp != "" {
			if prof, ok := profiles[bp]; ok {
				s.BFD = &v1alpha1.BFDSpec{MinTx: millis(prof.Spec.TransmitInterval), MinRx: millis(prof.Spec.ReceiveInterval)}
				if m := prof.Spec.DetectMultiplier; m != nil {
					s.BFD.Multiplier = int32(min(*m, 255))
				}
				if prof.Spec.EchoMode != nil && *prof.Spec.EchoMode || prof.Spec.PassiveMode != nil && *prof.Spec.PassiveMode {
					warn("%s: BFDProfile %s's echo or passive mode is not imported: the speaker runs single-hop BFD, active, without echo", name, bp)
				}
			} else {
				s.BFD = &v1alpha1.BFDSpec{}
				warn("%s: BFDProfile %s is not among the imported objects: BFD imported with the default timers (300ms x 3)", name, bp)
			}
		}
		if s.BFD != nil && s.EBGPMultihop > 0 {
			warn("%s: BFD with ebgpMultiHop: the speaker runs single-hop BFD only, so BFD is left out", name)
			s.BFD = nil
		}
		for field, d := range map[string]*metav1.Duration{"holdTime": s.HoldTime, "keepaliveTime": s.KeepaliveTime, "connectTime": s.ConnectRetry} {
			if d != nil && d.Duration == 0 {
				warn("%s: %s 0 is left out (the embedded speaker cannot turn the timer off): the default applies", name, field)
			}
		}
		if s.HoldTime != nil && s.HoldTime.Duration == 0 {
			s.HoldTime = nil
		}
		if s.KeepaliveTime != nil && s.KeepaliveTime.Duration == 0 {
			s.KeepaliveTime = nil
		}
		if s.ConnectRetry != nil && s.ConnectRetry.Duration == 0 {
			s.ConnectRetry = nil
		}
		if slices.ContainsFunc(out.Peers, func(o v1alpha1.BGPPeer) bool { return o.Name == p.Name }) {
			warn("%s: another imported BGPPeer is named %s (a BGPPeer is cluster-scoped): rename one before applying", name, p.Name)
		}
		if p.Spec.Password != "" || p.Spec.PasswordSecret.Name != "" {
			warn("%s: a TCP-MD5 password is not copied: put it in a file on every host that peers with the router, readable only by baremetal-ccm, and set spec.passwordFile", name)
		}
		for field, set := range map[string]bool{"vrf": p.Spec.VRFName != "", "interface": p.Spec.Interface != "", "routerID": p.Spec.RouterID != ""} {
			if set {
				warn("%s: %s is not imported (the router ID is per host: the inventory's bgpRouterID or --bgp-router-id)", name, field)
			}
		}
		out.Peers = append(out.Peers, v1alpha1.BGPPeer{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BGPPeer"},
			ObjectMeta: metav1.ObjectMeta{Name: p.Name},
			Spec:       s,
		})
	}
	sort.Slice(out.Peers, func(i, j int) bool { return out.Peers[i].Name < out.Peers[j].Name })
	slices.Sort(out.Warnings)
	return out
}

// millis is a BFDProfile interval (milliseconds) as a duration.
func millis(ms *uint32) *metav1.Duration {
	if ms == nil {
		return nil
	}
	return &metav1.Duration{Duration: time.Duration(*ms) * time.Millisecond}
}

// unsetPriority is the IPPool priority of a MetalLB pool without one: after every
// pool with one, as MetalLB orders them.
const unsetPriority = 1 << 20

// selects reports whether advertisement a applies to pool p: it names it, its
// selectors match its labels, or it names and selects none (every pool).
func selects(a *metallbv1beta1.BGPAdvertisement, p *metallbv1beta1.IPAddressPool) bool {
	if len(a.Spec.IPAddressPools) == 0 && len(a.Spec.IPAddressPoolSelectors) == 0 {
		return true
	}
	if slices.Contains(a.Spec.IPAddressPools, p.Name) {
		return true
	}
	for _, sel := range a.Spec.IPAddressPoolSelectors {
		if s, err := metav1.LabelSelectorAsSelector(&sel); err == nil && s.Matches(labels.Set(p.Labels)) {
			return true
		}
	}
	return false
}

func appendNew(list []string, v string) []string {
	if slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}
