package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// State is a BFD session state (RFC 5880 section 4.1, the Sta field).
type State uint8

// Session states, with their wire values.
const (
	StateAdminDown State = 0
	StateDown      State = 1
	StateInit      State = 2
	StateUp        State = 3
)

// String returns the RFC 5880 name of the state.
func (s State) String() string {
	switch s {
	case StateAdminDown:
		return "AdminDown"
	case StateDown:
		return "Down"
	case StateInit:
		return "Init"
	case StateUp:
		return "Up"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// metricLabel is the state's value of the "state" metric label.
func (s State) metricLabel() string {
	switch s {
	case StateAdminDown:
		return "admin_down"
	case StateDown:
		return "down"
	case StateInit:
		return "init"
	case StateUp:
		return "up"
	}
	return "unknown"
}

// Diag is a BFD diagnostic code (RFC 5880 section 4.1): the reason for the last
// change of a session's state.
type Diag uint8

// Diagnostic codes, with their wire values.
const (
	DiagNone                        Diag = 0
	DiagControlDetectionExpired     Diag = 1
	DiagEchoFailed                  Diag = 2
	DiagNeighborSignaledDown        Diag = 3
	DiagForwardingPlaneReset        Diag = 4
	DiagPathDown                    Diag = 5
	DiagConcatenatedPathDown        Diag = 6
	DiagAdminDown                   Diag = 7
	DiagReverseConcatenatedPathDown Diag = 8
)

var diagNames = [...]string{
	"No Diagnostic",
	"Control Detection Time Expired",
	"Echo Function Failed",
	"Neighbor Signaled Session Down",
	"Forwarding Plane Reset",
	"Path Down",
	"Concatenated Path Down",
	"Administratively Down",
	"Reverse Concatenated Path Down",
}

// String returns the RFC 5880 name of the diagnostic.
func (d Diag) String() string {
	if int(d) < len(diagNames) {
		return diagNames[d]
	}
	return fmt.Sprintf("Diag(%d)", uint8(d))
}

// Wire format of the mandatory section (RFC 5880 section 4.1).
const (
	packetVersion = 1
	headerLen     = 24
	// authHeaderLen is the smallest packet with the A bit: the mandatory section
	// plus Auth Type and Auth Len.
	authHeaderLen = headerLen + 2
	// maxPacketLen bounds what a reader needs: the mandatory section plus the
	// largest authentication section (Keyed SHA1, 28 bytes) and some slack.
	maxPacketLen = 256

	flagPoll       = 0x20
	flagFinal      = 0x10
	flagCPI        = 0x08
	flagAuth       = 0x04
	flagDemand     = 0x02
	flagMultipoint = 0x01
)

// errMalformed is wrapped by every error decode returns for a packet that RFC
// 5880 section 6.8.6 says to discard before looking at any session.
var errMalformed = errors.New("malformed BFD control packet")

// controlPacket is a BFD Control packet's mandatory section. Intervals are carried
// on the wire in microseconds.
type controlPacket struct {
	diag                                    Diag
	state                                   State
	poll, final, cpi, auth, demand, multipt bool
	detectMult                              uint8
	myDiscr, yourDiscr                      uint32
	desiredMinTx, requiredMinRx, minEchoRx  time.Duration
	length                                  uint8
}

// decode parses b and applies the checks RFC 5880 section 6.8.6 makes before the
// session lookup: version 1, a Length field that covers the mandatory (and, with
// the A bit, the authentication) section and fits in b, a non-zero Detect Mult and
// My Discriminator, and a clear Multipoint bit. Failing packets return an error
// wrapping errMalformed. Bytes beyond Length are ignored.
func decode(b []byte) (controlPacket, error) {
	var p controlPacket
	if len(b) < headerLen {
		return p, fmt.Errorf("%w: %d bytes, want at least %d", errMalformed, len(b), headerLen)
	}
	if v := b[0] >> 5; v != packetVersion {
		return p, fmt.Errorf("%w: version %d", errMalformed, v)
	}
	p.diag = Diag(b[0] & 0x1f)
	p.state = State(b[1] >> 6)
	flags := b[1]
	p.poll = flags&flagPoll != 0
	p.final = flags&flagFinal != 0
	p.cpi = flags&flagCPI != 0
	p.auth = flags&flagAuth != 0
	p.demand = flags&flagDemand != 0
	p.multipt = flags&flagMultipoint != 0
	p.detectMult = b[2]
	p.length = b[3]
	want := headerLen
	if p.auth {
		want = authHeaderLen
	}
	if int(p.length) < want {
		return p, fmt.Errorf("%w: length field %d, want at least %d", errMalformed, p.length, want)
	}
	if int(p.length) > len(b) {
		return p, fmt.Errorf("%w: length field %d exceeds the %d bytes received", errMalformed, p.length, len(b))
	}
	if p.detectMult == 0 {
		return p, fmt.Errorf("%w: detect multiplier 0", errMalformed)
	}
	if p.multipt {
		return p, fmt.Errorf("%w: multipoint bit set", errMalformed)
	}
	p.myDiscr = binary.BigEndian.Uint32(b[4:8])
	if p.myDiscr == 0 {
		return p, fmt.Errorf("%w: my discriminator 0", errMalformed)
	}
	p.yourDiscr = binary.BigEndian.Uint32(b[8:12])
	p.desiredMinTx = fromMicros(binary.BigEndian.Uint32(b[12:16]))
	p.requiredMinRx = fromMicros(binary.BigEndian.Uint32(b[16:20]))
	p.minEchoRx = fromMicros(binary.BigEndian.Uint32(b[20:24]))
	return p, nil
}

// encode appends the packet's mandatory section (24 bytes, no authentication) to b.
func (p *controlPacket) encode(b []byte) []byte {
	flags := byte(p.state) << 6
	for _, f := range []struct {
		set bool
		bit byte
	}{{p.poll, flagPoll}, {p.final, flagFinal}, {p.cpi, flagCPI}, {p.auth, flagAuth}, {p.demand, flagDemand}, {p.multipt, flagMultipoint}} {
		if f.set {
			flags |= f.bit
		}
	}
	b = append(b, packetVersion<<5|byte(p.diag)&0x1f, flags, p.detectMult, headerLen)
	b = binary.BigEndian.AppendUint32(b, p.myDiscr)
	b = binary.BigEndian.AppendUint32(b, p.yourDiscr)
	b = binary.BigEndian.AppendUint32(b, toMicros(p.desiredMinTx))
	b = binary.BigEndian.AppendUint32(b, toMicros(p.requiredMinRx))
	return binary.BigEndian.AppendUint32(b, toMicros(p.minEchoRx))
}

func fromMicros(us uint32) time.Duration { return time.Duration(us) * time.Microsecond }

// toMicros converts d to the wire's microseconds, saturating at the field's range.
func toMicros(d time.Duration) uint32 {
	us := d / time.Microsecond
	switch {
	case us <= 0:
		return 0
	case us > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(us)
}
