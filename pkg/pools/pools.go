// Package pools combines the CloudConfig's loadBalancer.pools with the cluster's
// IPPool objects (baremetal-ccm.io/v1alpha1). The leader's Controller checks each
// object and copies an accepted spec to its status.applied; every process (replicas
// and agents) uses the CloudConfig's pools plus the objects' status.applied
// (Effective), so they all apply the same set, and a bad or held change never
// reaches any of them.
//
// How the two combine: a CloudConfig pool always wins its name and its addresses; an
// IPPool that reuses either is in Conflict and not applied, unless it is the same pool
// (same name, same fields: the way to move a pool into the cluster, one replica's
// CloudConfig at a time). Among IPPools, the older (creation time, then name) wins.
package pools

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// ToConfig is the CloudConfig pool an IPPool spec stands for.
func ToConfig(name string, s *v1alpha1.IPPoolSpec) config.AddressPool {
	p := config.AddressPool{
		Name: name, Addresses: slices.Clone(s.Addresses), AvoidBuggyIPs: s.AvoidBuggyIPs, Priority: s.Priority,
		Namespaces: slices.Clone(s.Namespaces), Communities: slices.Clone(s.Communities), LargeCommunities: slices.Clone(s.LargeCommunities),
	}
	t := true
	p.AutoAssign = &t
	if s.AutoAssign != nil {
		v := *s.AutoAssign
		p.AutoAssign = &v
	}
	if s.ServiceSelector != nil {
		p.ServiceSelector = s.ServiceSelector.DeepCopy()
	}
	if s.LocalPreference != nil && *s.LocalPreference >= 0 && *s.LocalPreference <= 1<<32-1 {
		lp := uint32(*s.LocalPreference)
		p.LocalPreference = &lp
	}
	return p
}

// FromConfig is the IPPool spec of a CloudConfig pool (baremetal-ccmctl converts).
func FromConfig(p *config.AddressPool) v1alpha1.IPPoolSpec {
	s := v1alpha1.IPPoolSpec{
		Addresses: slices.Clone(p.Addresses), AvoidBuggyIPs: p.AvoidBuggyIPs, Priority: p.Priority,
		Namespaces: slices.Clone(p.Namespaces), Communities: slices.Clone(p.Communities), LargeCommunities: slices.Clone(p.LargeCommunities),
	}
	if p.AutoAssign != nil && !*p.AutoAssign {
		f := false
		s.AutoAssign = &f
	}
	if p.ServiceSelector != nil {
		s.ServiceSelector = p.ServiceSelector.DeepCopy()
	}
	if p.LocalPreference != nil {
		lp := int64(*p.LocalPreference)
		s.LocalPreference = &lp
	}
	return s
}

// Effective is the pool set every process applies: file, then each object's
// status.applied, oldest first (creation time, then name), leaving out any whose name
// or addresses a pool before it has (the CloudConfig always wins; the leader says
// Conflict), so every process gets the same valid set. A pool being deleted stays
// while held but assigns no new address (autoAssign off). Objects are not checked
// otherwise: the leader's Controller applied only what it accepted.
func Effective(file []config.AddressPool, objs []*v1alpha1.IPPool) []config.AddressPool {
	out := slices.Clone(file)
	names := map[string]bool{}
	var taken []span
	for i := range file {
		names[file[i].Name] = true
		taken = append(taken, spans(&file[i])...)
	}
	sorted := slices.Clone(objs)
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	for _, o := range sorted {
		if o.Status.Applied == nil || names[o.Name] {
			continue
		}
		p := ToConfig(o.Name, o.Status.Applied)
		mine := spans(&p)
		if slices.ContainsFunc(mine, func(s span) bool { return slices.ContainsFunc(taken, s.overlaps) }) {
			continue
		}
		if o.DeletionTimestamp != nil {
			f := false
			p.AutoAssign = &f
		}
		names[o.Name] = true
		taken = append(taken, mine...)
		out = append(out, p)
	}
	return out
}

// SameAsFile reports whether an IPPool's pool is exactly the CloudConfig's pool f.
func SameAsFile(f, p *config.AddressPool) bool {
	a, b := *f, *p
	norm := func(c *config.AddressPool) {
		if c.AutoAssign == nil {
			t := true
			c.AutoAssign = &t
		}
		if len(c.Namespaces) == 0 {
			c.Namespaces = nil
		}
		if len(c.Communities) == 0 {
			c.Communities = nil
		}
		if len(c.LargeCommunities) == 0 {
			c.LargeCommunities = nil
		}
	}
	norm(&a)
	norm(&b)
	return equality.Semantic.DeepEqual(a, b)
}

// span is one address range of a pool, for the overlap checks.
type span struct {
	pool        string
	first, last netip.Addr
	text        string
}

func spans(p *config.AddressPool) []span {
	var out []span
	for _, a := range p.Addresses {
		first, last, err := config.ParseAddressRange(a)
		if err == nil {
			out = append(out, span{pool: p.Name, first: first, last: last, text: a})
		}
	}
	return out
}

func (s span) overlaps(o span) bool {
	return s.first.Is4() == o.first.Is4() && s.first.Compare(o.last) <= 0 && o.first.Compare(s.last) <= 0
}

func (s span) contains(ip netip.Addr) bool {
	return s.first.Is4() == ip.Is4() && s.first.Compare(ip) <= 0 && ip.Compare(s.last) <= 0
}

// check returns why the object's spec cannot be applied next to accepted (the
// CloudConfig's pools and the IPPools before it): a reason and a message naming the
// field, or "" when it can.
func check(o *v1alpha1.IPPool, file map[string]*config.AddressPool, accepted []span) (reason, msg string) {
	var errs field.ErrorList
	for _, m := range validation.IsDNS1123Label(o.Name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), o.Name, m+" (the pool's name, as the annotation baremetal-ccm.io/address-pool names it)"))
	}
	cand := ToConfig(o.Name, &o.Spec)
	errs = append(errs, config.ValidatePool(cand, field.NewPath("spec"))...)
	if len(errs) > 0 {
		return v1alpha1.PoolReasonInvalid, errs.ToAggregate().Error()
	}
	if f, ok := file[o.Name]; ok && !SameAsFile(f, &cand) {
		return v1alpha1.PoolReasonConflict, fmt.Sprintf("metadata.name: the CloudConfig has a pool named %s (loadBalancer.pools) that differs: make them equal (to move it into the cluster) or rename this IPPool", o.Name)
	}
	var clashes []string
	for i, s := range spans(&cand) {
		for _, a := range accepted {
			if s.overlaps(a) {
				clashes = append(clashes, fmt.Sprintf("spec.addresses[%d] (%s) overlaps pool %s (%s)", i, s.text, a.pool, a.text))
			}
		}
	}
	if len(clashes) > 0 {
		return v1alpha1.PoolReasonConflict, strings.Join(clashes, "; ") + ": an address may belong to one pool only"
	}
	return "", ""
}

// Holder is an address in use and, when a Service's status shows it, that Service's
// namespace and labels (Known).
type Holder struct {
	IP        netip.Addr
	Known     bool
	Namespace string
	Labels    map[string]string
}

// held returns the addresses of old (the spec in force) among inUse() that spec (nil:
// the pool goes) no longer contains, or whose Service it no longer admits (its
// namespaces or serviceSelector), at most limit of them, and how many there are.
func held(old, spec *v1alpha1.IPPoolSpec, name string, inUse func() []Holder, limit int) ([]string, int) {
	if old == nil || spec != nil && equality.Semantic.DeepEqual(*old, *spec) {
		return nil, 0 // nothing in force changes
	}
	oldCfg := ToConfig(name, old)
	oldSpans := spans(&oldCfg)
	var keep []span
	var admits func(Holder) bool
	if spec != nil {
		c := ToConfig(name, spec)
		keep = spans(&c)
		var sel labels.Selector
		if c.ServiceSelector != nil {
			sel, _ = metav1.LabelSelectorAsSelector(c.ServiceSelector) // checked before
		}
		admits = func(h Holder) bool {
			if !h.Known {
				return true
			}
			if len(c.Namespaces) > 0 && !slices.Contains(c.Namespaces, h.Namespace) {
				return false
			}
			return sel == nil || sel.Matches(labels.Set(h.Labels))
		}
	}
	var out []string
	seen := map[netip.Addr]bool{}
	for _, h := range inUse() {
		ip := h.IP.Unmap()
		if !slices.ContainsFunc(oldSpans, func(s span) bool { return s.contains(ip) }) {
			continue
		}
		buggy := spec != nil && spec.AvoidBuggyIPs && ip.Is4() && (ip.As4()[3] == 0 || ip.As4()[3] == 255)
		if spec != nil && !buggy && slices.ContainsFunc(keep, func(s span) bool { return s.contains(ip) }) && admits(h) {
			continue
		}
		if seen[ip] {
			continue
		}
		seen[ip] = true
		if len(out) < limit {
			out = append(out, ip.String())
		}
	}
	return out, len(seen)
}
