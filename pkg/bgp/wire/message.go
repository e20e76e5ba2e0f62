package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Message types (RFC 4271, RFC 2918).
const (
	TypeOpen         = 1
	TypeUpdate       = 2
	TypeNotification = 3
	TypeKeepalive    = 4
	TypeRouteRefresh = 5
)

// Sizes (RFC 4271, RFC 8654).
const (
	HeaderLen         = 19
	MaxLen            = 4096
	MaxExtendedLen    = 65535
	minOpenLen        = 29
	minUpdateLen      = 23
	minNotificationLn = 21
	routeRefreshLen   = 23
)

// NOTIFICATION error codes and the subcodes the relay sends (RFC 4271, RFC 4486,
// RFC 7313, RFC 8538, RFC 9384).
const (
	CodeHeader       = 1
	CodeOpen         = 2
	CodeUpdate       = 3
	CodeHoldTimer    = 4
	CodeFSM          = 5
	CodeCease        = 6
	CodeRouteRefresh = 7

	SubHeaderNotSynchronized = 1
	SubHeaderBadLength       = 2
	SubHeaderBadType         = 3

	SubOpenUnspecific       = 0
	SubOpenVersion          = 1
	SubOpenBadIdentifier    = 3
	SubOpenBadHoldTime      = 6
	SubFSMOpenSent          = 1
	SubFSMOpenConfirm       = 2
	SubFSMEstablished       = 3
	SubRouteRefreshBadLen   = 1
	SubCeaseAdminShutdown   = 2
	SubCeasePeerDeconfig    = 3
	SubCeaseAdminReset      = 4
	SubCeaseOtherConfChange = 6
	SubCeaseOutOfResources  = 8
	SubCeaseHardReset       = 9
	SubCeaseBFDDown         = 10
)

// ErrMalformed wraps every *MessageError: what the router sent cannot be taken.
var ErrMalformed = errors.New("malformed BGP message")

// MessageError is a message the relay refuses, with the NOTIFICATION that says why.
type MessageError struct {
	Notification Notification
	Reason       string
}

func (e *MessageError) Error() string {
	return fmt.Sprintf("%s (NOTIFICATION %s)", e.Reason, e.Notification)
}

// Unwrap makes every MessageError match ErrMalformed.
func (e *MessageError) Unwrap() error { return ErrMalformed }

func malformed(code, sub uint8, data []byte, format string, args ...any) *MessageError {
	return &MessageError{Notification: Notification{Code: code, Subcode: sub, Data: data}, Reason: fmt.Sprintf(format, args...)}
}

// Message is one BGP message: its type and its body (the bytes after the header).
type Message struct {
	Type uint8
	Body []byte
}

// Bytes is the message on the wire.
func (m Message) Bytes() []byte { return frame(m.Type, m.Body) }

func frame(typ uint8, body []byte) []byte {
	b := make([]byte, HeaderLen+len(body))
	for i := range 16 {
		b[i] = 0xff
	}
	binary.BigEndian.PutUint16(b[16:], uint16(HeaderLen+len(body)))
	b[18] = typ
	copy(b[HeaderLen:], body)
	return b
}

// keepalive is a KEEPALIVE on the wire.
var keepalive = frame(TypeKeepalive, nil)

// ReadMessage reads one message and checks its header as RFC 4271 section 6.1
// says: marker all ones, length within [19, maxLen] and within the bounds of its
// type, a known type. A header it refuses is a *MessageError (nothing more is read);
// an I/O error is returned as it is.
func ReadMessage(r io.Reader, maxLen int) (Message, error) {
	var h [HeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Message{}, err
	}
	for _, b := range h[:16] {
		if b != 0xff {
			return Message{}, malformed(CodeHeader, SubHeaderNotSynchronized, nil, "header marker is not all ones")
		}
	}
	n := int(binary.BigEndian.Uint16(h[16:]))
	typ := h[18]
	lenErr := func() error {
		return malformed(CodeHeader, SubHeaderBadLength, h[16:18:18], "message type %d with length %d", typ, n)
	}
	if n < HeaderLen || n > maxLen {
		return Message{}, lenErr()
	}
	switch typ {
	case TypeOpen:
		if n < minOpenLen || n > MaxLen { // RFC 8654: OPEN stays within 4096
			return Message{}, lenErr()
		}
	case TypeUpdate:
		if n < minUpdateLen {
			return Message{}, lenErr()
		}
	case TypeNotification:
		if n < minNotificationLn {
			return Message{}, lenErr()
		}
	case TypeKeepalive:
		if n != HeaderLen {
			return Message{}, lenErr()
		}
	case TypeRouteRefresh:
		if n < routeRefreshLen {
			return Message{}, lenErr()
		}
	default:
		return Message{}, malformed(CodeHeader, SubHeaderBadType, []byte{typ}, "unknown message type %d", typ)
	}
	body := make([]byte, n-HeaderLen)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Message{}, err
	}
	return Message{Type: typ, Body: body}, nil
}

// TypeName is the RFC name of a message type.
func TypeName(t uint8) string {
	switch t {
	case TypeOpen:
		return "OPEN"
	case TypeUpdate:
		return "UPDATE"
	case TypeNotification:
		return "NOTIFICATION"
	case TypeKeepalive:
		return "KEEPALIVE"
	case TypeRouteRefresh:
		return "ROUTE-REFRESH"
	}
	return fmt.Sprintf("type-%d", t)
}
