package bfd

import (
	"net/netip"
	"time"
)

// goodbyePackets is how many AdminDown packets a session sends when it is removed
// or the Server stops, unless the peer acknowledges with Down earlier.
const goodbyePackets = 3

// session is one BFD session: the state variables of RFC 5880 section 6.8.1 and its
// timers. Its methods are deterministic functions of the packets and times passed
// in; the Server owns sockets, clock and locking.
type session struct {
	cfg PeerConfig // normalized

	localDiscr, remoteDiscr uint32
	state, prevState        State
	remoteState             State
	diag, remoteDiag        Diag
	remoteMinRx             time.Duration // bfd.RemoteMinRxInterval
	remoteMinTx             time.Duration // the peer's last Desired Min TX
	remoteMult              uint8         // the peer's last Detect Mult; 0 until heard
	remoteDemand            bool          // bfd.RemoteDemandMode

	// Timer parameters (section 6.8.3). advTx and advRx are bfd.DesiredMinTxInterval
	// and bfd.RequiredMinRxInterval as sent; effTx and effRx are the values this side
	// uses for its own transmit interval and detection time, which lag behind during
	// a Poll Sequence when the change would otherwise break a promise to the peer.
	advTx, advRx, effTx, effRx time.Duration
	polling                    bool // a Poll Sequence is in progress
	settled                    bool // a packet without Final arrived since the last Poll Sequence ended
	finalDue                   bool // answer a Poll: send a packet with Final at once
	sendNow                    bool // the state changed: send at once

	since  time.Time // of the last state change
	lastRx time.Time // last packet received; zero when the detection timer is stopped
	lastTx time.Time // last packet sent
	nextTx time.Time // next periodic packet

	// Removal: the session says AdminDown goodbyePackets times (or until the peer
	// reports Down), then is forgotten.
	leaving      bool
	goodbyeLeft  int
	goodbyeAcked bool
}

func newSession(cfg PeerConfig, discr uint32, now time.Time) *session {
	s := &session{
		cfg:         cfg,
		localDiscr:  discr,
		state:       StateDown,
		prevState:   StateDown,
		remoteState: StateDown,
		remoteMinRx: time.Microsecond, // RFC 5880 section 6.8.1: initialized to 1
		settled:     true,
		since:       now,
		nextTx:      now, // active role: start sending at once
	}
	s.advTx, s.advRx = s.wantTimers()
	s.effTx, s.effRx = s.advTx, s.advRx
	return s
}

// wantTimers returns the Desired Min TX and Required Min RX the configuration and
// the state call for: Desired Min TX at least one second while not Up.
func (s *session) wantTimers() (tx, rx time.Duration) {
	tx, rx = s.cfg.DesiredMinTx, s.cfg.RequiredMinRx
	if s.state != StateUp && tx < slowTxInterval {
		tx = slowTxInterval
	}
	return tx, rx
}

// txInterval is the negotiated transmit interval before jitter: the larger of our
// Desired Min TX in effect and the peer's Required Min RX (sections 6.8.2, 6.8.7).
func (s *session) txInterval() time.Duration { return max(s.effTx, s.remoteMinRx) }

// detectionTime is the peer's Detect Mult times the larger of our Required Min RX
// in effect and the peer's Desired Min TX (section 6.8.4); zero before the first
// packet from the peer.
func (s *session) detectionTime() time.Duration {
	if s.remoteMult == 0 {
		return 0
	}
	return time.Duration(s.remoteMult) * max(s.effRx, s.remoteMinTx)
}

// periodic reports whether periodic transmission is allowed (section 6.8.7): not
// when the peer's Required Min RX is zero, nor when the peer runs Demand mode and
// no Poll Sequence is under way.
func (s *session) periodic() bool {
	if s.leaving {
		return s.goodbyeLeft > 0
	}
	if s.remoteMinRx == 0 {
		return false
	}
	return !(s.remoteDemand && s.state == StateUp && s.remoteState == StateUp) || s.polling
}

// setState moves to st with diagnostic d, adjusts the timers the state governs, and
// asks for a packet to be sent at once.
func (s *session) setState(now time.Time, st State, d Diag) {
	s.prevState, s.state, s.diag, s.since = s.state, st, d, now
	s.sendNow = true
	s.updateTimers(now)
}

// updateTimers brings the advertised intervals in line with wantTimers, starting a
// Poll Sequence whenever they change (section 6.8.3). While Up, a longer transmit
// interval and a shorter receive interval take effect only when the peer has
// answered the Poll; a change arriving during a Poll Sequence waits for it to end
// and for one more packet without Final (so the Final is unambiguous). While not Up
// nothing depends on the old values, so changes apply at once.
func (s *session) updateTimers(now time.Time) {
	tx, rx := s.wantTimers()
	if tx == s.advTx && rx == s.advRx {
		return
	}
	old := s.txInterval()
	if s.state != StateUp {
		s.advTx, s.advRx, s.effTx, s.effRx = tx, rx, tx, rx
		s.polling = true
	} else {
		if s.polling || !s.settled {
			return
		}
		s.advTx, s.advRx = tx, rx
		s.effTx = min(s.effTx, tx)
		s.effRx = max(s.effRx, rx)
		s.polling = true
	}
	if s.txInterval() != old {
		s.rescheduled()
	}
}

// rescheduled makes the next periodic packet follow the new interval: it is due
// one (jittered) interval after the last one, so nextTx is cleared here and set by
// the Server, which owns the jitter source.
func (s *session) rescheduled() { s.nextTx = time.Time{} }

// receive processes a control packet demultiplexed to s (RFC 5880 section 6.8.6,
// from "Set bfd.RemoteDiscr" on). It reports whether the session state changed.
func (s *session) receive(now time.Time, p *controlPacket) bool {
	oldInterval := s.txInterval()
	s.remoteDiscr = p.myDiscr
	s.remoteState = p.state
	s.remoteDiag = p.diag
	s.remoteDemand = p.demand
	s.remoteMinRx = p.requiredMinRx
	s.remoteMinTx = p.desiredMinTx
	s.remoteMult = p.detectMult
	if p.final {
		if s.polling {
			s.polling, s.settled = false, false
			s.effTx, s.effRx = s.advTx, s.advRx
		}
	} else {
		s.settled = true
	}
	if s.state == StateAdminDown {
		// Discarded from here on (section 6.8.6), but a goodbye may be acknowledged.
		if s.leaving && (p.state == StateDown || p.state == StateAdminDown) {
			s.goodbyeAcked = true
		}
		if s.txInterval() != oldInterval {
			s.rescheduled()
		}
		return false
	}
	s.lastRx = now // received, for the detection timer
	if p.poll {
		s.finalDue = true
	}
	changed := false
	switch {
	case p.state == StateAdminDown:
		if s.state != StateDown {
			s.setState(now, StateDown, DiagNeighborSignaledDown)
			changed = true
		}
	case s.state == StateDown:
		switch p.state {
		case StateDown:
			s.setState(now, StateInit, DiagNone)
			changed = true
		case StateInit:
			s.setState(now, StateUp, DiagNone)
			changed = true
		}
	case s.state == StateInit:
		if p.state == StateInit || p.state == StateUp {
			s.setState(now, StateUp, DiagNone)
			changed = true
		}
	default: // Up
		if p.state == StateDown {
			s.setState(now, StateDown, DiagNeighborSignaledDown)
			changed = true
		}
	}
	s.updateTimers(now) // also starts a change that waited for a Poll Sequence to end
	if s.txInterval() != oldInterval {
		s.rescheduled()
	}
	return changed
}

// expire applies the detection timer (sections 6.8.1, 6.8.4): after a Detection
// Time without packets the peer's discriminator is forgotten, and an Init or Up
// session goes Down with "Control Detection Time Expired". It reports whether the
// state changed.
func (s *session) expire(now time.Time) bool {
	d := s.detectionTime()
	if s.lastRx.IsZero() || d == 0 || now.Before(s.lastRx.Add(d)) {
		return false
	}
	s.lastRx = time.Time{}
	s.remoteDiscr = 0
	s.remoteState = StateDown
	s.remoteDemand = false
	if s.state == StateInit || s.state == StateUp {
		s.setState(now, StateDown, DiagControlDetectionExpired)
		return true
	}
	return false
}

// detectionDeadline is when expire will act, or zero.
func (s *session) detectionDeadline() time.Time {
	d := s.detectionTime()
	if s.lastRx.IsZero() || d == 0 {
		return time.Time{}
	}
	return s.lastRx.Add(d)
}

// leave starts the goodbye: AdminDown with "Administratively Down" (RFC 5880
// section 6.8.16), sent at once and then at the (not Up, so at most once a
// second) periodic rate, goodbyePackets times or until the peer reports Down. It
// reports whether the state changed.
func (s *session) leave(now time.Time) bool {
	if s.leaving {
		return false
	}
	s.leaving, s.goodbyeLeft, s.goodbyeAcked = true, goodbyePackets, false
	s.nextTx = now
	if s.state == StateAdminDown {
		return false
	}
	s.setState(now, StateAdminDown, DiagAdminDown)
	return true
}

// rejoin undoes leave: the session leaves AdminDown for Down (section 6.8.16).
func (s *session) rejoin(now time.Time) bool {
	if !s.leaving {
		return false
	}
	s.leaving, s.goodbyeLeft = false, 0
	s.setState(now, StateDown, DiagNone)
	s.rescheduled()
	return true
}

// gone reports whether a leaving session has said goodbye.
func (s *session) gone() bool {
	return s.leaving && (s.goodbyeLeft == 0 || s.goodbyeAcked)
}

// reconfigure applies a changed configuration with the same addresses and interface:
// new intervals go through a Poll Sequence, the session stays up.
func (s *session) reconfigure(now time.Time, cfg PeerConfig) {
	s.cfg = cfg
	if !s.leaving {
		s.updateTimers(now)
	}
}

// transmit returns the packet to send at now, if any, and schedules the next one;
// jitter returns a jittered interval (section 6.8.7). An answer to a Poll and a
// state change are sent at once; periodic packets follow the negotiated interval.
func (s *session) transmit(now time.Time, jitter func(time.Duration, uint8) time.Duration) (controlPacket, bool) {
	if s.nextTx.IsZero() {
		base := s.lastTx
		if base.IsZero() {
			base = now
		}
		s.nextTx = base.Add(s.interval(jitter))
	}
	immediate := s.finalDue || s.sendNow
	periodic := s.periodic() && !now.Before(s.nextTx)
	if !immediate && !periodic {
		return controlPacket{}, false
	}
	p := s.packet()
	s.finalDue = false
	if s.sendNow || periodic {
		s.sendNow = false
		s.lastTx = now
		s.nextTx = now.Add(s.interval(jitter))
		if s.leaving && s.goodbyeLeft > 0 {
			s.goodbyeLeft--
		}
	}
	return p, true
}

// interval is the spacing to the next periodic packet.
func (s *session) interval(jitter func(time.Duration, uint8) time.Duration) time.Duration {
	return jitter(s.txInterval(), s.cfg.DetectMult)
}

// packet builds the next control packet (section 6.8.7). A packet answering a Poll
// carries Final and never Poll (section 6.5).
func (s *session) packet() controlPacket {
	p := controlPacket{
		diag:          s.diag,
		state:         s.state,
		detectMult:    s.cfg.DetectMult,
		myDiscr:       s.localDiscr,
		yourDiscr:     s.remoteDiscr,
		desiredMinTx:  s.advTx,
		requiredMinRx: s.advRx,
	}
	if s.finalDue {
		p.final = true
	} else {
		p.poll = s.polling
	}
	return p
}

// deadline is the next time the session needs attention: a due packet, the
// detection timer, or zero when neither.
func (s *session) deadline(now time.Time) time.Time {
	if s.finalDue || s.sendNow || s.nextTx.IsZero() {
		return now
	}
	d := s.detectionDeadline()
	if s.periodic() && (d.IsZero() || s.nextTx.Before(d)) {
		d = s.nextTx
	}
	return d
}

// jitterInterval reduces interval by a random 0-25% (rnd in [0, 1)), or by 10-25%
// when detectMult is 1 (RFC 5880 section 6.8.7).
func jitterInterval(interval time.Duration, detectMult uint8, rnd float64) time.Duration {
	hi := 1.0
	if detectMult == 1 {
		hi = 0.9
	}
	return time.Duration(float64(interval) * (0.75 + rnd*(hi-0.75)))
}

// snapshot returns the session's public view.
func (s *session) snapshot() SessionState {
	return SessionState{
		Peer:                s.cfg.Peer,
		Local:               s.cfg.Local,
		Interface:           s.cfg.Interface,
		State:               s.state,
		PreviousState:       s.prevState,
		RemoteState:         s.remoteState,
		Diag:                s.diag,
		RemoteDiag:          s.remoteDiag,
		LocalDiscriminator:  s.localDiscr,
		RemoteDiscriminator: s.remoteDiscr,
		TxInterval:          s.txInterval(),
		DetectionTime:       s.detectionTime(),
		Since:               s.since,
	}
}

// SessionState is a snapshot of one session.
//
// A transition to Down with RemoteState AdminDown (Diag "Neighbor Signaled Session
// Down") means the peer shut the session down on purpose; RFC 5882 section 3.2 says
// not to treat that as a path failure.
type SessionState struct {
	Peer, Local netip.Addr
	Interface   string
	// State is the local session state; PreviousState the one before its last change.
	State, PreviousState State
	// RemoteState is the state the peer last reported (Down before any packet and
	// after the detection time expired).
	RemoteState State
	// Diag is the local diagnostic (why State last changed); RemoteDiag the one the
	// peer last sent.
	Diag, RemoteDiag Diag
	// LocalDiscriminator and RemoteDiscriminator identify the session on the wire;
	// RemoteDiscriminator is 0 until the peer is heard.
	LocalDiscriminator, RemoteDiscriminator uint32
	// TxInterval is the negotiated transmit interval before jitter: the larger of our
	// Desired Min TX in effect and the peer's Required Min RX.
	TxInterval time.Duration
	// DetectionTime is how long this side waits for a packet before declaring the
	// session down: the peer's Detect Mult times the larger of our Required Min RX in
	// effect and the peer's Desired Min TX. Zero until the peer is heard.
	DetectionTime time.Duration
	// Since is when State last changed (when the session was added, before that).
	Since time.Time
	// Err is the last error opening the session's sockets, nil once they are open
	// (opening is retried with backoff).
	Err error
}
