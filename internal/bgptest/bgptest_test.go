package bgptest

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"
)

var (
	p4 = netip.MustParsePrefix("198.51.100.0/24")
	p6 = netip.MustParsePrefix("2001:db8:1::/48")
)

func TestHeaderAndMessage(t *testing.T) {
	ka := Keepalive()
	if len(ka) != HeaderLen || !bytes.Equal(ka[:16], Marker[:]) || ka[16] != 0 || ka[17] != 19 || ka[18] != TypeKeepalive {
		t.Fatalf("KEEPALIVE = %x", ka)
	}
	m, err := ParseMessage(Notification(6, 2, []byte("bye")))
	if err != nil || m.Type != TypeNotification {
		t.Fatalf("ParseMessage(NOTIFICATION) = %+v, %v", m, err)
	}
	n, err := ParseNotification(m.Body)
	if err != nil || n.Code != 6 || n.Subcode != 2 || string(n.Data) != "bye" {
		t.Fatalf("ParseNotification = %+v, %v", n, err)
	}
	if rr := RouteRefresh(IPv6Unicast); !bytes.Equal(rr[HeaderLen:], []byte{0, 2, 0, 1}) {
		t.Fatalf("ROUTE-REFRESH body = %x", rr[HeaderLen:])
	}
}

func TestShutdownCommunication(t *testing.T) {
	if got := ShutdownCommunication("node drained"); !bytes.Equal(got, append([]byte{12}, "node drained"...)) {
		t.Errorf("ShutdownCommunication = %x", got)
	}
	if got := ShutdownCommunication(""); !bytes.Equal(got, []byte{0}) {
		t.Errorf("empty communication = %x", got)
	}
	long := string(bytes.Repeat([]byte{'x'}, 300)) // RFC 9003 allows 255 octets at most
	if got := ShutdownCommunication(long); got[0] != byte(300%256) || len(got) != 301 {
		t.Errorf("over-long communication: length octet %d, %d octets", got[0], len(got))
	}
}

func TestMalformedHeaders(t *testing.T) {
	body := []byte{1, 2, 3}
	cases := map[string]func(h *Header){
		"marker":      func(h *Header) { h.Marker[3] = 0 },
		"short":       func(h *Header) { h.Length = 18 },
		"long":        func(h *Header) { h.Length = 4097 },
		"off by one":  func(h *Header) { h.Length++ },
		"zero length": func(h *Header) { h.Length = 0 },
	}
	for name, mutate := range cases {
		h := NewHeader(TypeUpdate, len(body))
		mutate(&h)
		raw := h.Build(body)
		if len(raw) != HeaderLen+len(body) {
			t.Errorf("%s: built %d octets, want %d (the body is never changed)", name, len(raw), HeaderLen+len(body))
		}
		if _, err := ParseMessage(raw); !errors.Is(err, ErrBadHeader) {
			t.Errorf("%s: ParseMessage(%x) = %v, want ErrBadHeader", name, raw, err)
		}
	}
	h := NewHeader(TypeUpdate, 0)
	h.Type = 0xff
	if m, err := ParseMessage(h.Build(nil)); err != nil || m.Type != 0xff {
		t.Errorf("unknown type: %+v, %v (a type is not the framing's business)", m, err)
	}
}

func TestAttrLengths(t *testing.T) {
	if a := Attr(FlagOptional, 99, make([]byte, 255)); a[0] != FlagOptional || a[2] != 255 || len(a) != 258 {
		t.Errorf("255-octet attribute header %x", a[:3])
	}
	a := Attr(FlagOptional, 99, make([]byte, 256))
	if a[0] != FlagOptional|FlagExtLength || a[2] != 1 || a[3] != 0 || len(a) != 260 {
		t.Errorf("256-octet attribute header %x", a[:4])
	}
	if a := AttrWithLength(FlagTransitive, AttrNextHop, 4, []byte{1, 2}); !bytes.Equal(a, []byte{0x40, 3, 4, 1, 2}) {
		t.Errorf("AttrWithLength = %x", a)
	}
	if a := AttrWithLength(FlagExtLength, 1, 0x1234, nil); !bytes.Equal(a, []byte{0x10, 1, 0x12, 0x34}) {
		t.Errorf("extended AttrWithLength = %x", a)
	}
}

func TestUpdateRoundTrip(t *testing.T) {
	nh6 := []netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fe80::1")}
	withdrawn := Prefix(netip.MustParsePrefix("203.0.113.0/25"), netip.MustParsePrefix("0.0.0.0/0"))
	msg := Update(withdrawn, [][]byte{
		Origin(OriginIGP),
		ASPath(true, Seq(4200000001, 65001), Segment{Type: ASSet, ASNs: []uint32{1, 2}}),
		NextHop(netip.MustParseAddr("192.0.2.1")),
		Communities(65000<<16|1, 0xffffff01),
		MPReach(IPv6Unicast, nh6, Prefix(p6, netip.MustParsePrefix("::/0"))),
		MPUnreach(IPv6Unicast, Prefix(netip.MustParsePrefix("2001:db8:2::/64"))),
	}, Prefix(p4, netip.MustParsePrefix("10.1.2.3/32")))
	m, err := ParseMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	u, err := DecodeUpdate(m.Body, DecodeOptions{FourOctetAS: true})
	if err != nil {
		t.Fatal(err)
	}
	if u.Origin != 0 || len(u.Attrs) != 6 {
		t.Errorf("origin %d, %d attributes", u.Origin, len(u.Attrs))
	}
	wantPath := []Segment{Seq(4200000001, 65001), {Type: ASSet, ASNs: []uint32{1, 2}}}
	if len(u.ASPath) != 2 || !slices.Equal(u.ASPath[0].ASNs, wantPath[0].ASNs) || u.ASPath[1].Type != ASSet {
		t.Errorf("AS_PATH %+v", u.ASPath)
	}
	if !slices.Equal(u.Communities, []uint32{65000<<16 | 1, 0xffffff01}) {
		t.Errorf("communities %v", u.Communities)
	}
	if !slices.Equal(u.MPNextHops, nh6) {
		t.Errorf("MP next hops %v", u.MPNextHops)
	}
	if r, ok := u.Announces(p4); !ok || r.NextHop != netip.MustParseAddr("192.0.2.1") || r.Family != IPv4Unicast {
		t.Errorf("IPv4 announcement %+v %v", r, ok)
	}
	if r, ok := u.Announces(p6); !ok || r.NextHop != nh6[0] || r.Family != IPv6Unicast {
		t.Errorf("IPv6 announcement %+v %v", r, ok)
	}
	if !u.Withdraws(netip.MustParsePrefix("203.0.113.0/25")) || !u.Withdraws(netip.MustParsePrefix("0.0.0.0/0")) ||
		!u.Withdraws(netip.MustParsePrefix("2001:db8:2::/64")) || len(u.Withdrawn) != 3 {
		t.Errorf("withdrawn %v", u.Withdrawn)
	}
	if len(u.Announced) != 4 {
		t.Errorf("announced %v", u.Announced)
	}
	if _, ok := u.EndOfRIB(); ok {
		t.Error("an UPDATE with routes is no End-of-RIB")
	}
}

func TestTwoOctetASPath(t *testing.T) {
	body := UpdateBody(nil, [][]byte{ASPath(false, Seq(ASTrans, 65001))}, nil)
	u, err := DecodeUpdate(body, DecodeOptions{})
	if err != nil || len(u.ASPath) != 1 || !slices.Equal(u.ASPath[0].ASNs, []uint32{ASTrans, 65001}) {
		t.Fatalf("%+v, %v", u, err)
	}
	if _, err := DecodeUpdate(body, DecodeOptions{FourOctetAS: true}); err == nil {
		t.Error("a 2-octet AS_PATH of 2 ASNs read as 4-octet should not fit")
	}
}

func TestAddPathDecoding(t *testing.T) {
	nlri := append(PathPrefix(7, p4), PathPrefix(0xfffffffe, netip.MustParsePrefix("10.0.0.0/8"))...)
	w6 := append(PathPrefix(3, p6), PathPrefix(4, p6)...)
	body := UpdateBody(PathPrefix(9, netip.MustParsePrefix("192.0.2.0/24")), [][]byte{
		Origin(OriginIGP), ASPath(true), NextHop(netip.MustParseAddr("192.0.2.1")),
		MPUnreach(IPv6Unicast, w6),
	}, nlri)
	opt := DecodeOptions{PathID: map[Family]bool{IPv4Unicast: true, IPv6Unicast: true}}
	u, err := DecodeUpdate(body, opt)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(rs []Route) (out []uint32) {
		for _, r := range rs {
			out = append(out, r.PathID)
		}
		return out
	}
	if got := ids(u.Announced); !slices.Equal(got, []uint32{7, 0xfffffffe}) {
		t.Errorf("announced path IDs %v", got)
	}
	if got := ids(u.Withdrawn); !slices.Equal(got, []uint32{9, 3, 4}) {
		t.Errorf("withdrawn path IDs %v", got)
	}
	// Without ADD-PATH the same octets do not decode as prefixes.
	if _, err := DecodeUpdate(body, DecodeOptions{}); err == nil {
		t.Error("ADD-PATH NLRI decoded without path IDs")
	}
}

func TestEndOfRIB(t *testing.T) {
	for _, f := range []Family{IPv4Unicast, IPv6Unicast} {
		m, err := ParseMessage(EndOfRIB(f))
		if err != nil {
			t.Fatal(err)
		}
		u, err := DecodeUpdate(m.Body, DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := u.EndOfRIB(); !ok || got != f {
			t.Errorf("EndOfRIB(%v) decodes as %v %v", f, got, ok)
		}
	}
	u, _ := DecodeUpdate(UpdateBody(nil, [][]byte{MPUnreach(IPv6Unicast, Prefix(p6))}, nil), DecodeOptions{})
	if _, ok := u.EndOfRIB(); ok {
		t.Error("a withdrawal is no End-of-RIB")
	}
}

func TestDecodeUpdateRejects(t *testing.T) {
	good := UpdateBody(nil, [][]byte{Origin(0)}, Prefix(p4))
	for name, body := range map[string][]byte{
		"empty":                   nil,
		"withdrawn overruns":      {0, 9, 0, 0},
		"attributes overrun":      {0, 0, 0, 9, 0x40, 1, 1, 0},
		"attribute overruns":      UpdateBody(nil, [][]byte{AttrWithLength(FlagTransitive, AttrOrigin, 5, []byte{0})}, nil),
		"prefix too long":         append(good[:len(good)-4:len(good)-4], 33, 1, 2, 3, 4, 5),
		"truncated prefix":        good[:len(good)-1],
		"bad next hop":            UpdateBody(nil, [][]byte{Attr(FlagTransitive, AttrNextHop, []byte{1, 2})}, nil),
		"unsupported MP family":   UpdateBody(nil, [][]byte{MPUnreach(Family{AFI: 25, SAFI: 70}, []byte{1, 2})}, nil),
		"odd communities length":  UpdateBody(nil, [][]byte{Attr(FlagOptional|FlagTransitive, AttrCommunities, []byte{1, 2, 3})}, nil),
		"truncated AS_PATH":       UpdateBody(nil, [][]byte{Attr(FlagTransitive, AttrASPath, []byte{2, 3, 0, 1})}, nil),
		"truncated attr header":   {0, 0, 0, 2, 0x40, 1},
		"truncated ext attr hdr":  {0, 0, 0, 3, 0x50, 1, 0},
		"MP_REACH next hop short": UpdateBody(nil, [][]byte{Attr(FlagOptional, AttrMPReach, []byte{0, 2, 1, 16, 1})}, nil),
	} {
		if _, err := DecodeUpdate(body, DecodeOptions{}); err == nil {
			t.Errorf("%s: %x decoded", name, body)
		}
	}
	if _, err := DecodeUpdate(good, DecodeOptions{}); err != nil {
		t.Errorf("good: %v", err)
	}
}

func TestOpenRoundTrip(t *testing.T) {
	o := Open{
		ASN: 4200000001, RouterID: netip.MustParseAddr("10.0.0.1"), HoldTime: 90,
		Families: []Family{IPv4Unicast, IPv6Unicast}, RouteRefresh: true, FourOctetAS: true,
		AddPath:         []AddPath{{IPv4Unicast, AddPathBoth}, {IPv6Unicast, AddPathSend}},
		GracefulRestart: &GracefulRestart{Time: 300, Restarting: true, Notification: true, Families: []GRFamily{{IPv4Unicast, true}, {IPv6Unicast, false}}},
		ExtendedMessage: true,
		RawCapabilities: [][]byte{{0xf0, 2, 0xaa, 0xbb}},
		RawOptParams:    []byte{0x7f, 1, 0xcc},
	}
	m, err := ParseMessage(o.Message())
	if err != nil || m.Type != TypeOpen {
		t.Fatalf("%+v %v", m, err)
	}
	p, err := ParseOpen(m.Body)
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != 4 || p.MyAS != uint16(ASTrans) || p.ASN != 4200000001 || !p.FourOctetAS || p.HoldTime != 90 || p.RouterID != o.RouterID {
		t.Errorf("header fields %+v", p)
	}
	if !slices.Equal(p.Families, o.Families) || !p.RouteRefresh || !p.ExtendedMessage || !slices.Equal(p.AddPath, o.AddPath) {
		t.Errorf("capabilities %+v", p)
	}
	if g := p.GracefulRestart; g == nil || g.Time != 300 || !g.Restarting || !g.Notification || !slices.Equal(g.Families, o.GracefulRestart.Families) {
		t.Errorf("graceful restart %+v", g)
	}
	last := p.Capabilities[len(p.Capabilities)-1]
	if last.Code != 0xf0 || !bytes.Equal(last.Value, []byte{0xaa, 0xbb}) {
		t.Errorf("raw capability %+v", last)
	}
	if len(p.OtherParams) != 1 || p.OtherParams[0].Code != 0x7f {
		t.Errorf("raw optional parameter %+v", p.OtherParams)
	}
	two := Open{ASN: 65001}
	if p, err := ParseOpen(two.Body()); err != nil || p.ASN != 65001 || p.FourOctetAS || len(p.Capabilities) != 0 {
		t.Errorf("2-octet OPEN %+v %v", p, err)
	}
}

func TestNegotiate(t *testing.T) {
	local := &OpenMsg{ASN: 1, HoldTime: 90, FourOctetAS: true,
		AddPath: []AddPath{{IPv4Unicast, AddPathBoth}, {IPv6Unicast, AddPathReceive}}}
	peer := &OpenMsg{ASN: 2, HoldTime: 30, ExtendedMessage: true,
		AddPath: []AddPath{{IPv4Unicast, AddPathReceive}, {IPv6Unicast, AddPathSend}}}
	n := Negotiate(local, peer)
	if n.HoldTime != 30 || n.FourOctetAS || n.ExtendedMessage || n.MaxMessageLen() != MaxMessageLen {
		t.Errorf("%+v", n)
	}
	if !n.SendPathID[IPv4Unicast] || n.RecvPathID[IPv4Unicast] || n.SendPathID[IPv6Unicast] || !n.RecvPathID[IPv6Unicast] {
		t.Errorf("ADD-PATH send %v receive %v", n.SendPathID, n.RecvPathID)
	}
}

// TestSession runs two Sessions against each other over loopback: handshake
// with the peer answering second, ADD-PATH both ways, the Adj-RIB-In and
// End-of-RIB, then a NOTIFICATION.
func TestSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	open := func(asn uint32) Open {
		return Open{ASN: asn, RouterID: netip.MustParseAddr("10.0.0.1"), HoldTime: 3, FourOctetAS: true,
			Families: []Family{IPv4Unicast, IPv6Unicast},
			AddPath:  []AddPath{{IPv4Unicast, AddPathBoth}, {IPv6Unicast, AddPathBoth}}}
	}
	type result struct {
		s   *Session
		err error
	}
	srv := make(chan result, 1)
	go func() {
		s, err := ln.Accept(ctx)
		if err == nil {
			time.Sleep(100 * time.Millisecond) // the dialer's OPEN arrives first
			_, err = s.Handshake(ctx, open(4200000002))
		}
		srv <- result{s, err}
	}()
	c, err := Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, err := c.Handshake(ctx, open(65001))
	if err != nil {
		t.Fatal(err)
	}
	if peer.ASN != 4200000002 {
		t.Errorf("peer ASN %d", peer.ASN)
	}
	r := <-srv
	if r.err != nil {
		t.Fatal(r.err)
	}
	s := r.s
	defer s.Close()
	n := s.Negotiated()
	if n == nil || !n.SendPathID[IPv4Unicast] || !n.RecvPathID[IPv6Unicast] || n.PeerASN != 65001 || !n.FourOctetAS {
		t.Fatalf("negotiated %+v", n)
	}
	s.KeepAlive(ctx)
	c.KeepAlive(ctx)

	nh := netip.MustParseAddr("192.0.2.7")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Send(Update(nil, [][]byte{Origin(0), ASPath(true, Seq(4200000002)), NextHop(nh)},
		append(PathPrefix(1, p4), PathPrefix(2, p4)...))))
	must(s.Send(Update(nil, [][]byte{Origin(0), ASPath(true, Seq(4200000002)),
		MPReach(IPv6Unicast, []netip.Addr{netip.MustParseAddr("2001:db8::7")}, PathPrefix(5, p6))}, nil)))
	must(s.Send(EndOfRIB(IPv4Unicast)))
	rs, err := c.WaitRoutes(ctx, func(rs []Route) bool { return len(rs) == 3 })
	must(err)
	if !Announced(rs, p4, nh) || !Announced(rs, p6, netip.MustParseAddr("2001:db8::7")) || Announced(rs, p4, netip.MustParseAddr("192.0.2.8")) {
		t.Errorf("routes %+v", rs)
	}
	must(c.WaitEndOfRIB(ctx, IPv4Unicast))

	must(s.Send(Update(PathPrefix(1, p4), nil, nil)))
	rs, err = c.WaitRoutes(ctx, func(rs []Route) bool { return len(rs) == 2 })
	must(err)
	if rs[0].Prefix != p4 || rs[0].PathID != 2 {
		t.Errorf("after withdrawing path 1: %+v", rs)
	}

	// Keepalives flow (hold time 3 s: one a second) and are not queued.
	time.Sleep(1500 * time.Millisecond)
	if c.Received() < 6 {
		t.Errorf("received %d messages, want keepalives too", c.Received())
	}

	must(s.Send(Notification(6, 4, nil)))
	must(s.Close())
	got, err := c.WaitNotification(ctx)
	if err != nil || got.Code != 6 || got.Subcode != 4 {
		t.Fatalf("WaitNotification = %+v, %v", got, err)
	}
	_, err = c.WaitNotification(ctx)
	if !errors.Is(err, ErrNoNotification) {
		t.Fatalf("second WaitNotification = %v, want ErrNoNotification", err)
	}
	select {
	case <-c.Closed():
	default:
		t.Error("Closed not closed after the peer closed")
	}
}

func TestHandshakeRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		defer s.Close()
		if _, err := s.ReadMessage(ctx); err == nil {
			_ = s.Send(Notification(2, 2, nil)) // bad peer AS
		}
		<-ctx.Done()
	}()
	c, err := Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Handshake(ctx, Open{ASN: 1, HoldTime: 90})
	var n *NotificationMsg
	if !errors.As(err, &n) || n.Code != 2 || n.Subcode != 2 {
		t.Fatalf("Handshake = %v, want the NOTIFICATION", err)
	}
}

func TestAcceptHonoursContext(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := ln.Accept(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Accept = %v, want deadline exceeded", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Error("Accept outlived its context")
	}
	if ln.Port() == 0 {
		t.Error("no port")
	}
}

func TestCraftedCases(t *testing.T) {
	n := &Negotiated{LocalASN: 65010, FourOctetAS: true, LocalAddr: netip.MustParseAddr("127.0.0.1"),
		SendPathID: map[Family]bool{IPv4Unicast: true}}
	seen := map[string]bool{}
	for _, c := range Crafted() {
		if c.Name == "" || seen[c.Name] || c.Bug == "" || (c.CVE == "" && c.GHSA == "" && c.Note == "") {
			t.Errorf("case %+v: needs a unique name, a bug and an ID or note", c.Name)
		}
		seen[c.Name] = true
		if !c.Reachable && c.Note == "" {
			t.Errorf("%s: unreachable without a note", c.Name)
		}
		if c.Open != nil {
			o := Open{ASN: 65010, FourOctetAS: true}
			c.Open(&o)
			if _, err := ParseOpen(o.Body()); err != nil {
				t.Errorf("%s: OPEN does not frame: %v", c.Name, err)
			}
		}
		if c.Messages == nil {
			continue
		}
		for _, fo := range []bool{true, false} {
			n.FourOctetAS = fo
			for i, raw := range c.Messages(n) {
				if _, err := ParseMessage(raw); err != nil && c.Name != "unknown-message-type" {
					t.Errorf("%s message %d: header must frame it (only the body is malformed): %v", c.Name, i, err)
				}
				if len(raw) > MaxMessageLen {
					t.Errorf("%s message %d: %d octets", c.Name, i, len(raw))
				}
			}
		}
	}
	for _, id := range []string{"CVE-2026-30405", "CVE-2026-41642", "CVE-2026-41643", "CVE-2026-42285", "CVE-2026-37461",
		"CVE-2026-37462", "CVE-2026-7734", "CVE-2026-7735", "CVE-2026-7736", "CVE-2026-7737", "GHSA-frrj-87jh-2772"} {
		if !slices.ContainsFunc(Crafted(), func(c Case) bool { return c.CVE == id || c.GHSA == id }) {
			t.Errorf("no case for %s", id)
		}
	}
}

func TestWellFormedAS4Case(t *testing.T) {
	// The CVE-2026-41643 route is valid: it decodes, and its attribute order is
	// ORIGIN, NEXT_HOP, AS4_PATH, AS_PATH.
	n := &Negotiated{LocalASN: 65010, FourOctetAS: true, LocalAddr: netip.MustParseAddr("127.0.0.1")}
	for _, c := range Crafted() {
		if c.Name != "as4path-before-aspath-wellformed" {
			continue
		}
		m, err := ParseMessage(c.Messages(n)[0])
		if err != nil {
			t.Fatal(err)
		}
		u, err := DecodeUpdate(m.Body, DecodeOptions{FourOctetAS: true})
		if err != nil {
			t.Fatal(err)
		}
		var types []uint8
		for _, a := range u.Attrs {
			types = append(types, a.Type)
		}
		if !slices.Equal(types, []uint8{AttrOrigin, AttrNextHop, AttrAS4Path, AttrASPath}) {
			t.Errorf("attribute order %v", types)
		}
		if _, ok := u.Announces(CraftedPrefix4); !ok {
			t.Error("no route")
		}
		return
	}
	t.Fatal("case missing")
}

// TestConnect: Connect retries a connection the peer refuses with a
// NOTIFICATION and one it leaves unanswered (past attempt), and returns the
// session of the third; WaitClosed then sees the peer close it.
func TestConnect(t *testing.T) {
	ln := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := Open{ASN: 65001, RouterID: netip.MustParseAddr("10.0.0.1"), HoldTime: 90}
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			refused, err := ln.Accept(ctx)
			if err != nil {
				return err
			}
			_ = refused.Send(Notification(6, 5, nil)) // Connection Rejected
			_ = refused.Close()
			stalled, err := ln.Accept(ctx)
			if err != nil {
				return err
			}
			defer stalled.Close() // never answered
			s, err := ln.Accept(ctx)
			if err != nil {
				return err
			}
			if _, err := s.Handshake(ctx, Open{ASN: 65002, RouterID: netip.MustParseAddr("10.0.0.2"), HoldTime: 90}); err != nil {
				return err
			}
			if err := s.Send(Notification(6, 2, nil)); err != nil {
				return err
			}
			return s.Close()
		}()
	}()
	s, peer, err := Connect(ctx, netip.MustParseAddr("127.0.0.1"), ln.Addr().String(), open, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if peer.ASN != 65002 || s.Negotiated() == nil {
		t.Errorf("peer %+v, negotiated %+v", peer, s.Negotiated())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.WaitClosed(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.WaitNotification(ctx); err != nil || n.Code != 6 || n.Subcode != 2 {
		t.Errorf("after WaitClosed: %v, %v; want the queued NOTIFICATION", n, err)
	}
}

// TestConnectGivesUp: Connect fails with ctx's error once ctx ends, and at once
// for an address it cannot dial; WaitClosed fails once ctx ends.
func TestConnectGivesUp(t *testing.T) {
	ln := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	// The kernel accepts the connection; nothing answers the OPEN.
	_, _, err := Connect(ctx, netip.Addr{}, ln.Addr().String(), Open{ASN: 1, HoldTime: 90}, 0)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("Connect = %v after %v, want deadline exceeded", err, time.Since(start))
	}
	if _, _, err := Connect(context.Background(), netip.Addr{}, "localhost:179", Open{}, 0); err == nil {
		t.Error("Connect accepted a host name")
	}

	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv := make(chan *Session, 1)
	go func() {
		s, _ := ln.Accept(ctx)
		srv <- s
	}()
	c, err := Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := <-srv; s != nil {
		defer s.Close()
	}
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer wcancel()
	if err := c.WaitClosed(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitClosed on an open connection = %v, want deadline exceeded", err)
	}
}

// TestSilent: a listener that accepts but never answers is silent; one that
// answers the OPEN, one that closes the connection and a closed port are not.
func TestSilent(t *testing.T) {
	ln := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, open := ln.Addr().String(), Open{ASN: 65001, HoldTime: 90}
	// The listener treats each connection as the next mode says.
	mode := make(chan string, 1)
	go func() {
		var stalled []*Session
		defer func() {
			for _, s := range stalled {
				_ = s.Close()
			}
		}()
		for {
			s, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			switch <-mode {
			case "stall":
				stalled = append(stalled, s)
			case "answer":
				go func() { _, _ = s.Handshake(ctx, Open{ASN: 65002, HoldTime: 90}); _ = s.Close() }()
			case "close":
				_ = s.Close()
			}
		}
	}()

	mode <- "stall"
	start := time.Now()
	if err := Silent(ctx, netip.Addr{}, addr, open, 300*time.Millisecond); err != nil {
		t.Errorf("Silent on an unanswered connection: %v", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("Silent returned after %v, want 300ms", took)
	}
	mode <- "answer"
	if err := Silent(ctx, netip.Addr{}, addr, open, 2*time.Second); err == nil {
		t.Error("Silent on a speaker that answers the OPEN")
	}
	mode <- "close"
	if err := Silent(ctx, netip.Addr{}, addr, open, 2*time.Second); err == nil {
		t.Error("Silent on a speaker that closes the connection")
	}
	mode <- "stall"
	short, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer scancel()
	if err := Silent(short, netip.Addr{}, addr, open, 2*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Silent with ctx ending first = %v, want deadline exceeded", err)
	}

	ln2 := listen(t)
	closed := ln2.Addr().String()
	ln2.Close()
	if err := Silent(ctx, netip.Addr{}, closed, open, 2*time.Second); err == nil {
		t.Error("Silent on a closed port")
	}
}

// listen returns a Listener on a free loopback port, closed at the test's end.
func listen(t *testing.T) *Listener {
	t.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}
