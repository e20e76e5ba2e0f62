package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Timeouts of a Peer.
const (
	// innerWait bounds how long a router connection waits for GoBGP to accept its
	// side (GoBGP refuses connections while its idle hold timer runs).
	innerWait = 30 * time.Second
	// innerRetry is the pause between two attempts to give GoBGP its side.
	innerRetry = 100 * time.Millisecond
	// writeTimeout bounds every write to either side.
	writeTimeout = 10 * time.Second
	// closeWait bounds how long the relay waits for the router to close its side
	// after a NOTIFICATION that ends the session on the speaker's initiative.
	closeWait = 2 * time.Second
	// minDialTimeout is the least time a connection attempt gets.
	minDialTimeout = 5 * time.Second
)

// Peer states, as Status reports them.
const (
	StateIdle    = "idle"    // not connecting: not started, held by the gate, or finished
	StateConnect = "connect" // connecting to the router
	StateActive  = "active"  // waiting to connect again (after ConnectRetry) or for the router
	StateOpen    = "open"    // connected: OPEN exchange or established, as GoBGP says
)

// ErrFinished is returned by methods of a finished Peer.
var ErrFinished = errors.New("BGP peer finished")

// Config of a Peer.
type Config struct {
	// Remote is the router's address and port.
	Remote netip.AddrPort
	// Source is the local address to connect from; zero: the kernel's choice.
	Source netip.Addr
	// Password is the TCP-MD5 key; empty: none. Never logged.
	Password string
	// TTL of outgoing packets; 0: the kernel's default.
	TTL int
	// ConnectRetry is the time between connection attempts.
	ConnectRetry time.Duration
	// RouterID is the speaker's BGP identifier (for connection collisions).
	RouterID netip.Addr
	// Inner is GoBGP's loopback listener, and InnerFrom the loopback address GoBGP
	// knows this peer by.
	Inner     netip.AddrPort
	InnerFrom netip.Addr
}

// Hooks tell the speaker what a Peer sees. They are called from the Peer's
// goroutines and must not call the Peer's methods; Connected and Ended are called
// without a lock of the Peer held.
type Hooks struct {
	// Connected: a connection to the router is up, with this local address; GoBGP
	// is given its side only after Connected returned.
	Connected func(local netip.Addr)
	// Ended: the session with the router ended (err says why). GoBGP's side is
	// still open while Ended runs; if Ended reports that GoBGP will close it (a
	// reset was asked of GoBGP), the relay waits a moment for that, else it closes
	// it at once.
	Ended func(err error) (gobgpCloses bool)
	// Sent: what the router holds from this session changed: paths per unicast
	// family the session negotiated, before the UPDATE that changes it is written
	// (so the count is never behind the router); nil when the session ended.
	Sent func(paths map[Family]int)
}

// Status is a Peer's state.
type Status struct {
	State string
	// Local and Remote are the connection's ends (zero when not connected).
	Local, Remote netip.AddrPort
	// Since is when State was entered.
	Since time.Time
	// Established: OPENs and KEEPALIVEs exchanged on the connection.
	Established bool
	// LastError is why the last connection attempt failed or the last session
	// ended; nil after a session was established, until it ends.
	LastError error
	// Sent is the number of paths the router holds from this session, per unicast
	// family negotiated (nil unless Established).
	Sent map[Family]int
	// Negotiated is valid when Established.
	Negotiated Negotiated
	// Gated: connecting is held (SetGate(false)).
	Gated bool
}

// Peer is the router-facing side of one BGP session. Its methods are safe for
// concurrent use.
type Peer struct {
	cfg   Config
	hooks Hooks
	log   klog.Logger

	mu       sync.Mutex
	state    string
	since    time.Time
	lastErr  error
	gate     bool
	finished bool
	sess     *session
	kick     chan struct{} // gate opened, or an incoming connection arrived
	incoming chan accepted
	cancel   context.CancelFunc
	done     chan struct{}
}

// NewPeer returns a Peer that is not connecting yet (see Start).
func NewPeer(cfg Config, hooks Hooks, logger klog.Logger) *Peer {
	if cfg.ConnectRetry <= 0 {
		cfg.ConnectRetry = 5 * time.Second
	}
	return &Peer{cfg: cfg, hooks: hooks, log: logger, state: StateIdle, since: time.Now(), gate: true,
		kick: make(chan struct{}, 1), incoming: make(chan accepted, 1), done: make(chan struct{})}
}

// Start connects to the router, and again after ConnectRetry whenever the
// connection fails or the session ends, until ctx ends or Finish is called. It
// returns at once.
func (p *Peer) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	p.mu.Lock()
	p.cancel = cancel
	p.mu.Unlock()
	go func() {
		defer close(p.done)
		defer p.drainIncoming()
		p.loop(ctx)
	}()
}

// drainIncoming refuses the connections offered to a Peer whose loop ended (a
// collision resolved for the router's connection just before Finish).
func (p *Peer) drainIncoming() {
	for {
		select {
		case c := <-p.incoming:
			_ = c.c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.c.Write(Cease(SubCeasePeerDeconfig, "").Bytes())
			_ = c.c.Close()
		default:
			return
		}
	}
}

// Done is closed when the Peer's connection loop has ended.
func (p *Peer) Done() <-chan struct{} { return p.done }

func (p *Peer) setState(s string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != s {
		p.state, p.since = s, time.Now()
	}
	if err != nil {
		p.lastErr = err
	}
}

// loop is the connection loop.
func (p *Peer) loop(ctx context.Context) {
	var retry <-chan time.Time // nil: connect now
	for ctx.Err() == nil {
		var conn accepted
		p.mu.Lock()
		gated := !p.gate
		p.mu.Unlock()
		if gated {
			p.setState(StateIdle, nil)
			select {
			case <-ctx.Done():
				return
			case <-p.kick:
				continue
			case c := <-p.incoming:
				_ = c.c.Close() // held: not even the router's connection is taken
				continue
			}
		}
		if retry != nil {
			p.setState(StateActive, nil)
			select {
			case <-ctx.Done():
				return
			case <-p.kick:
				continue
			case <-retry:
			case conn = <-p.incoming:
			}
			retry = nil
		}
		if conn.c == nil {
			var err error
			conn, err = p.dial(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				p.setState(StateActive, err)
				p.log.V(4).Info("Connecting to the BGP router failed", "err", err)
				retry = time.After(p.cfg.ConnectRetry)
				continue
			}
		}
		err := p.serve(ctx, conn)
		p.setState(StateActive, err)
		retry = time.After(p.cfg.ConnectRetry)
	}
}

// accepted is a connection to the router, with the bytes already read from it.
type accepted struct {
	c      *net.TCPConn
	prefix []byte
}

// dial connects to the router; an incoming connection that arrives meanwhile is
// taken instead.
func (p *Peer) dial(ctx context.Context) (accepted, error) {
	p.setState(StateConnect, nil)
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		c   *net.TCPConn
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := dialRouter(dctx, p.cfg.Remote, p.cfg.Source, p.cfg.Password, p.cfg.TTL, max(p.cfg.ConnectRetry, minDialTimeout))
		res <- result{c, err}
	}()
	select {
	case r := <-res:
		return accepted{c: r.c}, r.err
	case c := <-p.incoming:
		cancel()
		if r := <-res; r.c != nil {
			_ = r.c.Close()
		}
		return c, nil
	}
}

// serve runs one session on a connection to the router until it ends.
func (p *Peer) serve(ctx context.Context, in accepted) error {
	rc := in.c
	local, remote := addrPort(rc.LocalAddr()), addrPort(rc.RemoteAddr())
	log := p.log.WithValues("local", local)
	p.mu.Lock()
	if p.finished {
		p.mu.Unlock()
		_ = rc.Close()
		return ErrFinished
	}
	s := newSession(p, in, log)
	p.sess = s
	p.state, p.since = StateOpen, time.Now()
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if p.sess == s {
			p.sess = nil
		}
		p.mu.Unlock()
	}()
	log.V(2).Info("Connected to the BGP router", "remote", remote)
	if p.hooks.Connected != nil {
		p.hooks.Connected(local.Addr())
	}
	return s.run(ctx)
}

// Status returns the Peer's state.
func (p *Peer) Status() Status {
	p.mu.Lock()
	st := Status{State: p.state, Since: p.since, LastError: p.lastErr, Gated: !p.gate}
	s := p.sess
	p.mu.Unlock()
	if s != nil {
		s.status(&st)
	}
	return st
}

// Pending is the number of bytes GoBGP wrote that the router has not acknowledged
// yet: unread by the relay, or written and not acknowledged by the router's TCP.
// ok is false without an established session.
func (p *Peer) Pending() (n int, ok bool) {
	p.mu.Lock()
	s := p.sess
	p.mu.Unlock()
	if s == nil {
		return 0, false
	}
	return s.pending()
}

// SetGate allows (true, the default) or holds (false) connecting. Holding does not
// end a session that is up; Reset does.
func (p *Peer) SetGate(open bool) {
	p.mu.Lock()
	changed := p.gate != open
	p.gate = open
	p.mu.Unlock()
	if changed {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// Reset ends the current session, if any, with the NOTIFICATION n (a Hard Reset
// where negotiated, if hard), without withdrawals and without waiting for the
// router; the Peer connects again after ConnectRetry (when the gate allows).
func (p *Peer) Reset(n Notification, hard bool) {
	p.mu.Lock()
	s := p.sess
	p.mu.Unlock()
	if s != nil {
		// In the background: a router that reads nothing may block the write for
		// up to the hold time, and the caller (BFD) must not wait for that.
		go s.end(n, hard, false, false)
	}
}

// Finish ends the Peer for good: if a session is established it writes the
// withdrawals of every path the router holds (withdraw), then the NOTIFICATION n
// (a Hard Reset where the router negotiated RFC 8538), and waits until the router
// closes its side or ctx ends; then it closes the connection and stops
// connecting. It returns whether the router closed its side (false also when no
// session was up), and waits for the connection loop to end.
func (p *Peer) Finish(ctx context.Context, n Notification, withdraw bool) (confirmed bool) {
	p.mu.Lock()
	p.finished = true
	s, cancel := p.sess, p.cancel
	p.mu.Unlock()
	if s != nil {
		confirmed = s.finish(ctx, n, withdraw)
	}
	if cancel != nil {
		cancel()
		select {
		case <-p.done:
		case <-ctx.Done():
		}
	}
	p.drainIncoming() // offered while the loop was ending
	p.setState(StateIdle, nil)
	return confirmed
}

// offer hands a connection the router opened to the Peer (see Listener); o is
// the OPEN already read from it (prefix its bytes). It reports false, and leaves
// the connection to the caller, if the Peer does not take it: it is finished or
// held, or a connection collision (RFC 4271 6.8) keeps the current session. When
// the collision is resolved for the new connection, the current session is ended
// with a Cease "Connection Collision Resolution".
func (p *Peer) offer(c *net.TCPConn, o *Open, prefix []byte) bool {
	p.mu.Lock()
	s := p.sess
	refuse := p.finished || !p.gate
	p.mu.Unlock()
	if refuse {
		return false
	}
	if s != nil {
		if s.establishedNow() || !keepIncoming(p.cfg.RouterID, o.ID) {
			return false
		}
		s.end(Cease(7, ""), false, false, false)
	}
	select {
	case p.incoming <- accepted{c: c, prefix: prefix}:
		p.mu.Lock()
		finished := p.finished
		p.mu.Unlock()
		select {
		case <-p.done:
			finished = true
		default:
		}
		if finished {
			p.drainIncoming() // Finish may have drained before it was queued
		}
		return true
	case <-time.After(closeWait + time.Second):
		return false
	}
}

// keepIncoming is RFC 4271 6.8: the connection initiated by the speaker with the
// higher BGP identifier survives.
func keepIncoming(local, remote netip.Addr) bool {
	return local.Compare(remote) < 0
}

func (p *Peer) String() string { return fmt.Sprintf("peer %s", p.cfg.Remote) }
