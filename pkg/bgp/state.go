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
func normalize(paths []Path, baseComm []uint32, baseLarge [][3]uint32, scopes *scopeTable) (map[pathKey]attrs, []error) {
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
			v, err := config.ParseLargeCommunity(c) // refuses the scope tags' administrator
			if err != nil {
				errs = append(errs, fmt.Errorf("prefix %s: %w", prefix, err))
				ok = false
				continue
			}
			a.large = append(a.large, v)
		}
		if slices.ContainsFunc(p.Peers, func(a netip.Addr) bool { return !a.IsValid() }) {
			errs = append(errs, fmt.Errorf("prefix %s: an invalid peer address among the path's peers", prefix))
			ok = false
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
		if p.Peers != nil {
			a.large = append(a.large, [3]uint32{scopeTagASN, scopes.id(p.Peers), 0})
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

// rib holds the desired state per source and what was applied to GoBGP. It plans
// only what changed since the last plan (dirty keys), so a small change to a large
// table costs in proportion to the change. It is not safe for concurrent use.
type rib struct {
	sources map[string]map[pathKey]attrs
	// hops indexes each source's paths by prefix (for update).
	hops map[string]map[netip.Prefix][]netip.Addr
	// names are the sources, sorted (the first supplies a shared path's attributes).
	names   []string
	applied map[pathKey]appliedPath
	// ids are the path identifiers in applied, per prefix.
	ids map[netip.Prefix][]uint32
	// dirty are the keys whose desired or applied state may differ; all asks the
	// next plan to compare everything (after reset).
	dirty map[pathKey]struct{}
	all   bool
	// replaced are paths whose peer scope changed: GoBGP does not withdraw an
	// ADD-PATH path from a peer its new version is filtered from, so the new
	// version gets a new path identifier, and the old one is withdrawn by the plan
	// after the one that committed its successor (make-before-break).
	replaced map[pathKey][]appliedPath
	// dirtyPeak is the most keys dirty since dirty was made: a map keeps its
	// buckets when emptied, so after a burst an empty dirty is made anew.
	dirtyPeak int
}

func newRIB() *rib {
	return &rib{
		sources: map[string]map[pathKey]attrs{}, hops: map[string]map[netip.Prefix][]netip.Addr{},
		applied: map[pathKey]appliedPath{}, ids: map[netip.Prefix][]uint32{}, dirty: map[pathKey]struct{}{},
		replaced: map[pathKey][]appliedPath{},
	}
}

// reset forgets everything applied (the server is gone).
func (r *rib) reset() {
	r.applied = map[pathKey]appliedPath{}
	r.ids = map[netip.Prefix][]uint32{}
	r.dirty = map[pathKey]struct{}{}
	r.replaced = map[pathKey][]appliedPath{}
	r.all = true
}

// set replaces the desired state of one source (empty: the source announces nothing).
func (r *rib) set(source string, paths map[pathKey]attrs) {
	if len(paths) == 0 {
		for k := range r.sources[source] {
			r.dirty[k] = struct{}{}
		}
		r.dropSource(source)
		return
	}
	old, hops := r.sources[source], r.hops[source]
	if hops == nil {
		hops = make(map[netip.Prefix][]netip.Addr, len(paths))
	}
	for k, a := range old {
		b, ok := paths[k]
		if !ok {
			nhs := slices.DeleteFunc(hops[k.prefix], func(nh netip.Addr) bool { return nh == k.nextHop })
			if len(nhs) == 0 {
				delete(hops, k.prefix)
			} else {
				hops[k.prefix] = nhs
			}
		}
		if (!ok || !a.equal(b)) && !r.all {
			r.dirty[k] = struct{}{}
		}
	}
	for k := range paths {
		if _, ok := old[k]; !ok {
			hops[k.prefix] = append(hops[k.prefix], k.nextHop)
			if !r.all {
				r.dirty[k] = struct{}{}
			}
		}
	}
	r.addSource(source)
	r.sources[source], r.hops[source] = paths, hops
}

// update replaces one source's paths of the given prefixes by paths (whose prefixes
// must be among them; others are ignored), leaving its other prefixes alone.
func (r *rib) update(source string, prefixes []netip.Prefix, paths map[pathKey]attrs) {
	cur, hops := r.sources[source], r.hops[source]
	if cur == nil {
		cur, hops = map[pathKey]attrs{}, map[netip.Prefix][]netip.Addr{}
	}
	in := make(map[netip.Prefix]bool, len(prefixes))
	for _, p := range prefixes {
		p = p.Masked()
		in[p] = true
		for _, nh := range hops[p] {
			k := pathKey{prefix: p, nextHop: nh}
			delete(cur, k)
			r.dirty[k] = struct{}{}
		}
		delete(hops, p)
	}
	for k, a := range paths {
		if !in[k.prefix] {
			continue
		}
		cur[k] = a
		hops[k.prefix] = append(hops[k.prefix], k.nextHop)
		r.dirty[k] = struct{}{}
	}
	if len(cur) == 0 {
		r.dropSource(source)
		return
	}
	r.addSource(source)
	r.sources[source], r.hops[source] = cur, hops
}

func (r *rib) addSource(source string) {
	if _, ok := r.sources[source]; !ok {
		r.names = append(r.names, source)
		slices.Sort(r.names)
	}
}

func (r *rib) dropSource(source string) {
	delete(r.sources, source)
	delete(r.hops, source)
	r.names = slices.DeleteFunc(r.names, func(n string) bool { return n == source })
}

// want returns the desired attributes of a path: those of the first source (by
// name) that wants it; ok is false when no source does.
func (r *rib) want(k pathKey) (attrs, bool) {
	for _, n := range r.names {
		if a, ok := r.sources[n][k]; ok {
			return a, true
		}
	}
	return attrs{}, false
}

// effective is the union of all sources. When two sources want the same prefix
// with the same next hop, the source whose name sorts first supplies the
// attributes; the path stays announced until no source wants it.
func (r *rib) effective() map[pathKey]attrs {
	out := map[pathKey]attrs{}
	for _, n := range r.names {
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
// not used by another of our paths for the same prefix. Only dirty keys are
// compared; a key stays dirty until a plan finds it applied as wanted (a change
// that was never committed is planned again).
func (r *rib) plan() []change {
	if r.all {
		for k := range r.effective() {
			r.dirty[k] = struct{}{}
		}
		for k := range r.applied {
			r.dirty[k] = struct{}{}
		}
		r.all = false
	}
	// IDs handed out by this plan, for prefixes that get new paths.
	reserved := map[netip.Prefix][]uint32{}
	newID := func(prefix netip.Prefix) uint32 {
		id := uint32(1)
		for slices.Contains(r.ids[prefix], id) || slices.Contains(reserved[prefix], id) {
			id++
		}
		reserved[prefix] = append(reserved[prefix], id)
		return id
	}
	var adds, dels []change
	r.dirtyPeak = max(r.dirtyPeak, len(r.dirty))
	for k := range r.dirty {
		a, wanted := r.want(k)
		ap, applied := r.applied[k]
		switch {
		case wanted && applied:
			if ap.attrs.equal(a) {
				delete(r.dirty, k)
				continue
			}
			if scopeOf(ap.attrs) != scopeOf(a) {
				// A new version under a new identifier; the old one is withdrawn
				// once the new one is in (commit records it in replaced).
				adds = append(adds, change{key: k, attrs: a, id: newID(k.prefix)})
				continue
			}
			adds = append(adds, change{key: k, attrs: a, id: ap.id})
		case wanted:
			adds = append(adds, change{key: k, attrs: a, id: newID(k.prefix)})
		case applied:
			dels = append(dels, change{key: k, attrs: ap.attrs, id: ap.id, withdraw: true})
		default:
			delete(r.dirty, k)
		}
	}
	if len(r.dirty) == 0 && r.dirtyPeak > 1024 {
		r.dirty, r.dirtyPeak = map[pathKey]struct{}{}, 0
	}
	for k, olds := range r.replaced {
		for _, old := range olds {
			dels = append(dels, change{key: k, attrs: old.attrs, id: old.id, withdraw: true})
		}
	}
	sortChanges(adds)
	sortChanges(dels)
	return append(adds, dels...)
}

// replacing reports whether replaced versions wait for their withdrawal.
func (r *rib) replacing() bool { return len(r.replaced) > 0 }

// scopeOf is the peer scope tag of a path's attributes (0: every peer).
func scopeOf(a attrs) uint32 {
	for _, l := range a.large {
		if l[0] == scopeTagASN {
			return l[1]
		}
	}
	return 0
}

func sortChanges(cs []change) {
	slices.SortFunc(cs, func(a, b change) int {
		return cmp.Or(a.key.prefix.Addr().Compare(b.key.prefix.Addr()), cmp.Compare(a.key.prefix.Bits(), b.key.prefix.Bits()), a.key.nextHop.Compare(b.key.nextHop))
	})
}

// commit records a change that the GoBGP server accepted.
func (r *rib) commit(c change) {
	delete(r.dirty, c.key)
	if len(r.dirty) == 0 && r.dirtyPeak > 1024 {
		r.dirty, r.dirtyPeak = map[pathKey]struct{}{}, 0
	}
	ids := r.ids[c.key.prefix]
	if olds := r.replaced[c.key]; c.withdraw && slices.ContainsFunc(olds, func(o appliedPath) bool { return o.id == c.id }) {
		// A replaced version is gone.
		if olds = slices.DeleteFunc(olds, func(o appliedPath) bool { return o.id == c.id }); len(olds) == 0 {
			delete(r.replaced, c.key)
		} else {
			r.replaced[c.key] = olds
		}
		if ids = slices.DeleteFunc(ids, func(id uint32) bool { return id == c.id }); len(ids) == 0 {
			delete(r.ids, c.key.prefix)
		} else {
			r.ids[c.key.prefix] = ids
		}
		return
	}
	if ap, ok := r.applied[c.key]; ok && !c.withdraw && ap.id != c.id {
		// The successor of another scope is in: its predecessor goes next.
		r.replaced[c.key] = append(r.replaced[c.key], ap)
	}
	if c.withdraw {
		delete(r.applied, c.key)
		if ids = slices.DeleteFunc(ids, func(id uint32) bool { return id == c.id }); len(ids) == 0 {
			delete(r.ids, c.key.prefix)
		} else {
			r.ids[c.key.prefix] = ids
		}
		return
	}
	if !slices.Contains(ids, c.id) {
		r.ids[c.key.prefix] = append(ids, c.id)
	}
	r.applied[c.key] = appliedPath{attrs: c.attrs, id: c.id}
}
