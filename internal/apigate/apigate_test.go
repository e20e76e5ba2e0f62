package apigate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeServer is the transport under the gate: while down, every request fails as a
// refused connection does; else it answers 200. It counts the requests.
type fakeServer struct {
	down  atomic.Bool
	calls atomic.Int32
}

func (f *fakeServer) RoundTrip(*http.Request) (*http.Response, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

// probe answers as the fake server's /readyz would, and records when it was asked.
type probe struct {
	f     *fakeServer
	clock *testingclock.FakeClock
	mu    sync.Mutex
	at    []time.Time
	err   error // when set, the answer while the server is up
}

func (p *probe) Probe(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at = append(p.at, p.clock.Now())
	if p.f.down.Load() {
		return errors.New("connection refused")
	}
	return p.err
}

func (p *probe) calls() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.at...)
}

type fixture struct {
	t     *testing.T
	ctx   context.Context
	clock *testingclock.FakeClock
	f     *fakeServer
	p     *probe
	g     *Gate
	rt    http.RoundTripper
}

func newFixture(t *testing.T, o Options) *fixture {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	fx := &fixture{t: t, ctx: ctx, clock: testingclock.NewFakeClock(time.Unix(1000, 0)), f: &fakeServer{}}
	fx.p = &probe{f: fx.f, clock: fx.clock}
	o.Probe, o.Clock = fx.p.Probe, fx.clock
	fx.g = New(ctx, o)
	fx.rt = fx.g.Wrap(fx.f)
	return fx
}

// get sends a GET through the gate in the background.
func (fx *fixture) get(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example/api/v1/services?watch=true", nil)
		resp, err := fx.rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		done <- err
	}()
	return done
}

// result waits for the outcome of a GET started by get: an error wrapping want (nil:
// success).
func (fx *fixture) result(done <-chan error, want error, what string) {
	fx.t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			fx.t.Errorf("%s: %v, want %v", what, err, want)
		}
	case <-time.After(5 * time.Second):
		fx.t.Fatalf("%s: still held after 5 s", what)
	}
}

// nextProbe advances the fake clock in 10 ms steps until the prober has probed n
// times in all, and returns the time of that probe.
func (fx *fixture) nextProbe(n int) time.Time {
	fx.t.Helper()
	for i := 0; i < 1000; i++ {
		if at := fx.p.calls(); len(at) >= n {
			return at[n-1]
		}
		fx.waitForWaiter()
		if at := fx.p.calls(); len(at) >= n {
			return at[n-1]
		}
		fx.clock.Step(10 * time.Millisecond)
	}
	fx.t.Fatalf("no probe %d after 10 s of fake time", n)
	return time.Time{}
}

// waitForWaiter waits (real time) until the prober sleeps on the fake clock or has
// probed, so that stepping the clock is seen.
func (fx *fixture) waitForWaiter() {
	fx.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !fx.clock.HasWaiters() && !fx.g.Open() {
		if time.Now().After(deadline) {
			fx.t.Fatal("the prober never waited on the clock")
		}
		time.Sleep(time.Millisecond)
	}
}

func waitClosed(t *testing.T, g *Gate) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for g.Open() {
		if time.Now().After(deadline) {
			t.Fatal("the gate never closed")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHeldUntilTheServerAnswers: a GET that finds the server away is held, not
// failed; the server is probed after 100-200 ms, then 200-400 ms, then every 400-800
// ms (fake clock), without any other request reaching it; the first probe after it
// answers again releases the GET, which then succeeds: 2 requests in all.
func TestHeldUntilTheServerAnswers(t *testing.T) {
	fx := newFixture(t, Options{})
	fx.f.down.Store(true)
	closedAt := fx.clock.Now()
	reopened := fx.g.Reopened()
	done := fx.get(fx.ctx)
	waitClosed(t, fx.g)

	bounds := [][2]time.Duration{{100, 200}, {200, 400}, {400, 800}, {400, 800}, {400, 800}, {400, 800}}
	prev := closedAt
	for i, b := range bounds {
		at := fx.nextProbe(i + 1)
		d := at.Sub(prev)
		if d < b[0]*time.Millisecond || d > b[1]*time.Millisecond {
			t.Errorf("probe %d came %v after the previous one, want %v-%v ms", i+1, d, b[0], b[1])
		}
		prev = at
	}
	select {
	case err := <-done:
		t.Fatalf("the GET returned while the server was away: %v", err)
	default:
	}
	if n := fx.f.calls.Load(); n != 1 {
		t.Errorf("%d requests reached the server while it was away, want only the first", n)
	}

	fx.f.down.Store(false)
	back := fx.clock.Now()
	at := fx.nextProbe(len(bounds) + 1)
	if d := at.Sub(back); d > 800*time.Millisecond {
		t.Errorf("the first probe after the server came back was %v later, want at most 800 ms", d)
	}
	fx.result(done, nil, "the held GET, once the probe succeeded")
	if !fx.g.Open() {
		t.Error("the gate is still closed")
	}
	select {
	case <-reopened:
	default:
		t.Error("Reopened's channel is not closed after the gate opened")
	}
	if n := fx.f.calls.Load(); n != 2 {
		t.Errorf("the server saw %d requests, want 2 (the failed one, then the held one)", n)
	}
	// Open: a GET goes straight through.
	if err := <-fx.get(fx.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAnswersPassThrough: an HTTP error is an answer: it reaches the caller and the
// gate stays open; methods other than GET are never held or retried.
func TestAnswersPassThrough(t *testing.T) {
	fx := newFixture(t, Options{})
	unavailable := roundTripperFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: http.NoBody}, nil
	})
	req, _ := http.NewRequest(http.MethodGet, "https://api.example/api/v1/nodes", nil)
	resp, err := fx.g.Wrap(unavailable).RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("RoundTrip = %v, %v; want the 503", resp, err)
	}
	if !fx.g.Open() {
		t.Error("an HTTP 503 closed the gate")
	}

	fx.f.down.Store(true)
	post, _ := http.NewRequest(http.MethodPost, "https://api.example/api/v1/namespaces/default/events", http.NoBody)
	if _, err := fx.rt.RoundTrip(post); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("POST = %v, want the refused connection at once", err)
	}
	if !fx.g.Open() {
		t.Error("a failed POST closed the gate")
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestHeldRequestEndsWithItsContext: a held GET returns its context's error.
func TestHeldRequestEndsWithItsContext(t *testing.T) {
	fx := newFixture(t, Options{})
	fx.f.down.Store(true)
	ctx, cancel := context.WithCancel(fx.ctx)
	done := fx.get(ctx)
	waitClosed(t, fx.g)
	cancel()
	fx.result(done, context.Canceled, "a held GET whose context ended")
}

// TestStoppedGateHoldsNothing: once the gate's context is done, a held GET is sent
// and fails as it would without the gate, and new ones are not held.
func TestStoppedGateHoldsNothing(t *testing.T) {
	fx := newFixture(t, Options{})
	ctx, stop := context.WithCancel(fx.ctx)
	fx.g = New(ctx, Options{Probe: fx.p.Probe, Clock: fx.clock})
	fx.rt = fx.g.Wrap(fx.f)
	fx.f.down.Store(true)
	done := fx.get(fx.ctx)
	waitClosed(t, fx.g)
	stop()
	fx.result(done, syscall.ECONNREFUSED, "a GET held when the gate stopped")
	fx.result(fx.get(fx.ctx), syscall.ECONNREFUSED, "a GET through a stopped gate")
}

// TestStaleFailureKeepsTheGateOpen: a request sent before the gate last opened that
// fails afterwards says nothing about the server now: it is sent again at once and
// the gate stays open.
func TestStaleFailureKeepsTheGateOpen(t *testing.T) {
	fx := newFixture(t, Options{})
	gen, _ := fx.g.wait(fx.ctx)
	fx.g.fail(gen, errors.New("connection reset by peer"), fx.p.Probe) // closes
	fx.nextProbe(1)                                                    // the server is up: opens
	if !fx.g.Open() {
		t.Fatal("the gate did not open")
	}
	fx.g.fail(gen, errors.New("connection reset by peer"), fx.p.Probe) // the old generation
	if !fx.g.Open() {
		t.Error("a failure from before the gate opened closed it")
	}
}

// TestNotReadyOpensAfterTheLimit: a server that answers but never says it is ready
// holds the informers for NotReadyLimit, not forever; one that does not answer
// holds them as long as it is away.
func TestNotReadyOpensAfterTheLimit(t *testing.T) {
	fx := newFixture(t, Options{NotReadyLimit: 3 * time.Second})
	fx.p.err = fmt.Errorf("%w: HTTP 500", ErrNotReady)
	fx.f.down.Store(true)
	done := fx.get(fx.ctx)
	waitClosed(t, fx.g)
	for i := 1; i <= 10; i++ {
		fx.nextProbe(i) // refused: ~5 s of fake time
	}
	if fx.g.Open() {
		t.Fatal("the gate opened while the server did not answer")
	}
	fx.f.down.Store(false) // answers 500 from now on
	start := fx.clock.Now()
	for n := 11; !fx.g.Open(); n++ {
		fx.nextProbe(n)
		fx.waitForWaiter()
		if fx.clock.Now().Sub(start) > 5*time.Second {
			t.Fatal("the gate stayed closed past the limit")
		}
	}
	if d := fx.clock.Now().Sub(start); d < 3*time.Second {
		t.Errorf("the gate opened %v after the first not-ready answer, before the 3 s limit", d)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestUnreachable classifies transport errors: no answer (gate closes) or an answer.
func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("i/o timeout")}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{fmt.Errorf("reading the TLS handshake: %w", io.EOF), true},
		{io.ErrUnexpectedEOF, true},
		{errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1"), true},
		{errors.New("http2: client connection lost"), true},
		{errors.New("x509: certificate signed by unknown authority"), false},
		{context.Canceled, false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("unreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestReadyzProbe: the default probe asks GET /readyz of the server that failed,
// with the failed request's credentials; 200 is ready; any other answer (500 and
// 429, and 401 or 403 from a starting server) is not ready; no answer is neither.
func TestReadyzProbe(t *testing.T) {
	var code atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || r.URL.RawQuery != "" || r.Header.Get("Authorization") != "Bearer t0ken" {
			http.Error(w, "wrong request", http.StatusBadRequest)
			return
		}
		w.WriteHeader(int(code.Load()))
	}))
	defer srv.Close()
	failed, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/services?watch=true&resourceVersion=7", nil)
	failed.Header.Set("Authorization", "Bearer t0ken")
	probe := readyz(http.DefaultTransport, failed)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		code         int
		ok, notReady bool
	}{
		{200, true, false}, {401, false, true}, {403, false, true}, {500, false, true}, {429, false, true}, {503, false, true},
	} {
		code.Store(int32(tc.code))
		err := probe(ctx)
		if (err == nil) != tc.ok || errors.Is(err, ErrNotReady) != tc.notReady {
			t.Errorf("HTTP %d: probe = %v, want ok %v, not ready %v", tc.code, err, tc.ok, tc.notReady)
		}
	}
	srv.Close()
	if err := probe(ctx); err == nil || errors.Is(err, ErrNotReady) {
		t.Errorf("closed server: probe = %v, want a transport error", err)
	}
}
