package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// msg builds a message with a correct header.
func msg(typ uint8, body []byte) []byte { return frame(typ, body) }

// openBody builds an OPEN body with the given capabilities (code, value pairs),
// one per optional parameter.
func openBody(as uint16, hold uint16, id string, caps ...capability) []byte {
	b := []byte{4}
	b = binary.BigEndian.AppendUint16(b, as)
	b = binary.BigEndian.AppendUint16(b, hold)
	a := netip.MustParseAddr(id).As4()
	b = append(b, a[:]...)
	var params []byte
	for _, c := range caps {
		params = append(params, 2, byte(2+len(c.value)), c.code, byte(len(c.value)))
		params = append(params, c.value...)
	}
	b = append(b, byte(len(params)))
	return append(b, params...)
}

func mpCap(afi uint16, safi uint8) capability {
	return capability{capMultiprotocol, []byte{byte(afi >> 8), byte(afi), 0, safi}}
}

func TestReadMessageRefusesBadHeaders(t *testing.T) {
	good := msg(TypeKeepalive, nil)
	badMarker := bytes.Clone(good)
	badMarker[3] = 0
	short := bytes.Clone(good)
	binary.BigEndian.PutUint16(short[16:], 18)
	long := msg(TypeUpdate, make([]byte, 4100-HeaderLen))
	ka20 := msg(TypeKeepalive, []byte{0})
	rr := msg(TypeRouteRefresh, []byte{0, 1})
	notif := msg(TypeNotification, []byte{6})
	unknown := msg(9, nil)
	openLong := msg(TypeOpen, make([]byte, 4200))
	for name, tc := range map[string]struct {
		b         []byte
		max       int
		code, sub uint8
	}{
		"marker":                  {badMarker, MaxLen, CodeHeader, SubHeaderNotSynchronized},
		"length below header":     {short, MaxLen, CodeHeader, SubHeaderBadLength},
		"longer than 4096":        {long, MaxLen, CodeHeader, SubHeaderBadLength},
		"KEEPALIVE of 20 bytes":   {ka20, MaxLen, CodeHeader, SubHeaderBadLength},
		"short ROUTE-REFRESH":     {rr, MaxLen, CodeHeader, SubHeaderBadLength},
		"short NOTIFICATION":      {notif, MaxLen, CodeHeader, SubHeaderBadLength},
		"unknown type":            {unknown, MaxLen, CodeHeader, SubHeaderBadType},
		"OPEN beyond 4096 (8654)": {openLong, MaxExtendedLen, CodeHeader, SubHeaderBadLength},
	} {
		_, err := ReadMessage(bytes.NewReader(tc.b), tc.max)
		var me *MessageError
		if !errors.As(err, &me) || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want a MessageError", name, err)
			continue
		}
		if me.Notification.Code != tc.code || me.Notification.Subcode != tc.sub {
			t.Errorf("%s: NOTIFICATION %s, want %d/%d", name, me.Notification, tc.code, tc.sub)
		}
	}
	if _, err := ReadMessage(bytes.NewReader(long), MaxExtendedLen); err != nil {
		t.Errorf("an UPDATE of 4100 bytes with extended messages: %v", err)
	}
	m, err := ReadMessage(bytes.NewReader(append(bytes.Clone(good), good...)), MaxLen)
	if err != nil || m.Type != TypeKeepalive || len(m.Body) != 0 {
		t.Errorf("KEEPALIVE: %+v %v", m, err)
	}
}

func TestParseOpenKeepsOnlyEncodingCapabilities(t *testing.T) {
	gr := capability{capGracefulRestart, []byte{0x40, 120, 0, 1, 1, 0x80, 0, 2, 1, 0x80}} // N bit, 120 s, v4+v6 F bit
	body := openBody(23456, 90, "10.0.0.1",
		mpCap(1, 1), mpCap(2, 1), mpCap(1, 128),
		capability{capRouteRefresh, nil},
		capability{128, nil}, // old Cisco route refresh: dropped
		capability{capFourOctetAS, []byte{0, 1, 0, 1}},
		capability{capAddPath, []byte{0, 1, 1, 3, 0, 2, 1, 1}},
		gr,
		capability{capExtendedMessage, nil},
		capability{73, []byte{2, 'r', '1', 0}},  // FQDN: dropped
		capability{5, []byte{0, 1, 0, 1, 0, 2}}, // extended next hop: dropped
		capability{75, []byte{1, 'x'}},          // software version: dropped
	)
	o, err := ParseOpen(body)
	if err != nil {
		t.Fatal(err)
	}
	if o.AS != 65537 || !o.FourOctetAS || o.HoldTime != 90 || o.ID != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("AS %d hold %d id %v", o.AS, o.HoldTime, o.ID)
	}
	if !o.GracefulRestart || !o.Notification || !o.ExtendedMessage {
		t.Errorf("GR %v N %v ext %v", o.GracefulRestart, o.Notification, o.ExtendedMessage)
	}
	if o.AddPath[IPv4Unicast] != 3 || o.AddPath[IPv6Unicast] != 1 {
		t.Errorf("ADD-PATH %v", o.AddPath)
	}
	if len(o.Families) != 3 {
		t.Errorf("families %v", o.Families)
	}
	out := o.Bytes()
	again, err := ParseOpen(out[HeaderLen:])
	if err != nil {
		t.Fatalf("the re-encoded OPEN does not parse: %v", err)
	}
	var codes []uint8
	for _, c := range again.caps {
		codes = append(codes, c.code)
	}
	want := []uint8{capMultiprotocol, capMultiprotocol, capMultiprotocol, capRouteRefresh, capFourOctetAS, capExtendedMessage, capGracefulRestart, capAddPath}
	if !bytes.Equal(codes, want) {
		t.Errorf("re-encoded capabilities %v, want %v", codes, want)
	}
	if again.AS != o.AS || again.myAS != 23456 || !again.Notification {
		t.Errorf("re-encoded OPEN lost fields: %+v", again)
	}
}

func TestParseOpenRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		body      []byte
		code, sub uint8
	}{
		"version 3":           {append([]byte{3}, openBody(1, 90, "10.0.0.1")[1:]...), CodeOpen, SubOpenVersion},
		"hold time 2":         {openBody(1, 2, "10.0.0.1"), CodeOpen, SubOpenBadHoldTime},
		"identifier 0":        {openBody(1, 90, "0.0.0.0"), CodeOpen, SubOpenBadIdentifier},
		"MP of 3 bytes":       {openBody(1, 90, "10.0.0.1", capability{capMultiprotocol, []byte{0, 1, 1}}), CodeOpen, SubOpenUnspecific},
		"4-octet AS of 2":     {openBody(1, 90, "10.0.0.1", capability{capFourOctetAS, []byte{0, 1}}), CodeOpen, SubOpenUnspecific},
		"ADD-PATH mode 0":     {openBody(1, 90, "10.0.0.1", capability{capAddPath, []byte{0, 1, 1, 0}}), CodeOpen, SubOpenUnspecific},
		"GR of 3 bytes":       {openBody(1, 90, "10.0.0.1", capability{capGracefulRestart, []byte{0, 1, 2}}), CodeOpen, SubOpenUnspecific},
		"route refresh len 1": {openBody(1, 90, "10.0.0.1", capability{capRouteRefresh, []byte{0}}), CodeOpen, SubOpenUnspecific},
		"params overrun":      {append(openBody(1, 90, "10.0.0.1")[:9], 10, 2, 2), CodeOpen, SubOpenUnspecific},
		"capability overrun":  {append(openBody(1, 90, "10.0.0.1")[:9], 4, 2, 2, 1, 9), CodeOpen, SubOpenUnspecific},
		"unknown param type":  {append(openBody(1, 90, "10.0.0.1")[:9], 3, 1, 1, 0), CodeOpen, 4},
	} {
		_, err := ParseOpen(tc.body)
		var me *MessageError
		if !errors.As(err, &me) {
			t.Errorf("%s: err = %v, want a MessageError", name, err)
			continue
		}
		if me.Notification.Code != tc.code || me.Notification.Subcode != tc.sub {
			t.Errorf("%s: NOTIFICATION %s, want %d/%d", name, me.Notification, tc.code, tc.sub)
		}
	}
}

func TestParseOpenExtendedOptionalParameters(t *testing.T) {
	// RFC 9072: non-extended length and type 255, then a 2-byte length, then
	// parameters with 2-byte lengths.
	caps := []byte{capMultiprotocol, 4, 0, 2, 0, 1, capFourOctetAS, 4, 0, 0, 0xfd, 0xe8}
	param := append([]byte{2}, binary.BigEndian.AppendUint16(nil, uint16(len(caps)))...)
	param = append(param, caps...)
	body := openBody(23456, 90, "10.0.0.1")[:9]
	body = append(body, 255, 255)
	body = binary.BigEndian.AppendUint16(body, uint16(len(param)))
	body = append(body, param...)
	o, err := ParseOpen(body)
	if err != nil {
		t.Fatal(err)
	}
	if o.AS != 65000 || len(o.Families) != 1 || o.Families[0] != IPv6Unicast {
		t.Errorf("AS %d families %v", o.AS, o.Families)
	}
	if _, err := ParseOpen(o.Bytes()[HeaderLen:]); err != nil {
		t.Errorf("re-encoded in RFC 4271 form: %v", err)
	}
}

func TestOpenTooManyCapabilitiesKeepsUnicast(t *testing.T) {
	var caps []capability
	for safi := range 60 {
		caps = append(caps, mpCap(1, uint8(safi+1)))
	}
	o := &Open{myAS: 1, HoldTime: 90, ID: netip.MustParseAddr("10.0.0.1"), AddPath: map[Family]uint8{}}
	seen := map[uint8]bool{}
	for _, c := range caps {
		if err := o.addCapability(c, seen); err != nil {
			t.Fatal(err)
		}
	}
	out, err := ParseOpen(o.Bytes()[HeaderLen:])
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Families) != 1 || out.Families[0] != IPv4Unicast {
		t.Errorf("families after pruning: %v", out.Families)
	}
}

func TestNegotiate(t *testing.T) {
	local := &Open{Families: []Family{IPv4Unicast, IPv6Unicast}, AddPath: map[Family]uint8{IPv4Unicast: addPathSend, IPv6Unicast: addPathSend}, GracefulRestart: true, Notification: true, ExtendedMessage: true}
	remote := &Open{Families: []Family{IPv4Unicast}, AddPath: map[Family]uint8{IPv4Unicast: addPathReceive, IPv6Unicast: addPathSend}, GracefulRestart: true, Notification: true}
	n := Negotiate(local, remote)
	if !n.AddPathSend[IPv4Unicast] || n.AddPathSend[IPv6Unicast] || n.ExtendedMessage || !n.HardReset || len(n.Families) != 1 {
		t.Errorf("negotiated %+v", n)
	}
	if n.MaxLen() != MaxLen {
		t.Errorf("max length %d", n.MaxLen())
	}
	remote.Notification = false
	if Negotiate(local, remote).HardReset {
		t.Error("Hard Reset without the router's N bit")
	}
}

func TestEndOfRIB(t *testing.T) {
	for name, tc := range map[string]struct {
		body []byte
		fam  Family
		ok   bool
	}{
		"IPv4":                {[]byte{0, 0, 0, 0}, IPv4Unicast, true},
		"IPv6":                {endOfRIBBytes(IPv6Unicast)[HeaderLen:], IPv6Unicast, true},
		"IPv6 extended len":   {[]byte{0, 0, 0, 7, 0x90, 15, 0, 3, 0, 2, 1}, IPv6Unicast, true},
		"withdrawal":          {[]byte{0, 2, 8, 10, 0, 0}, Family{}, false},
		"MP_UNREACH + prefix": {[]byte{0, 0, 0, 8, 0x80, 15, 5, 0, 2, 1, 8, 0xfd}, Family{}, false},
		"two attributes":      {[]byte{0, 0, 0, 10, 0x80, 15, 3, 0, 2, 1, 0x40, 1, 1, 0}, Family{}, false},
	} {
		f, ok := EndOfRIB(tc.body)
		if ok != tc.ok || f != tc.fam {
			t.Errorf("%s: %v %v, want %v %v", name, f, ok, tc.fam, tc.ok)
		}
	}
}

// update4 is an UPDATE body announcing IPv4 prefixes (pathID 0: no ADD-PATH).
func update4(withdrawn []byte, nlri []byte) []byte {
	attrs := []byte{0x40, 1, 1, 0, 0x40, 3, 4, 10, 0, 0, 1}
	b := binary.BigEndian.AppendUint16(nil, uint16(len(withdrawn)))
	b = append(b, withdrawn...)
	if len(nlri) == 0 {
		attrs = nil
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(attrs)))
	b = append(b, attrs...)
	return append(b, nlri...)
}

func enc(addPath bool, id uint32, p string) []byte {
	pfx := netip.MustParsePrefix(p)
	f := IPv4Unicast
	if pfx.Addr().Is6() {
		f = IPv6Unicast
	}
	return appendPrefix(nil, pathKey{fam: f, id: id, prefix: pfx}, addPath)
}

func update6(addPath bool, reach []byte, unreach []byte) []byte {
	var attrs []byte
	if len(reach) > 0 {
		v := append([]byte{0, 2, 1, 16}, netip.MustParseAddr("fd00::1").AsSlice()...)
		v = append(v, 0)
		v = append(v, reach...)
		attrs = append(attrs, 0x90, attrMPReach)
		attrs = binary.BigEndian.AppendUint16(attrs, uint16(len(v)))
		attrs = append(attrs, v...)
	}
	if len(unreach) > 0 {
		v := append([]byte{0, 2, 1}, unreach...)
		attrs = append(attrs, 0x80, attrMPUnreach, byte(len(v)))
		attrs = append(attrs, v...)
	}
	b := []byte{0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(len(attrs)))
	return append(b, attrs...)
}

func TestRIBOutTracksWhatTheRouterHolds(t *testing.T) {
	n := Negotiated{AddPathSend: map[Family]bool{IPv4Unicast: true}, Families: []Family{IPv4Unicast, IPv6Unicast}}
	r := newRIBOut()
	nlri := append(append(enc(true, 1, "198.51.100.1/32"), enc(true, 2, "198.51.100.1/32")...), enc(true, 1, "10.1.0.0/16")...)
	if err := r.applyUpdate(update4(nil, nlri), n); err != nil {
		t.Fatal(err)
	}
	if err := r.applyUpdate(update6(false, append(enc(false, 0, "2001:db8::1/128"), enc(false, 0, "2001:db8:1::/48")...), nil), n); err != nil {
		t.Fatal(err)
	}
	if r.count[IPv4Unicast] != 3 || r.count[IPv6Unicast] != 2 {
		t.Fatalf("counts %v", r.count)
	}
	// Re-announcing is no new path; withdrawing removes one.
	_ = r.applyUpdate(update4(enc(true, 2, "198.51.100.1/32"), enc(true, 1, "198.51.100.1/32")), n)
	_ = r.applyUpdate(update6(false, nil, enc(false, 0, "2001:db8:1::/48")), n)
	if r.count[IPv4Unicast] != 2 || r.count[IPv6Unicast] != 1 {
		t.Fatalf("counts after changes %v", r.count)
	}
	// The withdrawals of everything, applied, leave nothing.
	applyWithdrawals(t, r, n)
	if len(r.paths) != 0 || r.count[IPv4Unicast] != 0 || r.count[IPv6Unicast] != 0 {
		t.Errorf("after the withdrawals: %v %v", r.paths, r.count)
	}
}

func TestWithdrawalsFitOneMessageEach(t *testing.T) {
	n := Negotiated{AddPathSend: map[Family]bool{IPv4Unicast: true, IPv6Unicast: true}}
	r := newRIBOut()
	for i := range 3000 {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1})
		r.add(pathKey{IPv4Unicast, uint32(i%3 + 1), netip.PrefixFrom(a, 32)})
		b := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)})
		r.add(pathKey{IPv6Unicast, 1, netip.PrefixFrom(b, 128)})
	}
	if us := applyWithdrawals(t, r, n); us < 10 {
		t.Errorf("%d UPDATEs for 6000 withdrawals", us)
	}
	if len(r.paths) != 0 {
		t.Errorf("%d paths left after the withdrawals", len(r.paths))
	}
}

func TestNotification(t *testing.T) {
	c := Cease(SubCeaseAdminShutdown, "maintenance")
	if c.Communication() != "maintenance" || c.String() != `6/2 (Cease/Administrative Shutdown) "maintenance"` {
		t.Errorf("Cease: %s", c)
	}
	h := HardReset(c)
	in, ok := h.Inner()
	if !ok || in.Code != 6 || in.Subcode != 2 || in.Communication() != "maintenance" {
		t.Errorf("Hard Reset inner %v %v", in, ok)
	}
	if !strings.HasPrefix(h.String(), "6/9 (Cease/Hard Reset) of 6/2") {
		t.Errorf("Hard Reset: %s", h)
	}
	b := h.Bytes()
	if !bytes.Equal(b[HeaderLen:HeaderLen+4], []byte{6, 9, 6, 2}) {
		t.Errorf("Hard Reset on the wire % x", b[HeaderLen:])
	}
	// What GoBGP v4 sends: a Hard Reset without the encapsulated code.
	if _, ok := (Notification{Code: 6, Subcode: 9, Data: []byte{22, 'b'}}).Inner(); ok {
		t.Error("a Hard Reset whose data starts with 22 has no valid inner code")
	}
	bfdDown := Cease(SubCeaseBFDDown, "ignored")
	if len(bfdDown.Data) != 0 || bfdDown.String() != "6/10 (Cease/BFD Down)" {
		t.Errorf("BFD Down: %s % x", bfdDown, bfdDown.Data)
	}
	long := Cease(SubCeaseAdminReset, strings.Repeat("é", 200))
	if len(long.Data) > 256 || long.Communication() == "" {
		t.Errorf("long communication: %d bytes", len(long.Data))
	}
	bad := Notification{Code: 6, Subcode: 2, Data: []byte{200, 'x'}}
	if s := bad.sanitized(); len(s.Data) != 0 {
		t.Errorf("a malformed communication is passed on: % x", s.Data)
	}
	other := Notification{Code: 3, Subcode: 1, Data: bytes.Repeat([]byte{1}, 100)}
	if s := other.sanitized(); len(s.Data) != 0 || s.Code != 3 || s.Subcode != 1 {
		t.Errorf("sanitized %v", s)
	}
}

// applyWithdrawals records r's withdrawals of everything in r, each checked to
// frame within the maximum length, and returns how many UPDATEs they were.
func applyWithdrawals(t testing.TB, r *ribOut, n Negotiated) int {
	t.Helper()
	us := r.withdrawals(n)
	for _, u := range us {
		m, err := ReadMessage(bytes.NewReader(u), MaxLen)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.applyUpdate(m.Body, n); err != nil {
			t.Fatal(err)
		}
	}
	return len(us)
}
