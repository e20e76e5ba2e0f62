package bgptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"
)

// DefaultTimeout bounds a network operation whose context has no deadline, and
// every Send.
const DefaultTimeout = 30 * time.Second

// ErrNoNotification is wrapped by WaitNotification's error when the connection
// closed without a NOTIFICATION.
var ErrNoNotification = errors.New("connection closed without a NOTIFICATION")

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// Listener accepts BGP connections on one TCP address.
type Listener struct {
	ln *net.TCPListener
}

// Listen listens on addr, an IP literal and port ("127.0.0.1:0" picks a free
// port); use a loopback address unless the test owns the network namespace.
func Listen(addr string) (*Listener, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("bgptest: listen address %q: %w", addr, err)
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
	if err != nil {
		return nil, fmt.Errorf("bgptest: listen on %s: %w", ap, err)
	}
	return &Listener{ln: ln}, nil
}

// Addr returns the address listened on.
func (l *Listener) Addr() netip.AddrPort { return l.ln.Addr().(*net.TCPAddr).AddrPort() }

// Port returns the port listened on.
func (l *Listener) Port() int { return int(l.Addr().Port()) }

// Accept waits for one connection until ctx ends (DefaultTimeout without a deadline).
func (l *Listener) Accept(ctx context.Context) (*Session, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	dl, _ := ctx.Deadline()
	if err := l.ln.SetDeadline(dl); err != nil {
		return nil, fmt.Errorf("bgptest: accept: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = l.ln.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c, err := l.ln.AcceptTCP()
	if err != nil {
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		case errors.Is(err, os.ErrDeadlineExceeded): // the deadline fired just before ctx's timer
			err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
		return nil, fmt.Errorf("bgptest: accept on %s: %w", l.Addr(), err)
	}
	return newSession(c), nil
}

// Close stops listening; sessions already accepted stay open.
func (l *Listener) Close() error { return l.ln.Close() }

// Dial connects to a BGP speaker at addr (IP literal and port).
func Dial(ctx context.Context, addr string) (*Session, error) {
	return DialFrom(ctx, netip.Addr{}, addr)
}

// DialFrom is Dial from a local address (the zero Addr: the kernel's choice).
func DialFrom(ctx context.Context, local netip.Addr, addr string) (*Session, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("bgptest: dial address %q: %w", addr, err)
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	var d net.Dialer
	if local.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
	}
	c, err := d.DialContext(ctx, "tcp", ap.String())
	if err != nil {
		return nil, fmt.Errorf("bgptest: dial %s: %w", ap, err)
	}
	return newSession(c.(*net.TCPConn)), nil
}

// connectRetry is the least time between two of Connect's attempts.
const connectRetry = 50 * time.Millisecond

// Connect dials addr (IP literal and port) from local (the zero Addr: the
// kernel's choice) and completes Handshake with o, on a fresh connection each
// attempt, until an attempt succeeds or ctx ends (DefaultTimeout without a
// deadline); it returns the session and the peer's OPEN. This suits a speaker
// that refuses, resets or NOTIFIES a connection for a moment, as a router does
// after a session with the same neighbor ended. When attempt is positive it
// bounds each attempt, so that one that stalls is given up and made again.
// Attempts start at least 50 ms apart; a failed attempt's connection is closed.
// Once ctx ends, the error wraps ctx's error and the last attempt's.
func Connect(ctx context.Context, local netip.Addr, addr string, o Open, attempt time.Duration) (*Session, *OpenMsg, error) {
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return nil, nil, fmt.Errorf("bgptest: connect address %q: %w", addr, err)
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	tick := time.NewTicker(connectRetry)
	defer tick.Stop()
	for {
		s, peer, err := connectOnce(ctx, local, addr, o, attempt)
		if err == nil {
			return s, peer, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("bgptest: connect to %s: %w (last attempt: %w)", addr, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func connectOnce(ctx context.Context, local netip.Addr, addr string, o Open, attempt time.Duration) (*Session, *OpenMsg, error) {
	if attempt > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, attempt)
		defer cancel()
	}
	s, err := DialFrom(ctx, local, addr)
	if err != nil {
		return nil, nil, err
	}
	peer, err := s.Handshake(ctx, o)
	if err != nil {
		_ = s.Close()
		return nil, nil, err
	}
	return s, peer, nil
}

// Silent reports whether the speaker at addr is silent, as one whose process is
// stopped is (the kernel still accepts connections and buffers what is sent):
// it dials addr from local (the zero Addr: the kernel's choice), sends the OPEN
// o and, for the duration d, expects neither a message nor the connection to
// close. It returns nil when so, else an error saying what happened instead (a
// failed dial, a message received, a closed connection); the connection is
// closed before it returns. It fails if ctx ends before d has passed.
func Silent(ctx context.Context, local netip.Addr, addr string, o Open, d time.Duration) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	s, err := DialFrom(ctx, local, addr)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Send(o.Message()); err != nil {
		return err
	}
	m, err := s.ReadMessage(ctx)
	switch {
	case err == nil:
		return fmt.Errorf("bgptest: %s answered with a message of type %d", s.RemoteAddr(), m.Type)
	case parent.Err() != nil:
		return fmt.Errorf("bgptest: silence of %s: %w", s.RemoteAddr(), parent.Err())
	case ctx.Err() != nil && s.Err() == nil:
		return nil
	}
	return err
}

// Session is one BGP connection seen from the test's side. A goroutine reads
// every message the peer sends into an unbounded queue from the start, so the
// peer never blocks on a full TCP window and nothing is lost; ReadMessage and
// the Wait methods consume that queue. Once the handshake is done, every
// UPDATE is also applied to an Adj-RIB-In (Routes, WaitRoutes). Safe for
// concurrent use.
type Session struct {
	conn   *net.TCPConn
	wmu    sync.Mutex // serialises writes
	closed chan struct{}

	mu       sync.Mutex
	notify   chan struct{} // closed and replaced on every change below
	queue    []Message
	readErr  error
	local    *OpenMsg // what Handshake sent
	peer     *OpenMsg
	neg      *Negotiated
	dropKA   bool
	rib      map[routeKey]Route
	eor      map[Family]bool
	ribErr   error
	received int
}

type routeKey struct {
	f  Family
	p  netip.Prefix
	id uint32
}

func newSession(c *net.TCPConn) *Session {
	s := &Session{conn: c, closed: make(chan struct{}), notify: make(chan struct{}),
		rib: map[routeKey]Route{}, eor: map[Family]bool{}}
	go s.readLoop()
	return s
}

// LocalAddr returns this side's address of the connection.
func (s *Session) LocalAddr() netip.AddrPort { return s.conn.LocalAddr().(*net.TCPAddr).AddrPort() }

// RemoteAddr returns the peer's address.
func (s *Session) RemoteAddr() netip.AddrPort { return s.conn.RemoteAddr().(*net.TCPAddr).AddrPort() }

func (s *Session) changed() {
	close(s.notify)
	s.notify = make(chan struct{})
}

func (s *Session) readLoop() {
	defer close(s.closed)
	hdr := make([]byte, HeaderLen)
	for {
		_, err := io.ReadFull(s.conn, hdr)
		var h Header
		if err == nil {
			h, err = ParseHeader(hdr)
		}
		var body []byte
		if err == nil {
			body = make([]byte, int(h.Length)-HeaderLen)
			_, err = io.ReadFull(s.conn, body)
		}
		s.mu.Lock()
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("truncated message: %w", err)
			}
			s.readErr = err
			s.changed()
			s.mu.Unlock()
			return
		}
		m := Message{Type: h.Type, Body: body}
		s.received++
		switch {
		case m.Type == TypeOpen && s.peer == nil:
			s.peer, _ = ParseOpen(body)
		case m.Type == TypeUpdate:
			s.applyLocked(m)
		}
		if !(s.dropKA && m.Type == TypeKeepalive) {
			s.queue = append(s.queue, m)
		}
		s.changed()
		s.mu.Unlock()
	}
}

func (s *Session) applyLocked(m Message) {
	neg := s.negotiatedLocked()
	if neg == nil || s.ribErr != nil {
		return
	}
	u, err := DecodeUpdate(m.Body, neg.DecodeOptions())
	if err != nil {
		s.ribErr = err
		return
	}
	if f, ok := u.EndOfRIB(); ok {
		s.eor[f] = true
	}
	for _, r := range u.Withdrawn {
		delete(s.rib, routeKey{r.Family, r.Prefix, r.PathID})
	}
	for _, r := range u.Announced {
		s.rib[routeKey{r.Family, r.Prefix, r.PathID}] = r
	}
}

// Negotiated is what an OPEN exchange agreed on.
type Negotiated struct {
	LocalASN, PeerASN uint32
	LocalAddr         netip.Addr // this side's address of the connection
	HoldTime          uint16     // the smaller of the two
	FourOctetAS       bool
	ExtendedMessage   bool
	// SendPathID: our NLRI of the family must carry path identifiers (we
	// advertised ADD-PATH send, the peer receive). RecvPathID: the peer's do.
	SendPathID, RecvPathID map[Family]bool
}

// DecodeOptions returns the options to decode the peer's UPDATEs.
func (n *Negotiated) DecodeOptions() DecodeOptions {
	return DecodeOptions{FourOctetAS: n.FourOctetAS, PathID: n.RecvPathID}
}

// MaxMessageLen returns the largest message either side may send.
func (n *Negotiated) MaxMessageLen() int {
	if n.ExtendedMessage {
		return MaxExtendedMessageLen
	}
	return MaxMessageLen
}

// Negotiate computes what the OPENs sent (local) and received (peer) agree on.
func Negotiate(local, peer *OpenMsg) *Negotiated {
	n := &Negotiated{
		LocalASN: local.ASN, PeerASN: peer.ASN,
		HoldTime:        min(local.HoldTime, peer.HoldTime),
		FourOctetAS:     local.FourOctetAS && peer.FourOctetAS,
		ExtendedMessage: local.ExtendedMessage && peer.ExtendedMessage,
		SendPathID:      map[Family]bool{}, RecvPathID: map[Family]bool{},
	}
	for _, a := range local.AddPath {
		pm := peer.AddPathMode(a.Family)
		n.SendPathID[a.Family] = a.Mode&AddPathSend != 0 && pm&AddPathReceive != 0
		n.RecvPathID[a.Family] = a.Mode&AddPathReceive != 0 && pm&AddPathSend != 0
	}
	return n
}

func (s *Session) negotiatedLocked() *Negotiated {
	if s.neg == nil && s.local != nil && s.peer != nil {
		s.neg = Negotiate(s.local, s.peer)
		s.neg.LocalAddr = s.LocalAddr().Addr().Unmap()
	}
	return s.neg
}

// Negotiated returns what the handshake agreed on, or nil before both OPENs
// were exchanged through Handshake.
func (s *Session) Negotiated() *Negotiated {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.negotiatedLocked()
}

// Send writes msg exactly as given, within DefaultTimeout.
func (s *Session) Send(msg []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.conn.SetWriteDeadline(time.Now().Add(DefaultTimeout)); err != nil {
		return fmt.Errorf("bgptest: send: %w", err)
	}
	if _, err := s.conn.Write(msg); err != nil {
		return fmt.Errorf("bgptest: send %d octets: %w", len(msg), err)
	}
	return nil
}

// wait blocks until cond, called under s.mu, returns true, the connection is
// closed and cond still fails (the read error is returned), or ctx ends.
func (s *Session) wait(ctx context.Context, cond func() bool) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	for {
		s.mu.Lock()
		if cond() {
			s.mu.Unlock()
			return nil
		}
		if s.readErr != nil {
			err := s.readErr
			s.mu.Unlock()
			return fmt.Errorf("bgptest: connection from %s closed: %w", s.RemoteAddr(), err)
		}
		ch := s.notify
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("bgptest: waiting on %s: %w", s.RemoteAddr(), ctx.Err())
		}
	}
}

// ReadMessage returns the next queued message, waiting for one until ctx ends
// (DefaultTimeout without a deadline) or the connection closes.
func (s *Session) ReadMessage(ctx context.Context) (Message, error) {
	var m Message
	err := s.wait(ctx, func() bool {
		if len(s.queue) == 0 {
			return false
		}
		m, s.queue = s.queue[0], s.queue[1:]
		return true
	})
	return m, err
}

// WaitFor consumes queued messages until one satisfies pred and returns it.
func (s *Session) WaitFor(ctx context.Context, pred func(Message) bool) (Message, error) {
	for {
		m, err := s.ReadMessage(ctx)
		if err != nil || pred(m) {
			return m, err
		}
	}
}

// WaitNotification consumes queued messages until a NOTIFICATION and returns
// it; if the connection closes first it fails wrapping ErrNoNotification.
func (s *Session) WaitNotification(ctx context.Context) (*NotificationMsg, error) {
	m, err := s.WaitFor(ctx, func(m Message) bool { return m.Type == TypeNotification })
	if err != nil {
		if ctx.Err() == nil && s.isClosed() {
			return nil, fmt.Errorf("%w: %w", ErrNoNotification, err)
		}
		return nil, err
	}
	return ParseNotification(m.Body)
}

func (s *Session) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// Handshake sends o, reads the peer's OPEN (whether it came before ours or
// after), sends a KEEPALIVE and waits for the peer's. Negotiation is computed
// from the OPEN as sent, raw capabilities included (if those are malformed,
// from o without them). A NOTIFICATION from the
// peer is returned as a *NotificationMsg error. Messages the peer sends after
// its KEEPALIVE stay queued.
func (s *Session) Handshake(ctx context.Context, o Open) (*OpenMsg, error) {
	local, err := ParseOpen(o.Body())
	if err != nil { // malformed raw parts: negotiate on the rest
		clean := o
		clean.RawCapabilities, clean.RawOptParams = nil, nil
		if local, err = ParseOpen(clean.Body()); err != nil {
			return nil, fmt.Errorf("bgptest: our OPEN: %w", err)
		}
	}
	s.mu.Lock()
	s.local = local
	s.mu.Unlock()
	if err := s.Send(o.Message()); err != nil {
		return nil, err
	}
	next := func(want uint8) (Message, error) {
		m, err := s.ReadMessage(ctx)
		if err != nil {
			return m, fmt.Errorf("bgptest: handshake with %s: %w", s.RemoteAddr(), err)
		}
		switch m.Type {
		case want:
			return m, nil
		case TypeNotification:
			n, err := ParseNotification(m.Body)
			if err != nil {
				return m, fmt.Errorf("bgptest: handshake with %s: %w", s.RemoteAddr(), err)
			}
			return m, fmt.Errorf("bgptest: handshake with %s refused: %w", s.RemoteAddr(), n)
		}
		return m, fmt.Errorf("bgptest: handshake with %s: got message type %d, want %d", s.RemoteAddr(), m.Type, want)
	}
	m, err := next(TypeOpen)
	if err != nil {
		return nil, err
	}
	peer, err := ParseOpen(m.Body)
	if err != nil {
		return nil, fmt.Errorf("bgptest: handshake with %s: %w", s.RemoteAddr(), err)
	}
	if err := s.Send(Keepalive()); err != nil {
		return nil, err
	}
	if _, err := next(TypeKeepalive); err != nil {
		return nil, err
	}
	return peer, nil
}

// KeepAlive keeps the session up until ctx ends or the connection closes: it
// sends a KEEPALIVE every third of the negotiated hold time (every second at
// most, none for a hold time of 0) and stops queueing received KEEPALIVEs.
// It returns at once; call it after Handshake.
func (s *Session) KeepAlive(ctx context.Context) {
	s.mu.Lock()
	s.dropKA = true
	s.queue = slices.DeleteFunc(s.queue, func(m Message) bool { return m.Type == TypeKeepalive })
	hold := uint16(0)
	if n := s.negotiatedLocked(); n != nil {
		hold = n.HoldTime
	}
	s.mu.Unlock()
	if hold == 0 {
		return
	}
	every := max(time.Second, time.Duration(hold)*time.Second/3)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.closed:
				return
			case <-t.C:
				if s.Send(Keepalive()) != nil {
					return
				}
			}
		}
	}()
}

// Routes returns the peer's current announcements (Adj-RIB-In), sorted by
// family, prefix and path ID. The Adj-RIB-In stops changing at the first
// UPDATE that does not decode (WaitRoutes then reports it).
func (s *Session) Routes() []Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routesLocked()
}

func (s *Session) routesLocked() []Route {
	rs := make([]Route, 0, len(s.rib))
	for _, r := range s.rib {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b Route) int {
		switch {
		case a.Family.AFI != b.Family.AFI:
			return int(a.Family.AFI) - int(b.Family.AFI)
		case a.Prefix != b.Prefix:
			if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
				return c
			}
			return a.Prefix.Bits() - b.Prefix.Bits()
		}
		return int(int64(a.PathID) - int64(b.PathID))
	})
	return rs
}

// WaitRoutes waits until pred holds for the Adj-RIB-In and returns it; it
// fails if an UPDATE from the peer could not be decoded.
func (s *Session) WaitRoutes(ctx context.Context, pred func([]Route) bool) ([]Route, error) {
	var rs []Route
	var derr error
	err := s.wait(ctx, func() bool {
		if s.ribErr != nil {
			derr = s.ribErr
			return true
		}
		rs = s.routesLocked()
		return pred(rs)
	})
	if derr != nil {
		return nil, fmt.Errorf("bgptest: UPDATE from %s: %w", s.RemoteAddr(), derr)
	}
	return rs, err
}

// WaitEndOfRIB waits for the peer's End-of-RIB for f.
func (s *Session) WaitEndOfRIB(ctx context.Context, f Family) error {
	return s.wait(ctx, func() bool { return s.eor[f] })
}

// Announced reports whether rs has p with next hop nh (any next hop if nh is
// the zero Addr).
func Announced(rs []Route, p netip.Prefix, nh netip.Addr) bool {
	return slices.ContainsFunc(rs, func(r Route) bool {
		return r.Prefix == p && (!nh.IsValid() || r.NextHop == nh)
	})
}

// Closed is closed once the connection is closed or fails.
func (s *Session) Closed() <-chan struct{} { return s.closed }

// WaitClosed waits until the connection is closed (by the peer, or failed)
// and returns nil, or ctx's error if ctx ends first (DefaultTimeout without a
// deadline). Messages still queued stay readable.
func (s *Session) WaitClosed(ctx context.Context) error {
	if s.isClosed() {
		return nil
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	select {
	case <-s.closed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("bgptest: waiting for %s to close: %w", s.RemoteAddr(), ctx.Err())
	}
}

// Err returns why the connection closed (io.EOF for an orderly close by the
// peer), or nil while it is open.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readErr
}

// Received returns how many messages have been read from the peer.
func (s *Session) Received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received
}

// Close closes the connection (without a NOTIFICATION; send one first for an
// orderly close) and waits for the reader to stop.
func (s *Session) Close() error {
	err := s.conn.Close()
	<-s.closed
	return err
}
