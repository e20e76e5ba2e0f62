package bfd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

var (
	// ErrAlreadyRunning is returned by a second call of Run.
	ErrAlreadyRunning = errors.New("bfd: Run called twice")
	// ErrServerClosed is returned by AddPeer once Run's context has ended.
	ErrServerClosed = errors.New("bfd: server stopped")
)

const (
	// stopTimeout bounds the AdminDown goodbye when Run's context ends.
	stopTimeout = time.Second
	// minRetry and maxRetry bound the backoff of opening a session's sockets.
	minRetry = time.Second
	maxRetry = 30 * time.Second
	// maxPortTries bounds the source ports tried when they are taken.
	maxPortTries = 64
	// rxQueue is the depth of the queue from the socket readers to Run.
	rxQueue = 256
)

// Options configure a Server. The zero value is what production uses.
type Options struct {
	// Clock is the time source; nil means the real clock.
	Clock Clock
	// Network opens the sockets; nil means UDP sockets as RFC 5881 describes.
	Network Network
}

// Server runs single-hop BFD sessions (RFC 5880 asynchronous mode, RFC 5881):
// every session takes the active role, sends once a second until the peer
// answers, comes Up by the three-way handshake, then sends at the negotiated
// interval and goes Down when the detection time passes without a packet.
type Server struct {
	clock    Clock
	network  Network
	rnd      func() float64 // [0, 1): jitter
	randN    func(n int) int
	newDiscr func() uint32

	mu        sync.Mutex
	log       klog.Logger
	sessions  map[netip.Addr]*entry // by peer (see peerKey)
	leaving   map[*entry]struct{}   // saying goodbye; not in sessions
	byDiscr   map[uint32]*entry     // both of the above
	ports     map[uint16]bool       // source ports in use
	listeners map[listenerKey]*listener
	subs      []func(SessionState)
	events    []SessionState // state changes not yet given to subscribers
	running   bool
	closed    bool

	wake   chan struct{} // AddPeer or RemovePeer changed something
	rx     chan received
	evWake chan struct{}
}

// entry is a session with its sockets.
type entry struct {
	*session
	lis     *listener
	sender  Sender
	port    uint16
	err     error
	retryAt time.Time
	backoff time.Duration
}

type listenerKey struct {
	local  netip.Addr
	ifname string
}

type listener struct {
	key     listenerKey
	conn    PacketConn
	refs    int
	reading bool
	done    chan struct{} // closed when the listener is closed
}

type received struct {
	lis  *listener
	data []byte
	src  netip.AddrPort
	ttl  int
}

type outgoing struct {
	e    *entry
	data []byte
}

// New returns a Server. Sessions added before Run start when Run does.
func New(opts Options) (*Server, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Network == nil {
		n, err := newUDPNetwork()
		if err != nil {
			return nil, err
		}
		opts.Network = n
	}
	registerMetrics()
	return &Server{
		clock:     opts.Clock,
		network:   opts.Network,
		rnd:       rand.Float64,
		randN:     rand.IntN,
		newDiscr:  rand.Uint32,
		log:       klog.Background().WithName("bfd"),
		sessions:  map[netip.Addr]*entry{},
		leaving:   map[*entry]struct{}{},
		byDiscr:   map[uint32]*entry{},
		ports:     map[uint16]bool{},
		listeners: map[listenerKey]*listener{},
		wake:      make(chan struct{}, 1),
		rx:        make(chan received, rxQueue),
		evWake:    make(chan struct{}, 1),
	}, nil
}

// AddPeer adds a session, or updates the one to c.Peer. It is idempotent. Changed
// intervals or multiplier take effect through a Poll Sequence without taking the
// session down; a changed local address or interface replaces the session (the old
// one says AdminDown). Invalid configurations return an error wrapping
// ErrInvalidConfig that names the fields.
func (s *Server) AddPeer(c PeerConfig) error {
	cfg, err := c.normalize()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrServerClosed
	}
	now := s.clock.Now()
	defer s.poke()
	if e := s.sessions[cfg.Peer]; e != nil {
		switch {
		case e.cfg == cfg:
			return nil
		case e.cfg.Local == cfg.Local && e.cfg.Interface == cfg.Interface:
			e.reconfigure(now, cfg)
			s.log.Info("Updated BFD session", "peer", cfg.Peer, "minTx", cfg.DesiredMinTx, "minRx", cfg.RequiredMinRx, "multiplier", cfg.DetectMult)
			return nil
		}
		s.retireLocked(e, now)
	}
	for le := range s.leaving {
		if le.cfg.Peer == cfg.Peer && le.cfg.Local == cfg.Local && le.cfg.Interface == cfg.Interface {
			delete(s.leaving, le)
			s.sessions[cfg.Peer] = le
			if le.rejoin(now) {
				s.changedLocked(le)
			}
			le.reconfigure(now, cfg)
			return nil
		}
	}
	e := &entry{session: newSession(cfg, s.newDiscrLocked(), now)}
	s.sessions[cfg.Peer] = e
	s.byDiscr[e.localDiscr] = e
	sessionUp.WithLabelValues(cfg.Peer.String()).Set(0)
	s.log.Info("Added BFD session", "peer", cfg.Peer, "local", cfg.Local, "interface", cfg.Interface,
		"minTx", cfg.DesiredMinTx, "minRx", cfg.RequiredMinRx, "multiplier", cfg.DetectMult, "discriminator", e.localDiscr)
	return nil
}

// RemovePeer removes the session to peer, if any: it sends AdminDown with
// diagnostic "Administratively Down" a few times (until the peer reports Down),
// then forgets the session. A link-local peer may be given without its zone when
// only one session has that address.
func (s *Server) RemovePeer(peer netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.sessions[peerKey(peer)]
	if e == nil && peer.Zone() == "" {
		for k, c := range s.sessions {
			if k.WithZone("") == peer.Unmap() {
				if e != nil {
					return // ambiguous
				}
				e = c
			}
		}
	}
	if e == nil {
		return
	}
	s.retireLocked(e, s.clock.Now())
	s.poke()
}

// Subscribe registers fn to be called with a snapshot on every change of a
// session's state. Calls are made one at a time, in order, from a goroutine of
// Run, never with the Server's lock held; fn must not block for long.
func (s *Server) Subscribe(fn func(SessionState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = append(s.subs, fn)
}

// Sessions returns a snapshot of every configured session, ordered by peer.
// Sessions being removed are not listed.
func (s *Server) Sessions() []SessionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := make([]SessionState, 0, len(s.sessions))
	for _, e := range s.sessions {
		st := e.snapshot()
		st.Err = e.err
		res = append(res, st)
	}
	slices.SortFunc(res, func(a, b SessionState) int { return a.Peer.Compare(b.Peer) })
	return res
}

// Run opens the sessions' sockets and runs them until ctx ends; then every session
// says AdminDown (diagnostic "Administratively Down", so peers following RFC 5882 do
// not treat the stop as a failure), for at most a second, and Run returns nil after
// closing every socket and delivering every state change to the subscribers.
// Failing sockets are retried with backoff and reported in SessionState.Err. Run
// may be called once.
func (s *Server) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("bfd")
	s.mu.Lock()
	if s.running || s.closed {
		s.mu.Unlock()
		return ErrAlreadyRunning
	}
	s.running, s.log = true, logger
	s.mu.Unlock()

	var readers sync.WaitGroup
	dispatchStop, dispatchDone := make(chan struct{}), make(chan struct{})
	go s.dispatch(dispatchStop, dispatchDone)

	timer := s.clock.NewTimer(time.Hour)
	defer timer.Stop()
	done := ctx.Done()
	stopping := false
	var stopBy time.Time
	for {
		now := s.clock.Now()
		s.mu.Lock()
		out := s.tickLocked(now)
		s.startReadersLocked(&readers)
		next := s.deadlineLocked(now)
		finished := stopping && (len(s.sessions)+len(s.leaving) == 0 || !now.Before(stopBy))
		s.mu.Unlock()
		s.send(out)
		s.kickDispatch()
		if finished {
			break
		}
		if stopping && (next.IsZero() || next.After(stopBy)) {
			next = stopBy
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(now)
		}
		if wait <= 0 {
			continue
		}
		timer.Reset(wait)
		fired := false
		select {
		case <-done:
			done, stopping = nil, true
			s.mu.Lock()
			now = s.clock.Now()
			stopBy = now.Add(stopTimeout)
			s.stopLocked(now)
			s.mu.Unlock()
		case <-s.wake:
		case r := <-s.rx:
			s.mu.Lock()
			out := s.receiveLocked(s.clock.Now(), r)
			s.mu.Unlock()
			s.send(out)
		case <-timer.C():
			fired = true
		}
		if !fired && !timer.Stop() {
			select { // a fake clock's timer channel must be empty before it fires again
			case <-timer.C():
			default:
			}
		}
	}

	s.mu.Lock()
	for _, e := range s.allLocked() {
		s.forgetLocked(e)
	}
	s.mu.Unlock()
	readers.Wait()
	close(dispatchStop)
	<-dispatchDone
	logger.Info("BFD stopped")
	return nil
}

// poke wakes Run after a change by AddPeer or RemovePeer.
func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Server) allLocked() []*entry {
	all := make([]*entry, 0, len(s.sessions)+len(s.leaving))
	for _, e := range s.sessions {
		all = append(all, e)
	}
	for e := range s.leaving {
		all = append(all, e)
	}
	return all
}

// newDiscrLocked returns a random discriminator, non-zero and unused (RFC 5880
// section 6.8.1).
func (s *Server) newDiscrLocked() uint32 {
	for {
		if d := s.newDiscr(); d != 0 && s.byDiscr[d] == nil {
			return d
		}
	}
}

func (s *Server) jitter(interval time.Duration, detectMult uint8) time.Duration {
	return jitterInterval(interval, detectMult, s.rnd())
}

// retireLocked takes e out of service: it says goodbye if its sockets are open and
// Run is running, else it is forgotten at once.
func (s *Server) retireLocked(e *entry, now time.Time) {
	if s.sessions[e.cfg.Peer] == e {
		delete(s.sessions, e.cfg.Peer)
	}
	if !s.running || e.sender == nil {
		s.forgetLocked(e)
		return
	}
	s.leaving[e] = struct{}{}
	if e.leave(now) {
		s.changedLocked(e)
	}
	s.log.Info("Removing BFD session", "peer", e.cfg.Peer, "local", e.cfg.Local)
}

// stopLocked starts the goodbye of every session and refuses new ones.
func (s *Server) stopLocked(now time.Time) {
	s.closed = true
	for _, e := range s.allLocked() {
		s.retireLocked(e, now)
	}
}

// forgetLocked drops e and closes its sockets (the listener when its last user
// goes).
func (s *Server) forgetLocked(e *entry) {
	if s.sessions[e.cfg.Peer] == e {
		delete(s.sessions, e.cfg.Peer)
	}
	delete(s.leaving, e)
	if s.byDiscr[e.localDiscr] == e {
		delete(s.byDiscr, e.localDiscr)
	}
	if e.sender != nil {
		_ = e.sender.Close()
		delete(s.ports, e.port)
		e.sender = nil
	}
	if l := e.lis; l != nil {
		e.lis = nil
		if l.refs--; l.refs == 0 {
			delete(s.listeners, l.key)
			close(l.done)
			_ = l.conn.Close()
		}
	}
	if s.sessions[e.cfg.Peer] == nil {
		sessionUp.DeleteLabelValues(e.cfg.Peer.String())
	}
}

// changedLocked records a state change of e: metrics, log, and an event for the
// subscribers.
func (s *Server) changedLocked(e *entry) {
	peer := e.cfg.Peer.String()
	up := 0.0
	if e.state == StateUp {
		up = 1
	}
	if !e.leaving || s.sessions[e.cfg.Peer] == nil {
		sessionUp.WithLabelValues(peer).Set(up)
	}
	stateChanges.WithLabelValues(peer, e.state.metricLabel()).Inc()
	st := e.snapshot()
	s.log.Info("BFD session state changed", "peer", e.cfg.Peer, "local", e.cfg.Local,
		"from", st.PreviousState, "to", st.State, "diag", st.Diag,
		"remoteState", st.RemoteState, "remoteDiag", st.RemoteDiag,
		"txInterval", st.TxInterval, "detectionTime", st.DetectionTime)
	s.events = append(s.events, st)
}

// tickLocked runs the timers due at now and returns the packets to send.
func (s *Server) tickLocked(now time.Time) []outgoing {
	var out []outgoing
	for _, e := range s.allLocked() {
		if e.gone() {
			s.forgetLocked(e)
			continue
		}
		if !s.openLocked(e, now) {
			if e.leaving {
				s.forgetLocked(e) // nothing was ever sent: nothing to say goodbye to
			}
			continue
		}
		if e.expire(now) {
			s.changedLocked(e)
		}
		if p, ok := e.transmit(now, s.jitter); ok {
			out = append(out, outgoing{e, p.encode(make([]byte, 0, headerLen))})
		}
	}
	return out
}

// deadlineLocked is the earliest time a session needs attention, or zero.
func (s *Server) deadlineLocked(now time.Time) time.Time {
	var next time.Time
	for _, e := range s.allLocked() {
		var d time.Time
		switch {
		case e.gone():
			d = now
		case e.sender == nil:
			d = e.retryAt // zero (open now) for a new session
			if d.Before(now) || e.leaving {
				d = now
			}
		default:
			d = e.deadline(now)
		}
		if !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	return next
}

// openLocked opens e's sockets unless they are open or a retry is not due yet. It
// reports whether they are open.
func (s *Server) openLocked(e *entry, now time.Time) bool {
	if e.sender != nil {
		return true
	}
	if e.leaving || now.Before(e.retryAt) {
		return false
	}
	err := s.openSocketsLocked(e)
	if err == nil {
		if e.err != nil {
			s.log.Info("Opened BFD sockets after failures", "peer", e.cfg.Peer, "local", e.cfg.Local)
		}
		e.err, e.backoff = nil, 0
		return true
	}
	e.backoff = min(max(2*e.backoff, minRetry), maxRetry)
	e.retryAt = now.Add(e.backoff)
	if e.err == nil || e.err.Error() != err.Error() {
		s.log.Error(err, "Cannot open BFD sockets; retrying", "peer", e.cfg.Peer, "local", e.cfg.Local, "retryIn", e.backoff)
	}
	e.err = err
	return false
}

func (s *Server) openSocketsLocked(e *entry) error {
	cfg := e.cfg
	if e.lis == nil {
		key := listenerKey{cfg.Local, cfg.Interface}
		l := s.listeners[key]
		if l == nil {
			conn, err := s.network.Listen(cfg.Local, cfg.Interface)
			if err != nil {
				return fmt.Errorf("bfd: listening on %s port %d: %w", netip.AddrPortFrom(cfg.Local, Port), Port, err)
			}
			l = &listener{key: key, conn: conn, done: make(chan struct{})}
			s.listeners[key] = l
		}
		l.refs++
		e.lis = l
	}
	start := s.randN(numSourcePort)
	tries := 0
	for i := range numSourcePort {
		port := uint16(minSourcePort + (start+i)%numSourcePort)
		if s.ports[port] {
			continue
		}
		snd, err := s.network.Dial(cfg.Local, port, cfg.Interface, cfg.Peer)
		if err == nil {
			e.sender, e.port = snd, port
			s.ports[port] = true
			return nil
		}
		if tries++; !errors.Is(err, syscall.EADDRINUSE) || tries >= maxPortTries {
			return fmt.Errorf("bfd: opening a socket from %s to %s: %w", netip.AddrPortFrom(cfg.Local, port), netip.AddrPortFrom(cfg.Peer, Port), err)
		}
	}
	return fmt.Errorf("bfd: no free source port in %d-65535 for %s: %w", minSourcePort, cfg.Peer, syscall.EADDRINUSE)
}

// receiveLocked demultiplexes one received datagram to its session (RFC 5880
// section 6.8.6, RFC 5881 sections 3 and 5) and returns what to send in reply.
func (s *Server) receiveLocked(now time.Time, r received) []outgoing {
	p, err := decode(r.data)
	if err != nil {
		return s.drop(dropMalformed, r, err)
	}
	if r.ttl != requiredTTL {
		return s.drop(dropTTL, r, fmt.Errorf("TTL or hop limit %d", r.ttl))
	}
	if p.auth {
		return s.drop(dropAuth, r, errors.New("authentication section present"))
	}
	src := peerKey(r.src.Addr())
	var e *entry
	if p.yourDiscr != 0 {
		e = s.byDiscr[p.yourDiscr]
	} else {
		if p.state != StateDown && p.state != StateAdminDown {
			return s.drop(dropNoDiscr, r, fmt.Errorf("state %v without Your Discriminator", p.state))
		}
		e = s.sessions[src]
		if e == nil || e.lis != r.lis {
			// A peer that went Down may have forgotten our discriminator (FRR does)
			// while we say goodbye: its Down acknowledges the goodbye.
			for le := range s.leaving {
				if le.cfg.Peer == src && le.lis == r.lis {
					e = le
				}
			}
		}
	}
	if e == nil || e.cfg.Peer != src || e.lis != r.lis {
		return s.drop(dropNoSession, r, fmt.Errorf("no session for discriminator %d from %s", p.yourDiscr, r.src))
	}
	if e.sender == nil {
		return s.drop(dropNotStarted, r, errors.New("session not started"))
	}
	if e.receive(now, &p) {
		s.changedLocked(e)
	}
	if pkt, ok := e.transmit(now, s.jitter); ok {
		return []outgoing{{e, pkt.encode(make([]byte, 0, headerLen))}}
	}
	return nil
}

func (s *Server) drop(reason string, r received, err error) []outgoing {
	droppedPackets.WithLabelValues(reason).Inc()
	s.log.V(4).Info("Dropped BFD packet", "reason", reason, "from", r.src, "err", err)
	return nil
}

// send transmits packets; it runs without the lock (only Run closes senders).
func (s *Server) send(out []outgoing) {
	for _, o := range out {
		if err := o.e.sender.Send(o.data); err != nil {
			// Typically ICMP unreachable while the peer's BFD is not running.
			s.log.V(4).Info("Sending BFD packet failed", "peer", o.e.cfg.Peer, "err", err)
		}
	}
}

// startReadersLocked starts a reader for every new listener.
func (s *Server) startReadersLocked(wg *sync.WaitGroup) {
	for _, l := range s.listeners {
		if l.reading {
			continue
		}
		l.reading = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.read(l)
		}()
	}
}

// read forwards l's datagrams to Run until l is closed.
func (s *Server) read(l *listener) {
	buf := make([]byte, maxPacketLen)
	for {
		n, src, ttl, err := l.conn.ReadPacket(buf)
		select {
		case <-l.done:
			return
		default:
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			s.mu.Lock()
			log := s.log
			s.mu.Unlock()
			log.V(2).Info("Reading BFD packet failed", "local", l.key.local, "err", err)
			time.Sleep(10 * time.Millisecond) // not on a hot loop if the error persists
			continue
		}
		data := make([]byte, n)
		copy(data, buf[:n])
		select {
		case s.rx <- received{lis: l, data: data, src: src, ttl: ttl}:
		case <-l.done:
			return
		}
	}
}

// kickDispatch wakes the dispatcher if events are queued.
func (s *Server) kickDispatch() {
	select {
	case s.evWake <- struct{}{}:
	default:
	}
}

// dispatch gives queued events to the subscribers until stop is closed and the
// queue is empty.
func (s *Server) dispatch(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		stopping := false
		select {
		case <-s.evWake:
		case <-stop:
			stopping = true
		}
		for {
			s.mu.Lock()
			evs, subs := s.events, slices.Clone(s.subs)
			s.events = nil
			s.mu.Unlock()
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				for _, fn := range subs {
					fn(ev)
				}
			}
		}
		if stopping {
			return
		}
	}
}
