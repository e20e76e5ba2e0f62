// Package adverts puts the cluster's BGPAdvertisement objects (baremetal-ccm.io/
// v1alpha1) in force: the leader's Controller checks each one and resolves its
// references (pools by name or label, BGPPeers by name) into its status; every
// speaker (replicas and agents) reads the statuses (Effective) and announces each
// load-balancer address as the advertisements that cover it say (For).
//
// Semantics: an address no advertisement covers is announced to every peer, as
// without any advertisement. One that some cover goes to the union of their peers
// (an advertisement without peers: every peer), with all their communities and the
// highest local preference, on top of its pool's and its Service's own.
package adverts

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
)

// Advert is one BGPAdvertisement in force, resolved.
type Advert struct {
	Name     string
	AllPools bool
	Pools    map[string]bool
	// Services is the serviceSelector (labels.Everything when absent).
	Services labels.Selector
	AllPeers bool
	Peers    []netip.Addr
	lb.Advertising
}

// Effective is every advertisement in force: each object's status.applied with the
// references the leader resolved, by name. An object without an applied spec, or
// being deleted, is left out.
func Effective(objs []*v1alpha1.BGPAdvertisement) []Advert {
	sorted := slices.Clone(objs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var out []Advert
	for _, o := range sorted {
		ap := o.Status.Applied
		if ap == nil || o.DeletionTimestamp != nil {
			continue
		}
		sel := labels.Everything()
		if ap.ServiceSelector != nil {
			s, err := metav1.LabelSelectorAsSelector(ap.ServiceSelector)
			if err != nil {
				continue // accepted only when it parses
			}
			sel = s
		}
		a := Advert{Name: o.Name, AllPools: o.Status.AllPools, Pools: map[string]bool{}, Services: sel, AllPeers: o.Status.AllPeers}
		for _, p := range o.Status.Pools {
			a.Pools[p] = true
		}
		for _, s := range o.Status.PeerAddresses {
			if addr, err := netip.ParseAddr(s); err == nil {
				a.Peers = append(a.Peers, addr.Unmap())
			}
		}
		a.Communities = slices.Clone(ap.Communities)
		a.LargeCommunities = slices.Clone(ap.LargeCommunities)
		if lp := ap.LocalPreference; lp != nil && *lp >= 0 && *lp <= 1<<32-1 {
			v := uint32(*lp)
			a.LocalPref = &v
		}
		out = append(out, a)
	}
	return out
}

// For returns how an address of pool held by svc is advertised, and false when no
// advertisement covers it (then: to every peer, as before).
func For(ads []Advert, svc *v1.Service, pool string) (lb.Advertising, bool) {
	var out lb.Advertising
	covered, all := false, false
	for i := range ads {
		a := &ads[i]
		if !a.AllPools && !a.Pools[pool] || !a.Services.Matches(labels.Set(svc.Labels)) {
			continue
		}
		covered = true
		all = all || a.AllPeers
		for _, p := range a.Peers {
			if !slices.Contains(out.Peers, p) {
				out.Peers = append(out.Peers, p)
			}
		}
		for _, c := range a.Communities {
			if !slices.Contains(out.Communities, c) {
				out.Communities = append(out.Communities, c)
			}
		}
		for _, c := range a.LargeCommunities {
			if !slices.Contains(out.LargeCommunities, c) {
				out.LargeCommunities = append(out.LargeCommunities, c)
			}
		}
		if a.LocalPref != nil && (out.LocalPref == nil || *a.LocalPref > *out.LocalPref) {
			v := *a.LocalPref
			out.LocalPref = &v
		}
	}
	if !covered {
		return lb.Advertising{}, false
	}
	if all {
		out.Peers = nil
	} else if out.Peers == nil {
		out.Peers = []netip.Addr{} // covered, to no peer that exists
	}
	slices.SortFunc(out.Peers, netip.Addr.Compare)
	return out, true
}

// Refs are what the references of an advertisement may resolve to.
type Refs struct {
	// FilePools are the CloudConfig's pool names.
	FilePools []string
	// Pools are the IPPool objects (only accepted ones, status.applied, count).
	Pools []*v1alpha1.IPPool
	// Peers are the BGPPeer objects (only accepted ones count).
	Peers []*v1alpha1.BGPPeer
}

// resolved is what a spec's references stand for.
type resolved struct {
	allPools bool
	pools    []string
	allPeers bool
	peers    []string
}

// validate checks a spec's own fields.
func validate(s *v1alpha1.BGPAdvertisementSpec) field.ErrorList {
	p := field.NewPath("spec")
	var errs field.ErrorList
	for i, n := range s.IPPools {
		for _, m := range validation.IsDNS1123Label(n) {
			errs = append(errs, field.Invalid(p.Child("ipPools").Index(i), n, m+" (a pool's name)"))
		}
	}
	for name, sel := range map[string]*metav1.LabelSelector{"ipPoolSelector": s.IPPoolSelector, "serviceSelector": s.ServiceSelector} {
		if sel == nil {
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			errs = append(errs, field.Invalid(p.Child(name), metav1.FormatLabelSelector(sel), err.Error()))
		}
	}
	for i, a := range s.PeerAddresses {
		if ip, err := netip.ParseAddr(a); err != nil || ip.Zone() != "" {
			errs = append(errs, field.Invalid(p.Child("peerAddresses").Index(i), a, "must be a peer's IPv4 or IPv6 address"))
		}
	}
	errs = append(errs, config.ValidateCommunities(s.Communities, p.Child("communities"))...)
	errs = append(errs, config.ValidateLargeCommunities(s.LargeCommunities, p.Child("largeCommunities"))...)
	if lp := s.LocalPreference; lp != nil && (*lp < 0 || *lp > 1<<32-1) {
		errs = append(errs, field.Invalid(p.Child("localPreference"), *lp, "must be 0-4294967295"))
	}
	return errs
}

// resolve finds what a valid spec's references stand for, or says which is missing.
func resolve(s *v1alpha1.BGPAdvertisementSpec, refs Refs) (resolved, error) {
	var r resolved
	p := field.NewPath("spec")
	var missing field.ErrorList
	if len(s.IPPools) == 0 && s.IPPoolSelector == nil {
		r.allPools = true
	}
	for i, n := range s.IPPools {
		ok := slices.Contains(refs.FilePools, n) || slices.ContainsFunc(refs.Pools, func(o *v1alpha1.IPPool) bool { return o.Name == n && o.Status.Applied != nil })
		if !ok {
			missing = append(missing, field.NotFound(p.Child("ipPools").Index(i), n))
			continue
		}
		r.pools = append(r.pools, n)
	}
	if s.IPPoolSelector != nil {
		sel, _ := metav1.LabelSelectorAsSelector(s.IPPoolSelector) // valid: checked
		for _, o := range refs.Pools {
			if o.Status.Applied != nil && sel.Matches(labels.Set(o.Labels)) {
				r.pools = append(r.pools, o.Name)
			}
		}
	}
	slices.Sort(r.pools)
	r.pools = slices.Compact(r.pools)
	if len(s.Peers) == 0 && len(s.PeerAddresses) == 0 {
		r.allPeers = true
	}
	for i, n := range s.Peers {
		j := slices.IndexFunc(refs.Peers, func(o *v1alpha1.BGPPeer) bool { return o.Name == n && o.Status.Applied != nil })
		if j < 0 {
			missing = append(missing, field.NotFound(p.Child("peers").Index(i), n))
			continue
		}
		if a, err := netip.ParseAddr(refs.Peers[j].Status.Applied.Address); err == nil {
			r.peers = append(r.peers, a.Unmap().String())
		}
	}
	for _, s := range s.PeerAddresses {
		if a, err := netip.ParseAddr(s); err == nil {
			r.peers = append(r.peers, a.Unmap().String())
		}
	}
	slices.Sort(r.peers)
	r.peers = slices.Compact(r.peers)
	if len(missing) > 0 {
		return r, fmt.Errorf("%s (a pool: an IPPool that is accepted, or a CloudConfig pool; a peer: a BGPPeer that is accepted)", missing.ToAggregate().Error())
	}
	return r, nil
}
