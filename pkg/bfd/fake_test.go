package bfd

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
)

// fakeNet is an in-memory Network. In simulation mode (sim != nil) sent packets
// wait in a queue that the simulation delivers at virtual times; otherwise they go
// straight to the receiving fakeConn's channel (for tests of Run).
type fakeNet struct {
	mu        sync.Mutex
	sim       *sim
	conns     map[listenerKey]*fakeConn
	busyPorts map[uint16]bool                // Dial answers EADDRINUSE
	failLocal map[netip.Addr]error           // Listen fails for these local addresses
	drop      func(from, to netip.Addr) bool // nil: deliver everything
	ttl       int                            // TTL of delivered packets; 0 means 255
	dials     []netip.AddrPort               // every successful Dial's local address and port
	senders   int                            // open senders
}

func newFakeNet() *fakeNet {
	return &fakeNet{conns: map[listenerKey]*fakeConn{}, busyPorts: map[uint16]bool{}, failLocal: map[netip.Addr]error{}}
}

type fakeDatagram struct {
	data []byte
	src  netip.AddrPort
	ttl  int
}

type fakeConn struct {
	net    *fakeNet
	key    listenerKey
	ch     chan fakeDatagram
	closed chan struct{}
	once   sync.Once
}

func (n *fakeNet) Listen(local netip.Addr, ifname string) (PacketConn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failLocal[local]; err != nil {
		return nil, err
	}
	key := listenerKey{local, ifname}
	if n.conns[key] != nil {
		return nil, fmt.Errorf("listen %v: %w", key, syscall.EADDRINUSE)
	}
	c := &fakeConn{net: n, key: key, ch: make(chan fakeDatagram, 64), closed: make(chan struct{})}
	n.conns[key] = c
	return c, nil
}

func (c *fakeConn) ReadPacket(b []byte) (int, netip.AddrPort, int, error) {
	select {
	case d := <-c.ch:
		return copy(b, d.data), d.src, d.ttl, nil
	case <-c.closed:
		return 0, netip.AddrPort{}, -1, io.EOF
	}
}

func (c *fakeConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.net.mu.Lock()
		if c.net.conns[c.key] == c {
			delete(c.net.conns, c.key)
		}
		c.net.mu.Unlock()
	})
	return nil
}

func (n *fakeNet) Dial(local netip.Addr, port uint16, ifname string, peer netip.Addr) (Sender, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.busyPorts[port] {
		return nil, fmt.Errorf("bind %s: %w", netip.AddrPortFrom(local, port), syscall.EADDRINUSE)
	}
	n.dials = append(n.dials, netip.AddrPortFrom(local, port))
	n.senders++
	return &fakeSender{net: n, src: netip.AddrPortFrom(local, port), dst: peer, ifname: ifname}, nil
}

type fakeSender struct {
	net    *fakeNet
	src    netip.AddrPort
	dst    netip.Addr
	ifname string
	closed bool
}

func (s *fakeSender) Send(b []byte) error {
	n := s.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.closed {
		return fmt.Errorf("send on closed socket")
	}
	if n.drop != nil && n.drop(s.src.Addr(), s.dst) {
		return nil
	}
	ttl := n.ttl
	if ttl == 0 {
		ttl = requiredTTL
	}
	d := fakeDatagram{data: slices.Clone(b), src: s.src, ttl: ttl}
	if n.sim != nil {
		n.sim.enqueue(s, d)
		return nil
	}
	c := n.conns[listenerKey{s.dst, s.ifname}]
	if c == nil {
		return fmt.Errorf("%s: %w", s.dst, syscall.ECONNREFUSED)
	}
	select {
	case c.ch <- d:
	default: // queue full: lost
	}
	return nil
}

func (s *fakeSender) Close() error {
	s.net.mu.Lock()
	defer s.net.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.net.senders--
	}
	return nil
}

// sim is a discrete-event simulation of Servers on a fakeNet: virtual time jumps to
// the next deadline or packet delivery, so timing is exact and reproducible.
type sim struct {
	t       *testing.T
	now     time.Time
	net     *fakeNet
	latency time.Duration
	servers []*Server
	queue   []flight
	sent    []sentPacket // every packet sent, in order
	events  map[*Server][]SessionState
	spins   int // steps without time advancing
}

type flight struct {
	at  time.Time
	dst listenerKey
	d   fakeDatagram
}

type sentPacket struct {
	at       time.Time
	from, to netip.Addr
	p        controlPacket
}

type simClock struct{ m *sim }

func (c simClock) Now() time.Time { return c.m.now }
func (c simClock) NewTimer(time.Duration) clock.Timer {
	panic("the simulation drives Servers directly; Run is not used")
}

func newSim(t *testing.T) *sim {
	m := &sim{t: t, now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), net: newFakeNet(), latency: time.Millisecond, events: map[*Server][]SessionState{}}
	m.net.sim = m
	return m
}

// server returns a Server driven by the simulation, as if Run were running.
func (m *sim) server() *Server {
	s, err := New(Options{Clock: simClock{m}, Network: m.net})
	if err != nil {
		m.t.Fatal(err)
	}
	s.running = true
	s.log = ktesting.NewLogger(m.t, ktesting.NewConfig())
	m.servers = append(m.servers, s)
	return s
}

// remove drops a Server from the simulation without any goodbye, as kill -9 would.
func (m *sim) remove(s *Server) {
	m.servers = slices.DeleteFunc(m.servers, func(x *Server) bool { return x == s })
	s.mu.Lock()
	for _, e := range s.allLocked() {
		s.forgetLocked(e)
	}
	s.mu.Unlock()
}

// enqueue is called by fakeSender.Send with net.mu held.
func (m *sim) enqueue(s *fakeSender, d fakeDatagram) {
	p, err := decode(d.data)
	if err != nil {
		m.t.Fatalf("sent undecodable packet %x: %v", d.data, err)
	}
	m.sent = append(m.sent, sentPacket{at: m.now, from: s.src.Addr(), to: s.dst, p: p})
	m.queue = append(m.queue, flight{at: m.now.Add(m.latency), dst: listenerKey{s.dst, s.ifname}, d: d})
}

func (m *sim) send(out []outgoing) {
	for _, o := range out {
		if err := o.e.sender.Send(o.data); err != nil {
			m.t.Fatalf("send: %v", err)
		}
	}
}

// step advances to the next event no later than limit and processes everything due
// then. It reports false when nothing is due before limit (time is set to limit).
func (m *sim) step(limit time.Time) bool {
	next := limit
	for _, f := range m.queue {
		if f.at.Before(next) {
			next = f.at
		}
	}
	for _, s := range m.servers {
		s.mu.Lock()
		d := s.deadlineLocked(m.now)
		s.mu.Unlock()
		if !d.IsZero() && d.Before(next) {
			next = d
		}
	}
	if !next.After(m.now) {
		next = m.now
		if m.spins++; m.spins > 10000 {
			m.t.Fatalf("simulation stuck at %v", m.now)
		}
	} else {
		m.spins = 0
	}
	m.now = next
	for len(m.queue) > 0 {
		i := slices.IndexFunc(m.queue, func(f flight) bool { return !f.at.After(m.now) })
		if i < 0 {
			break
		}
		f := m.queue[i]
		m.queue = slices.Delete(m.queue, i, i+1)
		m.deliver(f)
	}
	for _, s := range m.servers {
		s.mu.Lock()
		out := s.tickLocked(m.now)
		m.collect(s)
		s.mu.Unlock()
		m.send(out)
	}
	return next.Before(limit)
}

func (m *sim) deliver(f flight) {
	for _, s := range m.servers {
		s.mu.Lock()
		l := s.listeners[f.dst]
		if l == nil {
			s.mu.Unlock()
			continue
		}
		out := s.receiveLocked(m.now, received{lis: l, data: f.d.data, src: f.d.src, ttl: f.d.ttl})
		m.collect(s)
		s.mu.Unlock()
		m.send(out)
		return
	}
}

// collect moves s's queued events to m.events; s.mu is held.
func (m *sim) collect(s *Server) {
	m.events[s] = append(m.events[s], s.events...)
	s.events = nil
}

// run advances virtual time by d.
func (m *sim) run(d time.Duration) {
	limit := m.now.Add(d)
	for m.step(limit) {
	}
}

// runUntil advances until cond holds, failing the test after limit.
func (m *sim) runUntil(limit time.Duration, what string, cond func() bool) {
	m.t.Helper()
	end := m.now.Add(limit)
	for !cond() {
		if !m.now.Before(end) {
			m.t.Fatalf("after %v: %s", limit, what)
		}
		m.step(end)
	}
}

// session returns s's snapshot of the session to peer.
func session1(t *testing.T, s *Server, peer netip.Addr) SessionState {
	t.Helper()
	for _, st := range s.Sessions() {
		if st.Peer == peer {
			return st
		}
	}
	t.Fatalf("no session to %s", peer)
	return SessionState{}
}

// packets returns the packets sent from -> to since t0.
func (m *sim) packets(from, to netip.Addr, since time.Time) []sentPacket {
	var res []sentPacket
	for _, p := range m.sent {
		if p.from == from && p.to == to && !p.at.Before(since) {
			res = append(res, p)
		}
	}
	return res
}

var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
)

// pair returns two simulated Servers A and B with a session to each other.
func (m *sim) pair(ca, cb PeerConfig) (a, b *Server) {
	a, b = m.server(), m.server()
	ca.Peer, ca.Local = addrB, addrA
	cb.Peer, cb.Local = addrA, addrB
	if err := a.AddPeer(ca); err != nil {
		m.t.Fatal(err)
	}
	if err := b.AddPeer(cb); err != nil {
		m.t.Fatal(err)
	}
	return a, b
}

func bothUp(t *testing.T, a, b *Server) func() bool {
	return func() bool {
		return session1(t, a, addrB).State == StateUp && session1(t, b, addrA).State == StateUp
	}
}
