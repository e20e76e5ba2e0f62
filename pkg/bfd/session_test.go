package bfd

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testSession(t *testing.T, st State) *session {
	t.Helper()
	cfg, err := PeerConfig{Peer: addrB, Local: addrA}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(cfg, 1, t0)
	switch st {
	case StateInit:
		s.receive(t0, &controlPacket{state: StateDown, detectMult: 3, myDiscr: 2, desiredMinTx: time.Second, requiredMinRx: time.Second})
	case StateUp:
		s.receive(t0, &controlPacket{state: StateInit, detectMult: 3, myDiscr: 2, yourDiscr: 1, desiredMinTx: time.Second, requiredMinRx: time.Second})
	case StateAdminDown:
		s.leave(t0)
	}
	if s.state != st {
		t.Fatalf("set up %v, got %v", st, s.state)
	}
	return s
}

// TestStateMachine is the table of RFC 5880 section 6.8.6.
func TestStateMachine(t *testing.T) {
	for _, tc := range []struct {
		local, received State
		want            State
		diag            Diag
	}{
		{StateDown, StateAdminDown, StateDown, DiagNone},
		{StateDown, StateDown, StateInit, DiagNone},
		{StateDown, StateInit, StateUp, DiagNone},
		{StateDown, StateUp, StateDown, DiagNone},
		{StateInit, StateAdminDown, StateDown, DiagNeighborSignaledDown},
		{StateInit, StateDown, StateInit, DiagNone},
		{StateInit, StateInit, StateUp, DiagNone},
		{StateInit, StateUp, StateUp, DiagNone},
		{StateUp, StateAdminDown, StateDown, DiagNeighborSignaledDown},
		{StateUp, StateDown, StateDown, DiagNeighborSignaledDown},
		{StateUp, StateInit, StateUp, DiagNone},
		{StateUp, StateUp, StateUp, DiagNone},
		{StateAdminDown, StateAdminDown, StateAdminDown, DiagAdminDown},
		{StateAdminDown, StateDown, StateAdminDown, DiagAdminDown},
		{StateAdminDown, StateInit, StateAdminDown, DiagAdminDown},
		{StateAdminDown, StateUp, StateAdminDown, DiagAdminDown},
	} {
		t.Run(tc.local.String()+"+"+tc.received.String(), func(t *testing.T) {
			s := testSession(t, tc.local)
			before := s.state
			now := t0.Add(time.Second)
			changed := s.receive(now, &controlPacket{state: tc.received, detectMult: 3, myDiscr: 2, yourDiscr: 1, desiredMinTx: time.Second, requiredMinRx: time.Second, poll: true})
			if s.state != tc.want || s.diag != tc.diag || changed != (before != tc.want) {
				t.Errorf("-> %v diag %v changed %v, want %v diag %v", s.state, s.diag, changed, tc.want, tc.diag)
			}
			// A Poll is answered with Final unless the packet was discarded (AdminDown).
			if s.finalDue != (tc.local != StateAdminDown) {
				t.Errorf("finalDue = %v", s.finalDue)
			}
			if tc.local == StateAdminDown && !s.lastRx.IsZero() {
				t.Error("a discarded packet restarted the detection timer")
			}
			if changed && !s.sendNow {
				t.Error("state change without an immediate packet")
			}
		})
	}
}

// TestSlowRateWhileNotUp: Desired Min TX is at least 1s in every state but Up
// (RFC 5880 6.8.3).
func TestSlowRateWhileNotUp(t *testing.T) {
	for _, st := range []State{StateDown, StateInit, StateUp, StateAdminDown} {
		s := testSession(t, st)
		want := time.Second
		if st == StateUp {
			want = DefaultDesiredMinTx
		}
		if p := s.packet(); p.desiredMinTx != want || p.requiredMinRx != DefaultRequiredMinRx || p.state != st {
			t.Errorf("%v: packet %+v, want Desired Min TX %v", st, p, want)
		}
	}
}

// TestPeerDemandMode: periodic packets stop while the peer runs Demand mode and
// both are Up, except for a Poll Sequence (RFC 5880 6.8.7).
func TestPeerDemandMode(t *testing.T) {
	jit := func(d time.Duration, _ uint8) time.Duration { return d }
	s := testSession(t, StateUp)
	s.polling = false
	now := t0.Add(time.Second)
	s.receive(now, &controlPacket{state: StateUp, demand: true, detectMult: 3, myDiscr: 2, yourDiscr: 1, desiredMinTx: 300 * ms, requiredMinRx: 300 * ms})
	s.sendNow = false
	for i := range 10 {
		if _, ok := s.transmit(now.Add(time.Duration(i)*time.Second), jit); ok {
			t.Fatal("periodic packet in Demand mode")
		}
	}
	s.polling = true
	if p, ok := s.transmit(now.Add(11*time.Second), jit); !ok || !p.poll {
		t.Errorf("Poll in Demand mode: %+v %v", p, ok)
	}
}

// TestRemoteMinRxZero: a peer asking for no packets gets none but the answer to
// its Poll.
func TestRemoteMinRxZero(t *testing.T) {
	jit := func(d time.Duration, _ uint8) time.Duration { return d }
	s := testSession(t, StateUp)
	now := t0.Add(time.Second)
	s.receive(now, &controlPacket{state: StateUp, detectMult: 3, myDiscr: 2, yourDiscr: 1, desiredMinTx: 300 * ms})
	s.transmit(now, jit)
	if _, ok := s.transmit(now.Add(10*time.Second), jit); ok {
		t.Error("periodic packet to a peer with Required Min RX 0")
	}
	s.receive(now, &controlPacket{state: StateUp, poll: true, detectMult: 3, myDiscr: 2, yourDiscr: 1, desiredMinTx: 300 * ms})
	if p, ok := s.transmit(now.Add(10*time.Second), jit); !ok || !p.final || p.poll {
		t.Errorf("answer to a Poll: %+v %v", p, ok)
	}
}

// TestDetectionWhileDown: a Down session forgets the peer's discriminator after a
// detection time of silence, without a state change (RFC 5880 6.8.1).
func TestDetectionWhileDown(t *testing.T) {
	s := testSession(t, StateDown)
	s.receive(t0, &controlPacket{state: StateAdminDown, detectMult: 3, myDiscr: 2, desiredMinTx: time.Second, requiredMinRx: time.Second})
	if s.remoteDiscr != 2 || s.state != StateDown {
		t.Fatalf("%+v", s)
	}
	if s.expire(t0.Add(2999 * ms)) {
		t.Fatal("expired early")
	}
	if s.expire(t0.Add(3 * time.Second)) {
		t.Error("state change while Down")
	}
	if s.remoteDiscr != 0 || !s.detectionDeadline().IsZero() {
		t.Errorf("remote discriminator %d, deadline %v", s.remoteDiscr, s.detectionDeadline())
	}
}
