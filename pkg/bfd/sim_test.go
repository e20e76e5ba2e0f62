package bfd

import (
	"net/netip"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestSimHandshake(t *testing.T) {
	m := newSim(t)
	a, b := m.pair(PeerConfig{}, PeerConfig{})
	t0 := m.now
	m.runUntil(5*time.Second, "both Up", bothUp(t, a, b))
	// Both start at once, so each goes Down -> Init -> Up within a few latencies.
	if d := m.now.Sub(t0); d > 10*ms {
		t.Errorf("handshake took %v", d)
	}
	for _, s := range []*Server{a, b} {
		ev := m.events[s]
		if len(ev) != 2 || ev[0].State != StateInit || ev[0].PreviousState != StateDown || ev[1].State != StateUp || ev[1].PreviousState != StateInit {
			t.Errorf("events = %+v, want Down->Init, Init->Up", ev)
		}
	}
	tUp := m.now
	m.run(5 * time.Second)
	for _, st := range []SessionState{session1(t, a, addrB), session1(t, b, addrA)} {
		if st.State != StateUp || st.TxInterval != 300*ms || st.DetectionTime != 900*ms || st.RemoteState != StateUp || st.RemoteDiscriminator == 0 {
			t.Errorf("session %+v", st)
		}
	}
	ab := m.packets(addrA, addrB, m.now.Add(-time.Hour))
	// While not Up the advertised Desired Min TX is 1s (RFC 5880 6.8.3); the packet
	// announcing Up carries the configured 300ms with Poll, and B answers with Final.
	var firstUp *sentPacket
	for i := range ab {
		p := ab[i].p
		if p.state != StateUp {
			if p.desiredMinTx != time.Second {
				t.Errorf("packet in state %v advertises Desired Min TX %v", p.state, p.desiredMinTx)
			}
			continue
		}
		if firstUp == nil {
			firstUp = &ab[i]
		}
	}
	if firstUp == nil || !firstUp.p.poll || firstUp.p.desiredMinTx != 300*ms {
		t.Fatalf("first Up packet = %+v", firstUp)
	}
	finals := 0
	for _, p := range m.packets(addrB, addrA, firstUp.at) {
		if p.p.final {
			finals++
		}
	}
	if finals == 0 {
		t.Error("B never answered A's Poll with Final")
	}
	// Steady state: periodic packets 75%-100% of 300ms apart.
	checkSpacing(t, m.packets(addrA, addrB, tUp.Add(time.Second)), 225*ms, 300*ms)
}

// checkSpacing checks the gaps between consecutive packets.
func checkSpacing(t *testing.T, ps []sentPacket, lo, hi time.Duration) (minGap, maxGap time.Duration) {
	t.Helper()
	if len(ps) < 3 {
		t.Fatalf("only %d packets", len(ps))
	}
	minGap, maxGap = time.Hour, 0
	for i := 1; i < len(ps); i++ {
		gap := ps[i].at.Sub(ps[i-1].at)
		minGap, maxGap = min(minGap, gap), max(maxGap, gap)
		if gap < lo || gap > hi {
			t.Errorf("gap %v between packets %d and %d, want %v..%v", gap, i-1, i, lo, hi)
		}
	}
	return minGap, maxGap
}

func TestSimNegotiation(t *testing.T) {
	for _, tc := range []struct {
		name         string
		a, b         PeerConfig
		aTx, aDetect time.Duration
		bTx, bDetect time.Duration
	}{
		{
			name: "peer requires a slower rate than we desire",
			a:    PeerConfig{DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms, DetectMult: 3},
			b:    PeerConfig{DesiredMinTx: 300 * ms, RequiredMinRx: time.Second, DetectMult: 3},
			aTx:  time.Second, aDetect: 900 * ms,
			bTx: 300 * ms, bDetect: 3 * time.Second,
		},
		{
			name: "we desire a slower rate than the peer requires",
			a:    PeerConfig{DesiredMinTx: time.Second, RequiredMinRx: 100 * ms, DetectMult: 5},
			b:    PeerConfig{DesiredMinTx: 100 * ms, RequiredMinRx: 100 * ms, DetectMult: 2},
			aTx:  time.Second, aDetect: 200 * ms,
			bTx: 100 * ms, bDetect: 5 * time.Second,
		},
		{
			name: "asymmetric",
			a:    PeerConfig{DesiredMinTx: 50 * ms, RequiredMinRx: 200 * ms, DetectMult: 3},
			b:    PeerConfig{DesiredMinTx: 150 * ms, RequiredMinRx: 70 * ms, DetectMult: 4},
			aTx:  70 * ms, aDetect: 800 * ms,
			bTx: 200 * ms, bDetect: 210 * ms,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newSim(t)
			a, b := m.pair(tc.a, tc.b)
			m.runUntil(10*time.Second, "both Up", bothUp(t, a, b))
			m.run(10 * time.Second) // Poll Sequences done
			sa, sb := session1(t, a, addrB), session1(t, b, addrA)
			if sa.TxInterval != tc.aTx || sa.DetectionTime != tc.aDetect {
				t.Errorf("A: tx %v detect %v, want %v %v", sa.TxInterval, sa.DetectionTime, tc.aTx, tc.aDetect)
			}
			if sb.TxInterval != tc.bTx || sb.DetectionTime != tc.bDetect {
				t.Errorf("B: tx %v detect %v, want %v %v", sb.TxInterval, sb.DetectionTime, tc.bTx, tc.bDetect)
			}
			since := m.now
			m.run(20 * tc.aTx)
			checkSpacing(t, m.packets(addrA, addrB, since), tc.aTx*3/4, tc.aTx)
			if len(m.events[a]) != 2 || len(m.events[b]) != 2 {
				t.Errorf("state changes: A %+v, B %+v", m.events[a], m.events[b])
			}
		})
	}
}

func TestJitterInterval(t *testing.T) {
	for _, tc := range []struct {
		mult   uint8
		rnd    float64
		lo, hi time.Duration
	}{
		{3, 0, 750 * ms, 750 * ms},
		{3, 0.5, 875 * ms, 875 * ms},
		{3, 0.999999, 999 * ms, time.Second},
		{1, 0, 750 * ms, 750 * ms},
		{1, 0.999999, 899 * ms, 900 * ms},
	} {
		if got := jitterInterval(time.Second, tc.mult, tc.rnd); got < tc.lo || got > tc.hi {
			t.Errorf("jitterInterval(1s, %d, %v) = %v, want %v..%v", tc.mult, tc.rnd, got, tc.lo, tc.hi)
		}
	}
}

// TestSimJitterBounds: periodic packets are jittered per packet, within 75-100% of
// the interval, or 75-90% with a multiplier of 1 (RFC 5880 6.8.7).
func TestSimJitterBounds(t *testing.T) {
	for _, tc := range []struct {
		mult   uint8
		lo, hi time.Duration
	}{{3, 75 * ms, 100 * ms}, {1, 75 * ms, 90 * ms}} {
		m := newSim(t)
		a, b := m.pair(PeerConfig{DesiredMinTx: 100 * ms, RequiredMinRx: 100 * ms, DetectMult: tc.mult}, PeerConfig{DesiredMinTx: 100 * ms, RequiredMinRx: 100 * ms})
		m.runUntil(10*time.Second, "both Up", bothUp(t, a, b))
		m.run(5 * time.Second)
		since := m.now
		m.run(50 * time.Second)
		minGap, maxGap := checkSpacing(t, m.packets(addrA, addrB, since), tc.lo, tc.hi)
		// ~500 random gaps spread over the range.
		if spread := tc.hi - tc.lo; minGap > tc.lo+spread/10 || maxGap < tc.hi-spread/10 {
			t.Errorf("mult %d: gaps %v..%v do not spread over %v..%v", tc.mult, minGap, maxGap, tc.lo, tc.hi)
		}
	}
}

// TestSimNotUpSlowRate: without an answer the session sends once a second (or at
// a slower configured rate), in state Down, with Your Discriminator 0.
func TestSimNotUpSlowRate(t *testing.T) {
	for _, tc := range []struct {
		tx     time.Duration
		lo, hi time.Duration
	}{{300 * ms, 750 * ms, time.Second}, {2 * time.Second, 1500 * ms, 2 * time.Second}} {
		m := newSim(t)
		a := m.server()
		if err := a.AddPeer(PeerConfig{Peer: addrB, Local: addrA, DesiredMinTx: tc.tx}); err != nil {
			t.Fatal(err)
		}
		m.run(20 * time.Second)
		ps := m.packets(addrA, addrB, m.now.Add(-time.Hour))
		checkSpacing(t, ps, tc.lo, tc.hi)
		for _, p := range ps {
			if p.p.state != StateDown || p.p.yourDiscr != 0 || p.p.desiredMinTx != max(tc.tx, time.Second) || p.p.poll || p.p.final {
				t.Fatalf("packet %+v", p.p)
			}
		}
	}
}

// TestSimDetection: a peer that falls silent is declared Down exactly one
// detection time after its last packet arrived, with diagnostic 1; the peer, which
// still hears us, goes Down with diagnostic 3; once packets flow again both come
// Up and stay Up.
func TestSimDetection(t *testing.T) {
	m := newSim(t)
	a, b := m.pair(PeerConfig{}, PeerConfig{})
	m.runUntil(5*time.Second, "both Up", bothUp(t, a, b))
	m.run(3 * time.Second)
	m.events = map[*Server][]SessionState{}
	cut := m.now
	m.net.drop = func(from, _ netip.Addr) bool { return from == addrB }
	m.runUntil(5*time.Second, "A Down", func() bool { return session1(t, a, addrB).State == StateDown })
	ps := m.packets(addrB, addrA, cut.Add(-time.Second))
	var last time.Time
	for _, p := range ps {
		if p.at.Before(cut) {
			last = p.at
		}
	}
	sa := session1(t, a, addrB)
	if want := last.Add(m.latency + 900*ms); !sa.Since.Equal(want) {
		t.Errorf("A went Down at %v, want last arrival + 900ms = %v", sa.Since.Sub(cut), want.Sub(cut))
	}
	if sa.Diag != DiagControlDetectionExpired || sa.PreviousState != StateUp || sa.RemoteState != StateDown || sa.RemoteDiscriminator != 0 {
		t.Errorf("A after detection: %+v", sa)
	}
	m.runUntil(2*time.Second, "B Down", func() bool { return session1(t, b, addrA).State == StateDown })
	if sb := session1(t, b, addrA); sb.Diag != DiagNeighborSignaledDown || sb.RemoteDiag != DiagControlDetectionExpired {
		t.Errorf("B: %+v", sb)
	}
	m.net.drop = nil
	m.runUntil(5*time.Second, "both Up again", bothUp(t, a, b))
	n := len(m.events[a]) + len(m.events[b])
	m.run(20 * 900 * ms)
	if got := len(m.events[a]) + len(m.events[b]); got != n {
		t.Errorf("flapped after recovery: %+v %+v", m.events[a][n/2:], m.events[b])
	}
}

// TestSimPollSequence: changed intervals go through a Poll Sequence without a
// state change; a longer transmit and a shorter receive interval take effect at
// the Final, the opposite changes at once (RFC 5880 6.8.3).
func TestSimPollSequence(t *testing.T) {
	cfg := func(tx, rx time.Duration) PeerConfig {
		return PeerConfig{DesiredMinTx: tx, RequiredMinRx: rx, DetectMult: 3}
	}
	for _, tc := range []struct {
		name                          string
		a0, b, a1                     PeerConfig
		pollTx, pollDetect            time.Duration // A while the Poll is outstanding
		afterTx, afterDetect, bDetect time.Duration
	}{
		{"slower tx waits for the Final", cfg(300*ms, 300*ms), cfg(300*ms, 300*ms), cfg(time.Second, 300*ms),
			300 * ms, 900 * ms, time.Second, 900 * ms, 3 * time.Second},
		{"faster tx at once", cfg(time.Second, 300*ms), cfg(300*ms, 300*ms), cfg(300*ms, 300*ms),
			300 * ms, 900 * ms, 300 * ms, 900 * ms, 900 * ms},
		{"faster rx waits for the Final", cfg(300*ms, 300*ms), cfg(100*ms, 300*ms), cfg(300*ms, 100*ms),
			300 * ms, 900 * ms, 300 * ms, 300 * ms, 900 * ms},
		{"slower rx at once", cfg(300*ms, 300*ms), cfg(100*ms, 300*ms), cfg(300*ms, time.Second),
			300 * ms, 3 * time.Second, 300 * ms, 3 * time.Second, 900 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newSim(t)
			a, b := m.pair(tc.a0, tc.b)
			m.runUntil(5*time.Second, "both Up", bothUp(t, a, b))
			m.run(10 * time.Second)
			m.events = map[*Server][]SessionState{}
			t1 := m.now
			a1 := tc.a1
			a1.Peer, a1.Local = addrB, addrA
			if err := a.AddPeer(a1); err != nil {
				t.Fatal(err)
			}
			if n := len(m.packets(addrA, addrB, t1)); n != 0 {
				t.Errorf("AddPeer sent %d packets at once; the Poll must ride the periodic packets", n)
			}
			m.runUntil(5*time.Second, "A sends a Poll", func() bool { return len(m.packets(addrA, addrB, t1)) > 0 })
			p := m.packets(addrA, addrB, t1)[0].p
			if !p.poll || p.final || p.desiredMinTx != a1.DesiredMinTx || p.requiredMinRx != a1.RequiredMinRx {
				t.Errorf("first packet after the change: %+v", p)
			}
			if sa := session1(t, a, addrB); sa.TxInterval != tc.pollTx || sa.DetectionTime != tc.pollDetect {
				t.Errorf("during the Poll: A tx %v detect %v, want %v %v", sa.TxInterval, sa.DetectionTime, tc.pollTx, tc.pollDetect)
			}
			m.runUntil(5*time.Second, "the Poll Sequence ends", func() bool { return !a.sessions[addrB].polling })
			m.run(10 * time.Second)
			sa, sb := session1(t, a, addrB), session1(t, b, addrA)
			if sa.TxInterval != tc.afterTx || sa.DetectionTime != tc.afterDetect || sb.DetectionTime != tc.bDetect {
				t.Errorf("after: A tx %v detect %v, B detect %v; want %v %v %v", sa.TxInterval, sa.DetectionTime, sb.DetectionTime, tc.afterTx, tc.afterDetect, tc.bDetect)
			}
			if len(m.events[a])+len(m.events[b]) != 0 {
				t.Errorf("state changed: %+v %+v", m.events[a], m.events[b])
			}
			for _, p := range m.packets(addrA, addrB, t1.Add(5*time.Second)) {
				if p.p.poll {
					t.Fatalf("still polling: %+v", p.p)
				}
			}
		})
	}
}

// TestSimChangeDuringPoll: a second change during a Poll Sequence waits for it
// to end (and for one packet without Final), then runs its own.
func TestSimChangeDuringPoll(t *testing.T) {
	m := newSim(t)
	a, b := m.pair(PeerConfig{}, PeerConfig{})
	m.runUntil(5*time.Second, "both Up", bothUp(t, a, b))
	m.run(5 * time.Second)
	m.events = map[*Server][]SessionState{}
	t1 := m.now
	for _, tx := range []time.Duration{time.Second, 2 * time.Second} {
		if err := a.AddPeer(PeerConfig{Peer: addrB, Local: addrA, DesiredMinTx: tx}); err != nil {
			t.Fatal(err)
		}
	}
	m.run(20 * time.Second)
	var advertised []time.Duration
	for _, p := range m.packets(addrA, addrB, t1) {
		if len(advertised) == 0 || advertised[len(advertised)-1] != p.p.desiredMinTx {
			advertised = append(advertised, p.p.desiredMinTx)
		}
	}
	if len(advertised) != 2 || advertised[0] != time.Second || advertised[1] != 2*time.Second {
		t.Errorf("advertised Desired Min TX sequence %v, want [1s 2s]", advertised)
	}
	if sa := session1(t, a, addrB); sa.TxInterval != 2*time.Second || a.sessions[addrB].polling {
		t.Errorf("A: %+v, polling %v", sa, a.sessions[addrB].polling)
	}
	if sb := session1(t, b, addrA); sb.DetectionTime != 6*time.Second {
		t.Errorf("B detection %v, want 6s", sb.DetectionTime)
	}
	if len(m.events[a])+len(m.events[b]) != 0 {
		t.Errorf("state changed: %+v %+v", m.events[a], m.events[b])
	}
}

// TestSimRemovePeer: RemovePeer says AdminDown with diagnostic 7; the peer goes
// Down with "Neighbor Signaled Session Down" and answers, and the session is
// forgotten with its sockets. A new session to the same peer comes Up again.
func TestSimRemovePeer(t *testing.T) {
	m := newSim(t)
	a, b := m.pair(PeerConfig{}, PeerConfig{})
	m.runUntil(5*time.Second, "both Up", bothUp(t, a, b))
	m.run(2 * time.Second)
	m.events = map[*Server][]SessionState{}
	t1 := m.now
	a.RemovePeer(addrB)
	if len(a.Sessions()) != 0 {
		t.Errorf("Sessions() after RemovePeer = %+v", a.Sessions())
	}
	m.run(2 * time.Second)
	sent := m.packets(addrA, addrB, t1)
	if len(sent) == 0 || len(sent) > goodbyePackets {
		t.Fatalf("%d goodbye packets", len(sent))
	}
	for _, p := range sent {
		if p.p.state != StateAdminDown || p.p.diag != DiagAdminDown {
			t.Errorf("goodbye packet %+v", p.p)
		}
	}
	if ev := m.events[a]; len(ev) != 1 || ev[0].State != StateAdminDown || ev[0].PreviousState != StateUp || ev[0].Diag != DiagAdminDown {
		t.Errorf("A events %+v", ev)
	}
	sb := session1(t, b, addrA)
	if sb.State != StateDown || sb.Diag != DiagNeighborSignaledDown || sb.RemoteState != StateAdminDown || sb.RemoteDiag != DiagAdminDown {
		t.Errorf("B: %+v", sb)
	}
	a.mu.Lock()
	left := len(a.leaving) + len(a.byDiscr) + len(a.listeners) + len(a.ports)
	a.mu.Unlock()
	if left != 0 || m.net.senders != 1 {
		t.Errorf("A still holds %d things; %d senders open (want B's only)", left, m.net.senders)
	}
	if err := a.AddPeer(PeerConfig{Peer: addrB, Local: addrA}); err != nil {
		t.Fatal(err)
	}
	m.runUntil(5*time.Second, "Up again", bothUp(t, a, b))
}

// TestSimRemovePeerUnanswered: without an answer the goodbye is three packets, at
// once and then at the rate of a session that is not Up.
func TestSimRemovePeerUnanswered(t *testing.T) {
	m := newSim(t)
	a, b := m.pair(PeerConfig{}, PeerConfig{RequiredMinRx: 200 * ms})
	m.runUntil(5*time.Second, "both Up", bothUp(t, a, b))
	m.run(2 * time.Second)
	m.net.drop = func(from, _ netip.Addr) bool { return from == addrB }
	t1 := m.now
	a.RemovePeer(addrB)
	m.run(3 * time.Second)
	sent := m.packets(addrA, addrB, t1)
	if len(sent) != goodbyePackets {
		t.Fatalf("%d goodbye packets, want %d", len(sent), goodbyePackets)
	}
	checkSpacing(t, sent, 750*ms, time.Second)
	if sent[0].at != t1 {
		t.Errorf("first goodbye %v after RemovePeer", sent[0].at.Sub(t1))
	}
	if m.net.senders != 1 {
		t.Errorf("%d senders open", m.net.senders)
	}
}

// TestSimPeerRestart: a peer killed without a goodbye is declared Down after the
// detection time; its successor (new discriminator) comes Up. A successor that
// starts before the detection time takes the session Down ("Neighbor Signaled
// Session Down") and Up again.
func TestSimPeerRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pause    time.Duration
		wantDiag Diag
	}{
		{"after detection", 3 * time.Second, DiagControlDetectionExpired},
		{"before detection", 100 * ms, DiagNeighborSignaledDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newSim(t)
			a, b := m.pair(PeerConfig{}, PeerConfig{})
			m.runUntil(5*time.Second, "both Up", bothUp(t, a, b))
			m.run(2 * time.Second)
			oldDiscr := session1(t, b, addrA).LocalDiscriminator
			m.events = map[*Server][]SessionState{}
			m.remove(b)
			m.run(tc.pause)
			b2 := m.server()
			if err := b2.AddPeer(PeerConfig{Peer: addrA, Local: addrB}); err != nil {
				t.Fatal(err)
			}
			m.runUntil(5*time.Second, "Up again", bothUp(t, a, b2))
			ev := m.events[a]
			if len(ev) < 2 || ev[0].State != StateDown || ev[0].Diag != tc.wantDiag || ev[len(ev)-1].State != StateUp {
				t.Errorf("A events %+v", ev)
			}
			if st := session1(t, a, addrB); st.RemoteDiscriminator == oldDiscr || st.RemoteDiscriminator != session1(t, b2, addrA).LocalDiscriminator {
				t.Errorf("A's remote discriminator %d (old %d)", st.RemoteDiscriminator, oldDiscr)
			}
			n := len(ev)
			m.run(30 * time.Second)
			if len(m.events[a]) != n {
				t.Errorf("flapped: %+v", m.events[a][n:])
			}
		})
	}
}
