package wire

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strconv"
)

// Capability codes the relay understands (RFC 5492 registry).
const (
	capMultiprotocol   = 1
	capRouteRefresh    = 2
	capExtendedMessage = 6
	capGracefulRestart = 64
	capFourOctetAS     = 65
	capAddPath         = 69
	capEnhancedRR      = 70
)

// Family is an AFI/SAFI pair.
type Family struct {
	AFI  uint16
	SAFI uint8
}

// The families the speaker announces.
var (
	IPv4Unicast = Family{AFI: 1, SAFI: 1}
	IPv6Unicast = Family{AFI: 2, SAFI: 1}
)

func (f Family) String() string {
	switch f {
	case IPv4Unicast:
		return "ipv4"
	case IPv6Unicast:
		return "ipv6"
	}
	return "afi" + strconv.Itoa(int(f.AFI)) + "/safi" + strconv.Itoa(int(f.SAFI))
}

// ADD-PATH modes (RFC 7911).
const (
	addPathReceive = 1
	addPathSend    = 2
)

// capability is one capability TLV.
type capability struct {
	code  uint8
	value []byte
}

// Open is what the relay knows of an OPEN.
type Open struct {
	AS       uint32 // the 4-octet AS when the capability is present, else My AS
	HoldTime uint16
	ID       netip.Addr
	// Families are the multiprotocol capabilities (IPv4 unicast when none, RFC 4760).
	Families []Family
	// AddPath is the ADD-PATH mode per family (addPathReceive|addPathSend bits).
	AddPath map[Family]uint8
	// GracefulRestart: the capability is present; Notification: its N bit (RFC 8538).
	GracefulRestart, Notification bool
	ExtendedMessage               bool
	FourOctetAS                   bool

	myAS uint16
	caps []capability // validated, in order, each family once (see ParseOpen)
	raw  []byte       // the message as received (set by the caller)

	grHeader []byte          // graceful restart: flags and restart time
	grFams   map[Family]byte // graceful restart: per-family flags (the last one wins)
	grOrder  []Family        // graceful restart: families in first-seen order
	apOrder  []Family        // ADD-PATH: families in first-seen order
}

// rawBytes is the OPEN as it was received.
func (o *Open) rawBytes() []byte { return o.raw }

// ParseOpen validates an OPEN body as RFC 4271 6.2 and RFC 5492 say, and checks
// the length of every capability the relay passes on. Errors are *MessageError.
func ParseOpen(body []byte) (*Open, error) {
	if len(body) < minOpenLen-HeaderLen {
		return nil, malformed(CodeHeader, SubHeaderBadLength, nil, "OPEN of %d bytes", len(body))
	}
	if body[0] != 4 {
		return nil, malformed(CodeOpen, SubOpenVersion, []byte{0, 4}, "BGP version %d (only 4 is supported)", body[0])
	}
	o := &Open{myAS: binary.BigEndian.Uint16(body[1:]), HoldTime: binary.BigEndian.Uint16(body[3:]), AddPath: map[Family]uint8{}}
	o.AS = uint32(o.myAS)
	o.ID = netip.AddrFrom4([4]byte(body[5:9]))
	if o.HoldTime == 1 || o.HoldTime == 2 {
		return nil, malformed(CodeOpen, SubOpenBadHoldTime, nil, "hold time %d s (0 or at least 3 are allowed)", o.HoldTime)
	}
	if o.ID == netip.IPv4Unspecified() {
		return nil, malformed(CodeOpen, SubOpenBadIdentifier, nil, "BGP identifier 0.0.0.0")
	}
	params, err := optionalParams(body[9:])
	if err != nil {
		return nil, err
	}
	seen := map[uint8]bool{}
	for _, p := range params {
		if p.typ != 2 {
			return nil, malformed(CodeOpen, 4, nil, "unsupported optional parameter type %d", p.typ)
		}
		for v := p.value; len(v) > 0; {
			if len(v) < 2 || int(v[1]) > len(v)-2 {
				return nil, malformed(CodeOpen, SubOpenUnspecific, nil, "capability TLV overruns its optional parameter")
			}
			c := capability{code: v[0], value: v[2 : 2+int(v[1])]}
			v = v[2+int(v[1]):]
			if err := o.addCapability(c, seen); err != nil {
				return nil, err
			}
		}
	}
	if len(o.Families) == 0 {
		o.Families = []Family{IPv4Unicast}
	}
	o.addMerged()
	if !o.encodable() {
		return nil, malformed(CodeOpen, SubOpenUnspecific, nil, "the OPEN's capabilities do not fit in one OPEN once merged (%d families)", len(o.Families))
	}
	return o, nil
}

// addMerged adds the graceful restart and ADD-PATH capabilities, each once with
// each family once (a router may repeat them; the last entry of a family wins, as
// in GoBGP).
func (o *Open) addMerged() {
	if o.grHeader != nil {
		v := slices.Clone(o.grHeader)
		for _, f := range o.grOrder {
			v = append(v, byte(f.AFI>>8), byte(f.AFI), f.SAFI, o.grFams[f])
		}
		o.caps = append(o.caps, capability{code: capGracefulRestart, value: v})
	}
	if len(o.apOrder) > 0 {
		var v []byte
		for _, f := range o.apOrder {
			v = append(v, byte(f.AFI>>8), byte(f.AFI), f.SAFI, o.AddPath[f])
		}
		o.caps = append(o.caps, capability{code: capAddPath, value: v})
	}
}

// encodable reports whether Bytes can encode the capabilities: every one in an
// optional parameter of at most 255 bytes, all of them in at most 255.
func (o *Open) encodable() bool {
	caps := o.caps
	if capsLen(caps) > 255 {
		caps = unicastOnly(caps)
	}
	if capsLen(caps) > 255 {
		return false
	}
	for _, c := range caps {
		if 2+len(c.value) > 255 {
			return false
		}
	}
	return true
}

type optParam struct {
	typ   uint8
	value []byte
}

// optionalParams splits the optional parameters, in the RFC 4271 or the RFC 9072
// (extended length) encoding.
func optionalParams(b []byte) ([]optParam, error) {
	if len(b) < 1 {
		return nil, malformed(CodeOpen, SubOpenUnspecific, nil, "OPEN without optional parameters length")
	}
	n, rest := int(b[0]), b[1:]
	extended := n == 255 && len(rest) >= 1 && rest[0] == 255
	if extended {
		if len(rest) < 3 {
			return nil, malformed(CodeOpen, SubOpenUnspecific, nil, "truncated extended optional parameters length")
		}
		n, rest = int(binary.BigEndian.Uint16(rest[1:])), rest[3:]
	}
	if n != len(rest) {
		return nil, malformed(CodeOpen, SubOpenUnspecific, nil, "optional parameters length %d, %d bytes follow", n, len(rest))
	}
	var out []optParam
	for len(rest) > 0 {
		hdr := 2
		if extended {
			hdr = 3
		}
		if len(rest) < hdr {
			return nil, malformed(CodeOpen, SubOpenUnspecific, nil, "truncated optional parameter")
		}
		l := int(rest[1])
		if extended {
			l = int(binary.BigEndian.Uint16(rest[1:]))
		}
		if l > len(rest)-hdr {
			return nil, malformed(CodeOpen, SubOpenUnspecific, nil, "optional parameter overruns the OPEN")
		}
		out = append(out, optParam{typ: rest[0], value: rest[hdr : hdr+l]})
		rest = rest[hdr+l:]
	}
	return out, nil
}

// addCapability validates one capability and keeps it when the relay passes it.
func (o *Open) addCapability(c capability, seen map[uint8]bool) error {
	bad := func(what string) error {
		return malformed(CodeOpen, SubOpenUnspecific, nil, "malformed %s capability (length %d)", what, len(c.value))
	}
	v := c.value
	switch c.code {
	case capMultiprotocol:
		if len(v) != 4 {
			return bad("multiprotocol")
		}
		f := Family{AFI: binary.BigEndian.Uint16(v), SAFI: v[3]}
		if slices.Contains(o.Families, f) {
			return nil // once is enough
		}
		o.Families = append(o.Families, f)
	case capRouteRefresh, capExtendedMessage, capEnhancedRR:
		if len(v) != 0 {
			return bad("route refresh/extended message")
		}
		if c.code == capExtendedMessage {
			o.ExtendedMessage = true
		}
		if seen[c.code] {
			return nil
		}
	case capGracefulRestart:
		if len(v) < 2 || (len(v)-2)%4 != 0 {
			return bad("graceful restart")
		}
		if !seen[c.code] {
			o.GracefulRestart = true
			o.Notification = v[0]&0x40 != 0
			o.grHeader = slices.Clone(v[:2])
			o.grFams = map[Family]byte{}
		}
		seen[c.code] = true
		for t := v[2:]; len(t) > 0; t = t[4:] {
			f := Family{AFI: binary.BigEndian.Uint16(t), SAFI: t[2]}
			if _, ok := o.grFams[f]; !ok {
				o.grOrder = append(o.grOrder, f)
			}
			o.grFams[f] = t[3]
		}
		return nil // added once, merged, by addMerged
	case capFourOctetAS:
		if len(v) != 4 {
			return bad("4-octet AS")
		}
		if seen[c.code] {
			return nil
		}
		o.FourOctetAS = true
		o.AS = binary.BigEndian.Uint32(v)
	case capAddPath:
		if len(v) == 0 || len(v)%4 != 0 {
			return bad("ADD-PATH")
		}
		for t := v; len(t) > 0; t = t[4:] {
			if t[3] < 1 || t[3] > 3 {
				return bad("ADD-PATH")
			}
			f := Family{AFI: binary.BigEndian.Uint16(t), SAFI: t[2]}
			if _, ok := o.AddPath[f]; !ok {
				o.apOrder = append(o.apOrder, f)
			}
			o.AddPath[f] = t[3]
		}
		return nil // added once, merged, by addMerged
	default:
		return nil // not passed on: it changes nothing either side encodes
	}
	seen[c.code] = true
	o.caps = append(o.caps, capability{code: c.code, value: append([]byte(nil), v...)})
	return nil
}

// Bytes is the OPEN as the relay passes it: the validated capabilities only, in
// one optional parameter each. If they do not fit in 255 bytes (RFC 4271 optional
// parameters), only the unicast families' entries are kept.
func (o *Open) Bytes() []byte {
	caps := o.caps
	if capsLen(caps) > 255 {
		caps = unicastOnly(caps)
	}
	body := make([]byte, 0, 10+capsLen(caps))
	body = append(body, 4)
	body = binary.BigEndian.AppendUint16(body, o.myAS)
	body = binary.BigEndian.AppendUint16(body, o.HoldTime)
	id := o.ID.As4()
	body = append(body, id[:]...)
	body = append(body, byte(capsLen(caps)))
	for _, c := range caps {
		body = append(body, 2, byte(2+len(c.value)), c.code, byte(len(c.value)))
		body = append(body, c.value...)
	}
	return frame(TypeOpen, body)
}

func capsLen(caps []capability) int {
	n := 0
	for _, c := range caps {
		n += 4 + len(c.value)
	}
	return n
}

// unicastOnly keeps the multiprotocol, graceful restart and ADD-PATH entries of
// IPv4 and IPv6 unicast only.
func unicastOnly(caps []capability) []capability {
	uni := func(b []byte) bool {
		f := Family{AFI: binary.BigEndian.Uint16(b), SAFI: b[2]}
		if len(b) == 4 && b[2] == 0 { // multiprotocol: AFI, reserved, SAFI
			f.SAFI = b[3]
		}
		return f == IPv4Unicast || f == IPv6Unicast
	}
	var out []capability
	for _, c := range caps {
		switch c.code {
		case capMultiprotocol:
			if uni(c.value) {
				out = append(out, c)
			}
		case capGracefulRestart:
			v := append([]byte(nil), c.value[:2]...)
			for t := c.value[2:]; len(t) >= 4; t = t[4:] {
				if uni(t[:3]) {
					v = append(v, t[:4]...)
				}
			}
			out = append(out, capability{code: c.code, value: v})
		case capAddPath:
			var v []byte
			for t := c.value; len(t) >= 4; t = t[4:] {
				if uni(t[:3]) {
					v = append(v, t[:4]...)
				}
			}
			if len(v) > 0 {
				out = append(out, capability{code: c.code, value: v})
			}
		default:
			out = append(out, c)
		}
	}
	return out
}

// Negotiated is what both OPENs of a session agreed on, as far as the relay
// encodes or decodes anything.
type Negotiated struct {
	// AddPathSend: the speaker sends path identifiers for the family (RFC 7911).
	AddPathSend map[Family]bool
	// ExtendedMessage: messages up to 65535 bytes (RFC 8654).
	ExtendedMessage bool
	// HardReset: both sides sent the graceful restart N bit (RFC 8538).
	HardReset bool
	// GracefulRestart: both sides sent the graceful restart capability.
	GracefulRestart bool
	// Families both sides support.
	Families []Family
}

// Negotiate combines the speaker's (local) and the router's (remote) OPEN.
func Negotiate(local, remote *Open) Negotiated {
	n := Negotiated{
		AddPathSend:     map[Family]bool{},
		ExtendedMessage: local.ExtendedMessage && remote.ExtendedMessage,
		GracefulRestart: local.GracefulRestart && remote.GracefulRestart,
		HardReset:       local.GracefulRestart && remote.GracefulRestart && local.Notification && remote.Notification,
	}
	for f, m := range local.AddPath {
		if m&addPathSend != 0 && remote.AddPath[f]&addPathReceive != 0 {
			n.AddPathSend[f] = true
		}
	}
	for _, f := range local.Families {
		if slices.Contains(remote.Families, f) {
			n.Families = append(n.Families, f)
		}
	}
	return n
}

// MaxLen is the longest message the session allows.
func (n Negotiated) MaxLen() int {
	if n.ExtendedMessage {
		return MaxExtendedLen
	}
	return MaxLen
}
