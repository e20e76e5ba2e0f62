package bgp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"

	api "github.com/osrg/gobgp/v3/api"
)

// Next hop "self" across address families.
//
// GoBGP fills the unspecified next hop of a locally originated path with the
// session's local address. For an IPv6 prefix on an IPv4 session that is an IPv4
// address (sent as the IPv4-mapped ::ffff:a.b.c.d in MP_REACH_NLRI), which BIRD
// rejects ("Invalid NEXT_HOP attribute - mismatched address family") and treats
// as a withdrawal; the same holds for IPv4 prefixes on an IPv6 session (RFC 8950
// extended next hop is not negotiated). The speaker therefore installs one global
// export policy, policyName, that for each such session local address L:
//
//   - IPv6 path whose next hop is L (IPv4): next hop := the IPv6 "self" address;
//   - IPv4 path whose next hop is L (IPv6): next hop := the IPv4 "self" address;
//
// and rejects (does not send) self paths of the other family when no such address
// is known, instead of sending a next hop the router must refuse. The other
// family's self address is Config.IPv6NextHop / IPv4NextHop when set, else the one
// global address of that family on the interface holding L (none or several: not
// known). Paths with explicit next hops (nodes mode) always have a next hop of
// their own family and pass unchanged.
const policyName = "baremetal-ccm-nexthop-self"

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

// nextHopPolicy builds the export policy for the given session local addresses.
func nextHopPolicy(locals map[netip.Addr]netip.Addr) *api.Policy {
	v4 := []*api.Family{{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}}
	v6 := []*api.Family{{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}}
	keys := make([]netip.Addr, 0, len(locals))
	for l := range locals {
		keys = append(keys, l)
	}
	slices.SortFunc(keys, netip.Addr.Compare)
	var st []*api.Statement
	add := func(fam []*api.Family, nh []string, act *api.Actions) {
		st = append(st, &api.Statement{
			Name:       fmt.Sprintf("%s-%d", policyName, len(st)),
			Conditions: &api.Conditions{AfiSafiIn: fam, NextHopInList: nh},
			Actions:    act,
		})
	}
	for _, l := range keys {
		p := locals[l]
		if !p.IsValid() {
			continue
		}
		fam := v6
		if l.Is6() {
			fam = v4
		}
		add(fam, []string{netip.PrefixFrom(l, l.BitLen()).String()}, &api.Actions{RouteAction: api.RouteAction_ACCEPT, Nexthop: &api.NexthopAction{Address: p.String()}})
	}
	// IPv6 paths with an IPv4 next hop left: self paths without an IPv6 address.
	add(v6, []string{"0.0.0.0/0"}, &api.Actions{RouteAction: api.RouteAction_REJECT})
	// IPv4 paths: an IPv4 next hop is fine; anything else is an untranslated self.
	add(v4, []string{"0.0.0.0/0"}, &api.Actions{RouteAction: api.RouteAction_ACCEPT})
	add(v4, nil, &api.Actions{RouteAction: api.RouteAction_REJECT})
	return &api.Policy{Name: policyName, Statements: st}
}

// syncNextHopPolicyLocked recomputes the local addresses of all sessions and their
// other-family partners; when the result changed it installs the policy and
// soft-resets the established sessions outbound so they get the corrected paths.
func (s *Speaker) syncNextHopPolicyLocked(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	locals := map[netip.Addr]netip.Addr{}
	for a, e := range s.active {
		l := s.sessionLocal[a]
		if src, err := netip.ParseAddr(e.cfg.SourceAddress); err == nil {
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
		locals[l] = p
	}
	if s.policyInstalled && mapsEqual(locals, s.nhSelf) {
		return nil
	}
	pol := nextHopPolicy(locals)
	if !s.policyInstalled {
		// SetPolicies ignores assignments: add the policy, then assign it.
		if err := s.srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: pol}); err != nil {
			return fmt.Errorf("adding next-hop policy: %w", err)
		}
		if err := s.srv.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: api.PolicyDirection_EXPORT,
			Policies: []*api.Policy{{Name: policyName}}, DefaultAction: api.RouteAction_ACCEPT,
		}}); err != nil {
			return fmt.Errorf("assigning next-hop policy: %w", err)
		}
	} else if err := s.srv.SetPolicies(ctx, &api.SetPoliciesRequest{Policies: []*api.Policy{pol}}); err != nil {
		// SetPolicies replaces the definitions and keeps the assignment by name.
		return fmt.Errorf("updating next-hop policy: %w", err)
	}
	s.policyInstalled = true
	prev := s.nhSelf
	s.nhSelf = locals
	for l, p := range locals {
		if q, ok := prev[l]; ok && q == p {
			continue // unchanged: logged before
		}
		if p.IsValid() {
			s.log.V(2).Info("Next hop self of the other address family", "localAddress", l, "nextHop", p)
		} else {
			s.log.Info("No address of the other family for next hop self on sessions from this local address: such paths are not sent there (set a session of that family, or the speaker's IPv4NextHop/IPv6NextHop)", "localAddress", l)
		}
	}
	for a := range s.active {
		if s.established[a] {
			if err := s.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: a.String(), Soft: true, Direction: api.ResetPeerRequest_OUT}); err != nil {
				s.log.Error(err, "Soft reset after next-hop policy change failed", "peer", a)
			}
		}
	}
	return nil
}

func mapsEqual(a, b map[netip.Addr]netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
