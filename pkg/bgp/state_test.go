package bgp

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	api "github.com/osrg/gobgp/v4/api"
)

var (
	pfxA = netip.MustParsePrefix("192.0.2.1/32")
	pfxB = netip.MustParsePrefix("192.0.2.2/32")
	pfx6 = netip.MustParsePrefix("2001:db8::1/128")
	nh1  = netip.MustParseAddr("10.0.0.1")
	nh2  = netip.MustParseAddr("10.0.0.2")
)

func mustNormalize(t *testing.T, paths ...Path) map[pathKey]attrs {
	t.Helper()
	m, errs := normalize(paths, nil, nil, &scopeTable{})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return m
}

// apply commits a plan as if GoBGP accepted everything.
func apply(r *rib) []change {
	cs := r.plan()
	for _, c := range cs {
		r.commit(c)
	}
	return cs
}

func describe(cs []change) []string {
	var out []string
	for _, c := range cs {
		op := "add"
		if c.withdraw {
			op = "del"
		}
		out = append(out, op+" "+c.key.String())
	}
	return out
}

func TestPlanAddUpdateWithdraw(t *testing.T) {
	r := newRIB()
	r.set("lb", mustNormalize(t, Path{Prefix: pfxA}, Path{Prefix: pfx6}))
	if got, want := describe(apply(r)), []string{"add 192.0.2.1/32 via self", "add 2001:db8::1/128 via self"}; !slices.Equal(got, want) {
		t.Fatalf("first plan = %v, want %v", got, want)
	}
	if cs := apply(r); len(cs) != 0 {
		t.Fatalf("same state again must be a no-op, got %v", describe(cs))
	}
	// Attribute change: re-announce with the same path ID.
	r.set("lb", mustNormalize(t, Path{Prefix: pfxA, Communities: []string{"65000:1"}}, Path{Prefix: pfx6}))
	cs := apply(r)
	if len(cs) != 1 || cs[0].withdraw || cs[0].id != 1 || !slices.Equal(cs[0].attrs.communities, []uint32{65000<<16 | 1}) {
		t.Fatalf("update plan = %+v", cs)
	}
	// Removal.
	r.set("lb", mustNormalize(t, Path{Prefix: pfx6}))
	if got, want := describe(apply(r)), []string{"del 192.0.2.1/32 via self"}; !slices.Equal(got, want) {
		t.Fatalf("withdraw plan = %v, want %v", got, want)
	}
	r.set("lb", nil)
	apply(r)
	if len(r.applied) != 0 || len(r.sources) != 0 {
		t.Fatalf("empty source must leave nothing: %+v %+v", r.applied, r.sources)
	}
}

func TestPlanNodesPathIDsAndMakeBeforeBreak(t *testing.T) {
	r := newRIB()
	r.set("lb", mustNormalize(t, Path{Prefix: pfxA, NextHops: []netip.Addr{nh1, nh2}}))
	cs := apply(r)
	if len(cs) != 2 || cs[0].id == cs[1].id {
		t.Fatalf("two next hops need two distinct path IDs: %+v", cs)
	}
	id2 := r.applied[pathKey{pfxA, nh2}].id
	// Move from nh1 to a new nh3: the add comes before the withdrawal, the new path
	// may not reuse nh1's ID while nh1 is still announced, and nh2 keeps its ID.
	nh3 := netip.MustParseAddr("10.0.0.3")
	r.set("lb", mustNormalize(t, Path{Prefix: pfxA, NextHops: []netip.Addr{nh2, nh3}}))
	cs = apply(r)
	if got, want := describe(cs), []string{"add 192.0.2.1/32 via 10.0.0.3", "del 192.0.2.1/32 via 10.0.0.1"}; !slices.Equal(got, want) {
		t.Fatalf("plan = %v, want %v", got, want)
	}
	if cs[0].id == id2 || cs[0].id == cs[1].id {
		t.Fatalf("path ID reuse: %+v", cs)
	}
	if r.applied[pathKey{pfxA, nh2}].id != id2 {
		t.Fatal("unchanged path changed its ID")
	}
}

func TestPlanSourcesIndependent(t *testing.T) {
	r := newRIB()
	r.set("podcidr", mustNormalize(t, Path{Prefix: pfxA, Communities: []string{"65000:2"}}))
	r.set("lb", mustNormalize(t, Path{Prefix: pfxA, Communities: []string{"65000:1"}}, Path{Prefix: pfxB}))
	apply(r)
	// Same prefix and next hop from two sources: one path, attributes of "lb" (sorts first).
	if got := r.applied[pathKey{prefix: pfxA}].attrs.communities; !slices.Equal(got, []uint32{65000<<16 | 1}) {
		t.Fatalf("communities = %v, want lb's", got)
	}
	// lb withdraws: the path stays for podcidr, re-announced with podcidr's attributes.
	r.set("lb", nil)
	cs := apply(r)
	if got, want := describe(cs), []string{"add 192.0.2.1/32 via self", "del 192.0.2.2/32 via self"}; !slices.Equal(got, want) {
		t.Fatalf("plan = %v, want %v", got, want)
	}
	if got := r.applied[pathKey{prefix: pfxA}].attrs.communities; !slices.Equal(got, []uint32{65000<<16 | 2}) {
		t.Fatalf("communities = %v, want podcidr's", got)
	}
	r.set("podcidr", nil)
	if got := describe(apply(r)); !slices.Equal(got, []string{"del 192.0.2.1/32 via self"}) {
		t.Fatalf("plan = %v", got)
	}
}

func TestPlanFailedChangeIsRetried(t *testing.T) {
	r := newRIB()
	r.set("lb", mustNormalize(t, Path{Prefix: pfxA}))
	if cs := r.plan(); len(cs) != 1 {
		t.Fatalf("plan = %v", describe(cs))
	}
	// Not committed (GoBGP refused): the next plan still has it.
	if cs := r.plan(); len(cs) != 1 || cs[0].id != 1 {
		t.Fatalf("retry plan = %+v", cs)
	}
}

func TestNormalize(t *testing.T) {
	lp := uint32(200)
	m, errs := normalize([]Path{
		{Prefix: netip.MustParsePrefix("192.0.2.7/24"), Communities: []string{"65000:2", "no-export", "65000:2"}, LargeCommunities: []string{"1:2:3"}, LocalPref: &lp},
		{Prefix: pfxB, Communities: []string{"70000:1"}},                                      // invalid community
		{Prefix: pfx6, NextHops: []netip.Addr{nh1}},                                           // wrong family
		{Prefix: netip.MustParsePrefix("2001:db8::2/128"), LargeCommunities: []string{"1:2"}}, // invalid large
		{Prefix: netip.Prefix{}},
	}, []uint32{1}, [][3]uint32{{9, 9, 9}}, &scopeTable{})
	if len(errs) != 4 {
		t.Errorf("errors = %v, want 4", errs)
	}
	if len(m) != 1 {
		t.Fatalf("paths = %v, want only the valid one", m)
	}
	a, ok := m[pathKey{prefix: netip.MustParsePrefix("192.0.2.0/24")}]
	if !ok {
		t.Fatalf("prefix not masked: %v", m)
	}
	if !slices.Equal(a.communities, []uint32{1, 65000<<16 | 2, 0xFFFFFF01}) || !slices.Equal(a.large, [][3]uint32{{1, 2, 3}, {9, 9, 9}}) || !a.hasLocalPref || a.localPref != 200 {
		t.Errorf("attrs = %+v", a)
	}
	// IPv4-mapped next hops are unmapped so they compare equal.
	m, _ = normalize([]Path{{Prefix: pfxA, NextHops: []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.1")}}}, nil, nil, &scopeTable{})
	if _, ok := m[pathKey{pfxA, nh1}]; !ok {
		t.Errorf("mapped next hop not unmapped: %v", m)
	}
}

func TestToAPIPath(t *testing.T) {
	for _, c := range []change{
		{key: pathKey{prefix: pfxA}, id: 1},
		{key: pathKey{prefix: pfx6, nextHop: netip.MustParseAddr("2001:db8::99")}, id: 2, attrs: attrs{communities: []uint32{1}, large: [][3]uint32{{1, 2, 3}}, hasLocalPref: true, localPref: 5}},
		{key: pathKey{prefix: pfxB}, id: 3, withdraw: true},
	} {
		p, err := toAPIPath(c)
		if err != nil {
			t.Fatalf("%v: %v", c.key, err)
		}
		if p.RemoteID != c.id || p.Withdrawal != c.withdraw || p.Nlri.String() != c.key.prefix.String() {
			t.Errorf("%v: identifier %d withdraw %v nlri %v", c.key, p.RemoteID, p.Withdrawal, p.Nlri)
		}
		wantAttrs := 2 + len(c.attrs.large) + len(c.attrs.communities)
		if c.attrs.hasLocalPref {
			wantAttrs++
		}
		if len(p.Attrs) != wantAttrs {
			t.Errorf("%v: %d attributes %v, want %d", c.key, len(p.Attrs), p.Attrs, wantAttrs)
		}
	}
}

func TestNextHopPolicy(t *testing.T) {
	a1, a2 := netip.MustParseAddr("127.77.0.1"), netip.MustParseAddr("127.77.0.2")
	l4, l6 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")
	sets, pol := nextHopPolicy([]policyPeer{{alias: a1, local: l4, partner: l6}, {alias: a2, local: l6}, {alias: netip.MustParseAddr("127.77.0.3")}}, nil)
	// Two statements per peer with a local address, then the two loopback rejects.
	if len(sets) != 2 || len(pol.Statements) != 6 {
		t.Fatalf("sets %v, statements %v", sets, pol.Statements)
	}
	if sets[0].List[0] != "127.77.0.1/32" {
		t.Errorf("neighbor set = %v", sets[0])
	}
	s0, s1, s3 := pol.Statements[0], pol.Statements[1], pol.Statements[3]
	if s0.Conditions.NeighborSet.Name != sets[0].Name || s0.Conditions.NextHopInList[0] != "127.0.0.1/32" || s0.Actions.Nexthop.Address != "10.0.0.1" {
		t.Errorf("same-family statement = %v", s0)
	}
	if s1.Actions.Nexthop.Address != "fd00::1" || s1.Conditions.AfiSafiIn[0].Afi != 2 {
		t.Errorf("other-family statement = %v", s1)
	}
	if s3.Actions.Nexthop != nil || s3.Actions.RouteAction != 2 {
		t.Errorf("no partner: want reject, got %v", s3)
	}
}

// A scoped path is tagged with its peer set's scope (one per distinct set, in any
// order); the policy rejects it towards the other peers and strips every tag, ahead
// of the next-hop statements; a path's own reserved large community is refused.
func TestScopes(t *testing.T) {
	r1, r2, r3 := netip.MustParseAddr("10.0.0.254"), netip.MustParseAddr("10.0.1.254"), netip.MustParseAddr("fd00::fe")
	var tbl scopeTable
	m, errs := normalize([]Path{
		{Prefix: pfxA, Peers: []netip.Addr{r2, r1}},
		{Prefix: pfxB, Peers: []netip.Addr{r1, r2, r1}},
		{Prefix: pfx6, Peers: []netip.Addr{}},
		{Prefix: netip.MustParsePrefix("192.0.2.9/32"), LargeCommunities: []string{"4294967295:1:0"}},
	}, nil, nil, &tbl)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "reserved") {
		t.Fatalf("errs = %v, want the reserved large community refused", errs)
	}
	tag := func(k pathKey) [][3]uint32 { return m[k].large }
	if a, b := tag(pathKey{prefix: pfxA}), tag(pathKey{prefix: pfxB}); len(a) != 1 || !slices.Equal(a, b) || a[0] != [3]uint32{scopeTagASN, 1, 0} {
		t.Errorf("same set, same scope: %v %v", a, b)
	}
	if c := tag(pathKey{prefix: pfx6}); len(c) != 1 || c[0][1] != 2 {
		t.Errorf("the empty set (no peer) is a scope of its own: %v", c)
	}
	a1, a2, a3 := netip.MustParseAddr("127.77.0.1"), netip.MustParseAddr("127.77.0.2"), netip.MustParseAddr("127.77.0.3")
	peers := []policyPeer{{addr: r1, alias: a1, local: netip.MustParseAddr("10.0.0.1")}, {addr: r2, alias: a2, local: netip.MustParseAddr("10.0.1.1")},
		{addr: r3, alias: a3, local: netip.MustParseAddr("fd00::1")}}
	sets, pol := nextHopPolicy(peers, tbl.peers)
	members := map[string][]string{}
	for _, d := range sets {
		members[d.Name] = d.List
	}
	var rejects []string
	strip := -1
	firstNH := -1
	for i, st := range pol.Statements {
		c := st.Conditions
		switch {
		case c.LargeCommunitySet != nil && c.NeighborSet != nil && st.Actions.RouteAction == api.RouteAction_ROUTE_ACTION_REJECT:
			if c.NeighborSet.Type != api.MatchSet_TYPE_INVERT {
				t.Errorf("statement %d rejects only named sessions: %v", i, c)
			}
			rejects = append(rejects, c.LargeCommunitySet.Name+" unless "+strings.Join(members[c.NeighborSet.Name], ","))
		case st.Actions.LargeCommunity != nil:
			strip = i
		case st.Actions.Nexthop != nil && firstNH < 0:
			firstNH = i
		}
	}
	want := []string{
		scopeSetName(1) + " unless 127.77.0.1/32,127.77.0.2/32",
		scopeSetName(2) + " unless " + noAlias,
	}
	if !slices.Equal(rejects, want) {
		t.Errorf("rejects %v, want %v", rejects, want)
	}
	if strip < len(rejects) || firstNH < strip {
		t.Errorf("statement order: rejects 0-%d, strip %d, first next hop %d; want rejects, strip, next hops", len(rejects)-1, strip, firstNH)
	}
}

func TestRIBUpdateTouchesOnlyItsPrefixes(t *testing.T) {
	r := newRIB()
	r.set("lb", mustNormalize(t, Path{Prefix: pfxA}, Path{Prefix: pfxB, NextHops: []netip.Addr{nh1, nh2}}))
	apply(r)
	// A changes its attributes; B is not named, so it stays as it is.
	r.update("lb", []netip.Prefix{pfxA}, mustNormalize(t, Path{Prefix: pfxA, Communities: []string{"65000:1"}}))
	cs := apply(r)
	if got, want := describe(cs), []string{"add 192.0.2.1/32 via self"}; !slices.Equal(got, want) || cs[0].id != 1 {
		t.Fatalf("plan = %v (%+v), want %v with the same path ID", got, cs, want)
	}
	// B loses one next hop and A is withdrawn, in one update.
	r.update("lb", []netip.Prefix{pfxA, pfxB}, mustNormalize(t, Path{Prefix: pfxB, NextHops: []netip.Addr{nh2}}))
	if got, want := describe(apply(r)), []string{"del 192.0.2.1/32 via self", "del 192.0.2.2/32 via 10.0.0.1"}; !slices.Equal(got, want) {
		t.Fatalf("plan = %v, want %v", got, want)
	}
	// A path outside the named prefixes is ignored.
	r.update("lb", []netip.Prefix{pfx6}, mustNormalize(t, Path{Prefix: pfx6}, Path{Prefix: pfxA}))
	if got, want := describe(apply(r)), []string{"add 2001:db8::1/128 via self"}; !slices.Equal(got, want) {
		t.Fatalf("plan = %v, want %v", got, want)
	}
	// Emptying the source by updates drops it.
	r.update("lb", []netip.Prefix{pfxB, pfx6}, nil)
	apply(r)
	if len(r.applied) != 0 || len(r.sources) != 0 || len(r.names) != 0 || len(r.dirty) != 0 {
		t.Fatalf("left: applied %v sources %v names %v dirty %v", r.applied, r.sources, r.names, r.dirty)
	}
}

func TestRIBResetPlansEverythingAgain(t *testing.T) {
	r := newRIB()
	r.set("lb", mustNormalize(t, Path{Prefix: pfxA}))
	r.set("podcidr", mustNormalize(t, Path{Prefix: pfxB}))
	apply(r)
	r.reset()
	if got, want := describe(apply(r)), []string{"add 192.0.2.1/32 via self", "add 192.0.2.2/32 via self"}; !slices.Equal(got, want) {
		t.Fatalf("plan after reset = %v, want %v", got, want)
	}
	if cs := apply(r); len(cs) != 0 {
		t.Fatalf("second plan = %v", describe(cs))
	}
}

// TestRIBIncrementalMatchesFull drives random sets and updates of two sources and
// checks after each plan that what is applied is exactly the union the sources
// want, as a full comparison would make it.
func TestRIBIncrementalMatchesFull(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	prefixes := make([]netip.Prefix, 12)
	for i := range prefixes {
		prefixes[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}), 32)
	}
	hops := []netip.Addr{nh1, nh2, netip.MustParseAddr("10.0.0.3")}
	randomPaths := func(ps []netip.Prefix) []Path {
		var out []Path
		for _, p := range ps {
			if rnd.IntN(3) == 0 {
				continue
			}
			path := Path{Prefix: p}
			for _, h := range hops {
				if rnd.IntN(2) == 0 {
					path.NextHops = append(path.NextHops, h)
				}
			}
			if rnd.IntN(2) == 0 {
				path.Communities = []string{"65000:" + strconv.Itoa(rnd.IntN(3))}
			}
			out = append(out, path)
		}
		return out
	}
	// ref holds each source's desired paths per prefix, as full state.
	ref := map[string]map[netip.Prefix][]Path{"lb": {}, "podcidr": {}}
	r := newRIB()
	for step := range 500 {
		src := []string{"lb", "podcidr"}[rnd.IntN(2)]
		if rnd.IntN(4) == 0 {
			ps := randomPaths(prefixes)
			ref[src] = map[netip.Prefix][]Path{}
			for _, p := range ps {
				ref[src][p.Prefix] = append(ref[src][p.Prefix], p)
			}
			r.set(src, mustNormalize(t, ps...))
		} else {
			var named []netip.Prefix
			for _, p := range prefixes {
				if rnd.IntN(4) == 0 {
					named = append(named, p)
				}
			}
			ps := randomPaths(named)
			for _, p := range named {
				delete(ref[src], p)
			}
			for _, p := range ps {
				ref[src][p.Prefix] = append(ref[src][p.Prefix], p)
			}
			r.update(src, named, mustNormalize(t, ps...))
		}
		if rnd.IntN(10) == 0 {
			r.reset()
		}
		if rnd.IntN(5) == 0 {
			r.plan() // a plan GoBGP refused: nothing committed
		}
		apply(r)
		full := newRIB()
		for _, src := range []string{"lb", "podcidr"} {
			var ps []Path
			for _, p := range ref[src] {
				ps = append(ps, p...)
			}
			full.set(src, mustNormalize(t, ps...))
		}
		want := full.effective()
		if len(want) != len(r.applied) {
			t.Fatalf("step %d: %d paths applied, want %d", step, len(r.applied), len(want))
		}
		for k, a := range want {
			if ap, ok := r.applied[k]; !ok || !ap.attrs.equal(a) {
				t.Fatalf("step %d: %v applied %+v (%v), want %+v", step, k, ap, ok, a)
			}
		}
		if cs := r.plan(); len(cs) != 0 {
			t.Fatalf("step %d: a plan right after applying changes %v", step, describe(cs))
		}
	}
}

// A path whose peer scope changes is re-announced under a new path identifier and
// its old version withdrawn in the plan after the one that committed its successor
// (GoBGP would not withdraw an ADD-PATH path from a peer its new version is filtered
// from); a plain attribute change keeps the identifier. A failed add keeps the old
// version; a failed withdrawal is planned again, also across a second scope change.
func TestRIBScopeChangeReplacesPath(t *testing.T) {
	tbl := &scopeTable{}
	norm := func(p Path) map[pathKey]attrs {
		m, errs := normalize([]Path{p}, nil, nil, tbl)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return m
	}
	ops := func(cs []change) []string {
		var out []string
		for _, c := range cs {
			op := "add"
			if c.withdraw {
				op = "del"
			}
			out = append(out, fmt.Sprintf("%s %d/%d", op, c.id, scopeOf(c.attrs)))
		}
		return out
	}
	r1, r2 := netip.MustParseAddr("10.0.0.254"), netip.MustParseAddr("10.0.1.254")
	r := newRIB()
	r.set("lb", norm(Path{Prefix: pfxA, Peers: []netip.Addr{r1}}))
	apply(r)
	r.set("lb", norm(Path{Prefix: pfxA, Peers: []netip.Addr{r2}}))
	if got := ops(apply(r)); !slices.Equal(got, []string{"add 2/2"}) {
		t.Fatalf("scope change: %v, want the new version under id 2 first", got)
	}
	if got := ops(apply(r)); !slices.Equal(got, []string{"del 1/1"}) {
		t.Fatalf("next plan: %v, want the old version withdrawn", got)
	}
	if ap := r.applied[pathKey{prefix: pfxA}]; ap.id != 2 || !slices.Equal(r.ids[pfxA], []uint32{2}) || r.replacing() {
		t.Fatalf("applied %+v, ids %v, replaced %v", ap, r.ids[pfxA], r.replaced)
	}
	r.set("lb", norm(Path{Prefix: pfxA, Peers: []netip.Addr{r2}, Communities: []string{"65000:1"}}))
	if got := ops(apply(r)); !slices.Equal(got, []string{"add 2/2"}) {
		t.Fatalf("same scope, new community: %v, want an update of id 2", got)
	}
	// The add fails: nothing is withdrawn, the old version stays until it works.
	r.set("lb", norm(Path{Prefix: pfxA}))
	if got := ops(r.plan()); !slices.Equal(got, []string{"add 1/0"}) {
		t.Fatalf("to every peer: %v", got)
	}
	if got := ops(apply(r)); !slices.Equal(got, []string{"add 1/0"}) {
		t.Fatalf("after a failed add: %v, want it planned again", got)
	}
	// The withdrawal of id 2 fails, and the scope changes again meanwhile.
	if got := ops(r.plan()); !slices.Equal(got, []string{"del 2/2"}) {
		t.Fatalf("withdrawal: %v", got)
	}
	r.set("lb", norm(Path{Prefix: pfxA, Peers: []netip.Addr{r1}}))
	if got := ops(apply(r)); !slices.Equal(got, []string{"add 3/1", "del 2/2"}) {
		t.Fatalf("second scope change with a withdrawal pending: %v, want a third identifier", got)
	}
	if got := ops(apply(r)); !slices.Equal(got, []string{"del 1/0"}) || r.replacing() || !slices.Equal(r.ids[pfxA], []uint32{3}) {
		t.Fatalf("then: %v, replaced %v, ids %v", got, r.replaced, r.ids[pfxA])
	}
}
