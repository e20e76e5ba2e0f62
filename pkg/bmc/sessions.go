package bmc

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// Sessions is the Driver the CCM runs. For Redfish it keeps one session per BMC open
// between calls (redfishConn: X-Auth-Token, or Basic auth on a service without a
// SessionService) and one kept-alive TLS connection, so a read costs one GET of the
// host's ComputerSystem, which also carries the system's UUID. IPMI calls run
// ipmitool once each (a login, the query, a logout).
//
// Guarantees:
//   - at most one call and one session per BMC at a time (a BMC is its protocol,
//     address and port: the hosts of a blade enclosure share one): a call waits for
//     the previous one (even one its caller abandoned at a deadline) until its own
//     deadline;
//   - a login runs to its answer (at most loginTimeout) even when its caller gave up,
//     so a session a slow BMC created is kept and logged out later, never leaked, and
//     a refusal is always counted against the failed-login budget (per BMC, Redfish
//     and IPMI alike);
//   - a logout the BMC does not take is tried again by CloseIdle and Close (until
//     maxKeep), also for sessions replaced after a change of credentials;
//   - a session the BMC does not accept (401 after expiry or a BMC reboot, or right
//     after its login) is logged out and replaced by one new login, in the same call;
//     when the new session is refused too the error is ErrAccessDenied (the login
//     was accepted: not the credentials) and no refused login is counted; changed
//     credentials or TLS settings replace the session too;
//   - a login whose answer lacks X-Auth-Token deletes the session it created (with
//     Basic auth) before the call returns; a session is found for its logout by the
//     Location header, the body's @odata.id or Id; every link taken from the BMC's
//     answers must be on the BMC's own scheme, host and port, or nothing is sent;
//   - a session idle for longer than the idle time is logged out by Run; a session on
//     a BMC that stopped answering is kept and logged out once the BMC answers again
//     (Run probes it at every idle time), or dropped after maxKeep when it never does
//     (the BMC expires it by itself);
//   - Close, and Run when its context ends, log out every session.
//
// Lifetimes: a Sessions lives for the process (the failed-login budget of every BMC
// too), its sessions for a leadership term: BeginTerm opens one, and when the term's
// context ends it logs out every session, also one whose call was under way, and
// refuses calls (ErrNoTerm) until the next BeginTerm. Terms must not overlap.
// Before the first term calls are served as in one; Close ends every term for good.
//
// It is safe for concurrent use.
type Sessions struct {
	creds CredentialSource
	idle  time.Duration
	ids   identities
	// maxFailures and failWindow: the failed-login budget per BMC (see
	// SetLoginBudget).
	maxFailures int
	failWindow  time.Duration

	mu        sync.Mutex
	conns     map[string]*conn // by bmcKey
	stale     []staleSession   // sessions whose logout the BMC did not take yet
	closed    bool             // calls are refused: between terms, or after Close
	shut      bool             // Close ran: no term starts again
	closeOnce sync.Once
	loggedOut chan struct{} // closed when Close has logged out every session

	// ipmi runs ipmitool (nil: the ipmitool binary; a fake in tests).
	ipmi ipmiRunner
	// afterCall, when set (tests), runs when a Redfish call has released its BMC,
	// before its caller is answered.
	afterCall func()
}

// conn is one BMC's kept session.
type conn struct {
	// lock is held (a value in it) by the goroutine using client; it is released
	// when that goroutine ends, even after its caller has given up.
	lock chan struct{}
	// Guarded by lock:
	client  *redfishConn // nil: no session
	key     [32]byte     // fingerprint of target and credentials the session uses
	used    time.Time    // last call
	healthy bool         // the last call on the session succeeded
	target  Target
	// The failed-login budget: refusals within the window, and the fingerprint of
	// the credentials refused last.
	fails      []time.Time
	refusedKey [32]byte
	refusedAt  time.Time
	// call is the Redfish call holding lock (nil when none does); its abandoned
	// flag is set when its caller gave up. Being per call, a flag set late (after
	// the call ended) marks nothing: a later call holding lock is never "busy".
	call atomic.Pointer[redfishCall]
	// request is the last request sent on the BMC ("GET /path"), for messages.
	request atomic.Pointer[string]
}

// redfishCall is one call on a conn.
type redfishCall struct{ abandoned atomic.Bool }

// staleSession is a replaced session still to be logged out.
type staleSession struct {
	client        *redfishConn
	since         time.Time
	basicFallback bool
}

// loginTimeout bounds a login, which runs to its answer even when its caller gave up.
const loginTimeout = 30 * time.Second

// logoutTimeout bounds a logout, which runs on its own deadline.
const logoutTimeout = 5 * time.Second

// bmcKey names a BMC: its protocol, address and port.
func bmcKey(t Target) string { return fmt.Sprintf("%s\x00%s\x00%d", t.Protocol, t.Address, t.Port) }

// connFor returns the BMC's conn, creating it; nil between terms and after Close.
func (s *Sessions) connFor(t Target) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	c := s.conns[bmcKey(t)]
	if c == nil {
		c = &conn{lock: make(chan struct{}, 1)}
		s.conns[bmcKey(t)] = c
	}
	return c
}

// DefaultSessionIdle is the idle time after which the CCM logs out a BMC session: it
// outlives the NotReady re-read interval (so NotReady hosts are read on one session)
// but not the Ready one (so Ready hosts hold no session between reads).
const DefaultSessionIdle = time.Minute

// maxKeep is how long a session on a BMC that stopped answering is kept for a logout
// before it is dropped (BMCs expire idle sessions themselves, usually well before).
const maxKeep = time.Hour

// NewSessions returns a Sessions driver resolving credentials through creds (nil:
// the Target's credentials file) and logging out sessions idle for longer than idle.
func NewSessions(creds CredentialSource, idle time.Duration) *Sessions {
	return &Sessions{creds: creds, idle: idle, conns: map[string]*conn{}, loggedOut: make(chan struct{}),
		maxFailures: DefaultMaxFailedLogins, failWindow: DefaultFailedLoginWindow}
}

// Defaults of the failed-login budget.
const (
	DefaultMaxFailedLogins   = 2
	DefaultFailedLoginWindow = 10 * time.Minute
)

// SetLoginBudget sets the failed-login budget per BMC (call it before the first
// read): credentials a BMC refused are not tried on it again until they change or
// window has passed, and after maxFailures refused logins within window no login is
// tried on it until the oldest leaves the window. Real BMCs lock a client out after a
// few failed logins (iDRAC: its IP for 600 s after the third), which would also lock
// out the credentials once they are fixed.
func (s *Sessions) SetLoginBudget(maxFailures int, window time.Duration) {
	s.maxFailures, s.failWindow = maxFailures, window
}

// ErrLoginBudget is wrapped (beside ErrAuth) when a login is not even tried because
// of the failed-login budget.
var ErrLoginBudget = errors.New("not logging in again yet")

// loginAllowed applies the budget; it runs with c.lock held.
func (s *Sessions) loginAllowed(c *conn, key [32]byte, now time.Time) error {
	cut := now.Add(-s.failWindow)
	c.fails = slices.DeleteFunc(c.fails, func(t time.Time) bool { return !t.After(cut) })
	if c.refusedKey == key && c.refusedAt.After(cut) {
		return fmt.Errorf("%w: %w: the BMC refused these credentials at %s; they are tried again at %s, or as soon as they change (BMCs lock out clients that keep failing)",
			ErrAuth, ErrLoginBudget, c.refusedAt.UTC().Format(time.RFC3339), c.refusedAt.Add(s.failWindow).UTC().Format(time.RFC3339))
	}
	if len(c.fails) >= s.maxFailures {
		return fmt.Errorf("%w: %w: %d refused logins within %s (bmc.failedLogins); the next is tried at %s",
			ErrAuth, ErrLoginBudget, len(c.fails), s.failWindow, c.fails[0].Add(s.failWindow).UTC().Format(time.RFC3339))
	}
	return nil
}

var _ Driver = (*Sessions)(nil)

// PowerState implements Driver.
func (s *Sessions) PowerState(ctx context.Context, t Target) (string, error) {
	if t.Protocol != inventory.ProtocolRedfish {
		raw, _, err := s.readIPMI(ctx, t, false)
		return raw, err
	}
	raw, _, err := s.readRedfish(ctx, t)
	return raw, err
}

// readIPMI reads an IPMI host's power with one ipmitool run, one RMCP+ login
// (bmclib's Open runs "power status" too, so a read through it logs in twice), one at
// a time per BMC and within the failed-login budget. With identity, an "off" answer
// also reads the system GUID (see ReadPower) in the same turn on the BMC: under its
// lock and within its budget, and a refused login there counts too.
func (s *Sessions) readIPMI(ctx context.Context, t Target, identity bool) (string, string, error) {
	c := s.connFor(t)
	if c == nil {
		return "", "", ErrNoTerm
	}
	select {
	case c.lock <- struct{}{}:
	case <-ctx.Done():
		return "", "", fmt.Errorf("%w: the previous call to this BMC has not returned: %w", ErrUnreachable, ctx.Err())
	}
	defer func() { <-c.lock }()
	creds, err := credentialsOf(ctx, s.creds, t)
	if err != nil {
		return "", "", err
	}
	run := s.ipmi
	if run == nil {
		run = ipmitool
	}
	key := fingerprint(t, creds)
	if err := s.loginAllowed(c, key, time.Now()); err != nil {
		return "", "", err
	}
	raw, err := ipmiPowerStatus(ctx, run, t, creds)
	if errors.Is(err, ErrAuth) {
		s.refused(c, key, time.Now())
	}
	if err != nil || !identity || Normalize(raw) != PowerOff {
		return raw, "", err
	}
	uuid, err := s.ids.get(ctx, key, func(ctx context.Context) (string, error) {
		return ipmiSystemGUID(ctx, run, t, creds)
	})
	if err != nil {
		if errors.Is(err, ErrAuth) {
			s.refused(c, key, time.Now())
		}
		return "", "", fmt.Errorf("%w: the BMC reports the host off, but its system's identity could not be read: %w", ErrUnknownState, err)
	}
	return raw, uuid, nil
}

// refused records a refused login against c's budget.
func (s *Sessions) refused(c *conn, key [32]byte, at time.Time) {
	c.fails = append(c.fails, at)
	c.refusedKey, c.refusedAt = key, at
}

// readRedfish reads the power state and system UUID of a Redfish host on its kept
// session.
func (s *Sessions) readRedfish(ctx context.Context, t Target) (string, string, error) {
	c := s.connFor(t)
	if c == nil {
		return "", "", ErrNoTerm
	}

	select {
	case c.lock <- struct{}{}:
	case <-ctx.Done():
		return "", "", fmt.Errorf("%w: the previous call to this BMC has not returned: %w", ErrUnreachable, ctx.Err())
	}
	creds, err := credentialsOf(ctx, s.creds, t)
	if err != nil {
		<-c.lock
		return "", "", err
	}
	type result struct {
		state, uuid string
		err         error
	}
	call := &redfishCall{}
	c.call.Store(call)
	done := make(chan result, 1)
	go func() {
		state, uuid, err := s.read(ctx, c, t, creds)
		if errors.Is(err, ErrAuth) {
			if inv, ok := s.creds.(invalidator); ok {
				inv.Invalidate(t) // a rotated Secret is read again on the next call
			}
		}
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			// The term ended (or Close ran) while this call was under way: its
			// session goes too.
			s.logout(ctx, c)
		}
		c.call.CompareAndSwap(call, nil)
		<-c.lock // before answering: the caller's next call finds the BMC free
		if s.afterCall != nil {
			s.afterCall()
		}
		done <- result{state, uuid, err}
	}()
	select {
	case r := <-done:
		return r.state, r.uuid, r.err
	case <-ctx.Done():
		call.abandoned.Store(true)
		req := "the call"
		if p := c.request.Load(); p != nil {
			req = *p
		}
		return "", "", fmt.Errorf("%w: %s: %s: %w", ErrUnreachable, req, noAnswerWithin(ctx), ctx.Err())
	}
}

// read runs with c.lock held.
func (s *Sessions) read(ctx context.Context, c *conn, t Target, creds Credentials) (string, string, error) {
	logger := klog.FromContext(ctx).WithValues("host", t.Host)
	key := fingerprint(t, creds)
	if c.client != nil && c.key != key {
		logger.V(2).Info("BMC settings or credentials changed: replacing the session")
		s.logout(ctx, c)
	}
	if err := ctx.Err(); err != nil {
		return "", "", fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	reused := c.client != nil
	if !reused {
		if err := s.login(ctx, c, t, creds, key); err != nil {
			return "", "", err
		}
	}
	c.used = time.Now()
	state, uuid, err := c.client.readSystem(ctx, t)
	if err != nil && c.client.basic && errors.Is(err, ErrAuth) {
		// With Basic auth every request is a login: a refusal counts against the
		// budget, and the next read asks the budget first.
		s.refused(c, key, time.Now())
		c.client, c.healthy = nil, false
		return "", "", err
	}
	if err != nil && errors.Is(err, ErrAuth) {
		// The BMC refuses the session: it expired or the BMC rebooted (a kept one),
		// or the BMC refuses a session it has just created. Log in once more.
		logger.V(2).Info("BMC session not accepted: logging in again", "reused", reused)
		s.logoutWith(ctx, c, !reused)
		if ctx.Err() != nil {
			return "", "", fmt.Errorf("%w: %w", ErrUnreachable, ctx.Err())
		}
		if err := s.login(ctx, c, t, creds, key); err != nil {
			return "", "", err
		}
		state, uuid, err = c.client.readSystem(ctx, t)
		if err != nil && errors.Is(err, ErrAuth) {
			// The login was accepted right before: not the credentials, but what
			// the BMC lets this account read.
			s.logoutWith(ctx, c, true)
			return "", "", accessDenied(err)
		}
	}
	c.healthy = err == nil
	return state, uuid, err
}

// accessDenied turns a refusal that follows an accepted login into an
// ErrAccessDenied error, keeping the HTTP answer but not ErrAuth.
func accessDenied(err error) error {
	var he *HTTPError
	if errors.As(err, &he) {
		return fmt.Errorf("%w (%w): the BMC accepted the login but refused the session's request twice: %w", ErrAccessDenied, ErrUnknownState, he)
	}
	return fmt.Errorf("%w (%w): the BMC accepted the login but refused the session's request twice", ErrAccessDenied, ErrUnknownState)
}

func (s *Sessions) login(ctx context.Context, c *conn, t Target, creds Credentials, key [32]byte) error {
	if err := s.loginAllowed(c, key, time.Now()); err != nil {
		return err
	}
	client, err := newRedfishConn(t, creds)
	if err != nil {
		return err
	}
	client.track = func(req string) { c.request.Store(&req) }
	// The login runs to its answer even if the caller gives up meanwhile: a session the
	// BMC creates is then kept (and logged out in time), and a refusal is counted.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loginTimeout)
	defer cancel()
	if err := client.login(lctx); err != nil {
		client.http.CloseIdleConnections()
		if errors.Is(err, ErrAuth) {
			s.refused(c, key, time.Now())
		}
		return err // a failed login leaves no session to log out
	}
	if c.refusedKey == key {
		c.refusedKey = [32]byte{}
	}
	c.client, c.key, c.target, c.used, c.healthy = client, key, t, time.Now(), false
	return nil
}

// logout ends c's session on its own deadline and forgets it; a logout the BMC does
// not take is kept for CloseIdle and Close to try again.
func (s *Sessions) logout(ctx context.Context, c *conn) { s.logoutWith(ctx, c, false) }

// logoutWith is logout; basicFallback sends the DELETE again with Basic auth when
// the BMC refuses the session's token (see redfishConn.logout).
func (s *Sessions) logoutWith(ctx context.Context, c *conn, basicFallback bool) {
	if c.client == nil {
		return
	}
	old := c.client
	c.client, c.healthy = nil, false
	s.logoutOrKeep(ctx, old, c.used, basicFallback)
}

// logoutOrKeep logs a session out, or keeps it in s.stale when the BMC does not take
// the logout.
func (s *Sessions) logoutOrKeep(ctx context.Context, client *redfishConn, since time.Time, basicFallback bool) {
	token, uri := client.token, client.sessionURI
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), logoutTimeout)
	defer cancel()
	err := client.logout(lctx, basicFallback)
	if err == nil || time.Since(since) >= maxKeep {
		client.http.CloseIdleConnections() // ended, or never taken: the BMC expires it
	} else {
		client.token, client.sessionURI = token, uri
		s.mu.Lock()
		s.stale = append(s.stale, staleSession{client: client, since: since, basicFallback: basicFallback})
		s.mu.Unlock()
	}
}

// retryStale tries again the logouts the BMCs did not take.
func (s *Sessions) retryStale(ctx context.Context) {
	s.mu.Lock()
	stale := s.stale
	s.stale = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, st := range stale {
		wg.Go(func() { s.logoutOrKeep(ctx, st.client, st.since, st.basicFallback) })
	}
	wg.Wait()
}

// Busy reports whether a call to t's BMC that its caller abandoned at a deadline (on
// a BMC that hangs) is still under way.
func (s *Sessions) Busy(t Target) bool {
	s.mu.Lock()
	c := s.conns[bmcKey(t)]
	s.mu.Unlock()
	if c == nil {
		return false
	}
	call := c.call.Load()
	return call != nil && call.abandoned.Load()
}

// BeginTerm opens one leadership term and returns at once; the returned channel closes
// when the term has ended. Calls are served from now (unless Close ran); a goroutine
// logs out idle sessions every idle time until ctx ends, then refuses calls until the
// next BeginTerm and logs out every session (each with a deadline of timeout, waiting
// as long for calls under way) before the channel closes.
func (s *Sessions) BeginTerm(ctx context.Context, timeout time.Duration) <-chan struct{} {
	done := make(chan struct{})
	s.mu.Lock()
	shut := s.shut
	s.closed = shut
	s.mu.Unlock()
	if shut {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		s.runTerm(ctx, timeout)
	}()
	return done
}

// runTerm is the goroutine of a term (see BeginTerm).
func (s *Sessions) runTerm(ctx context.Context, timeout time.Duration) {
	if s.idle <= 0 {
		<-ctx.Done()
	} else {
		tick := time.NewTicker(s.idle / 2)
		defer tick.Stop()
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case <-tick.C:
				s.CloseIdle(ctx, s.idle, timeout)
			}
		}
	}
	s.endTerm(context.WithoutCancel(ctx), timeout)
}

// endTerm refuses calls and logs out every session, each within timeout, waiting as
// long for a call under way (whose session its call logs out if it ends later).
func (s *Sessions) endTerm(ctx context.Context, timeout time.Duration) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.each(ctx, timeout, true, func(ctx context.Context, c *conn) { s.logout(ctx, c) })
	s.retryStale(ctx)
}

// CloseIdle logs out the sessions not used for idle, each within timeout, and waits
// for them. A session whose BMC did not answer its last call is first probed with a
// read on it; it is logged out if the BMC answers anything (the logout would otherwise
// be lost), dropped without a logout if the BMC refuses it (it is gone already), and
// kept otherwise, until maxKeep.
func (s *Sessions) CloseIdle(ctx context.Context, idle, timeout time.Duration) {
	s.retryStale(ctx)
	s.each(ctx, timeout, false, func(ctx context.Context, c *conn) {
		if c.client == nil || time.Since(c.used) < idle {
			return
		}
		if !c.healthy {
			_, _, err := c.client.readSystem(ctx, c.target)
			switch {
			case err == nil:
			case !errors.Is(err, ErrUnreachable) && !errors.Is(err, ErrAuth):
				// It answered (though not with a power state): it can take the
				// logout.
			case errors.Is(err, ErrAuth):
				c.client.http.CloseIdleConnections()
				c.client = nil
				return
			case time.Since(c.used) > maxKeep:
				klog.FromContext(ctx).Info("Dropping a BMC session that could not be logged out; the BMC expires it", "host", c.target.Host, "idle", time.Since(c.used).Round(time.Second))
				c.client.http.CloseIdleConnections()
				c.client = nil
				return
			default:
				return
			}
		}
		s.logout(ctx, c) // a logout the BMC does not take is tried again, until maxKeep
	})
}

// Close logs out every session, each within timeout, and makes later calls and terms
// fail, for good (the process stops). A second Close waits for the first one's logouts
// (at most timeout, or until ctx ends).
func (s *Sessions) Close(ctx context.Context, timeout time.Duration) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed, s.shut = true, true
		s.mu.Unlock()
		go func() {
			defer close(s.loggedOut)
			s.each(ctx, timeout, true, func(ctx context.Context, c *conn) { s.logout(ctx, c) })
			s.retryStale(ctx)
		}()
	})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.loggedOut:
	case <-t.C:
	case <-ctx.Done():
	}
}

// OpenSessions returns the number of sessions kept open, including those whose logout
// the BMC has not taken yet (a session whose call is
// under way counts).
func (s *Sessions) OpenSessions() int {
	var n atomic.Int32
	busy := s.each(context.Background(), time.Second, false, func(_ context.Context, c *conn) {
		if c.client != nil {
			n.Add(1)
		}
	})
	s.mu.Lock()
	stale := len(s.stale)
	s.mu.Unlock()
	return int(n.Load()) + busy + stale
}

// each runs f on every conn, with the conn's lock held and a deadline of timeout,
// concurrently, and waits for those that finish within timeout (an f stuck in bmclib
// keeps the conn's lock until it returns). A conn in use is skipped, or with wait,
// waited for until the deadline (a call that its caller abandoned on a hung BMC ends
// when the BMC answers again or bmclib's HTTP timeout ends it). It returns how many
// conns were skipped.
func (s *Sessions) each(ctx context.Context, timeout time.Duration, wait bool, f func(context.Context, *conn)) (busy int) {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		if !wait {
			select {
			case c.lock <- struct{}{}:
			default:
				busy++ // in use: its call keeps or ends the session
				continue
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if wait {
				select {
				case c.lock <- struct{}{}:
				case <-cctx.Done():
					return
				}
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer func() { <-c.lock }() // released before done closes
				f(cctx, c)
			}()
			select {
			case <-done:
			case <-cctx.Done():
			}
		}()
	}
	wg.Wait()
	return busy
}

// fingerprint identifies what a session was opened with, without keeping the
// credentials in another place.
func fingerprint(t Target, c Credentials) [32]byte {
	return sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%s\x00%t\x00%s\x00%s", t.Protocol, t.Address, t.Port, t.CAFile, t.InsecureSkipVerify, c.Username, c.Password))
}
