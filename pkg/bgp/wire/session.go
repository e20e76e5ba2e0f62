package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Errors a session ends with (wrapped; test with errors.Is).
var (
	// ErrRouterNotification: the router sent a NOTIFICATION.
	ErrRouterNotification = errors.New("the router sent a NOTIFICATION")
	// ErrRouterClosed: the router closed the connection without a NOTIFICATION.
	ErrRouterClosed = errors.New("the router closed the connection")
	// ErrRefused: the router sent a message the relay refuses; it was told why.
	ErrRefused = errors.New("refused a message from the router")
	// ErrSpeakerEnded: the speaker (GoBGP, or a Reset or Finish) ended the session.
	ErrSpeakerEnded = errors.New("the speaker ended the session")
	// ErrInternal: the relay failed on a message (a bug); the session was reset.
	ErrInternal = errors.New("internal error relaying a BGP message")
	// ErrGoBGPUnavailable: GoBGP did not take the connection in time.
	ErrGoBGPUnavailable = errors.New("the embedded BGP server did not accept the session")
)

// session is one connection to the router and the matching one to GoBGP.
type session struct {
	p   *Peer
	log klog.Logger
	rc  *net.TCPConn // the router
	rr  io.Reader    // reads rc (after any bytes read ahead)
	gc  *net.TCPConn // GoBGP; set once before the pumps start

	mu          sync.Mutex
	local       *Open // GoBGP's OPEN
	remote      *Open // the router's OPEN (as received)
	neg         Negotiated
	negotiated  bool
	established bool
	timedOut    bool // the router side ended on our read deadline, not the router's close

	// wmu serializes writes to the router; it guards rib. A write may block for up
	// to the hold time (a router that does not read): nothing that reports status
	// takes wmu.
	wmu       sync.Mutex
	rib       *ribOut
	ribBroken bool // an UPDATE of GoBGP's did not parse: withdrawals are not exact
	// cut: GoBGP's output is no longer passed on, the session is ending (set under
	// wmu, read without it).
	cut atomic.Bool
	// sent is what the router holds per family (see sentLocked), kept apart from
	// wmu for status readers.
	sentMu sync.Mutex
	sent   map[Family]int

	routerDone chan struct{} // closed when the router side's reader returned
	runDone    chan struct{} // closed when run returned
	endOnce    sync.Once
}

func newSession(p *Peer, in accepted, log klog.Logger) *session {
	s := &session{p: p, log: log, rc: in.c, rr: in.c, rib: newRIBOut(), routerDone: make(chan struct{}), runDone: make(chan struct{})}
	if len(in.prefix) > 0 {
		s.rr = io.MultiReader(bytes.NewReader(in.prefix), in.c)
	}
	return s
}

// run relays until the session ends, and returns why it ended.
func (s *session) run(ctx context.Context) error {
	defer close(s.runDone)
	defer s.rc.Close()
	if err := s.awaitRouterOpen(); err != nil {
		return err
	}
	gc, open, err := s.dialInner(ctx)
	if err != nil {
		if !s.cut.Load() { // else end wrote its NOTIFICATION already
			s.writeRouter(Cease(SubCeaseOutOfResources, "").Bytes())
		}
		return err
	}
	s.gc = gc
	s.mu.Lock()
	s.local = open
	s.mu.Unlock()
	if !s.writeRouterUncut(open.rawBytes()) {
		_ = gc.Close()
		return ErrSpeakerEnded // ended while GoBGP took its side
	}

	routerErr := make(chan error, 1)
	gobgpDone := make(chan struct{})
	go func() { routerErr <- s.fromRouter() }()
	go func() { defer close(gobgpDone); s.fromGoBGP() }()

	var reason error
	select {
	case <-ctx.Done():
		// The speaker's end without Finish (process exit): close as the kernel would.
		_ = s.rc.Close()
		_ = gc.Close()
		<-routerErr
		<-gobgpDone
		return ctx.Err()
	case reason = <-routerErr:
	case <-gobgpDone:
		// GoBGP ended the session (its NOTIFICATION is on the way): give the router
		// the time to read it and close.
		select {
		case reason = <-routerErr:
		case <-time.After(closeWait + time.Second):
			_ = s.rc.Close()
			reason = <-routerErr
		}
		if reason == nil || errors.Is(reason, ErrRouterClosed) {
			reason = ErrSpeakerEnded
		}
	}
	s.markCut()
	s.mu.Lock()
	wasUp := s.established
	s.established = false
	s.mu.Unlock()
	if wasUp {
		s.log.Info("BGP session with the router ended", "reason", reason)
	}
	waitGoBGP := false
	if s.p.hooks.Ended != nil {
		waitGoBGP = s.p.hooks.Ended(reason)
	}
	if s.p.hooks.Sent != nil {
		s.p.hooks.Sent(nil)
	}
	if waitGoBGP {
		select {
		case <-gobgpDone:
		case <-time.After(time.Second):
		}
	}
	_ = gc.Close()
	<-gobgpDone
	return reason
}

// routerOpenWait bounds how long a new connection waits for the router's OPEN
// before GoBGP is given the session.
const routerOpenWait = 3 * time.Second

// awaitRouterOpen waits (bounded by routerOpenWait) for the router's first
// message before GoBGP is involved: a router that accepts the connection and
// closes it (FRR does while its configuration settles) then costs GoBGP nothing,
// where a session GoBGP saw fail would keep it idle for 5 s. A router that waits
// for our OPEN first (DelayOpen) gets it after routerOpenWait.
func (s *session) awaitRouterOpen() error {
	if s.rr != io.Reader(s.rc) {
		return nil // the OPEN was read already (an accepted connection)
	}
	_ = s.rc.SetReadDeadline(time.Now().Add(routerOpenWait))
	if s.isCut() {
		// end ran before the deadline above and its own was overwritten.
		return ErrSpeakerEnded
	}
	m, err := ReadMessage(s.rc, MaxLen)
	_ = s.rc.SetReadDeadline(time.Time{})
	var me *MessageError
	switch {
	case s.isCut():
		return ErrSpeakerEnded
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	case errors.As(err, &me):
		s.refuse(me)
		return fmt.Errorf("%w: %w", ErrRefused, me)
	case err != nil:
		return fmt.Errorf("%w before its OPEN: %w", ErrRouterClosed, err)
	case m.Type == TypeNotification:
		// A router refusing the session (BIRD's "Connection Rejected" while it
		// delays, a neighbor shut down): RFC 4271 8.2.2, drop the connection.
		n := ParseNotification(m.Body)
		s.log.Info("The BGP router refused the session", "notification", n.String())
		return fmt.Errorf("%w: %s", ErrRouterNotification, n)
	case m.Type != TypeOpen:
		me := malformed(CodeFSM, SubFSMOpenSent, []byte{m.Type}, "%s before OPEN", TypeName(m.Type))
		s.refuse(me)
		return fmt.Errorf("%w: %w", ErrRefused, me)
	}
	s.rr = io.MultiReader(bytes.NewReader(m.Bytes()), s.rc)
	return nil
}

// dialInner gives GoBGP its side of the session and reads GoBGP's OPEN. GoBGP
// refuses connections while its idle hold timer runs: the attempt is repeated
// until innerWait has passed.
func (s *session) dialInner(ctx context.Context) (*net.TCPConn, *Open, error) {
	deadline := time.Now().Add(innerWait)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil && !s.cut.Load() {
		c, open, err := s.tryInner(ctx)
		if err == nil {
			return c, open, nil
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(innerRetry):
		}
	}
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	if s.cut.Load() {
		return nil, nil, ErrSpeakerEnded
	}
	return nil, nil, fmt.Errorf("%w within %v: %w", ErrGoBGPUnavailable, innerWait, last)
}

func (s *session) tryInner(ctx context.Context) (*net.TCPConn, *Open, error) {
	d := net.Dialer{Timeout: 2 * time.Second, KeepAlive: -1, LocalAddr: &net.TCPAddr{IP: s.p.cfg.InnerFrom.AsSlice()}}
	c, err := d.DialContext(ctx, "tcp", s.p.cfg.Inner.String())
	if err != nil {
		return nil, nil, err
	}
	tc := c.(*net.TCPConn)
	_ = tc.SetReadDeadline(time.Now().Add(3 * time.Second))
	m, err := ReadMessage(tc, MaxLen)
	if err == nil && m.Type != TypeOpen {
		err = fmt.Errorf("GoBGP sent %s before OPEN", TypeName(m.Type))
	}
	var o *Open
	if err == nil {
		o, err = ParseOpen(m.Body)
		if o != nil {
			o.raw = m.Bytes()
		}
	}
	if err != nil {
		_ = tc.Close()
		return nil, nil, err
	}
	_ = tc.SetReadDeadline(time.Time{})
	return tc, o, nil
}

// markCut stops passing GoBGP's output on; from now on the router side is only
// read to see it close.
func (s *session) markCut() { s.cut.Store(true) }

func (s *session) isCut() bool { return s.cut.Load() }

// writeTimeoutNow bounds a write to the router: the negotiated hold time (a router
// that reads nothing for that long is dead by BGP's own rule), at least
// writeTimeout.
func (s *session) writeTimeoutNow() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := writeTimeout
	if s.local != nil && s.remote != nil {
		if h := time.Duration(min(s.local.HoldTime, s.remote.HoldTime)) * time.Second; h > d {
			d = h
		}
	}
	return d
}

// writeRouterLocked writes to the router (s.wmu held); a failed write closes the
// connection, which ends the session.
func (s *session) writeRouterLocked(b []byte) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.writeTimeoutNow()))
	if _, err := s.rc.Write(b); err != nil {
		s.log.V(2).Info("Writing to the BGP router failed", "err", err)
		_ = s.rc.Close()
	}
}

func (s *session) writeRouter(b []byte) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.writeRouterLocked(b)
}

// writeRouterUncut writes unless the session is ending, and reports whether it
// wrote.
func (s *session) writeRouterUncut(b []byte) bool {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.cut.Load() {
		return false
	}
	s.writeRouterLocked(b)
	return true
}

// end ends the session on the speaker's side, once: GoBGP's output stops, the
// withdrawals of every path the router holds are written (withdraw), then the
// NOTIFICATION n (a Hard Reset where negotiated, when hard). With wait it returns
// when the router has closed its side, or after closeWait; without, at once.
// It reports whether the router closed its side.
func (s *session) end(n Notification, hard, withdraw, wait bool) bool {
	// sent: this call wrote the NOTIFICATION; sentEst: the session was established
	// then, so the router's close that follows confirms it read everything.
	sent, sentEst := false, false
	s.endOnce.Do(func() {
		s.mu.Lock()
		neg, negotiated, est := s.neg, s.negotiated, s.established
		s.mu.Unlock()
		sent, sentEst = true, est
		s.wmu.Lock()
		if !s.cut.Swap(true) {
			if withdraw && est {
				for _, u := range s.rib.withdrawals(neg) {
					s.writeRouterLocked(u)
				}
			}
			if hard && negotiated && neg.HardReset {
				n = HardReset(n)
			}
			s.writeRouterLocked(n.Bytes())
			s.log.V(2).Info("Sent NOTIFICATION to the BGP router", "notification", n.String(), "withdrawn", withdraw && est)
		}
		s.wmu.Unlock()
		// An established session gives the router closeWait to read the
		// withdrawals and close; before that the router holds nothing of it, and
		// the read ends now, so Finish never returns before the connection closes.
		wait := time.Duration(0)
		if est {
			wait = closeWait
		}
		_ = s.rc.SetReadDeadline(time.Now().Add(wait))
	})
	// Before the session is established the router holds nothing of it: there is
	// nothing to wait for. When this call sent the NOTIFICATION, what counts is the
	// state it was sent in: a router that reads it and closes at once may have ended
	// the session before this check (which then reported a confirmed stop as
	// unconfirmed); when an earlier call ended it, the session must still be up.
	if !wait || sent && !sentEst || !sent && !s.establishedNow() {
		return false
	}
	select {
	case <-s.routerDone:
		return s.routerClosedCleanly()
	case <-s.runDone: // the router side was never read (ended before the OPENs)
		return false
	case <-time.After(closeWait):
		return false
	}
}

// finish is end with withdrawals and a wait bounded by ctx.
func (s *session) finish(ctx context.Context, n Notification, withdraw bool) bool {
	done := make(chan bool, 1)
	go func() { done <- s.end(n, true, withdraw, true) }()
	select {
	case ok := <-done:
		return ok
	case <-ctx.Done():
		_ = s.rc.Close()
		return false
	}
}

// routerClosedCleanly: the router side ended with the router's FIN or RST, not
// a deadline of ours.
func (s *session) routerClosedCleanly() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.timedOut
}

// fromRouter reads the router's messages and passes GoBGP what it may see, until
// the router's side ends. It returns why the session ended.
func (s *session) fromRouter() (reason error) {
	defer close(s.routerDone)
	for {
		maxLen := MaxLen
		s.mu.Lock()
		if s.negotiated {
			maxLen = s.neg.MaxLen()
		}
		s.mu.Unlock()
		m, err := ReadMessage(s.rr, maxLen)
		if err != nil {
			var me *MessageError
			switch {
			case errors.As(err, &me) && !s.isCut():
				s.refuse(me)
				reason = fmt.Errorf("%w: %w", ErrRefused, me)
				continue // read on until the router closes (bounded by the deadline end set)
			case errors.As(err, &me):
				continue
			case errors.Is(err, os.ErrDeadlineExceeded):
				s.mu.Lock()
				s.timedOut = true
				s.mu.Unlock()
			}
			if reason == nil {
				reason = fmt.Errorf("%w: %w", ErrRouterClosed, err)
			}
			return reason
		}
		if s.isCut() {
			continue // ending: only waiting for the router to close
		}
		if r := s.handleRouter(m); r != nil && reason == nil {
			reason = r
		}
	}
}

// refuse ends the session because of a message the relay refuses.
func (s *session) refuse(me *MessageError) {
	s.log.Info("Refused a message from the BGP router; resetting the session", "reason", me.Reason, "notification", me.Notification.String())
	s.end(me.Notification, false, false, false)
}

// handleRouter handles one message of the router's; a panic in it resets the
// session instead of ending the process. It returns the session's end reason
// when the message ends the session.
func (s *session) handleRouter(m Message) (reason error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error(fmt.Errorf("%v", r), "Internal error on a message from the BGP router; resetting the session", "type", TypeName(m.Type), "stack", string(debug.Stack()))
			s.end(Cease(SubCeaseAdminReset, "internal error"), false, false, false)
			reason = ErrInternal
		}
	}()
	s.mu.Lock()
	gotOpen, est := s.remote != nil, s.established
	s.mu.Unlock()
	fsm := func() error {
		sub := uint8(SubFSMOpenSent)
		switch {
		case est:
			sub = SubFSMEstablished
		case gotOpen:
			sub = SubFSMOpenConfirm
		}
		me := malformed(CodeFSM, sub, []byte{m.Type}, "unexpected %s", TypeName(m.Type))
		s.refuse(me)
		return fmt.Errorf("%w: %w", ErrRefused, me)
	}
	switch m.Type {
	case TypeOpen:
		if gotOpen {
			return fsm()
		}
		o, err := ParseOpen(m.Body)
		if err != nil {
			var me *MessageError
			if errors.As(err, &me) {
				s.refuse(me)
			}
			return fmt.Errorf("%w: %w", ErrRefused, err)
		}
		s.mu.Lock()
		s.remote = o
		s.neg, s.negotiated = Negotiate(s.local, o), true
		s.mu.Unlock()
		s.toGoBGP(o.Bytes())
	case TypeKeepalive:
		if !gotOpen {
			return fsm()
		}
		if !est {
			s.mu.Lock()
			s.established = true
			s.mu.Unlock()
			s.p.mu.Lock()
			s.p.lastErr = nil
			s.p.mu.Unlock()
		}
		s.toGoBGP(keepalive)
	case TypeUpdate:
		if !est {
			return fsm()
		}
		if f, ok := EndOfRIB(m.Body); ok && (f == IPv4Unicast || f == IPv6Unicast) {
			s.toGoBGP(endOfRIBBytes(f))
		} else {
			s.toGoBGP(keepalive) // routes are not imported; the hold timer is kept
		}
	case TypeRouteRefresh:
		if !est {
			return fsm()
		}
		if len(m.Body) != routeRefreshLen-HeaderLen {
			me := malformed(CodeRouteRefresh, SubRouteRefreshBadLen, m.Bytes(), "ROUTE-REFRESH of %d bytes", len(m.Body))
			s.refuse(me)
			return fmt.Errorf("%w: %w", ErrRefused, me)
		}
		f := Family{AFI: uint16(m.Body[0])<<8 | uint16(m.Body[1]), SAFI: m.Body[3]}
		if (f == IPv4Unicast || f == IPv6Unicast) && m.Body[2] <= 2 {
			s.toGoBGP(m.Bytes())
		}
	case TypeNotification:
		n := ParseNotification(m.Body)
		s.log.Info("The BGP router sent a NOTIFICATION", "notification", n.String())
		s.toGoBGP(n.sanitized().Bytes())
		s.markCut() // the router takes nothing after its NOTIFICATION
		_ = s.rc.SetReadDeadline(time.Now().Add(closeWait))
		return fmt.Errorf("%w: %s", ErrRouterNotification, n)
	}
	return nil
}

// toGoBGP writes to GoBGP; a failure closes GoBGP's side, which ends the session.
func (s *session) toGoBGP(b []byte) {
	_ = s.gc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := s.gc.Write(b); err != nil {
		s.log.V(2).Info("Writing to the embedded BGP server failed", "err", err)
		_ = s.gc.Close()
	}
}

// fromGoBGP passes GoBGP's messages to the router, recording what the router is
// sent, until GoBGP's side ends.
func (s *session) fromGoBGP() {
	for {
		m, err := ReadMessage(s.gc, MaxExtendedLen)
		if err != nil {
			s.wmu.Lock()
			if !s.cut.Swap(true) {
				// GoBGP closed without a NOTIFICATION: tell the router, so a
				// graceful-restart router keeps the paths for the next session.
				s.writeRouterLocked(Cease(SubCeaseAdminReset, "session restart").Bytes())
			}
			s.wmu.Unlock()
			_ = s.rc.SetReadDeadline(time.Now().Add(closeWait))
			return
		}
		s.handleGoBGP(m)
	}
}

func (s *session) handleGoBGP(m Message) {
	locked := false
	defer func() {
		if r := recover(); r != nil {
			if locked {
				s.wmu.Unlock()
			}
			s.log.Error(fmt.Errorf("%v", r), "Internal error on a message of the embedded BGP server; resetting the session", "type", TypeName(m.Type), "stack", string(debug.Stack()))
			s.end(Cease(SubCeaseAdminReset, "internal error"), false, false, false)
		}
	}()
	s.wmu.Lock()
	locked = true
	if s.cut.Load() {
		s.wmu.Unlock()
		return
	}
	b := m.Bytes()
	switch m.Type {
	case TypeUpdate:
		s.mu.Lock()
		neg := s.neg
		s.mu.Unlock()
		if err := s.rib.applyUpdate(m.Body, neg); err != nil && !s.ribBroken {
			s.ribBroken = true
			s.log.Error(err, "An UPDATE of the embedded BGP server did not parse; withdrawals at the end of this session rely on the Cease")
		}
		sent := s.sentLocked(neg)
		s.sentMu.Lock()
		s.sent = sent
		s.sentMu.Unlock()
		if s.p.hooks.Sent != nil {
			// Before the write: the count is never behind what the router has.
			s.p.hooks.Sent(sent)
		}
	case TypeNotification:
		n := ParseNotification(m.Body)
		if n.Code == CodeCease && n.Subcode == SubCeaseHardReset {
			if _, ok := n.Inner(); !ok {
				// GoBGP v4 turns a Cease into a Hard Reset without encapsulating the
				// original code (RFC 8538 section 3 requires it).
				n = HardReset(Notification{Code: CodeCease, Subcode: SubCeaseAdminShutdown, Data: n.Data})
				b = n.Bytes()
			}
		}
		s.log.V(2).Info("The embedded BGP server ended the session", "notification", n.String())
		s.cut.Store(true)
		s.writeRouterLocked(b)
		locked = false
		s.wmu.Unlock()
		_ = s.rc.SetReadDeadline(time.Now().Add(closeWait))
		return
	}
	s.writeRouterLocked(b)
	locked = false
	s.wmu.Unlock()
}

// status adds the session's view to st.
func (s *session) status(st *Status) {
	s.mu.Lock()
	st.Established = s.established
	st.Negotiated = s.neg
	s.mu.Unlock()
	st.Local, st.Remote = addrPort(s.rc.LocalAddr()), addrPort(s.rc.RemoteAddr())
	if st.Established {
		s.sentMu.Lock()
		st.Sent = maps.Clone(s.sent)
		s.sentMu.Unlock()
		if st.Sent == nil {
			st.Sent = map[Family]int{}
			for _, f := range st.Negotiated.Families {
				if f == IPv4Unicast || f == IPv6Unicast {
					st.Sent[f] = 0
				}
			}
		}
	}
}

// sentLocked is the number of paths the router holds per unicast family the
// session negotiated (s.wmu held).
func (s *session) sentLocked(neg Negotiated) map[Family]int {
	out := map[Family]int{}
	for _, f := range neg.Families {
		if f == IPv4Unicast || f == IPv6Unicast {
			out[f] = s.rib.count[f]
		}
	}
	return out
}

func (s *session) establishedNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.established
}

// pending: GoBGP's bytes not yet read by the relay plus the relay's not yet
// acknowledged by the router.
func (s *session) pending() (int, bool) {
	if !s.establishedNow() || s.gc == nil {
		return 0, false
	}
	out, err := outq(s.rc)
	if err != nil {
		return 0, false
	}
	in, err := inq(s.gc)
	if err != nil {
		return 0, false
	}
	return out + in, true
}
