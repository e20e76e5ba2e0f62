package config

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ParseAddressRange parses one entry of AddressPool.Addresses: a CIDR (host bits are
// ignored, as net.ParseCIDR does: 10.0.0.7/24 means 10.0.0.0/24) or a range
// "first-last" of one family with first <= last. Spaces around the parts are
// allowed. IPv4-mapped IPv6 addresses and zones are refused. first and last are
// both included.
func ParseAddressRange(s string) (first, last netip.Addr, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return first, last, fmt.Errorf("empty address entry; use a CIDR such as 192.0.2.0/24 or a range such as 192.0.2.10-192.0.2.20")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return first, last, fmt.Errorf("%q is not a CIDR: use a form such as 192.0.2.0/24 or 2001:db8::/120", s)
		}
		if p.Addr().Is4In6() {
			return first, last, fmt.Errorf("%q is an IPv4-mapped IPv6 prefix: write the IPv4 prefix instead", s)
		}
		p = p.Masked()
		return p.Addr(), lastOf(p), nil
	}
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return first, last, fmt.Errorf("%q is neither a CIDR nor a range: use 192.0.2.0/24 or 192.0.2.10-192.0.2.20", s)
	}
	first, err1 := netip.ParseAddr(strings.TrimSpace(a))
	last, err2 := netip.ParseAddr(strings.TrimSpace(b))
	switch {
	case err1 != nil || err2 != nil:
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("range %q: both ends must be plain IP addresses, as in 192.0.2.10-192.0.2.20", s)
	case first.Zone() != "" || last.Zone() != "":
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("range %q: remove the IPv6 zone (%%...)", s)
	case first.Is4In6() || last.Is4In6():
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("range %q: IPv4-mapped IPv6 addresses are not allowed: write IPv4 addresses", s)
	case first.Is4() != last.Is4():
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("range %q mixes IPv4 and IPv6: write one range per family", s)
	case first.Compare(last) > 0:
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("range %q: first address is after the last: swap them", s)
	}
	return first, last, nil
}

// lastOf returns the last address of a masked prefix.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

type poolRange struct {
	first, last netip.Addr
	path        *field.Path
	value       string
}

// validatePools checks every pool: name, addresses, selectors, communities, overlaps.
func validatePools(pools []AddressPool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	// No pool here is fine: the cluster's IPPool objects may hold them all.
	names := map[string]int{}
	var ranges []poolRange
	for i := range pools {
		pool := &pools[i]
		pp := p.Index(i)
		np := pp.Child("name")
		if pool.Name == "" {
			errs = append(errs, field.Required(np, "a DNS-1123 label such as default or public-v4"))
		} else {
			for _, msg := range validation.IsDNS1123Label(pool.Name) {
				errs = append(errs, field.Invalid(np, pool.Name, msg))
			}
			if j, dup := names[pool.Name]; dup {
				errs = append(errs, field.Duplicate(np, fmt.Sprintf("%s (also the name of pools[%d]): pool names must be unique", pool.Name, j)))
			} else {
				names[pool.Name] = i
			}
		}
		errs = append(errs, validatePool(pool, pp, &ranges)...)
	}
	return append(errs, overlaps(ranges)...)
}

// validatePool checks one pool's fields but its name, at pp, and appends its
// address ranges to ranges (for the overlap check).
func validatePool(pool *AddressPool, pp *field.Path, ranges *[]poolRange) field.ErrorList {
	var errs field.ErrorList
	ap := pp.Child("addresses")
	if len(pool.Addresses) == 0 {
		errs = append(errs, field.Required(ap, "at least one CIDR (192.0.2.0/24) or range (192.0.2.10-192.0.2.20)"))
	}
	for j, s := range pool.Addresses {
		first, last, err := ParseAddressRange(s)
		if err != nil {
			errs = append(errs, field.Invalid(ap.Index(j), s, err.Error()))
			continue
		}
		*ranges = append(*ranges, poolRange{first: first, last: last, path: ap.Index(j), value: s})
	}
	for j, ns := range pool.Namespaces {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(pp.Child("namespaces").Index(j), ns, msg+" (a namespace name)"))
		}
	}
	if pool.ServiceSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(pool.ServiceSelector); err != nil {
			errs = append(errs, field.Invalid(pp.Child("serviceSelector"), pool.ServiceSelector.String(), err.Error()+": fix the label selector (matchLabels keys/values, matchExpressions operators In, NotIn, Exists, DoesNotExist)"))
		}
	}
	for j, c := range pool.Communities {
		if _, err := ParseCommunity(c); err != nil {
			errs = append(errs, field.Invalid(pp.Child("communities").Index(j), c, err.Error()))
		}
	}
	for j, c := range pool.LargeCommunities {
		if _, err := ParseLargeCommunity(c); err != nil {
			errs = append(errs, field.Invalid(pp.Child("largeCommunities").Index(j), c, err.Error()))
		}
	}
	return errs
}

// ValidatePool checks one pool as a CloudConfig entry is checked (addresses,
// namespaces, selector, communities; no two of its ranges overlapping), except its
// name: the errors name the fields under p. It does not compare it with other pools.
func ValidatePool(pool AddressPool, p *field.Path) field.ErrorList {
	var ranges []poolRange
	errs := validatePool(&pool, p, &ranges)
	return append(errs, overlaps(ranges)...)
}

// overlaps reports every range that overlaps another, within and between pools.
func overlaps(ranges []poolRange) field.ErrorList {
	var errs field.ErrorList
	// Overlaps, within and between pools: sort by first address, compare neighbours
	// against the furthest end seen so far.
	sort.SliceStable(ranges, func(i, j int) bool { return ranges[i].first.Less(ranges[j].first) })
	furthest := -1 // index of the range with the highest last address in this family so far
	for i := range ranges {
		if furthest >= 0 && ranges[furthest].first.Is4() != ranges[i].first.Is4() {
			furthest = -1
		}
		if furthest >= 0 && ranges[i].first.Compare(ranges[furthest].last) <= 0 {
			errs = append(errs, field.Invalid(ranges[i].path, ranges[i].value,
				fmt.Sprintf("overlaps %s (%s): an address may belong to one pool entry only; shrink or remove one of them", ranges[furthest].path, ranges[furthest].value)))
		}
		if furthest < 0 || ranges[i].last.Compare(ranges[furthest].last) > 0 {
			furthest = i
		}
	}
	return errs
}
