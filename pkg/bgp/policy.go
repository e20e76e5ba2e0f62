package bgp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	api "github.com/osrg/gobgp/v4/api"
)

// Next hop "self".
//
// GoBGP sees every session on loopback (package wire relays it), so the next hop
// it fills in for a path of ours without one is its own end of that loopback
// connection, innerHost, for every peer and both families. The speaker installs
// one global export policy, policyName, that gives each peer its real next hop
// "self": for the peer known by alias A whose router connection's local address
// is L,
//
//   - a path of L's family with next hop innerHost: next hop := L;
//   - a path of the other family with next hop innerHost: next hop := the "self"
//     address of that family (Config.IPv6NextHop / IPv4NextHop when set, else the
//     one global address of that family on the interface holding L), or the path
//     is not sent there if there is no such address (an IPv4 next hop for an IPv6
//     prefix is refused by routers: BIRD says "Invalid NEXT_HOP attribute -
//     mismatched address family"; RFC 8950 extended next hop is not negotiated);
//
// and, last, no path with a loopback next hop is ever sent (a peer whose local
// address is not known yet). Paths with explicit next hops (nodes mode) always
// have a next hop of their own family and pass unchanged.
//
// A peer's statements are installed when its relay connects to the router, before
// GoBGP is given the session, so its first UPDATEs already carry the right next
// hops; other peers' statements do not change then.
const policyName = "baremetal-ccm-nexthop-self"

// importPolicyName is the global import policy: only the speaker's own paths are
// taken into the RIB. The relay passes GoBGP no route of a router's (End-of-RIB
// markers only); should one ever get through, it is neither kept nor passed on
// to other routers.
const importPolicyName = "baremetal-ccm-local-only"

func importPolicy() *api.Policy {
	return &api.Policy{Name: importPolicyName, Statements: []*api.Statement{{
		Name:       importPolicyName + "-0",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
	}}}
}

// Per-peer scopes.
//
// A path with Path.Peers goes only to those peers. The speaker gives every distinct
// peer set a scope, and the path an internal large community, its tag
// scopeTagASN:<scope>:0; the export policy, ahead of the next-hop statements,
// rejects a tagged path towards every peer its scope does not name, and strips the
// tags from what it sends: no tag ever reaches a router. The rejects deny by
// default (one statement per scope: "not one of the scope's sessions"), so a
// session the policy does not know yet gets no scoped path. A path's own large
// communities of that administrator are refused (normalize). Scopes are installed
// in the policy before the first path that carries them is handed to GoBGP, so a
// scoped path is never exported unfiltered. Scope numbers are never reused by a
// speaker (their count is the number of distinct peer sets it was ever given).

// scopeTagASN is the global administrator of the scope tags: 4294967295, the last
// ASN, reserved (RFC 7300) and never a real one.
const scopeTagASN uint32 = 4294967295

// scopeTable numbers peer sets.
type scopeTable struct {
	byKey map[string]uint32
	// peers[i] is scope i+1's set, sorted.
	peers [][]netip.Addr
}

// id returns the scope of a peer set (any order, duplicates, IPv4-mapped forms),
// numbering a new one.
func (t *scopeTable) id(peers []netip.Addr) uint32 {
	set := make([]netip.Addr, 0, len(peers))
	for _, a := range peers {
		set = append(set, a.Unmap())
	}
	slices.SortFunc(set, netip.Addr.Compare)
	set = slices.Compact(set)
	var b strings.Builder
	for _, a := range set {
		b.WriteString(a.String())
		b.WriteByte(',')
	}
	key := b.String()
	if id, ok := t.byKey[key]; ok {
		return id
	}
	if t.byKey == nil {
		t.byKey = map[string]uint32{}
	}
	t.peers = append(t.peers, set)
	id := uint32(len(t.peers))
	t.byKey[key] = id
	return id
}

func scopeSetName(id uint32) string { return fmt.Sprintf("baremetal-ccm-scope-%d", id) }

// noAlias is a loopback address allocAliasLocked never hands out (it stays below
// 127.77.255.255): the member of a scope's peer set when none of its peers is up.
const noAlias = "127.77.255.255/32"

const allScopesSetName = "baremetal-ccm-scopes"

// syncScopesLocked installs the policy when normalize numbered new scopes, before
// any path reaches GoBGP, and reports whether every scope is in. A failure is
// logged; then no path is applied (reconcileLocked) until a retry installs them.
func (s *Speaker) syncScopesLocked() bool {
	if s.srv == nil || len(s.scopes.peers) == s.nhScopes {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.syncNextHopPolicyLocked(ctx); err != nil {
		s.log.Error(err, "Installing the per-peer scopes failed; no path is applied until they are")
		return false
	}
	return true
}

// policyPeer is one peer's input to the policy.
type policyPeer struct {
	// addr is the router's address (what Path.Peers names).
	addr         netip.Addr
	alias, local netip.Addr
	// partner is the "self" address of the family local is not (zero: unknown).
	partner netip.Addr
}

// interfacePartner returns the unique global unicast address of the other family
// on the interface that holds local, or the zero Addr.
func interfacePartner(local netip.Addr) netip.Addr {
	ifs, err := net.Interfaces()
	if err != nil {
		return netip.Addr{}
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		var has bool
		var other []netip.Addr
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if ip == local {
				has = true
			} else if ip.Is4() != local.Is4() && ip.IsGlobalUnicast() {
				other = append(other, ip)
			}
		}
		if has {
			if len(other) == 1 {
				return other[0]
			}
			return netip.Addr{}
		}
	}
	return netip.Addr{}
}

func neighborSetName(alias netip.Addr) string { return "baremetal-ccm-peer-" + alias.String() }

// nextHopPolicy builds the export policy and the sets it uses: the scopes' rejects
// and tag removal, then the next hops.
func nextHopPolicy(peers []policyPeer, scopes [][]netip.Addr) ([]*api.DefinedSet, *api.Policy) {
	v4 := []*api.Family{{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}}
	v6 := []*api.Family{{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}}
	inner := []string{netip.PrefixFrom(innerHost, 32).String()}
	var sets []*api.DefinedSet
	var st []*api.Statement
	add := func(c *api.Conditions, act *api.Actions) {
		st = append(st, &api.Statement{Name: fmt.Sprintf("%s-%d", policyName, len(st)), Conditions: c, Actions: act})
	}
	setNH := func(a netip.Addr) *api.Actions {
		return &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT, Nexthop: &api.NexthopAction{Address: a.String()}}
	}
	reject := &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_REJECT}
	for _, p := range peers {
		if !p.local.IsValid() {
			continue
		}
		name := neighborSetName(p.alias)
		sets = append(sets, &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: name, List: []string{netip.PrefixFrom(p.alias, 32).String()}})
	}
	if len(scopes) > 0 {
		// Deny by default: a tagged path is rejected towards every session but
		// those of its scope's peers, including a session the policy does not know
		// yet. One statement per scope.
		for i, set := range scopes {
			id := uint32(i + 1)
			sets = append(sets, &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_LARGE_COMMUNITY, Name: scopeSetName(id), List: []string{fmt.Sprintf("^%d:%d:0$", scopeTagASN, id)}})
			var members []string
			for _, p := range peers {
				if p.local.IsValid() && slices.Contains(set, p.addr) {
					members = append(members, netip.PrefixFrom(p.alias, 32).String())
				}
			}
			if len(members) == 0 {
				members = []string{noAlias} // a set may not be empty
			}
			sets = append(sets, &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: scopeSetName(id) + "-peers", List: members})
			add(&api.Conditions{NeighborSet: &api.MatchSet{Type: api.MatchSet_TYPE_INVERT, Name: scopeSetName(id) + "-peers"},
				LargeCommunitySet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: scopeSetName(id)}}, reject)
		}
		tags := fmt.Sprintf("^%d:[0-9]+:0$", scopeTagASN)
		sets = append(sets, &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_LARGE_COMMUNITY, Name: allScopesSetName, List: []string{tags}})
		add(&api.Conditions{LargeCommunitySet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: allScopesSetName}},
			&api.Actions{LargeCommunity: &api.CommunityAction{Type: api.CommunityAction_TYPE_REMOVE, Communities: []string{tags}}})
	}
	for _, p := range peers {
		if !p.local.IsValid() {
			continue
		}
		nbr := &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: neighborSetName(p.alias)}
		same, other := v4, v6
		if p.local.Is6() {
			same, other = v6, v4
		}
		add(&api.Conditions{NeighborSet: nbr, AfiSafiIn: same, NextHopInList: inner}, setNH(p.local))
		if p.partner.IsValid() {
			add(&api.Conditions{NeighborSet: nbr, AfiSafiIn: other, NextHopInList: inner}, setNH(p.partner))
		} else {
			add(&api.Conditions{NeighborSet: nbr, AfiSafiIn: other, NextHopInList: inner}, reject)
		}
	}
	// Never a loopback next hop.
	add(&api.Conditions{AfiSafiIn: v4, NextHopInList: []string{"127.0.0.0/8"}}, reject)
	add(&api.Conditions{AfiSafiIn: v6, NextHopInList: []string{"127.0.0.0/8"}}, reject)
	return sets, &api.Policy{Name: policyName, Statements: st}
}

// syncNextHopPolicyLocked computes every active peer's input and installs the
// policy when it changed.
func (s *Speaker) syncNextHopPolicyLocked(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	var peers []policyPeer
	for _, ap := range s.active {
		l := ap.local
		if src, err := netip.ParseAddr(ap.entry.cfg.SourceAddress); err == nil {
			l = src.Unmap()
		}
		if !l.IsValid() {
			continue
		}
		p := s.cfg.IPv6NextHop
		if l.Is6() {
			p = s.cfg.IPv4NextHop
		}
		if !p.IsValid() {
			p = interfacePartner(l)
		}
		peers = append(peers, policyPeer{addr: ap.entry.addr.Unmap(), alias: ap.alias, local: l, partner: p})
	}
	slices.SortFunc(peers, func(a, b policyPeer) int { return a.alias.Compare(b.alias) })
	if s.policyInstalled && slices.Equal(peers, s.nhSelf) && s.nhScopes == len(s.scopes.peers) {
		return nil
	}
	sets, pol := nextHopPolicy(peers, s.scopes.peers)
	if err := s.srv.SetPolicies(ctx, &api.SetPoliciesRequest{DefinedSets: sets, Policies: []*api.Policy{pol, importPolicy()}}); err != nil {
		return fmt.Errorf("installing the next-hop policy: %w", err)
	}
	if !s.policyInstalled {
		// SetPolicies keeps assignments but makes none: assign the policies once.
		for _, a := range []*api.PolicyAssignment{
			{Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_EXPORT, Policies: []*api.Policy{{Name: policyName}}, DefaultAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
			{Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_IMPORT, Policies: []*api.Policy{{Name: importPolicyName}}, DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT},
		} {
			if err := s.srv.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: a}); err != nil {
				return fmt.Errorf("assigning the %s policy: %w", a.Direction, err)
			}
		}
		s.policyInstalled = true
	}
	prev := s.nhSelf
	s.nhSelf, s.nhScopes = peers, len(s.scopes.peers)
	for _, p := range peers {
		if slices.Contains(prev, p) {
			continue // unchanged: logged before
		}
		if p.partner.IsValid() {
			s.log.V(2).Info("Next hop self of the other address family", "localAddress", p.local, "nextHop", p.partner)
		} else {
			s.log.Info("No address of the other family for next hop self on sessions from this local address: such paths are not sent there (set a session of that family, or the speaker's IPv4NextHop/IPv6NextHop)", "localAddress", p.local)
		}
	}
	return nil
}
