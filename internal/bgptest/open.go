package bgptest

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
)

// Capability codes used here.
const (
	CapMultiprotocol   uint8 = 1
	CapRouteRefresh    uint8 = 2
	CapExtendedMessage uint8 = 6
	CapGracefulRestart uint8 = 64
	CapFourOctetAS     uint8 = 65
	CapAddPath         uint8 = 69
)

// AddPathMode is the ADD-PATH Send/Receive field (RFC 7911).
type AddPathMode uint8

// ADD-PATH modes.
const (
	AddPathReceive AddPathMode = 1
	AddPathSend    AddPathMode = 2
	AddPathBoth    AddPathMode = 3
)

// AddPath is one family's ADD-PATH capability tuple.
type AddPath struct {
	Family Family
	Mode   AddPathMode
}

// GracefulRestart is the graceful restart capability (RFC 4724, RFC 8538).
type GracefulRestart struct {
	Time         uint16 // seconds, 12 bits
	Restarting   bool   // R bit
	Notification bool   // N bit (RFC 8538)
	Families     []GRFamily
}

// GRFamily is one family of the graceful restart capability.
type GRFamily struct {
	Family     Family
	Forwarding bool // F bit
}

// Open is the OPEN a Session sends. Zero fields are sent as zero, except
// Version (0 means 4).
type Open struct {
	Version  uint8
	ASN      uint32 // sent in My AS as is when < 65536, else as AS_TRANS
	RouterID netip.Addr
	HoldTime uint16 // seconds
	// Capabilities, sent in this order: multiprotocol (one per family), route
	// refresh, 4-octet AS (carrying ASN), ADD-PATH, graceful restart, extended
	// message, then RawCapabilities.
	Families        []Family
	RouteRefresh    bool
	FourOctetAS     bool
	AddPath         []AddPath
	GracefulRestart *GracefulRestart
	ExtendedMessage bool
	// RawCapabilities are whole capability TLVs (code, length, value) appended
	// verbatim to the capabilities.
	RawCapabilities [][]byte
	// RawOptParams are appended verbatim after the capabilities optional
	// parameter(s) and counted in the optional parameters length.
	RawOptParams []byte
}

// Capabilities returns the capability TLVs o advertises, in order.
func (o Open) Capabilities() [][]byte {
	var caps [][]byte
	c := func(code uint8, v []byte) { caps = append(caps, append([]byte{code, byte(len(v))}, v...)) }
	for _, f := range o.Families {
		c(CapMultiprotocol, []byte{byte(f.AFI >> 8), byte(f.AFI), 0, f.SAFI})
	}
	if o.RouteRefresh {
		c(CapRouteRefresh, nil)
	}
	if o.FourOctetAS {
		c(CapFourOctetAS, binary.BigEndian.AppendUint32(nil, o.ASN))
	}
	if len(o.AddPath) > 0 {
		var v []byte
		for _, a := range o.AddPath {
			v = append(v, byte(a.Family.AFI>>8), byte(a.Family.AFI), a.Family.SAFI, byte(a.Mode))
		}
		c(CapAddPath, v)
	}
	if g := o.GracefulRestart; g != nil {
		hdr := g.Time & 0x0fff
		if g.Restarting {
			hdr |= 0x8000
		}
		if g.Notification {
			hdr |= 0x4000
		}
		v := binary.BigEndian.AppendUint16(nil, hdr)
		for _, f := range g.Families {
			var fl byte
			if f.Forwarding {
				fl = 0x80
			}
			v = append(v, byte(f.Family.AFI>>8), byte(f.Family.AFI), f.Family.SAFI, fl)
		}
		c(CapGracefulRestart, v)
	}
	if o.ExtendedMessage {
		c(CapExtendedMessage, nil)
	}
	return append(caps, o.RawCapabilities...)
}

// Body returns the OPEN message body. Capabilities go in as few capabilities
// optional parameters (type 2) as fit in 255 octets each.
func (o Open) Body() []byte {
	var params []byte
	var cur []byte
	flush := func() {
		if len(cur) > 0 {
			params = append(params, 2, byte(len(cur)))
			params = append(params, cur...)
			cur = nil
		}
	}
	for _, c := range o.Capabilities() {
		if len(cur)+len(c) > 255 {
			flush()
		}
		cur = append(cur, c...)
	}
	flush()
	params = append(params, o.RawOptParams...)

	v := o.Version
	if v == 0 {
		v = 4
	}
	myAS := uint16(o.ASN)
	if o.ASN > 0xffff {
		myAS = uint16(ASTrans)
	}
	b := []byte{v}
	b = binary.BigEndian.AppendUint16(b, myAS)
	b = binary.BigEndian.AppendUint16(b, o.HoldTime)
	id := o.RouterID
	if !id.Is4() {
		id = netip.IPv4Unspecified()
	}
	b = append(b, id.AsSlice()...)
	b = append(b, byte(len(params)))
	return append(b, params...)
}

// Message returns the whole OPEN message.
func (o Open) Message() []byte { return Msg(TypeOpen, o.Body()) }

// Capability is one capability as received.
type Capability struct {
	Code  uint8
	Value []byte
}

// OpenMsg is a decoded OPEN. The capability-derived fields summarise
// Capabilities; unknown capabilities, and known ones of a malformed length,
// are only in Capabilities.
type OpenMsg struct {
	Version      uint8
	MyAS         uint16
	HoldTime     uint16
	RouterID     netip.Addr
	Capabilities []Capability
	// OtherParams holds optional parameters other than capabilities (type, value).
	OtherParams []Capability

	ASN             uint32 // the 4-octet AS capability's value, else MyAS
	FourOctetAS     bool
	Families        []Family
	RouteRefresh    bool
	ExtendedMessage bool
	AddPath         []AddPath
	GracefulRestart *GracefulRestart
}

// AddPathMode returns the peer's ADD-PATH mode for f (0 if none).
func (m *OpenMsg) AddPathMode(f Family) AddPathMode {
	for _, a := range m.AddPath {
		if a.Family == f {
			return a.Mode
		}
	}
	return 0
}

// ParseOpen decodes an OPEN body (RFC 4271, capabilities per RFC 5492). It
// rejects malformed framing of the body, optional parameters and capabilities;
// it does not judge the values.
func ParseOpen(body []byte) (*OpenMsg, error) {
	if len(body) < 10 {
		return nil, fmt.Errorf("OPEN body of %d octets, want at least 10", len(body))
	}
	m := &OpenMsg{
		Version:  body[0],
		MyAS:     binary.BigEndian.Uint16(body[1:3]),
		HoldTime: binary.BigEndian.Uint16(body[3:5]),
		RouterID: netip.AddrFrom4([4]byte(body[5:9])),
	}
	m.ASN = uint32(m.MyAS)
	params := body[10:]
	if int(body[9]) != len(params) {
		return nil, fmt.Errorf("OPEN optional parameters length %d, %d octets follow", body[9], len(params))
	}
	for len(params) > 0 {
		if len(params) < 2 || len(params) < 2+int(params[1]) {
			return nil, fmt.Errorf("OPEN optional parameter truncated")
		}
		typ, v := params[0], params[2:2+int(params[1])]
		params = params[2+int(params[1]):]
		if typ != 2 {
			m.OtherParams = append(m.OtherParams, Capability{Code: typ, Value: v})
			continue
		}
		for len(v) > 0 {
			if len(v) < 2 || len(v) < 2+int(v[1]) {
				return nil, fmt.Errorf("OPEN capability truncated")
			}
			c := Capability{Code: v[0], Value: slices.Clone(v[2 : 2+int(v[1])])}
			v = v[2+int(v[1]):]
			m.Capabilities = append(m.Capabilities, c)
			m.apply(c)
		}
	}
	return m, nil
}

func (m *OpenMsg) apply(c Capability) {
	v := c.Value
	family := func(b []byte) Family { return Family{AFI: binary.BigEndian.Uint16(b), SAFI: b[2]} }
	switch c.Code {
	case CapMultiprotocol:
		if len(v) != 4 {
			return
		}
		m.Families = append(m.Families, Family{AFI: binary.BigEndian.Uint16(v), SAFI: v[3]})
	case CapRouteRefresh:
		m.RouteRefresh = true
	case CapExtendedMessage:
		m.ExtendedMessage = true
	case CapFourOctetAS:
		if len(v) != 4 {
			return
		}
		m.FourOctetAS, m.ASN = true, binary.BigEndian.Uint32(v)
	case CapAddPath:
		if len(v)%4 != 0 {
			return
		}
		for ; len(v) > 0; v = v[4:] {
			m.AddPath = append(m.AddPath, AddPath{Family: family(v), Mode: AddPathMode(v[3])})
		}
	case CapGracefulRestart:
		if len(v) < 2 || (len(v)-2)%4 != 0 {
			return
		}
		h := binary.BigEndian.Uint16(v)
		g := &GracefulRestart{Time: h & 0x0fff, Restarting: h&0x8000 != 0, Notification: h&0x4000 != 0}
		for v = v[2:]; len(v) > 0; v = v[4:] {
			g.Families = append(g.Families, GRFamily{Family: family(v), Forwarding: v[3]&0x80 != 0})
		}
		m.GracefulRestart = g
	}
}
