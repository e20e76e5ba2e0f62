package bgp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// pathKey identifies one path the speaker originates: a prefix and a next hop. The
// zero next hop means "self" (the session's local address).
type pathKey struct {
	prefix  netip.Prefix
	nextHop netip.Addr
}

func (k pathKey) String() string {
	if !k.nextHop.IsValid() {
		return k.prefix.String() + " via self"
	}
	return k.prefix.String() + " via " + k.nextHop.String()
}

// attrs are the normalized attributes of a path (sorted, deduplicated), comparable
// with equal.
type attrs struct {
	communities  []uint32
	large        [][3]uint32
	localPref    uint32
	hasLocalPref bool
}

func (a attrs) equal(b attrs) bool {
	return slices.Equal(a.communities, b.communities) && slices.Equal(a.large, b.large) &&
		a.hasLocalPref == b.hasLocalPref && a.localPref == b.localPref
}

// normalize turns the API's Paths into keyed attributes, adding the speaker-wide
// communities. Invalid paths are reported in errs and left out, never announced
// without the attributes they asked for.
func normalize(paths []Path, baseComm []uint32, baseLarge [][3]uint32) (map[pathKey]attrs, []error) {
	out := make(map[pathKey]attrs, len(paths))
	var errs []error
	for _, p := range paths {
		if !p.Prefix.IsValid() {
			errs = append(errs, fmt.Errorf("invalid prefix %v", p.Prefix))
			continue
		}
		prefix := p.Prefix.Masked()
		a := attrs{communities: slices.Clone(baseComm), large: slices.Clone(baseLarge)}
		if p.LocalPref != nil {
			a.localPref, a.hasLocalPref = *p.LocalPref, true
		}
		ok := true
		for _, c := range p.Communities {
			v, err := config.ParseCommunity(c)
			if err != nil {
				errs = append(errs, fmt.Errorf("prefix %s: %w", prefix, err))
				ok = false
				continue
			}
			a.communities = append(a.communities, v)
		}
		for _, c := range p.LargeCommunities {
			v, err := config.ParseLargeCommunity(c)
			if err != nil {
				errs = append(errs, fmt.Errorf("prefix %s: %w", prefix, err))
				ok = false
				continue
			}
			a.large = append(a.large, v)
		}
		for _, nh := range p.NextHops {
			if !nh.IsValid() || nh.Unmap().Is4() != prefix.Addr().Is4() || nh.IsUnspecified() || nh.Zone() != "" {
				errs = append(errs, fmt.Errorf("prefix %s: next hop %v must be a unicast address of the same family", prefix, nh))
				ok = false
			}
		}
		if !ok {
			continue
		}
		slices.Sort(a.communities)
		a.communities = slices.Compact(a.communities)
		slices.SortFunc(a.large, func(x, y [3]uint32) int {
			return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1]), cmp.Compare(x[2], y[2]))
		})
		a.large = slices.Compact(a.large)
		if len(p.NextHops) == 0 {
			out[pathKey{prefix: prefix}] = a
			continue
		}
		for _, nh := range p.NextHops {
			out[pathKey{prefix: prefix, nextHop: nh.Unmap()}] = a
		}
	}
	return out, errs
}

// appliedPath is a path the GoBGP server currently originates.
type appliedPath struct {
	attrs attrs
	// id is the ADD-PATH path identifier (unique per prefix among our paths).
	id uint32
}

// change is one operation on the GoBGP server.
type change struct {
	key      pathKey
	attrs    attrs
	id       uint32
	withdraw bool
}

// rib holds the desired state per source and what was applied to GoBGP. It is not
// safe for concurrent use.
type rib struct {
	sources map[string]map[pathKey]attrs
	applied map[pathKey]appliedPath
	// ids are the path identifiers in applied, per prefix.
	ids map[netip.Prefix][]uint32
}

func newRIB() *rib {
	return &rib{sources: map[string]map[pathKey]attrs{}, applied: map[pathKey]appliedPath{}, ids: map[netip.Prefix][]uint32{}}
}

// reset forgets everything applied (the server is gone).
func (r *rib) reset() {
	r.applied = map[pathKey]appliedPath{}
	r.ids = map[netip.Prefix][]uint32{}
}

// set replaces the desired state of one source (empty: the source announces nothing).
func (r *rib) set(source string, paths map[pathKey]attrs) {
	if len(paths) == 0 {
		delete(r.sources, source)
		return
	}
	r.sources[source] = paths
}

// effective is the union of all sources. When two sources want the same prefix
// with the same next hop, the source whose name sorts first supplies the
// attributes; the path stays announced until no source wants it.
func (r *rib) effective() map[pathKey]attrs {
	if len(r.sources) == 1 {
		for _, m := range r.sources {
			return m // read-only below
		}
	}
	names := make([]string, 0, len(r.sources))
	for n := range r.sources {
		names = append(names, n)
	}
	slices.Sort(names)
	out := map[pathKey]attrs{}
	for _, n := range names {
		for k, a := range r.sources[n] {
			if _, ok := out[k]; !ok {
				out[k] = a
			}
		}
	}
	return out
}

// plan returns the changes that turn applied into the effective desired state:
// announcements (new or changed attributes) first, then withdrawals, so that a
// next-hop change is make-before-break. New paths get the lowest path identifier
// not used by another of our paths for the same prefix.
func (r *rib) plan() []change {
	want := r.effective()
	// IDs handed out by this plan, for prefixes that get new paths.
	reserved := map[netip.Prefix][]uint32{}
	var adds, dels []change
	for k, a := range want {
		if ap, ok := r.applied[k]; ok {
			if !ap.attrs.equal(a) {
				adds = append(adds, change{key: k, attrs: a, id: ap.id})
			}
			continue
		}
		id := uint32(1)
		for slices.Contains(r.ids[k.prefix], id) || slices.Contains(reserved[k.prefix], id) {
			id++
		}
		reserved[k.prefix] = append(reserved[k.prefix], id)
		adds = append(adds, change{key: k, attrs: a, id: id})
	}
	for k, ap := range r.applied {
		if _, ok := want[k]; !ok {
			dels = append(dels, change{key: k, attrs: ap.attrs, id: ap.id, withdraw: true})
		}
	}
	sortChanges(adds)
	sortChanges(dels)
	return append(adds, dels...)
}

func sortChanges(cs []change) {
	slices.SortFunc(cs, func(a, b change) int {
		return cmp.Or(a.key.prefix.Addr().Compare(b.key.prefix.Addr()), cmp.Compare(a.key.prefix.Bits(), b.key.prefix.Bits()), a.key.nextHop.Compare(b.key.nextHop))
	})
}

// commit records a change that the GoBGP server accepted.
func (r *rib) commit(c change) {
	ids := r.ids[c.key.prefix]
	if c.withdraw {
		delete(r.applied, c.key)
		if ids = slices.DeleteFunc(ids, func(id uint32) bool { return id == c.id }); len(ids) == 0 {
			delete(r.ids, c.key.prefix)
		} else {
			r.ids[c.key.prefix] = ids
		}
		return
	}
	if _, ok := r.applied[c.key]; !ok {
		r.ids[c.key.prefix] = append(ids, c.id)
	}
	r.applied[c.key] = appliedPath{attrs: c.attrs, id: c.id}
}
