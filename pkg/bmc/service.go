package bmc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Target identifies one BMC. Credentials are not part of it: a Driver reads them from
// the inventory's credentials file or Secret when it connects, so they never travel in
// errors or logs.
type Target struct {
	// Host is the inventory host name; the cache, breaker and serialization key.
	Host     string
	Protocol string // redfish or ipmi
	Address  string
	Port     int32
	// CredentialsFile, CAFile and InsecureSkipVerify come from the inventory.
	CredentialsFile string
	// SecretNamespace and SecretName name the credentials Secret (instead of a file).
	SecretNamespace, SecretName string
	CAFile                      string
	InsecureSkipVerify          bool
	// System names the host's Redfish ComputerSystem (its Id or path); SystemUUID is
	// the host's systemUUID from the inventory, which chooses the system on a service
	// with several when System is unset.
	System, SystemUUID string
}

// Driver performs one power-state query against a BMC. Implementations return by ctx's
// deadline and never leak a BMC session: they close it before returning (BMCLib) or
// keep at most one per BMC and log it out later (Sessions). Errors wrap
// ErrUnreachable, ErrAuth or ErrCredentials when they can tell.
type Driver interface {
	PowerState(ctx context.Context, t Target) (raw string, err error)
}

// Config tunes a Service.
type Config struct {
	// CallTimeout bounds one driver call.
	CallTimeout time.Duration
	// CacheTTL is how long a successful answer is reused.
	CacheTTL time.Duration
	// MaxConcurrent is the number of driver calls in flight at once, over all BMCs.
	MaxConcurrent int
	// FailureThreshold consecutive failures open a BMC's breaker for BackoffBase,
	// doubling with every further failure up to BackoffMax. An answer without a
	// power state opens it at once (it is no failure of the BMC, but asking again
	// at once would get the same answer).
	FailureThreshold int
	BackoffBase      time.Duration
	BackoffMax       time.Duration
}

// DefaultConfig is a conservative default for BMCs that answer in hundreds of ms.
func DefaultConfig() Config {
	return Config{
		CallTimeout: 10 * time.Second, CacheTTL: 5 * time.Second, MaxConcurrent: 32,
		FailureThreshold: 3, BackoffBase: 10 * time.Second, BackoffMax: 5 * time.Minute,
	}
}

// Reading is one answer about a host's power.
type Reading struct {
	State PowerState
	// At is when the BMC answered (a cached Reading keeps its original time).
	At time.Time
	// Cached is true when no BMC call was made for this Reading.
	Cached bool
	// SystemUUID is the UUID the BMC reports for the system it read (lower case), ""
	// when it reports none or the Driver cannot read it (see IdentityReader).
	SystemUUID string
}

// Service answers power-state questions through a Driver. It is safe for concurrent
// use. Guarantees: at most one driver call per BMC at a time; at most MaxConcurrent
// calls overall; concurrent asks for one BMC share one call; a successful answer is
// reused for CacheTTL; a BMC gets CallTimeout to answer, counted from when its call
// holds a slot (waiting for a slot never counts against a BMC); a BMC in backoff is not
// called and answers ErrBackoff at once. An answer without a power state
// (ErrUnknownState) backs the host off at once, for BackoffBase doubling up to
// BackoffMax while it repeats, so such a host costs at most one read per backoff
// interval. Readings and backoffs belong to the host's BMC and system (readingKey):
// a changed address starts afresh.
type Service struct {
	drv   Driver
	cfg   Config
	clock clock.PassiveClock
	sem   chan struct{}

	mu   sync.Mutex
	bmcs map[string]*bmcState
}

type bmcState struct {
	// guarded by Service.mu
	bmc      string // the BMC the state is of (readingKey): another one starts afresh
	last     Reading
	lastErr  error
	failures int       // consecutive failures (unreachable, refused)
	unknowns int       // consecutive answers without a power state
	until    time.Time // breaker open until
	inflight *call
}

// readingKey names what a host's reading comes from: its BMC (protocol, address,
// port) and the system on it. A reading, cached or backed off, is never served for
// another (a changed bmc.address, bmc.system or systemUUID).
func readingKey(t Target) string {
	return fmt.Sprintf("%s\x00%s\x00%d\x00%s\x00%s", t.Protocol, t.Address, t.Port, t.System, t.SystemUUID)
}

// stateLocked returns t's state, a new one when t's host had none or its BMC
// changed. It runs with s.mu held.
func (s *Service) stateLocked(t Target) *bmcState {
	key := readingKey(t)
	st := s.bmcs[t.Host]
	if st == nil || st.bmc != key {
		st = &bmcState{bmc: key} // a call under way for the old BMC ends on its own state
		s.bmcs[t.Host] = st
	}
	return st
}

type call struct {
	done  chan struct{}
	state PowerState
	uuid  string
	at    time.Time
	err   error
}

// NewService returns a Service over drv.
func NewService(drv Driver, cfg Config, clk clock.PassiveClock) *Service {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 1
	}
	registerMetrics()
	return &Service{drv: drv, cfg: cfg, clock: clk, sem: make(chan struct{}, cfg.MaxConcurrent), bmcs: map[string]*bmcState{}}
}

// PowerState returns the host's power state. It never guesses: an unreachable or
// refusing BMC, a timeout, a backed-off BMC and an unknown answer are errors (wrapping
// ErrUnreachable, ErrAuth, ErrBackoff, ErrUnknownState or ctx's error).
func (s *Service) PowerState(ctx context.Context, t Target) (Reading, error) {
	return s.powerState(ctx, t, s.cfg.CacheTTL, false)
}

// Recent returns the host's power state as read at most maxAge ago, without waiting
// for a BMC when such a reading exists, except that a call already under way for the
// host (a fresher answer, typically the power monitor's read on a readiness change)
// is joined, unless the BMC failed its last call: that failure is answered at once.
// Without a reading that young it asks the BMC like PowerState. The wait is bounded by
// ctx only: callers that must not be held give it a short deadline; the call goes on
// without them and its answer is kept. Errors are PowerState's (a backed-off BMC
// answers ErrBackoff at once), so nothing but a successful reading of at most maxAge
// is ever returned.
func (s *Service) Recent(ctx context.Context, t Target, maxAge time.Duration) (Reading, error) {
	return s.powerState(ctx, t, maxAge, true)
}

// Probe asks the BMC now, even while it is backed off: for an event that makes an
// answer likely again (the host's Node turned Ready after an outage), so that a BMC
// that is back is seen at once rather than after its backoff. It joins a call under
// way instead of starting a second one. Its result counts like any other call's.
func (s *Service) Probe(ctx context.Context, t Target) (Reading, error) {
	s.mu.Lock()
	st := s.stateLocked(t)
	if st.inflight == nil {
		st.until = time.Time{} // this one call ignores the backoff; a failure sets it again
	}
	s.mu.Unlock()
	return s.powerState(ctx, t, 0, false)
}

func (s *Service) powerState(ctx context.Context, t Target, maxAge time.Duration, joinFirst bool) (Reading, error) {
	now := s.clock.Now()
	s.mu.Lock()
	st := s.stateLocked(t)
	if joinFirst && st.inflight != nil && st.lastErr != nil {
		// The BMC failed its last call and is being asked again: answer that failure
		// now rather than hold the caller on a BMC that may hang again.
		lastErr := st.lastErr
		s.mu.Unlock()
		return Reading{}, fmt.Errorf("%w (asking it again)", lastErr)
	}
	fresh := st.lastErr == nil && !st.last.At.IsZero() && now.Sub(st.last.At) < maxAge
	if fresh && !(joinFirst && st.inflight != nil) {
		r := st.last
		s.mu.Unlock()
		r.Cached = true
		requests.WithLabelValues(t.Protocol, "power_state", "cached").Inc()
		return r, nil
	}
	if now.Before(st.until) {
		until, lastErr := st.until, st.lastErr
		s.mu.Unlock()
		requests.WithLabelValues(t.Protocol, "power_state", "backoff").Inc()
		return Reading{}, fmt.Errorf("%w until %s (last error: %w)", ErrBackoff, until.Format(time.RFC3339), lastErr)
	}
	c := st.inflight
	if c == nil {
		c = &call{done: make(chan struct{})}
		st.inflight = c
		go s.do(context.WithoutCancel(ctx), t, st, c)
	}
	s.mu.Unlock()

	select {
	case <-c.done:
		if c.err != nil {
			return Reading{}, c.err
		}
		return Reading{State: c.state, At: c.at, SystemUUID: c.uuid}, nil
	case <-ctx.Done():
		return Reading{}, fmt.Errorf("waiting for BMC of %s: %w", t.Host, ctx.Err())
	}
}

// slotWait bounds how long a call waits for one of the MaxConcurrent slots.
const slotWaitFactor = 6

// do makes the one driver call for a BMC and publishes its result to every waiter.
// It runs detached from any single caller's cancellation. It first waits for a call
// slot (at most slotWaitFactor × CallTimeout; running out is ErrBusy and does not
// count against the BMC), then gives the BMC CallTimeout to answer.
func (s *Service) do(ctx context.Context, t Target, st *bmcState, c *call) {
	logger := klog.FromContext(ctx).WithValues("host", t.Host, "protocol", t.Protocol)

	state, uuid, err := PowerUnknown, "", error(nil)
	if b, ok := s.drv.(busyReporter); ok && b.Busy(t) {
		// The previous call (abandoned by its caller at its deadline) still holds this
		// BMC: fail now rather than hold one of the shared call slots waiting for
		// it, so hung BMCs cannot starve the others.
		err = fmt.Errorf("BMC of %s (%s %s): %w: the previous call to it has not returned", t.Host, t.Protocol, t.Address, ErrUnreachable)
		s.finish(logger, t, st, c, state, uuid, err)
		return
	}
	slotCtx, cancelSlot := context.WithTimeout(ctx, slotWaitFactor*s.cfg.CallTimeout)
	select {
	case s.sem <- struct{}{}:
		cancelSlot()
		callCtx, cancel := context.WithTimeout(WithCallLimit(ctx, s.cfg.CallTimeout), s.cfg.CallTimeout)
		start := s.clock.Now()
		var raw string
		if ir, ok := s.drv.(IdentityReader); ok {
			raw, uuid, err = ir.ReadPower(callCtx, t)
		} else {
			raw, err = s.drv.PowerState(callCtx, t)
		}
		<-s.sem
		duration.WithLabelValues(t.Protocol, "power_state").Observe(s.clock.Since(start).Seconds())
		if err == nil {
			if state = Normalize(raw); state == PowerUnknown {
				err = fmt.Errorf("%w: %q", ErrUnknownState, truncate(raw, 64))
			}
		} else if callCtx.Err() != nil && !errors.Is(err, ErrUnreachable) {
			err = fmt.Errorf("%w: no answer within %s: %w", ErrUnreachable, s.cfg.CallTimeout, err)
		}
		cancel()
	case <-slotCtx.Done():
		cancelSlot()
		err = fmt.Errorf("%w: waited %s for one of %d call slots; raise bmc.maxConcurrent", ErrBusy, slotWaitFactor*s.cfg.CallTimeout, s.cfg.MaxConcurrent)
	}
	if err != nil {
		err = fmt.Errorf("BMC of %s (%s %s): %w", t.Host, t.Protocol, t.Address, err)
	}
	s.finish(logger, t, st, c, state, uuid, err)
}

// busyReporter is implemented by a Driver that knows when a call to a BMC is still
// under way (Sessions).
type busyReporter interface {
	Busy(t Target) bool
}

// finish publishes a call's result: the BMC's state, breaker and metrics, then the
// waiters.
func (s *Service) finish(logger klog.Logger, t Target, st *bmcState, c *call, state PowerState, uuid string, err error) {
	now := s.clock.Now()
	s.mu.Lock()
	st.inflight = nil
	switch {
	case err == nil:
		st.last, st.lastErr, st.failures, st.unknowns, st.until = Reading{State: state, At: now, SystemUUID: uuid}, nil, 0, 0, time.Time{}
		requests.WithLabelValues(t.Protocol, "power_state", "success").Inc()
	case errors.Is(err, ErrUnknownState):
		// The BMC answered: not a reachability failure, and nothing to cache as a
		// power state; but asking again at once would most likely get the same
		// answer (a system it cannot choose, a refused privilege), so it is not
		// asked again for BackoffBase, doubling with every unknown in a row up to
		// BackoffMax. Callers get ErrBackoff wrapping this error meanwhile: still
		// unknown, never off.
		st.lastErr, st.failures = err, 0
		st.unknowns++
		backoff := s.backoff(st.unknowns - 1)
		st.until = now.Add(backoff)
		logger.V(2).Info("BMC answered without a power state: not asked again until the backoff ends", "event", "bmcUnknownBackoff", "unknowns", st.unknowns, "backoff", backoff, "err", err)
		requests.WithLabelValues(t.Protocol, "power_state", "unknown").Inc()
	case errors.Is(err, ErrBusy):
		// We never asked the BMC: nothing to hold against it.
		requests.WithLabelValues(t.Protocol, "power_state", "busy").Inc()
	case errors.Is(err, ErrNoTerm):
		// Nor here: the call came between leadership terms.
		requests.WithLabelValues(t.Protocol, "power_state", "no_term").Inc()
	default:
		st.lastErr = err
		st.failures++
		st.unknowns = 0
		if st.failures >= s.cfg.FailureThreshold {
			backoff := s.backoff(st.failures - s.cfg.FailureThreshold)
			st.until = now.Add(backoff)
			logger.Info("BMC backed off after repeated failures", "event", "bmcBackoff", "failures", st.failures, "backoff", backoff, "err", err)
		}
		requests.WithLabelValues(t.Protocol, "power_state", "error").Inc()
	}
	unreachable.Set(float64(s.countFailingLocked()))
	c.state, c.uuid, c.at, c.err = state, uuid, now, err
	s.mu.Unlock()
	close(c.done)
}

// backoff is BackoffBase doubled n times, at most BackoffMax.
func (s *Service) backoff(n int) time.Duration {
	b := s.cfg.BackoffBase << min(n, 20)
	if b > s.cfg.BackoffMax || b <= 0 {
		b = s.cfg.BackoffMax
	}
	return b
}

func (s *Service) countFailingLocked() int {
	n := 0
	for _, st := range s.bmcs {
		if st.failures > 0 {
			n++
		}
	}
	return n
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
