// Package peers combines the CloudConfig's bgp.peers with the cluster's BGPPeer
// objects (baremetal-ccm.io/v1alpha1). The leader's Controller checks each object and
// copies an accepted spec to its status.applied; every speaker (replicas and agents)
// peers with the CloudConfig's peers plus the objects' status.applied whose node
// selector matches its Node (Effective, For), so a bad change never reaches any of
// them, and a good one reaches all without a restart.
//
// How the two combine: a CloudConfig peer (bgp.peers, or a rack's racks[].bgpPeers on
// the hosts of that rack) always wins its address; a BGPPeer with the address of a
// bgp.peers entry is in Conflict and not applied, and one with a rack peer's address
// is left out on that rack's hosts. A BGPPeer equal to a bgp.peers entry is accepted
// (SameAsFile): the way to move a peer into the cluster. Among BGPPeers, the older (creation time, then
// name) wins an address.
package peers

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// ToConfig is the CloudConfig peer a BGPPeer spec stands for, defaulted.
func ToConfig(s *v1alpha1.BGPPeerSpec) config.BGPPeer {
	p := config.BGPPeer{
		Address: s.Address, Port: s.Port, SourceAddress: s.SourceAddress, PasswordFile: s.PasswordFile,
		EBGPMultihop: s.EBGPMultihop, HoldTime: dur(s.HoldTime), KeepaliveTime: dur(s.KeepaliveTime),
		ConnectRetry: dur(s.ConnectRetry), GracefulRestart: dur(s.GracefulRestart),
	}
	if s.ASN > 0 && s.ASN <= 1<<32-1 {
		p.ASN = uint32(s.ASN)
	}
	if b := s.BFD; b != nil {
		p.BFD = &config.BFDConfig{MinTx: dur(b.MinTx), MinRx: dur(b.MinRx), Multiplier: b.Multiplier}
	}
	config.SetBGPPeerDefaults(&p)
	return p
}

// FromConfig is the BGPPeer spec of a CloudConfig peer (baremetal-ccmctl converts).
func FromConfig(p *config.BGPPeer) v1alpha1.BGPPeerSpec {
	s := v1alpha1.BGPPeerSpec{
		Address: p.Address, ASN: int64(p.ASN), SourceAddress: p.SourceAddress, PasswordFile: p.PasswordFile,
		EBGPMultihop: p.EBGPMultihop, HoldTime: dur(p.HoldTime), KeepaliveTime: dur(p.KeepaliveTime),
		ConnectRetry: dur(p.ConnectRetry), GracefulRestart: dur(p.GracefulRestart),
	}
	if p.Port != 0 && p.Port != config.DefaultBGPPort {
		s.Port = p.Port
	}
	if b := p.BFD; b != nil {
		s.BFD = &v1alpha1.BFDSpec{MinTx: dur(b.MinTx), MinRx: dur(b.MinRx), Multiplier: b.Multiplier}
	}
	return s
}

// ObjectName is the name baremetal-ccmctl gives the BGPPeer of a neighbor address:
// peer-192-0-2-1, peer-2001-db8--1 (an IPv6 address expanded would be long; ':'
// becomes '-').
func ObjectName(addr string) string {
	n := "peer-" + strings.NewReplacer(".", "-", ":", "-").Replace(strings.ToLower(addr))
	if strings.HasSuffix(n, "-") { // fd00:: ends in zeros
		n += "0"
	}
	return n
}

func dur(d *metav1.Duration) *metav1.Duration {
	if d == nil {
		return nil
	}
	c := *d
	return &c
}

// Peer is one BGPPeer in force: the neighbor, and the Nodes whose speakers peer with
// it.
type Peer struct {
	// Name is the BGPPeer's.
	Name   string
	Config config.BGPPeer
	// Selector is the spec's nodeSelector (labels.Everything when absent).
	Selector labels.Selector
}

// Effective is the set every process peers with from the BGPPeers: each object's
// status.applied, oldest first (creation time, then name), leaving out any whose
// address a bgp.peers entry (file) or an object before it has, so every process
// derives the same set. Objects are not checked otherwise: the leader's Controller
// applied only what it accepted (an applied selector that no longer parses is left
// out).
func Effective(file []config.BGPPeer, objs []*v1alpha1.BGPPeer) []Peer {
	taken := map[netip.Addr]bool{}
	for i := range file {
		if a, err := netip.ParseAddr(file[i].Address); err == nil {
			taken[a.Unmap()] = true
		}
	}
	var out []Peer
	for _, o := range sorted(objs) {
		if o.Status.Applied == nil || o.DeletionTimestamp != nil {
			continue
		}
		a, err := netip.ParseAddr(o.Status.Applied.Address)
		if err != nil || taken[a.Unmap()] {
			continue
		}
		a = a.Unmap()
		sel, err := selector(o.Status.Applied.NodeSelector)
		if err != nil {
			continue
		}
		taken[a] = true
		out = append(out, Peer{Name: o.Name, Config: ToConfig(o.Status.Applied), Selector: sel})
	}
	return out
}

// For returns the peers of the speaker on node: those whose selector matches its
// labels (a nil node, not known yet, matches only the selector-less peers), leaving
// out the addresses in exclude (this host's rack peers, which win).
func For(peers []Peer, node *v1.Node, exclude []config.BGPPeer) []config.BGPPeer {
	var out []config.BGPPeer
	var set labels.Set
	if node != nil {
		set = labels.Set(node.Labels)
	}
	for _, p := range peers {
		if slices.ContainsFunc(exclude, func(e config.BGPPeer) bool { return sameAddr(e.Address, p.Config.Address) }) {
			continue
		}
		if node == nil && !p.Selector.Empty() {
			continue
		}
		if p.Selector.Matches(set) {
			out = append(out, p.Config)
		}
	}
	return out
}

func sameAddr(a, b string) bool {
	x, err1 := netip.ParseAddr(a)
	y, err2 := netip.ParseAddr(b)
	return err1 == nil && err2 == nil && x.Unmap() == y.Unmap()
}

func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

func sorted(objs []*v1alpha1.BGPPeer) []*v1alpha1.BGPPeer {
	out := slices.Clone(objs)
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	return out
}

// SameAsFile reports whether a BGPPeer spec is exactly the CloudConfig peer f (all
// settings, defaulted, and no node selector): the way to move a peer into the
// cluster, one replica's CloudConfig at a time. While a process's CloudConfig has it,
// the CloudConfig's entry is the one in force there.
func SameAsFile(f *config.BGPPeer, s *v1alpha1.BGPPeerSpec) bool {
	if s.NodeSelector != nil && (len(s.NodeSelector.MatchLabels) > 0 || len(s.NodeSelector.MatchExpressions) > 0) {
		return false
	}
	a, b := *f, ToConfig(s)
	config.SetBGPPeerDefaults(&a)
	return sameAddr(a.Address, b.Address) && equality.Semantic.DeepEqual(withAddr(a, b.Address), b)
}

func withAddr(p config.BGPPeer, addr string) config.BGPPeer {
	p.Address = addr
	return p
}

// check returns why the object's spec cannot be applied next to the CloudConfig's
// peers (file) and the addresses other BGPPeers before it hold (owner by address): a
// reason and a message naming the field, or "" when it can.
func check(o *v1alpha1.BGPPeer, file []config.BGPPeer, owner map[netip.Addr]string) (reason, msg string) {
	p := field.NewPath("spec")
	var errs field.ErrorList
	if o.Spec.ASN < 1 || o.Spec.ASN > 1<<32-2 {
		errs = append(errs, field.Invalid(p.Child("asn"), o.Spec.ASN, "the neighbor's AS number, 1-4294967294"))
	}
	cand := ToConfig(&o.Spec)
	if o.Spec.ASN < 1 || o.Spec.ASN > 1<<32-2 {
		cand.ASN = 1 // reported above
	}
	errs = append(errs, config.ValidateBGPPeer(&cand, p)...)
	if _, err := selector(o.Spec.NodeSelector); err != nil {
		errs = append(errs, field.Invalid(p.Child("nodeSelector"), metav1.FormatLabelSelector(o.Spec.NodeSelector), err.Error()))
	}
	if len(errs) > 0 {
		return v1alpha1.PeerReasonInvalid, errs.ToAggregate().Error()
	}
	a, _ := netip.ParseAddr(cand.Address) // valid: checked above
	for i := range file {
		if sameAddr(file[i].Address, cand.Address) && !SameAsFile(&file[i], &o.Spec) {
			return v1alpha1.PeerReasonConflict, fmt.Sprintf("spec.address: %s is the CloudConfig's bgp.peers[%d] with other settings: make them equal (to move the peer into the cluster: baremetal-ccmctl peers convert) or remove it from every replica's CloudConfig", cand.Address, i)
		}
	}
	if other, ok := owner[a.Unmap()]; ok && other != o.Name {
		return v1alpha1.PeerReasonConflict, fmt.Sprintf("spec.address: %s is BGPPeer %s's: configure each neighbor once", cand.Address, other)
	}
	return "", ""
}
