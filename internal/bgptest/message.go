// Package bgptest is a raw BGP-4 peer for tests: it speaks to a BGP speaker over
// TCP with the bytes a test chooses, well-formed or not, and decodes what the
// speaker sends back.
//
// Guarantees:
//   - Standard library only; nothing in it depends on the implementation under test.
//   - Builders never validate: they encode exactly what they are given (a length
//     that does not fit its field is truncated to the field), so malformed
//     messages are as easy to build as correct ones. Only the helpers documented
//     as computing a length do so.
//   - Every network operation is bounded: by the caller's context, or by
//     DefaultTimeout when that context has no deadline.
//   - The decoders never panic on any input; they return an error instead.
package bgptest

import (
	"encoding/binary"
	"net/netip"
)

// BGP message types (RFC 4271, RFC 2918).
const (
	TypeOpen         uint8 = 1
	TypeUpdate       uint8 = 2
	TypeNotification uint8 = 3
	TypeKeepalive    uint8 = 4
	TypeRouteRefresh uint8 = 5
)

// Message sizes (RFC 4271, RFC 8654).
const (
	HeaderLen             = 19
	MaxMessageLen         = 4096
	MaxExtendedMessageLen = 65535
)

// Path attribute flags (RFC 4271 section 4.3).
const (
	FlagOptional   uint8 = 0x80
	FlagTransitive uint8 = 0x40
	FlagPartial    uint8 = 0x20
	FlagExtLength  uint8 = 0x10
)

// Path attribute type codes used here.
const (
	AttrOrigin          uint8 = 1
	AttrASPath          uint8 = 2
	AttrNextHop         uint8 = 3
	AttrMED             uint8 = 4
	AttrLocalPref       uint8 = 5
	AttrAtomicAggregate uint8 = 6
	AttrAggregator      uint8 = 7
	AttrCommunities     uint8 = 8
	AttrMPReach         uint8 = 14
	AttrMPUnreach       uint8 = 15
	AttrExtCommunities  uint8 = 16
	AttrAS4Path         uint8 = 17
	AttrAS4Aggregator   uint8 = 18
	AttrIP6ExtCommunity uint8 = 25
	AttrAIGP            uint8 = 26
	AttrLargeCommunity  uint8 = 32
	AttrPrefixSID       uint8 = 40
)

// AS_PATH segment types (RFC 4271, RFC 5065).
const (
	ASSet       uint8 = 1
	ASSequence  uint8 = 2
	ASConfedSeq uint8 = 3
	ASConfedSet uint8 = 4
)

// ASTrans is the 2-octet placeholder for a 4-octet ASN (RFC 6793).
const ASTrans uint32 = 23456

// ORIGIN values.
const (
	OriginIGP        uint8 = 0
	OriginEGP        uint8 = 1
	OriginIncomplete uint8 = 2
)

// Family is an AFI/SAFI pair.
type Family struct {
	AFI  uint16
	SAFI uint8
}

// The families an export-only unicast speaker uses.
var (
	IPv4Unicast = Family{AFI: 1, SAFI: 1}
	IPv6Unicast = Family{AFI: 2, SAFI: 1}
)

// Marker is the all-ones marker of every valid message.
var Marker = [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Header is a message header written exactly as its fields say: change a field
// of NewHeader's result to craft a malformed message.
type Header struct {
	Marker [16]byte
	Length uint16
	Type   uint8
}

// NewHeader returns the correct header for a body of bodyLen bytes.
func NewHeader(typ uint8, bodyLen int) Header {
	return Header{Marker: Marker, Length: uint16(HeaderLen + bodyLen), Type: typ}
}

// Build returns the header followed by body.
func (h Header) Build(body []byte) []byte {
	b := make([]byte, 0, HeaderLen+len(body))
	b = append(b, h.Marker[:]...)
	b = binary.BigEndian.AppendUint16(b, h.Length)
	b = append(b, h.Type)
	return append(b, body...)
}

// Msg returns a well-formed message of type typ with body.
func Msg(typ uint8, body []byte) []byte { return NewHeader(typ, len(body)).Build(body) }

// Keepalive returns a KEEPALIVE message.
func Keepalive() []byte { return Msg(TypeKeepalive, nil) }

// Notification returns a NOTIFICATION with the error code, subcode and data.
func Notification(code, subcode uint8, data []byte) []byte {
	return Msg(TypeNotification, append([]byte{code, subcode}, data...))
}

// ShutdownCommunication returns the data of a Cease/Administrative Shutdown or
// Reset NOTIFICATION carrying msg as its shutdown communication (RFC 9003):
// msg's length in one octet (truncated to the octet), then msg.
func ShutdownCommunication(msg string) []byte {
	return append([]byte{byte(len(msg))}, msg...)
}

// RouteRefresh returns a ROUTE-REFRESH (RFC 2918) for f, subtype 0.
func RouteRefresh(f Family) []byte {
	return Msg(TypeRouteRefresh, []byte{byte(f.AFI >> 8), byte(f.AFI), 0, f.SAFI})
}

// UpdateBody returns an UPDATE body: the withdrawn-routes field, the path
// attributes (concatenated in the order given) and the NLRI field, with both
// length fields computed.
func UpdateBody(withdrawn []byte, attrs [][]byte, nlri []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(withdrawn)))
	b = append(b, withdrawn...)
	n := 0
	for _, a := range attrs {
		n += len(a)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	for _, a := range attrs {
		b = append(b, a...)
	}
	return append(b, nlri...)
}

// Update returns a well-framed UPDATE message (see UpdateBody).
func Update(withdrawn []byte, attrs [][]byte, nlri []byte) []byte {
	return Msg(TypeUpdate, UpdateBody(withdrawn, attrs, nlri))
}

// EndOfRIB returns the End-of-RIB marker for f (RFC 4724): an empty UPDATE for
// IPv4 unicast, an MP_UNREACH_NLRI with no NLRI otherwise.
func EndOfRIB(f Family) []byte {
	if f == IPv4Unicast {
		return Update(nil, nil, nil)
	}
	return Update(nil, [][]byte{MPUnreach(f, nil)}, nil)
}

// Attr returns a path attribute; the extended-length flag is added when the
// value does not fit in one length octet, and the length is computed.
func Attr(flags, typ uint8, value []byte) []byte {
	if len(value) > 255 {
		flags |= FlagExtLength
	}
	return AttrWithLength(flags, typ, uint16(len(value)), value)
}

// AttrWithLength returns a path attribute whose length field says length,
// whatever len(value) is: two octets if flags has FlagExtLength, else one
// (truncated).
func AttrWithLength(flags, typ uint8, length uint16, value []byte) []byte {
	b := []byte{flags, typ}
	if flags&FlagExtLength != 0 {
		b = binary.BigEndian.AppendUint16(b, length)
	} else {
		b = append(b, byte(length))
	}
	return append(b, value...)
}

// Origin returns a well-known ORIGIN attribute.
func Origin(v uint8) []byte { return Attr(FlagTransitive, AttrOrigin, []byte{v}) }

// Segment is one AS_PATH or AS4_PATH segment.
type Segment struct {
	Type uint8
	ASNs []uint32
}

// Seq is an AS_SEQUENCE segment.
func Seq(asns ...uint32) Segment { return Segment{Type: ASSequence, ASNs: asns} }

// ASPathValue encodes segments with 4-octet or 2-octet ASNs (2-octet encoding
// truncates each ASN to 16 bits; use ASTrans yourself where RFC 6793 wants it).
func ASPathValue(fourOctet bool, segs ...Segment) []byte {
	var b []byte
	for _, s := range segs {
		b = append(b, s.Type, byte(len(s.ASNs)))
		for _, a := range s.ASNs {
			if fourOctet {
				b = binary.BigEndian.AppendUint32(b, a)
			} else {
				b = binary.BigEndian.AppendUint16(b, uint16(a))
			}
		}
	}
	return b
}

// ASPath returns a well-known AS_PATH attribute.
func ASPath(fourOctet bool, segs ...Segment) []byte {
	return Attr(FlagTransitive, AttrASPath, ASPathValue(fourOctet, segs...))
}

// AS4Path returns an optional transitive AS4_PATH attribute (4-octet ASNs).
func AS4Path(segs ...Segment) []byte {
	return Attr(FlagOptional|FlagTransitive, AttrAS4Path, ASPathValue(true, segs...))
}

// NextHop returns a well-known NEXT_HOP attribute with the address's bytes.
func NextHop(a netip.Addr) []byte { return Attr(FlagTransitive, AttrNextHop, a.AsSlice()) }

// Communities returns an optional transitive COMMUNITIES attribute.
func Communities(cs ...uint32) []byte {
	var v []byte
	for _, c := range cs {
		v = binary.BigEndian.AppendUint32(v, c)
	}
	return Attr(FlagOptional|FlagTransitive, AttrCommunities, v)
}

// MPReach returns an optional non-transitive MP_REACH_NLRI attribute (RFC 4760)
// for f with the next hops' bytes concatenated (one, or global then link-local)
// and the NLRI field nlri (see Prefix and PathPrefix).
func MPReach(f Family, nextHops []netip.Addr, nlri []byte) []byte {
	var nh []byte
	for _, a := range nextHops {
		nh = append(nh, a.AsSlice()...)
	}
	v := []byte{byte(f.AFI >> 8), byte(f.AFI), f.SAFI, byte(len(nh))}
	v = append(v, nh...)
	v = append(v, 0) // reserved
	return Attr(FlagOptional, AttrMPReach, append(v, nlri...))
}

// MPUnreach returns an optional non-transitive MP_UNREACH_NLRI attribute for f.
func MPUnreach(f Family, nlri []byte) []byte {
	v := []byte{byte(f.AFI >> 8), byte(f.AFI), f.SAFI}
	return Attr(FlagOptional, AttrMPUnreach, append(v, nlri...))
}

// Prefix encodes prefixes in NLRI form: length in bits, then the fewest octets
// that hold it.
func Prefix(ps ...netip.Prefix) []byte {
	var b []byte
	for _, p := range ps {
		b = appendPrefix(b, p)
	}
	return b
}

// PathPrefix encodes one prefix preceded by an ADD-PATH path identifier (RFC 7911).
func PathPrefix(id uint32, p netip.Prefix) []byte {
	return appendPrefix(binary.BigEndian.AppendUint32(nil, id), p)
}

func appendPrefix(b []byte, p netip.Prefix) []byte {
	p = p.Masked()
	bits := p.Bits()
	b = append(b, byte(bits))
	return append(b, p.Addr().AsSlice()[:(bits+7)/8]...)
}
