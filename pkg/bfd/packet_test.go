package bfd

import (
	"encoding/hex"
	"errors"
	"testing"
	"time"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, p := range []controlPacket{
		{diag: DiagNone, state: StateDown, detectMult: 3, myDiscr: 1, desiredMinTx: time.Second, requiredMinRx: 300 * time.Millisecond},
		{diag: DiagAdminDown, state: StateAdminDown, detectMult: 1, myDiscr: 0xffffffff, yourDiscr: 7},
		{diag: DiagControlDetectionExpired, state: StateUp, poll: true, detectMult: 255, myDiscr: 42, yourDiscr: 43,
			desiredMinTx: 10 * time.Millisecond, requiredMinRx: 50 * time.Millisecond, minEchoRx: time.Microsecond},
		{state: StateInit, final: true, cpi: true, demand: true, detectMult: 5, myDiscr: 9, yourDiscr: 10},
	} {
		b := p.encode(nil)
		if len(b) != headerLen {
			t.Fatalf("encoded %d bytes", len(b))
		}
		got, err := decode(b)
		if err != nil {
			t.Fatalf("decode(%x): %v", b, err)
		}
		p.length = headerLen
		if got != p {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, p)
		}
	}
}

// TestDecodeWire checks the bit layout against a packet as FRR's bfdd sends it.
func TestDecodeWire(t *testing.T) {
	// Version 1, diag 0, state Up, Poll, mult 3, length 24, my 0xd2135448,
	// your 0x0000beef, tx 300000us, rx 300000us, echo 50000us.
	b, _ := hex.DecodeString("20e00318d21354480000beef000493e0000493e00000c350")
	p, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := controlPacket{state: StateUp, poll: true, detectMult: 3, length: 24, myDiscr: 0xd2135448, yourDiscr: 0xbeef,
		desiredMinTx: 300 * time.Millisecond, requiredMinRx: 300 * time.Millisecond, minEchoRx: 50 * time.Millisecond}
	if p != want {
		t.Errorf("got %+v\nwant %+v", p, want)
	}
	if enc := want.encode(nil); hex.EncodeToString(enc) != hex.EncodeToString(b) {
		t.Errorf("encode = %x, want %x", enc, b)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := (&controlPacket{state: StateDown, detectMult: 3, myDiscr: 1}).encode(nil)
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", good[:23]},
		{"version 0", mod(func(b []byte) []byte { b[0] &^= 0xe0; return b })},
		{"version 2", mod(func(b []byte) []byte { b[0] = b[0]&0x1f | 2<<5; return b })},
		{"length below 24", mod(func(b []byte) []byte { b[3] = 23; return b })},
		{"length beyond datagram", mod(func(b []byte) []byte { b[3] = 25; return b })},
		{"auth bit with length 24", mod(func(b []byte) []byte { b[1] |= flagAuth; return b })},
		{"detect mult 0", mod(func(b []byte) []byte { b[2] = 0; return b })},
		{"multipoint", mod(func(b []byte) []byte { b[1] |= flagMultipoint; return b })},
		{"my discriminator 0", mod(func(b []byte) []byte { copy(b[4:8], []byte{0, 0, 0, 0}); return b })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decode(tc.b); !errors.Is(err, errMalformed) {
				t.Errorf("decode(%x) = %v, want errMalformed", tc.b, err)
			}
		})
	}
	// Accepted: trailing bytes beyond Length, and the A bit with room for its section
	// (the Server drops those as "auth").
	if _, err := decode(append(append([]byte(nil), good...), 1, 2, 3)); err != nil {
		t.Errorf("trailing bytes: %v", err)
	}
	withAuth := append(append([]byte(nil), good...), 1, 2)
	withAuth[1] |= flagAuth
	withAuth[3] = authHeaderLen
	if p, err := decode(withAuth); err != nil || !p.auth {
		t.Errorf("auth section: %+v, %v", p, err)
	}
}

func TestToMicrosSaturates(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want uint32
	}{{-time.Second, 0}, {0, 0}, {time.Microsecond, 1}, {1500 * time.Nanosecond, 1}, {time.Second, 1_000_000}, {2 * time.Hour, 0xffffffff}} {
		if got := toMicros(tc.d); got != tc.want {
			t.Errorf("toMicros(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestStateAndDiagStrings(t *testing.T) {
	if StateAdminDown.String() != "AdminDown" || StateUp.String() != "Up" || State(7).String() != "State(7)" {
		t.Error("State.String")
	}
	if DiagControlDetectionExpired.String() != "Control Detection Time Expired" || DiagAdminDown.String() != "Administratively Down" || Diag(31).String() != "Diag(31)" {
		t.Error("Diag.String")
	}
}

// FuzzDecode: any input decodes or is rejected with errMalformed, never panics;
// what decodes re-encodes to the same mandatory section (bar the Length and auth
// fields, which encode always writes as 24 and clear).
func FuzzDecode(f *testing.F) {
	f.Add((&controlPacket{state: StateDown, detectMult: 3, myDiscr: 1}).encode(nil))
	f.Add([]byte{0x20, 0xc4, 3, 26, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decode(b)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v does not wrap errMalformed", err)
			}
			return
		}
		if p.detectMult == 0 || p.myDiscr == 0 || p.multipt || int(p.length) > len(b) || p.length < headerLen {
			t.Fatalf("accepted invalid packet %+v from %x", p, b)
		}
		q := p
		q.auth, q.length = false, headerLen
		enc := q.encode(nil)
		want := append([]byte(nil), b[:headerLen]...)
		want[1] &^= flagAuth
		want[3] = headerLen
		if string(enc) != string(want) {
			t.Fatalf("re-encoded %x, want %x", enc, want)
		}
	})
}
