package bfd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestPeerConfigValidation(t *testing.T) {
	ll := netip.MustParseAddr("fe80::1")
	for _, tc := range []struct {
		name    string
		cfg     PeerConfig
		wantErr []string // substrings; empty: valid
		check   func(PeerConfig) bool
	}{
		{name: "defaults", cfg: PeerConfig{Peer: addrB, Local: addrA},
			check: func(c PeerConfig) bool {
				return c.DesiredMinTx == 300*ms && c.RequiredMinRx == 300*ms && c.DetectMult == 3
			}},
		{name: "mapped addresses unmapped", cfg: PeerConfig{Peer: netip.MustParseAddr("::ffff:10.0.0.2"), Local: netip.MustParseAddr("::ffff:10.0.0.1")},
			check: func(c PeerConfig) bool { return c.Peer == addrB && c.Local == addrA }},
		{name: "link-local takes the interface as zone", cfg: PeerConfig{Peer: ll, Local: netip.MustParseAddr("fe80::2"), Interface: "eth0"},
			check: func(c PeerConfig) bool { return c.Peer.Zone() == "eth0" && c.Local.Zone() == "eth0" }},
		{name: "link-local zone names the interface", cfg: PeerConfig{Peer: ll.WithZone("eth1"), Local: netip.MustParseAddr("fd00::1")},
			check: func(c PeerConfig) bool {
				return c.Interface == "eth1" && c.Peer.Zone() == "eth1" && c.Local.Zone() == ""
			}},
		{name: "global address zone dropped", cfg: PeerConfig{Peer: netip.MustParseAddr("fd00::2%eth0"), Local: netip.MustParseAddr("fd00::1")},
			check: func(c PeerConfig) bool { return c.Peer.Zone() == "" && c.Interface == "" }},
		{name: "intervals too short", cfg: PeerConfig{Peer: addrB, Local: addrA, DesiredMinTx: 5 * ms, RequiredMinRx: time.Millisecond},
			wantErr: []string{"bfd.minTx: must be >= 10ms", "bfd.minRx: must be >= 10ms"}},
		{name: "interval too long", cfg: PeerConfig{Peer: addrB, Local: addrA, DesiredMinTx: 2 * time.Minute},
			wantErr: []string{"bfd.minTx: must be <= 1m0s"}},
		{name: "addresses missing", cfg: PeerConfig{}, wantErr: []string{"bfd.peer: required", "bfd.local: required"}},
		{name: "not unicast", cfg: PeerConfig{Peer: netip.MustParseAddr("224.0.0.5"), Local: netip.MustParseAddr("0.0.0.0")},
			wantErr: []string{"bfd.peer: 224.0.0.5 is not a unicast", "bfd.local: 0.0.0.0 is not a unicast"}},
		{name: "families differ", cfg: PeerConfig{Peer: addrB, Local: netip.MustParseAddr("fd00::1")}, wantErr: []string{"bfd.local: fd00::1 is not of the family"}},
		{name: "same address", cfg: PeerConfig{Peer: addrA, Local: addrA}, wantErr: []string{"bfd.local: must differ"}},
		{name: "link-local without interface", cfg: PeerConfig{Peer: ll, Local: netip.MustParseAddr("fe80::2")}, wantErr: []string{"bfd.interface: required"}},
		{name: "zone and interface differ", cfg: PeerConfig{Peer: ll.WithZone("eth1"), Local: netip.MustParseAddr("fe80::2"), Interface: "eth0"},
			wantErr: []string{`bfd.interface: "eth0" differs from the addresses' zone "eth1"`}},
		{name: "bad interface name", cfg: PeerConfig{Peer: addrB, Local: addrA, Interface: "a/b"}, wantErr: []string{`bfd.interface: "a/b" is not`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.normalize()
			if len(tc.wantErr) == 0 {
				if err != nil || (tc.check != nil && !tc.check(got)) {
					t.Errorf("normalize() = %+v, %v", got, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			s, _ := New(Options{Network: newFakeNet()})
			if aerr := s.AddPeer(tc.cfg); !errors.Is(aerr, ErrInvalidConfig) {
				t.Errorf("AddPeer: %v", aerr)
			}
		})
	}
}

// TestAddPeerIdempotentAndReplace: the same config changes nothing; new timers keep
// the session; a new local address replaces it (the old one says goodbye); adding
// back a session that is saying goodbye revives it.
func TestAddPeerIdempotentAndReplace(t *testing.T) {
	m := newSim(t)
	a, b := m.pair(PeerConfig{}, PeerConfig{})
	m.runUntil(5*time.Second, "both Up", bothUp(t, a, b))
	discr := session1(t, a, addrB).LocalDiscriminator
	cfg := PeerConfig{Peer: addrB, Local: addrA}
	for range 3 {
		if err := a.AddPeer(cfg); err != nil {
			t.Fatal(err)
		}
	}
	cfg.DetectMult = 5
	if err := a.AddPeer(cfg); err != nil {
		t.Fatal(err)
	}
	m.run(3 * time.Second)
	if st := session1(t, b, addrA); st.State != StateUp || st.LocalDiscriminator == 0 || st.DetectionTime != 1500*ms {
		t.Errorf("B after a new multiplier: %+v", st)
	}
	if st := session1(t, a, addrB); st.LocalDiscriminator != discr || st.State != StateUp {
		t.Errorf("A after re-adds: %+v", st)
	}

	// Revive: RemovePeer then AddPeer before the goodbye is over (B unanswering).
	m.net.drop = func(from, _ netip.Addr) bool { return from == addrB }
	a.RemovePeer(addrB)
	m.run(10 * ms)
	if err := a.AddPeer(cfg); err != nil {
		t.Fatal(err)
	}
	if st := session1(t, a, addrB); st.LocalDiscriminator != discr || st.State != StateDown {
		t.Errorf("revived: %+v", st)
	}
	m.net.drop = nil
	m.runUntil(5*time.Second, "Up after revival", bothUp(t, a, b))

	// Replace: a new local address is a new session; the old one says goodbye.
	other := netip.MustParseAddr("10.0.0.3")
	m.events = map[*Server][]SessionState{}
	if err := a.AddPeer(PeerConfig{Peer: addrB, Local: other}); err != nil {
		t.Fatal(err)
	}
	st := session1(t, a, addrB)
	if st.Local != other || st.LocalDiscriminator == discr || st.State != StateDown {
		t.Errorf("replaced: %+v", st)
	}
	m.run(2 * time.Second)
	if ev := m.events[a]; len(ev) == 0 || ev[0].State != StateAdminDown || ev[0].LocalDiscriminator != discr {
		t.Errorf("old session's events %+v", ev)
	}
}

// TestDemultiplex: what RFC 5880 6.8.6 and RFC 5881 say to discard is counted and
// dropped without touching the session.
func TestDemultiplex(t *testing.T) {
	m := newSim(t)
	a := m.server()
	if err := a.AddPeer(PeerConfig{Peer: addrB, Local: addrA}); err != nil {
		t.Fatal(err)
	}
	if err := a.AddPeer(PeerConfig{Peer: netip.MustParseAddr("10.0.1.2"), Local: netip.MustParseAddr("10.0.1.1")}); err != nil {
		t.Fatal(err)
	}
	m.run(time.Millisecond) // sockets open
	e := a.sessions[addrB]
	lis, other := e.lis, a.sessions[netip.MustParseAddr("10.0.1.2")].lis
	src := netip.AddrPortFrom(addrB, 50000)
	good := controlPacket{state: StateDown, detectMult: 3, myDiscr: 77, desiredMinTx: time.Second, requiredMinRx: time.Second}
	enc := func(f func(p *controlPacket)) []byte {
		p := good
		f(&p)
		return p.encode(nil)
	}
	for _, tc := range []struct {
		name   string
		r      received
		reason string
	}{
		{"malformed", received{lis: lis, data: []byte{1, 2, 3}, src: src, ttl: 255}, dropMalformed},
		{"TTL 254", received{lis: lis, data: enc(func(*controlPacket) {}), src: src, ttl: 254}, dropTTL},
		{"TTL unknown", received{lis: lis, data: enc(func(*controlPacket) {}), src: src, ttl: -1}, dropTTL},
		{"authentication", received{lis: lis, data: append(enc(func(p *controlPacket) { p.auth = true })[:3:3], append([]byte{26}, append(enc(func(*controlPacket) {})[4:], 1, 2)...)...), src: src, ttl: 255}, dropAuth},
		{"Up without Your Discriminator", received{lis: lis, data: enc(func(p *controlPacket) { p.state = StateUp }), src: src, ttl: 255}, dropNoDiscr},
		{"unknown Your Discriminator", received{lis: lis, data: enc(func(p *controlPacket) { p.yourDiscr = e.localDiscr + 1 }), src: src, ttl: 255}, dropNoSession},
		{"right discriminator, wrong source", received{lis: lis, data: enc(func(p *controlPacket) { p.yourDiscr = e.localDiscr }), src: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.9"), 50000), ttl: 255}, dropNoSession},
		{"unknown source", received{lis: lis, data: enc(func(*controlPacket) {}), src: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.9"), 50000), ttl: 255}, dropNoSession},
		{"other local address", received{lis: other, data: enc(func(*controlPacket) {}), src: src, ttl: 255}, dropNoSession},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := testutil.GetCounterMetricValue(droppedPackets.WithLabelValues(tc.reason))
			a.mu.Lock()
			out := a.receiveLocked(m.now, tc.r)
			a.mu.Unlock()
			after, _ := testutil.GetCounterMetricValue(droppedPackets.WithLabelValues(tc.reason))
			if len(out) != 0 || after != before+1 {
				t.Errorf("out %d, %s drops %v -> %v", len(out), tc.reason, before, after)
			}
			if e.state != StateDown || e.remoteDiscr != 0 {
				t.Errorf("session touched: %v remote %d", e.state, e.remoteDiscr)
			}
		})
	}
	// Accepted by source address, then by discriminator.
	a.mu.Lock()
	out := a.receiveLocked(m.now, received{lis: lis, data: good.encode(nil), src: src, ttl: 255})
	a.mu.Unlock()
	if e.state != StateInit || e.remoteDiscr != 77 || len(out) != 1 {
		t.Fatalf("by source: %v remote %d out %d", e.state, e.remoteDiscr, len(out))
	}
	p := good
	p.state, p.yourDiscr = StateInit, e.localDiscr
	a.mu.Lock()
	a.receiveLocked(m.now, received{lis: lis, data: p.encode(nil), src: src, ttl: 255})
	a.mu.Unlock()
	if e.state != StateUp {
		t.Errorf("by discriminator: %v", e.state)
	}
}

// FuzzReceive: arbitrary datagrams to a running session never panic; malformed ones
// are counted.
func FuzzReceive(f *testing.F) {
	f.Add((&controlPacket{state: StateDown, detectMult: 3, myDiscr: 1}).encode(nil), 255)
	f.Add([]byte{0x20, 0xc0, 3, 24, 0, 0, 0, 1, 0, 0, 0, 5}, 255)
	f.Add([]byte{}, 64)
	f.Fuzz(func(t *testing.T, b []byte, ttl int) {
		m := newSim(&testing.T{})
		a := m.server()
		a.log = ktesting.NewLogger(t, ktesting.NewConfig())
		if err := a.AddPeer(PeerConfig{Peer: addrB, Local: addrA}); err != nil {
			t.Fatal(err)
		}
		m.run(time.Millisecond)
		a.newDiscr = func() uint32 { return 5 }
		e := a.sessions[addrB]
		before, _ := testutil.GetCounterMetricValue(droppedPackets.WithLabelValues(dropMalformed))
		a.mu.Lock()
		a.receiveLocked(m.now, received{lis: e.lis, data: b, src: netip.AddrPortFrom(addrB, 49152), ttl: ttl})
		a.tickLocked(m.now.Add(time.Second))
		a.mu.Unlock()
		after, _ := testutil.GetCounterMetricValue(droppedPackets.WithLabelValues(dropMalformed))
		if _, err := decode(b); err != nil && after != before+1 {
			t.Errorf("malformed packet not counted (%v -> %v)", before, after)
		}
	})
}

func TestDiscriminatorsUniqueAndNonZero(t *testing.T) {
	s, err := New(Options{Network: newFakeNet()})
	if err != nil {
		t.Fatal(err)
	}
	seq := []uint32{0, 7, 7, 0, 7, 9}
	s.newDiscr = func() uint32 { d := seq[0]; seq = seq[1:]; return d }
	for i := range 2 {
		if err := s.AddPeer(PeerConfig{Peer: netip.AddrFrom4([4]byte{10, 0, 0, byte(10 + i)}), Local: addrA}); err != nil {
			t.Fatal(err)
		}
	}
	ss := s.Sessions()
	if ss[0].LocalDiscriminator != 7 || ss[1].LocalDiscriminator != 9 {
		t.Errorf("discriminators %d %d", ss[0].LocalDiscriminator, ss[1].LocalDiscriminator)
	}
}

// TestSourcePorts: each session has its own source port in 49152-65535; ports in
// use elsewhere (EADDRINUSE) are skipped.
func TestSourcePorts(t *testing.T) {
	m := newSim(t)
	a := m.server()
	a.randN = func(n int) int { return n - 2 } // start at 65534
	m.net.busyPorts[65534] = true
	for i := range 3 {
		if err := a.AddPeer(PeerConfig{Peer: netip.AddrFrom4([4]byte{10, 0, 0, byte(10 + i)}), Local: addrA}); err != nil {
			t.Fatal(err)
		}
	}
	m.run(time.Millisecond)
	seen := map[uint16]bool{}
	for _, d := range m.net.dials {
		if d.Port() < minSourcePort || seen[d.Port()] {
			t.Errorf("port %d", d.Port())
		}
		seen[d.Port()] = true
	}
	if !seen[65535] || !seen[49152] || !seen[49153] || len(seen) != 3 {
		t.Errorf("ports %v, want 65535, 49152, 49153 (65534 busy)", seen)
	}
}

// TestSocketRetry: a local address that cannot be bound is reported in
// SessionState.Err and retried with backoff until it works.
func TestSocketRetry(t *testing.T) {
	m := newSim(t)
	a, b := m.pair(PeerConfig{}, PeerConfig{})
	m.net.failLocal[addrA] = fmt.Errorf("bind: %w", syscall.EADDRNOTAVAIL)
	t0 := m.now
	m.run(6500 * ms)
	st := session1(t, a, addrB)
	if !errors.Is(st.Err, syscall.EADDRNOTAVAIL) || st.State != StateDown {
		t.Fatalf("session %+v", st)
	}
	// Attempts at 0, 1s, 3s (backoff 1s, 2s, 4s...); the next at 7s.
	delete(m.net.failLocal, addrA)
	m.runUntil(5*time.Second, "both Up", bothUp(t, a, b))
	if d := m.now.Sub(t0); d < 7*time.Second || d > 7100*ms {
		t.Errorf("came up %v after start, want just after the retry at 7s", d)
	}
	if st := session1(t, a, addrB); st.Err != nil {
		t.Errorf("Err after recovery: %v", st.Err)
	}
}

// TestRunFakeClock drives two Servers through Run with a fake clock: they come Up,
// subscribers see every change in order, and the end of Run's context sends
// AdminDown, which the peer reports as Down with RemoteState AdminDown.
func TestRunFakeClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	fn := newFakeNet()
	newServer := func(local, peer netip.Addr) (*Server, *recorder) {
		s, err := New(Options{Clock: clk, Network: fn})
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		s.Subscribe(rec.add)
		if err := s.AddPeer(PeerConfig{Peer: peer, Local: local}); err != nil {
			t.Fatal(err)
		}
		return s, rec
	}
	a, recA := newServer(addrA, addrB)
	b, recB := newServer(addrB, addrA)
	_, tctx := ktesting.NewTestContext(t)
	ctxA, cancelA := context.WithCancel(tctx)
	ctxB, cancelB := context.WithCancel(tctx)
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() { doneA <- a.Run(ctxA) }()
	go func() { doneB <- b.Run(ctxB) }()
	stopClock := tick(clk)
	defer func() {
		cancelA()
		cancelB()
		<-doneB // its goodbye needs the clock
		stopClock()
	}()

	waitFor(t, "both Up", func() bool {
		return len(a.Sessions()) == 1 && a.Sessions()[0].State == StateUp && b.Sessions()[0].State == StateUp
	})
	if err := a.Run(ctxA); !errors.Is(err, ErrAlreadyRunning) {
		t.Errorf("second Run: %v", err)
	}
	waitFor(t, "subscribers see Up", func() bool { return recA.last().State == StateUp && recB.last().State == StateUp })
	for _, rec := range []*recorder{recA, recB} {
		ev := rec.all()
		for i := 1; i < len(ev); i++ {
			if ev[i].PreviousState != ev[i-1].State {
				t.Errorf("events out of order: %+v", ev)
			}
		}
	}
	cancelA()
	select {
	case err := <-doneA:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	if last := recA.last(); last.State != StateAdminDown || last.Diag != DiagAdminDown {
		t.Errorf("A's last event %+v (delivered before Run returned)", last)
	}
	waitFor(t, "B sees AdminDown", func() bool {
		st := b.Sessions()[0]
		return st.State == StateDown && st.RemoteState == StateAdminDown && st.Diag == DiagNeighborSignaledDown
	})
	if err := a.AddPeer(PeerConfig{Peer: addrB, Local: addrA}); !errors.Is(err, ErrServerClosed) {
		t.Errorf("AddPeer after Run: %v", err)
	}
	fn.mu.Lock()
	senders, conns := fn.senders, len(fn.conns)
	fn.mu.Unlock()
	if senders != 1 || conns != 1 {
		t.Errorf("after A stopped: %d senders, %d listeners open (want B's)", senders, conns)
	}
}

type recorder struct {
	mu sync.Mutex
	ev []SessionState
}

func (r *recorder) add(st SessionState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ev = append(r.ev, st)
}

func (r *recorder) all() []SessionState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]SessionState(nil), r.ev...)
}

func (r *recorder) last() SessionState {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ev) == 0 {
		return SessionState{State: StateDown}
	}
	return r.ev[len(r.ev)-1]
}

// tick advances the fake clock by 5ms every 100µs of real time until stopped.
func tick(clk *clocktesting.FakeClock) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Microsecond):
				clk.Step(5 * ms)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGoodbyeAckWithoutDiscriminator: a peer that forgets our discriminator when
// it goes Down (FRR does) still acknowledges the goodbye with its Down packet.
func TestGoodbyeAckWithoutDiscriminator(t *testing.T) {
	m := newSim(t)
	a, b := m.pair(PeerConfig{}, PeerConfig{})
	m.runUntil(5*time.Second, "both Up", bothUp(t, a, b))
	m.net.drop = func(from, _ netip.Addr) bool { return from == addrB }
	bDiscr := session1(t, b, addrA).LocalDiscriminator
	a.RemovePeer(addrB)
	m.run(time.Millisecond)
	a.mu.Lock()
	if len(a.leaving) != 1 {
		a.mu.Unlock()
		t.Fatalf("leaving %d", len(a.leaving))
	}
	var e *entry
	for le := range a.leaving {
		e = le
	}
	p := controlPacket{state: StateDown, diag: DiagNeighborSignaledDown, final: true, detectMult: 3, myDiscr: bDiscr, desiredMinTx: time.Second, requiredMinRx: time.Second}
	a.receiveLocked(m.now, received{lis: e.lis, data: p.encode(nil), src: netip.AddrPortFrom(addrB, 49999), ttl: 255})
	a.mu.Unlock()
	if !e.gone() {
		t.Error("goodbye not acknowledged")
	}
	m.run(time.Millisecond)
	if m.net.senders != 1 {
		t.Errorf("%d senders open, want B's only", m.net.senders)
	}
}
