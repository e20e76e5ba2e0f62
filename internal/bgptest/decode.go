package bgptest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Message is one received message: its type and body, exactly as framed.
type Message struct {
	Type uint8
	Body []byte
}

// Raw returns the message re-framed with a correct header.
func (m Message) Raw() []byte { return Msg(m.Type, m.Body) }

// ErrBadHeader is wrapped by ParseMessage's and the reader's errors for a
// header that frames no valid message (bad marker or length).
var ErrBadHeader = errors.New("bad BGP message header")

// ParseHeader decodes the first HeaderLen octets of b. It fails with
// ErrBadHeader for a marker other than all ones or a length below HeaderLen.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fmt.Errorf("%w: %d octets", ErrBadHeader, len(b))
	}
	h := Header{Marker: [16]byte(b[:16]), Length: binary.BigEndian.Uint16(b[16:18]), Type: b[18]}
	if h.Marker != Marker {
		return h, fmt.Errorf("%w: marker %x", ErrBadHeader, h.Marker)
	}
	if h.Length < HeaderLen {
		return h, fmt.Errorf("%w: length %d", ErrBadHeader, h.Length)
	}
	return h, nil
}

// ParseMessage decodes one whole message; its header must frame exactly raw.
func ParseMessage(raw []byte) (Message, error) {
	h, err := ParseHeader(raw)
	if err != nil {
		return Message{}, err
	}
	if int(h.Length) != len(raw) {
		return Message{}, fmt.Errorf("%w: length %d, %d octets given", ErrBadHeader, h.Length, len(raw))
	}
	return Message{Type: h.Type, Body: slices.Clone(raw[HeaderLen:])}, nil
}

// NotificationMsg is a decoded NOTIFICATION; it is an error so that a
// handshake refused by the peer can return it.
type NotificationMsg struct {
	Code, Subcode uint8
	Data          []byte
}

func (n *NotificationMsg) Error() string {
	return fmt.Sprintf("BGP NOTIFICATION %d/%d data %x", n.Code, n.Subcode, n.Data)
}

// ParseNotification decodes a NOTIFICATION body.
func ParseNotification(body []byte) (*NotificationMsg, error) {
	if len(body) < 2 {
		return nil, fmt.Errorf("NOTIFICATION body of %d octets", len(body))
	}
	return &NotificationMsg{Code: body[0], Subcode: body[1], Data: slices.Clone(body[2:])}, nil
}

// DecodeOptions says how to read an UPDATE: what the session negotiated.
type DecodeOptions struct {
	FourOctetAS bool            // AS_PATH carries 4-octet ASNs
	PathID      map[Family]bool // NLRI of these families carry ADD-PATH path identifiers
}

// Route is one prefix of an UPDATE.
type Route struct {
	Family  Family
	Prefix  netip.Prefix
	PathID  uint32     // 0 without ADD-PATH
	NextHop netip.Addr // announcements only: NEXT_HOP, or MP_REACH_NLRI's first next hop
}

// PathAttr is one path attribute as received.
type PathAttr struct {
	Flags, Type uint8
	Value       []byte
}

// UpdateMsg is a decoded UPDATE: IPv4 and IPv6 unicast NLRI, in the body or in
// MP_REACH_NLRI/MP_UNREACH_NLRI.
type UpdateMsg struct {
	Withdrawn []Route
	Announced []Route
	Attrs     []PathAttr // all attributes, in order received

	Origin      int // -1 if absent
	ASPath      []Segment
	NextHop     netip.Addr   // NEXT_HOP attribute
	MPNextHops  []netip.Addr // MP_REACH_NLRI next hops (global, then link-local)
	Communities []uint32

	eor *Family
}

// EndOfRIB reports whether u is an End-of-RIB marker (RFC 4724) and for which family.
func (u *UpdateMsg) EndOfRIB() (Family, bool) {
	if u.eor == nil {
		return Family{}, false
	}
	return *u.eor, true
}

// Attr returns the first attribute of type typ.
func (u *UpdateMsg) Attr(typ uint8) (PathAttr, bool) {
	for _, a := range u.Attrs {
		if a.Type == typ {
			return a, true
		}
	}
	return PathAttr{}, false
}

// Announces returns the announcement of p, if u carries one.
func (u *UpdateMsg) Announces(p netip.Prefix) (Route, bool) {
	for _, r := range u.Announced {
		if r.Prefix == p {
			return r, true
		}
	}
	return Route{}, false
}

// Withdraws reports whether u withdraws p.
func (u *UpdateMsg) Withdraws(p netip.Prefix) bool {
	return slices.ContainsFunc(u.Withdrawn, func(r Route) bool { return r.Prefix == p })
}

// DecodeUpdate decodes an UPDATE body. It fails on any framing error and on
// NLRI of families other than IPv4/IPv6 unicast.
func DecodeUpdate(body []byte, opt DecodeOptions) (*UpdateMsg, error) {
	u := &UpdateMsg{Origin: -1}
	if len(body) < 2 {
		return nil, errors.New("UPDATE: no withdrawn routes length")
	}
	wl := int(binary.BigEndian.Uint16(body))
	body = body[2:]
	if len(body) < wl+2 {
		return nil, fmt.Errorf("UPDATE: withdrawn routes length %d exceeds the message", wl)
	}
	var err error
	if u.Withdrawn, err = decodeNLRI(IPv4Unicast, body[:wl], opt.PathID[IPv4Unicast]); err != nil {
		return nil, fmt.Errorf("UPDATE withdrawn routes: %w", err)
	}
	body = body[wl:]
	al := int(binary.BigEndian.Uint16(body))
	body = body[2:]
	if len(body) < al {
		return nil, fmt.Errorf("UPDATE: path attributes length %d exceeds the message", al)
	}
	attrs, nlri := body[:al], body[al:]
	onlyUnreach := wl == 0 && len(nlri) == 0
	for len(attrs) > 0 {
		if len(attrs) < 3 {
			return nil, errors.New("UPDATE: truncated path attribute header")
		}
		a := PathAttr{Flags: attrs[0], Type: attrs[1]}
		n, hl := int(attrs[2]), 3
		if a.Flags&FlagExtLength != 0 {
			if len(attrs) < 4 {
				return nil, errors.New("UPDATE: truncated path attribute header")
			}
			n, hl = int(binary.BigEndian.Uint16(attrs[2:4])), 4
		}
		if len(attrs) < hl+n {
			return nil, fmt.Errorf("UPDATE: attribute %d length %d exceeds the attributes", a.Type, n)
		}
		a.Value = slices.Clone(attrs[hl : hl+n])
		attrs = attrs[hl+n:]
		u.Attrs = append(u.Attrs, a)
		if err := u.apply(a, opt); err != nil {
			return nil, fmt.Errorf("UPDATE attribute %d: %w", a.Type, err)
		}
		if a.Type != AttrMPUnreach {
			onlyUnreach = false
		}
	}
	ann, err := decodeNLRI(IPv4Unicast, nlri, opt.PathID[IPv4Unicast])
	if err != nil {
		return nil, fmt.Errorf("UPDATE NLRI: %w", err)
	}
	for i := range ann {
		ann[i].NextHop = u.NextHop
	}
	u.Announced = append(ann, u.Announced...)
	switch {
	case wl == 0 && al == 0 && len(nlri) == 0:
		f := IPv4Unicast
		u.eor = &f
	case onlyUnreach && len(u.Attrs) == 1 && len(u.Attrs[0].Value) == 3:
		f := Family{AFI: binary.BigEndian.Uint16(u.Attrs[0].Value), SAFI: u.Attrs[0].Value[2]}
		u.eor = &f
	}
	return u, nil
}

func (u *UpdateMsg) apply(a PathAttr, opt DecodeOptions) error {
	v := a.Value
	switch a.Type {
	case AttrOrigin:
		if len(v) != 1 {
			return fmt.Errorf("length %d", len(v))
		}
		u.Origin = int(v[0])
	case AttrASPath:
		segs, err := decodeASPath(v, opt.FourOctetAS)
		if err != nil {
			return err
		}
		u.ASPath = segs
	case AttrNextHop:
		ip, ok := netip.AddrFromSlice(v)
		if !ok {
			return fmt.Errorf("length %d", len(v))
		}
		u.NextHop = ip
	case AttrCommunities:
		if len(v)%4 != 0 {
			return fmt.Errorf("length %d", len(v))
		}
		for ; len(v) > 0; v = v[4:] {
			u.Communities = append(u.Communities, binary.BigEndian.Uint32(v))
		}
	case AttrMPReach:
		if len(v) < 5 || len(v) < 5+int(v[3]) {
			return fmt.Errorf("length %d", len(v))
		}
		f := Family{AFI: binary.BigEndian.Uint16(v), SAFI: v[2]}
		nh := v[4 : 4+int(v[3])]
		switch len(nh) {
		case 4, 16:
			u.MPNextHops = []netip.Addr{addrOf(nh)}
		case 32:
			u.MPNextHops = []netip.Addr{addrOf(nh[:16]), addrOf(nh[16:])}
		default:
			return fmt.Errorf("next hop length %d", len(nh))
		}
		rs, err := decodeNLRI(f, v[5+int(v[3]):], opt.PathID[f])
		if err != nil {
			return err
		}
		for i := range rs {
			rs[i].NextHop = u.MPNextHops[0]
		}
		u.Announced = append(u.Announced, rs...)
	case AttrMPUnreach:
		if len(v) < 3 {
			return fmt.Errorf("length %d", len(v))
		}
		f := Family{AFI: binary.BigEndian.Uint16(v), SAFI: v[2]}
		rs, err := decodeNLRI(f, v[3:], opt.PathID[f])
		if err != nil {
			return err
		}
		u.Withdrawn = append(u.Withdrawn, rs...)
	}
	return nil
}

func addrOf(b []byte) netip.Addr { a, _ := netip.AddrFromSlice(b); return a }

func decodeASPath(v []byte, fourOctet bool) ([]Segment, error) {
	size := 2
	if fourOctet {
		size = 4
	}
	var segs []Segment
	for len(v) > 0 {
		if len(v) < 2 || len(v) < 2+int(v[1])*size {
			return nil, errors.New("truncated AS_PATH segment")
		}
		s := Segment{Type: v[0]}
		n := int(v[1])
		v = v[2:]
		for range n {
			if fourOctet {
				s.ASNs = append(s.ASNs, binary.BigEndian.Uint32(v))
			} else {
				s.ASNs = append(s.ASNs, uint32(binary.BigEndian.Uint16(v)))
			}
			v = v[size:]
		}
		segs = append(segs, s)
	}
	return segs, nil
}

func decodeNLRI(f Family, b []byte, pathID bool) ([]Route, error) {
	var size int
	switch {
	case len(b) == 0:
		return nil, nil
	case f.AFI == 1 && (f.SAFI == 1 || f.SAFI == 2):
		size = 4
	case f.AFI == 2 && (f.SAFI == 1 || f.SAFI == 2):
		size = 16
	default:
		return nil, fmt.Errorf("unsupported family %d/%d", f.AFI, f.SAFI)
	}
	var rs []Route
	for len(b) > 0 {
		r := Route{Family: f}
		if pathID {
			if len(b) < 4 {
				return nil, errors.New("truncated path identifier")
			}
			r.PathID = binary.BigEndian.Uint32(b)
			b = b[4:]
		}
		if len(b) < 1 {
			return nil, errors.New("missing prefix length")
		}
		bits := int(b[0])
		n := (bits + 7) / 8
		if bits > size*8 || len(b) < 1+n {
			return nil, fmt.Errorf("bad prefix length %d", bits)
		}
		var buf [16]byte
		copy(buf[:], b[1:1+n])
		b = b[1+n:]
		a := netip.AddrFrom16(buf)
		if size == 4 {
			a = netip.AddrFrom4([4]byte(buf[:4]))
		}
		r.Prefix = netip.PrefixFrom(a, bits).Masked()
		rs = append(rs, r)
	}
	return rs, nil
}
