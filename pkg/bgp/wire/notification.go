package wire

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Notification is a BGP NOTIFICATION.
type Notification struct {
	Code, Subcode uint8
	Data          []byte
}

// Cease is a Cease NOTIFICATION with a subcode and, for administrative shutdown
// and reset, a shutdown communication (RFC 9003; cut to 255 bytes at a rune).
func Cease(sub uint8, communication string) Notification {
	n := Notification{Code: CodeCease, Subcode: sub}
	if communication != "" && (sub == SubCeaseAdminShutdown || sub == SubCeaseAdminReset) {
		c := communication
		for len(c) > 255 {
			_, size := utf8.DecodeLastRuneInString(c)
			c = c[:len(c)-size]
		}
		n.Data = append([]byte{byte(len(c))}, c...)
	}
	return n
}

// HardReset wraps n in a Cease Hard Reset (RFC 8538 section 3: the data is the
// encapsulated error code, subcode and data).
func HardReset(n Notification) Notification {
	if n.Code == CodeCease && n.Subcode == SubCeaseHardReset {
		return n
	}
	return Notification{Code: CodeCease, Subcode: SubCeaseHardReset, Data: append([]byte{n.Code, n.Subcode}, n.Data...)}
}

// Bytes is the NOTIFICATION on the wire (data cut to fit one message).
func (n Notification) Bytes() []byte {
	d := n.Data
	if len(d) > MaxLen-HeaderLen-2 {
		d = d[:MaxLen-HeaderLen-2]
	}
	return frame(TypeNotification, append([]byte{n.Code, n.Subcode}, d...))
}

// ParseNotification reads a NOTIFICATION body (at least 2 bytes, which ReadMessage
// guarantees).
func ParseNotification(body []byte) Notification {
	n := Notification{Code: body[0], Subcode: body[1]}
	if len(body) > 2 {
		n.Data = append([]byte(nil), body[2:]...)
	}
	return n
}

// Inner is what a Hard Reset encapsulates; ok is false for any other
// notification or a Hard Reset without a valid encapsulated code.
func (n Notification) Inner() (Notification, bool) {
	if n.Code != CodeCease || n.Subcode != SubCeaseHardReset || len(n.Data) < 2 || n.Data[0] < CodeHeader || n.Data[0] > CodeRouteRefresh {
		return Notification{}, false
	}
	return Notification{Code: n.Data[0], Subcode: n.Data[1], Data: n.Data[2:]}, true
}

// Communication is the shutdown communication of an administrative shutdown or
// reset (RFC 9003), "" if there is none or it is malformed.
func (n Notification) Communication() string {
	if n.Code != CodeCease || (n.Subcode != SubCeaseAdminShutdown && n.Subcode != SubCeaseAdminReset) || len(n.Data) == 0 {
		return ""
	}
	l := int(n.Data[0])
	if l == 0 || l > len(n.Data)-1 || !utf8.Valid(n.Data[1:1+l]) {
		return ""
	}
	return strings.ToValidUTF8(string(n.Data[1:1+l]), "?")
}

// sanitized is what GoBGP is given of a router's NOTIFICATION: code and subcode,
// a Hard Reset's encapsulated code and subcode, a well-formed shutdown
// communication; no other data.
func (n Notification) sanitized() Notification {
	out := Notification{Code: n.Code, Subcode: n.Subcode}
	if in, ok := n.Inner(); ok {
		out.Data = []byte{in.Code, in.Subcode}
		if c := in.Communication(); c != "" {
			out.Data = append(out.Data, Cease(in.Subcode, c).Data...)
		}
		return out
	}
	if c := n.Communication(); c != "" {
		out.Data = Cease(n.Subcode, c).Data
	}
	return out
}

var codeNames = map[uint8]string{
	CodeHeader: "Message Header Error", CodeOpen: "OPEN Message Error", CodeUpdate: "UPDATE Message Error",
	CodeHoldTimer: "Hold Timer Expired", CodeFSM: "Finite State Machine Error", CodeCease: "Cease",
	CodeRouteRefresh: "ROUTE-REFRESH Message Error",
}

var ceaseNames = map[uint8]string{
	1: "Maximum Number of Prefixes Reached", 2: "Administrative Shutdown", 3: "Peer De-configured",
	4: "Administrative Reset", 5: "Connection Rejected", 6: "Other Configuration Change",
	7: "Connection Collision Resolution", 8: "Out of Resources", 9: "Hard Reset", 10: "BFD Down",
}

// String is "code/subcode (names)", the encapsulated notification of a Hard
// Reset and a shutdown communication included.
func (n Notification) String() string {
	name := codeNames[n.Code]
	if name == "" {
		name = "Unknown Error Code"
	}
	if n.Code == CodeCease {
		if s := ceaseNames[n.Subcode]; s != "" {
			name += "/" + s
		}
	}
	s := fmt.Sprintf("%d/%d (%s)", n.Code, n.Subcode, name)
	if in, ok := n.Inner(); ok {
		s += " of " + in.String()
	} else if c := n.Communication(); c != "" {
		s += fmt.Sprintf(" %q", c)
	}
	return s
}
