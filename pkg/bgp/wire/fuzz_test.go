package wire

import (
	"bytes"
	"testing"
)

// FuzzRouterBytes feeds arbitrary bytes, as a router could send them, through
// everything the relay does with a router's messages: framing, OPEN validation
// and re-encoding, End-of-RIB recognition, NOTIFICATION sanitizing. Nothing may
// panic, and a re-encoded OPEN must parse again with the same content.
func FuzzRouterBytes(f *testing.F) {
	f.Add(frame(TypeOpen, openBody(65001, 90, "10.0.0.2", mpCap(1, 1), capability{capGracefulRestart, []byte{0x40, 120}})))
	f.Add(frame(TypeUpdate, []byte{0, 0, 0, 0}))
	f.Add(endOfRIBBytes(IPv6Unicast))
	f.Add(frame(TypeNotification, []byte{6, 9, 6, 2, 3, 'b', 'y', 'e'}))
	f.Add(frame(TypeKeepalive, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			m, err := ReadMessage(r, MaxExtendedLen)
			if err != nil {
				return
			}
			switch m.Type {
			case TypeOpen:
				o, err := ParseOpen(m.Body)
				if err != nil {
					continue
				}
				again, err := ParseOpen(o.Bytes()[HeaderLen:])
				if err != nil {
					t.Fatalf("re-encoded OPEN does not parse: %v", err)
				}
				if again.AS != o.AS || again.GracefulRestart != o.GracefulRestart || again.Notification != o.Notification || again.ExtendedMessage != o.ExtendedMessage {
					t.Fatalf("re-encoded OPEN differs: %+v vs %+v", again, o)
				}
			case TypeUpdate:
				if f, ok := EndOfRIB(m.Body); ok {
					if g, ok := EndOfRIB(endOfRIBBytes(f)[HeaderLen:]); !ok || g != f {
						t.Fatalf("End-of-RIB of %v does not round-trip", f)
					}
				}
			case TypeNotification:
				n := ParseNotification(m.Body)
				_ = n.String()
				s := n.sanitized()
				if _, err := ReadMessage(bytes.NewReader(s.Bytes()), MaxLen); err != nil {
					t.Fatalf("sanitized NOTIFICATION does not frame: %v", err)
				}
			}
		}
	})
}

// FuzzSpeakerUpdates feeds arbitrary UPDATE bodies, as GoBGP could send them,
// into the record of what a router holds: nothing panics, the counts match the
// paths, and the withdrawals of everything leave nothing.
func FuzzSpeakerUpdates(f *testing.F) {
	f.Add(update4(nil, enc(false, 0, "198.51.100.1/32")), false)
	f.Add(update6(true, enc(true, 7, "2001:db8::/64"), nil), true)
	f.Fuzz(func(t *testing.T, body []byte, addPath bool) {
		n := Negotiated{AddPathSend: map[Family]bool{IPv4Unicast: addPath, IPv6Unicast: addPath}}
		r := newRIBOut()
		_ = r.applyUpdate(body, n)
		if r.count[IPv4Unicast]+r.count[IPv6Unicast] != len(r.paths) {
			t.Fatalf("counts %v for %d paths", r.count, len(r.paths))
		}
		applyWithdrawals(t, r, n)
		if len(r.paths) != 0 {
			t.Fatalf("%d paths after withdrawing everything", len(r.paths))
		}
	})
}
