package bmc

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// Sessions is the Driver the CCM runs. For Redfish it keeps one bmclib client, and so
// one BMC session, per BMC open between calls, so a read costs the GETs only, not a
// login and a logout as well (bmclib cannot reuse connections, so each request is
// still its own TLS connection). IPMI calls go through BMCLib, one shot each.
//
// Guarantees:
//   - at most one call and one session per BMC at a time: a call waits for the previous
//     one (even one its caller abandoned at a deadline) until its own deadline;
//   - a session the BMC no longer accepts (401 after expiry or a BMC reboot: bmclib
//     never logs in again by itself) is logged out and replaced by one new login, in
//     the same call; changed credentials or TLS settings replace the session too;
//   - a session idle for longer than the idle time is logged out by Run; a session on
//     a BMC that stopped answering is kept and logged out once the BMC answers again
//     (Run probes it at every idle time), or dropped after maxKeep when it never does
//     (the BMC expires it by itself);
//   - Close, and Run when its context ends, log out every session.
//
// It is safe for concurrent use.
type Sessions struct {
	creds CredentialSource
	idle  time.Duration
	ids   identities

	mu        sync.Mutex
	conns     map[string]*conn // by Target.Host
	closed    bool
	closeOnce sync.Once
	loggedOut chan struct{} // closed when Close has logged out every session
}

// conn is one BMC's kept session.
type conn struct {
	// lock is held (a value in it) by the goroutine using client; it is released
	// when that goroutine ends, even after its caller has given up.
	lock chan struct{}
	// Guarded by lock:
	client  *bmclib.Client // nil: no session
	key     [32]byte       // fingerprint of target and credentials the session uses
	used    time.Time      // last call
	healthy bool           // the last call on the session succeeded
	target  Target
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
	return &Sessions{creds: creds, idle: idle, conns: map[string]*conn{}, loggedOut: make(chan struct{})}
}

var _ Driver = (*Sessions)(nil)

// PowerState implements Driver.
func (s *Sessions) PowerState(ctx context.Context, t Target) (string, error) {
	if t.Protocol != inventory.ProtocolRedfish {
		return BMCLib{Credentials: s.creds}.PowerState(ctx, t)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", fmt.Errorf("%w: the BMC driver is shut down", ErrUnreachable)
	}
	c := s.conns[t.Host]
	if c == nil {
		c = &conn{lock: make(chan struct{}, 1)}
		s.conns[t.Host] = c
	}
	s.mu.Unlock()

	select {
	case c.lock <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("%w: the previous call to this BMC has not returned: %w", ErrUnreachable, ctx.Err())
	}
	creds, err := credentialsOf(ctx, s.creds, t)
	if err != nil {
		<-c.lock
		return "", err
	}
	type result struct {
		state string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		state, err := s.read(ctx, c, t, creds)
		if errors.Is(err, ErrAuth) {
			if inv, ok := s.creds.(invalidator); ok {
				inv.Invalidate(t) // a rotated Secret is read again on the next call
			}
		}
		<-c.lock // before answering: the caller's next call finds the BMC free
		done <- result{state, err}
	}()
	select {
	case r := <-done:
		return r.state, r.err
	case <-ctx.Done():
		return "", fmt.Errorf("%w: %w", ErrUnreachable, ctx.Err())
	}
}

// read runs with c.lock held.
func (s *Sessions) read(ctx context.Context, c *conn, t Target, creds Credentials) (string, error) {
	logger := klog.FromContext(ctx).WithValues("host", t.Host)
	key := fingerprint(t, creds)
	if c.client != nil && c.key != key {
		logger.V(2).Info("BMC settings or credentials changed: replacing the session")
		s.logout(ctx, c)
	}
	if err := ctx.Err(); err != nil {
		// Abandoned before it began: bmclib would turn an expired deadline into none.
		return "", fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	reused := c.client != nil
	if !reused {
		if err := s.login(ctx, c, t, creds, key); err != nil {
			return "", err
		}
	}
	c.used = time.Now()
	state, err := c.client.GetPowerState(ctx)
	if err != nil && reused && errors.Is(classify(err), ErrAuth) {
		// The BMC no longer accepts the session (expired, or the BMC rebooted).
		logger.V(2).Info("BMC session no longer accepted: logging in again")
		s.logout(ctx, c)
		if ctx.Err() != nil {
			return "", fmt.Errorf("%w: %w", ErrUnreachable, ctx.Err())
		}
		if err := s.login(ctx, c, t, creds, key); err != nil {
			return "", err
		}
		state, err = c.client.GetPowerState(ctx)
	}
	c.healthy = err == nil
	return state, classifyOrNil(err)
}

func (s *Sessions) login(ctx context.Context, c *conn, t Target, creds Credentials, key [32]byte) error {
	client, err := newClient(t, creds)
	if err != nil {
		return err
	}
	if err := client.Open(ctx); err != nil {
		// gofish creates the session last: a failed Open leaves none to log out.
		return classify(err)
	}
	c.client, c.key, c.target, c.used, c.healthy = client, key, t, time.Now(), false
	return nil
}

// logout ends c's session (best effort: bmclib reports no logout error) and forgets it.
func (s *Sessions) logout(ctx context.Context, c *conn) {
	if c.client == nil {
		return
	}
	_ = c.client.Close(ctx)
	c.client, c.healthy = nil, false
}

// Run logs out idle sessions every idle time until ctx ends, then logs out every
// session (each with a deadline of timeout).
func (s *Sessions) Run(ctx context.Context, timeout time.Duration) {
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
	s.Close(context.WithoutCancel(ctx), timeout)
}

// CloseIdle logs out the sessions not used for idle, each within timeout, and waits
// for them. A session whose BMC did not answer its last call is first probed with a
// read on it; it is logged out only if the BMC answers (the logout would otherwise be
// lost), dropped without a logout if the BMC refuses it (it is gone already), and kept
// otherwise, until maxKeep.
func (s *Sessions) CloseIdle(ctx context.Context, idle, timeout time.Duration) {
	s.each(ctx, timeout, false, func(ctx context.Context, c *conn) {
		if c.client == nil || time.Since(c.used) < idle {
			return
		}
		if !c.healthy {
			_, err := c.client.GetPowerState(ctx)
			switch {
			case err == nil:
			case errors.Is(classify(err), ErrAuth):
				c.client = nil
				return
			case time.Since(c.used) > maxKeep:
				klog.FromContext(ctx).Info("Dropping a BMC session that could not be logged out; the BMC expires it", "host", c.target.Host, "idle", time.Since(c.used).Round(time.Second))
				c.client = nil
				return
			default:
				return
			}
		}
		s.logout(ctx, c)
	})
}

// Close logs out every session, each within timeout, and makes later calls fail. A
// second Close waits for the first one's logouts (at most timeout, or until ctx ends).
func (s *Sessions) Close(ctx context.Context, timeout time.Duration) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		go func() {
			defer close(s.loggedOut)
			s.each(ctx, timeout, true, func(ctx context.Context, c *conn) { s.logout(ctx, c) })
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

// OpenSessions returns the number of sessions kept open (a session whose call is
// under way counts).
func (s *Sessions) OpenSessions() int {
	var n atomic.Int32
	busy := s.each(context.Background(), time.Second, false, func(_ context.Context, c *conn) {
		if c.client != nil {
			n.Add(1)
		}
	})
	return int(n.Load()) + busy
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
