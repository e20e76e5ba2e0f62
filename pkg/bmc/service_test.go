package bmc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeDriver answers per host; a host listed in block waits for its channel (or ctx).
type fakeDriver struct {
	mu       sync.Mutex
	answers  map[string]string
	errs     map[string]error
	block    map[string]chan struct{}
	calls    map[string]int
	inFlight atomic.Int32
	maxSeen  atomic.Int32
	started  chan string
}

func newFakeDriver() *fakeDriver {
	return &fakeDriver{answers: map[string]string{}, errs: map[string]error{}, block: map[string]chan struct{}{}, calls: map[string]int{}, started: make(chan string, 100)}
}

func (f *fakeDriver) PowerState(ctx context.Context, t Target) (string, error) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxSeen.Load()
		if n <= m || f.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	f.mu.Lock()
	f.calls[t.Host]++
	ans, err, blk := f.answers[t.Host], f.errs[t.Host], f.block[t.Host]
	f.mu.Unlock()
	f.started <- t.Host
	if blk != nil {
		select {
		case <-blk:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return ans, err
}

func (f *fakeDriver) callCount(h string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[h]
}

func target(h string) Target { return Target{Host: h, Protocol: "redfish", Address: "https://" + h} }

func testConfig() Config {
	return Config{CallTimeout: 5 * time.Second, CacheTTL: 5 * time.Second, MaxConcurrent: 8, FailureThreshold: 3, BackoffBase: 10 * time.Second, BackoffMax: time.Minute}
}

func TestCoalescingAndCache(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	drv := newFakeDriver()
	drv.answers["a"] = "Chassis Power is off"
	drv.block["a"] = make(chan struct{})
	clk := clocktesting.NewFakeClock(time.Now())
	s := NewService(drv, testConfig(), clk)

	var wg sync.WaitGroup
	results := make(chan Reading, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.PowerState(ctx, target("a"))
			if err != nil {
				t.Error(err)
			}
			results <- r
		}()
	}
	<-drv.started
	close(drv.block["a"])
	wg.Wait()
	close(results)
	for r := range results {
		if r.State != PowerOff {
			t.Errorf("state = %q", r.State)
		}
	}
	if n := drv.callCount("a"); n != 1 {
		t.Fatalf("10 concurrent asks made %d BMC calls, want 1", n)
	}
	// Within the TTL: cached, no call.
	clk.Step(4 * time.Second)
	r, err := s.PowerState(ctx, target("a"))
	if err != nil || !r.Cached || drv.callCount("a") != 1 {
		t.Fatalf("within TTL: %+v, %v, calls %d", r, err, drv.callCount("a"))
	}
	// After the TTL: a new call.
	clk.Step(2 * time.Second)
	if r, err := s.PowerState(ctx, target("a")); err != nil || r.Cached || drv.callCount("a") != 2 {
		t.Fatalf("after TTL: %+v, %v, calls %d", r, err, drv.callCount("a"))
	}
}

func TestBreaker(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	drv := newFakeDriver()
	drv.errs["a"] = fmt.Errorf("%w: connection refused", ErrUnreachable)
	clk := clocktesting.NewFakeClock(time.Now())
	s := NewService(drv, testConfig(), clk)

	for i := range 3 {
		if _, err := s.PowerState(ctx, target("a")); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("call %d: %v, want ErrUnreachable", i, err)
		}
	}
	_, err := s.PowerState(ctx, target("a"))
	if !errors.Is(err, ErrBackoff) || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("after 3 failures: %v, want ErrBackoff wrapping the last error", err)
	}
	if drv.callCount("a") != 3 {
		t.Fatalf("a backed-off BMC was called: %d calls", drv.callCount("a"))
	}
	// After the backoff, it is tried again; a success closes the breaker.
	clk.Step(11 * time.Second)
	drv.mu.Lock()
	drv.errs["a"], drv.answers["a"] = nil, "On"
	drv.mu.Unlock()
	if r, err := s.PowerState(ctx, target("a")); err != nil || r.State != PowerOn {
		t.Fatalf("after backoff: %+v, %v", r, err)
	}
	// Errors are never cached as a state, and a failure after recovery starts over.
	clk.Step(10 * time.Second)
	drv.mu.Lock()
	drv.errs["a"] = fmt.Errorf("%w: 401", ErrAuth)
	drv.mu.Unlock()
	if _, err := s.PowerState(ctx, target("a")); !errors.Is(err, ErrAuth) {
		t.Fatalf("auth failure: %v", err)
	}
	if _, err := s.PowerState(ctx, target("a")); errors.Is(err, ErrBackoff) {
		t.Fatal("one failure after recovery opened the breaker")
	}
}

func TestGlobalLimitAndHungBMC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	drv := newFakeDriver()
	cfg := testConfig()
	cfg.MaxConcurrent = 2
	s := NewService(drv, cfg, nil)
	// "hung" never answers until released; the others answer at once.
	drv.block["hung"] = make(chan struct{})
	hungDone := make(chan error, 1)
	go func() { _, err := s.PowerState(ctx, target("hung")); hungDone <- err }()
	<-drv.started
	for i := range 20 {
		h := fmt.Sprintf("h%d", i)
		drv.mu.Lock()
		drv.answers[h] = "On"
		drv.mu.Unlock()
		if r, err := s.PowerState(ctx, target(h)); err != nil || r.State != PowerOn {
			t.Fatalf("%s answered %+v, %v while another BMC hangs", h, r, err)
		}
	}
	select {
	case err := <-hungDone:
		t.Fatalf("the hung BMC answered: %v", err)
	default:
	}
	close(drv.block["hung"])
	<-hungDone
	if m := drv.maxSeen.Load(); m > 2 {
		t.Errorf("%d calls in flight, limit 2", m)
	}
}

func TestTimeoutAndUnknown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	drv := newFakeDriver()
	cfg := testConfig()
	cfg.CallTimeout = 50 * time.Millisecond
	s := NewService(drv, cfg, nil)
	drv.block["slow"] = make(chan struct{}) // never released: honors ctx
	if _, err := s.PowerState(ctx, target("slow")); !errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung BMC: %v, want ErrUnreachable from the deadline", err)
	}
	drv.answers["weird"] = "Paused"
	_, err := s.PowerState(ctx, target("weird"))
	if !errors.Is(err, ErrUnknownState) {
		t.Fatalf("Paused: %v, want ErrUnknownState", err)
	}
	// Issue 26: an answer without a power state is backed off (it was asked again
	// at every read); the answers meanwhile stay unknown, and it never counts as
	// unreachable.
	for range 5 {
		_, err := s.PowerState(ctx, target("weird"))
		if !errors.Is(err, ErrBackoff) || !errors.Is(err, ErrUnknownState) || errors.Is(err, ErrUnreachable) {
			t.Fatalf("asked again during the backoff: %v, want ErrBackoff wrapping ErrUnknownState", err)
		}
	}
	if n := drv.callCount("weird"); n != 1 {
		t.Errorf("%d calls during the backoff, want 1", n)
	}
}

func TestCallerCancelDoesNotCancelSharedCall(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	drv := newFakeDriver()
	drv.answers["a"] = "Off"
	drv.block["a"] = make(chan struct{})
	s := NewService(drv, testConfig(), nil)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, err := s.PowerState(cctx, target("a")); errc <- err }()
	<-drv.started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled caller: %v", err)
	}
	second := make(chan Reading, 1)
	go func() { r, _ := s.PowerState(ctx, target("a")); second <- r }()
	close(drv.block["a"])
	if r := <-second; r.State != PowerOff || drv.callCount("a") != 1 {
		t.Fatalf("second caller: %+v, calls %d; want the first call's answer", r, drv.callCount("a"))
	}
}

// TestSlotWaitDoesNotCountAgainstTheBMC: when every slot is taken by slow BMCs, a
// healthy BMC waiting for a slot is not backed off, and its deadline starts only once
// it holds a slot.
func TestSlotWaitDoesNotCountAgainstTheBMC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	drv := newFakeDriver()
	cfg := testConfig()
	cfg.MaxConcurrent, cfg.CallTimeout, cfg.FailureThreshold = 1, 200*time.Millisecond, 1
	s := NewService(drv, cfg, nil)
	drv.block["slow"] = make(chan struct{}) // holds the only slot until its deadline
	drv.answers["healthy"] = "On"
	go func() { _, _ = s.PowerState(ctx, target("slow")) }()
	<-drv.started
	// healthy waits for the slot (up to slotWaitFactor × CallTimeout), then answers.
	r, err := s.PowerState(ctx, target("healthy"))
	if err != nil || r.State != PowerOn {
		t.Fatalf("healthy BMC behind a slow one: %+v, %v", r, err)
	}
	// A Service whose slot never frees: ErrBusy, and the BMC is not backed off.
	s2 := NewService(drv, cfg, nil)
	s2.sem <- struct{}{} // every slot taken
	if _, err := s2.PowerState(ctx, target("healthy")); !errors.Is(err, ErrBusy) {
		t.Fatalf("no free slot: %v, want ErrBusy", err)
	}
	<-s2.sem
	if r, err := s2.PowerState(ctx, target("healthy")); err != nil || r.State != PowerOn {
		t.Fatalf("after ErrBusy the BMC must not be backed off: %+v, %v", r, err)
	}
}

// TestRecent: a fresh successful reading answers without a call; a call under way is
// joined rather than answered from an older reading; a BMC that failed its last call
// answers that failure at once while it is asked again; a stale reading is never used.
func TestRecent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	drv := newFakeDriver()
	drv.answers["h"] = "On"
	s := NewService(drv, testConfig(), clk)
	if _, err := s.PowerState(ctx, target("h")); err != nil {
		t.Fatal(err)
	}
	<-drv.started
	clk.Step(10 * time.Second) // past the cache TTL
	if r, err := s.Recent(ctx, target("h"), 20*time.Second); err != nil || r.State != PowerOn || !r.Cached {
		t.Fatalf("Recent within maxAge = %+v, %v; want the cached reading", r, err)
	}
	if n := drv.callCount("h"); n != 1 {
		t.Fatalf("calls = %d, want 1", n)
	}

	// A call under way (the host just lost power) is joined.
	drv.mu.Lock()
	drv.answers["h"], drv.block["h"] = "Off", make(chan struct{})
	drv.mu.Unlock()
	go func() { _, _ = s.Recent(ctx, target("h"), 0) }() // the monitor's uncached read
	<-drv.started
	got := make(chan Reading, 1)
	go func() {
		r, _ := s.Recent(ctx, target("h"), 20*time.Second)
		got <- r
	}()
	drv.mu.Lock()
	close(drv.block["h"])
	delete(drv.block, "h")
	drv.mu.Unlock()
	if r := <-got; r.State != PowerOff {
		t.Fatalf("Recent with a call under way = %+v; want that call's answer (off)", r)
	}

	// The BMC fails (hangs until its deadline); while it is asked again, Recent
	// answers the failure without waiting.
	drv.mu.Lock()
	drv.errs["h"] = fmt.Errorf("%w: no answer", ErrUnreachable)
	drv.mu.Unlock()
	clk.Step(time.Minute)
	if _, err := s.PowerState(ctx, target("h")); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
	<-drv.started
	release := make(chan struct{})
	drv.mu.Lock()
	drv.block["h"] = release
	drv.mu.Unlock()
	go func() { _, _ = s.Recent(ctx, target("h"), 0) }()
	<-drv.started
	if _, err := s.Recent(ctx, target("h"), time.Hour); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Recent while a failed BMC is asked again = %v, want its last error at once", err)
	}
	close(release)
}

// TestProbeIgnoresBackoff: a backed-off BMC is asked at once by Probe (a readiness
// change), and a success closes the breaker; a failed probe backs it off again.
func TestProbeIgnoresBackoff(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	drv := newFakeDriver()
	drv.errs["a"] = fmt.Errorf("%w: connection refused", ErrUnreachable)
	clk := clocktesting.NewFakeClock(time.Now())
	s := NewService(drv, testConfig(), clk)
	for range 3 {
		_, _ = s.PowerState(ctx, target("a"))
	}
	if _, err := s.PowerState(ctx, target("a")); !errors.Is(err, ErrBackoff) {
		t.Fatalf("after 3 failures: %v, want ErrBackoff", err)
	}
	// Still down: the probe asks, fails, and the BMC is backed off again.
	if _, err := s.Probe(ctx, target("a")); !errors.Is(err, ErrUnreachable) || errors.Is(err, ErrBackoff) || drv.callCount("a") != 4 {
		t.Fatalf("probe of a down BMC: %v (%d calls), want a real ask", err, drv.callCount("a"))
	}
	if _, err := s.PowerState(ctx, target("a")); !errors.Is(err, ErrBackoff) {
		t.Fatalf("after a failed probe: %v, want ErrBackoff", err)
	}
	// Back: the probe sees it at once, and the breaker is closed.
	drv.mu.Lock()
	drv.errs["a"], drv.answers["a"] = nil, "On"
	drv.mu.Unlock()
	if r, err := s.Probe(ctx, target("a")); err != nil || r.State != PowerOn {
		t.Fatalf("probe of a BMC that is back: %+v, %v", r, err)
	}
	if r, err := s.PowerState(ctx, target("a")); err != nil || r.State != PowerOn {
		t.Fatalf("after the probe: %+v, %v", r, err)
	}
}

type busyDriver struct {
	*fakeDriver
	busy map[string]bool
}

func (b busyDriver) Busy(t Target) bool { return b.busy[t.Host] }

// TestBusyBMCTakesNoSlot: a BMC whose previous (abandoned) call has not returned fails
// at once, without taking one of the shared call slots, so it cannot starve others.
func TestBusyBMCTakesNoSlot(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	drv := busyDriver{fakeDriver: newFakeDriver(), busy: map[string]bool{"hung": true}}
	drv.answers["ok"] = "On"
	cfg := testConfig()
	cfg.MaxConcurrent = 1
	s := NewService(drv, cfg, nil)
	if _, err := s.PowerState(ctx, target("hung")); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "previous call to it has not returned") {
		t.Fatalf("busy BMC: %v", err)
	}
	if drv.callCount("hung") != 0 {
		t.Fatal("the driver was called for a busy BMC")
	}
	if r, err := s.PowerState(ctx, target("ok")); err != nil || r.State != PowerOn {
		t.Fatalf("another BMC: %+v, %v", r, err)
	}
}

// TestNoTermIsNotTheBMCsFault: calls refused between leadership terms (ErrNoTerm) do
// not count against the BMC: the next term reads it at once, without a backoff.
func TestNoTermIsNotTheBMCsFault(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	drv := newFakeDriver()
	drv.errs["h1"] = ErrNoTerm
	drv.answers["h1"] = "On"
	s := NewService(drv, testConfig(), nil)
	for range 10 {
		if _, err := s.PowerState(ctx, target("h1")); !errors.Is(err, ErrNoTerm) {
			t.Fatalf("between terms: %v, want ErrNoTerm", err)
		}
	}
	drv.mu.Lock()
	drv.errs["h1"] = nil
	drv.mu.Unlock()
	if r, err := s.PowerState(ctx, target("h1")); err != nil || r.State != PowerOn {
		t.Fatalf("in the next term: %+v, %v; want on, without a backoff", r, err)
	}
}
