// Package apigate keeps the informers of a process from falling behind an API server
// that stopped answering for a while.
//
// client-go's reflector (tools/cache/reflector.go, v0.37) waits after every failed
// list or watch: 0.8 s, doubling to a cap of 30 s, each wait stretched by up to 100%
// (jitter 1.0), and the growth is reset only every 2 minutes. After 40 s of refused
// connections a reflector may be in a 30-60 s wait when the API server answers again,
// and an informer that serves the agent keeps announcing Services that are gone; the
// shared informer factory offers no way to set the reflector's backoff.
//
// A Gate sits in the HTTP transport of the clients the informers use (Wrap, Config).
// A GET that fails without any answer from the server (connection refused, reset or
// closed, a dial or TLS-handshake timeout: see unreachable) closes the gate. While it
// is closed, GETs are held in the transport instead of failing: the reflectors never
// see the outage, so they never back off for it. One prober per Gate asks the API
// server for GET /readyz, through the gated transport itself with the headers
// (credentials) of the request that failed, after 100 ms, then at intervals doubling
// to 400 ms, each stretched by up to 100%: one probe every 0.4-0.8 s, at most 2.5 a
// second, while the server is away. The first 200 opens the gate and every held GET
// is sent at once: informers re-list and re-watch within 0.8 s of the API server
// being ready again, plus the probe's round trip. Any other answer is not ready (a
// starting API server answers 500, and 401 or 403 until its authenticators and RBAC
// caches are filled; /readyz is open to every client through the default ClusterRole
// system:public-info-viewer). An answer that is an HTTP error (a 5xx or a 429 from a
// struggling server) to an informer's own request does not close the gate: the
// reflectors' own backoff still protects a server that answers but is overloaded.
//
// Guarantees: a held request ends when its context does, with the context's error;
// the gate holds nothing once its own context is done (requests then fail as they
// would without it); methods other than GET pass through untouched. A prober that
// keeps getting answers that are not ready (such as /readyz answering 500 for a check
// that never passes, or 403 where the ClusterRole was removed) opens the gate after
// Options.NotReadyLimit (default 30 s), so a readiness check cannot hold the
// informers forever.
//
// Lifetime: a Gate lives as long as the context given to New, one per API server
// endpoint (clients of one rest.Config share it); its prober runs only while the gate
// is closed.
package apigate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// The probe's schedule and limits (see the package doc).
const (
	// DefaultFirstProbe is the wait before the first probe after the gate closed.
	DefaultFirstProbe = 100 * time.Millisecond
	// DefaultMaxProbeInterval caps the doubling wait between probes, before jitter.
	DefaultMaxProbeInterval = 400 * time.Millisecond
	// DefaultProbeJitter stretches each wait by up to this factor (1.0: up to 100%).
	DefaultProbeJitter = 1.0
	// DefaultProbeTimeout bounds one probe.
	DefaultProbeTimeout = time.Second
	// DefaultNotReadyLimit is how long the gate stays closed while the server answers
	// but says it is not ready.
	DefaultNotReadyLimit = 30 * time.Second
	// flapWindow: a gate that closes again within this time after it opened resumes
	// its probes' backoff where it was instead of starting over.
	flapWindow = 5 * time.Second
)

// ErrNotReady is wrapped by a probe's error when the API server answered but is not
// ready to serve (for example /readyz answered 500).
var ErrNotReady = errors.New("the API server answers but is not ready")

// Probe answers nil once the API server serves requests again, an error wrapping
// ErrNotReady when it answers without being ready, any other error when it does not
// answer. It must honor its context's deadline.
type Probe func(context.Context) error

// Options configure a Gate.
type Options struct {
	// Probe replaces the probe (tests). Default: GET /readyz on the server that did
	// not answer, through the gated transport, with the failed request's headers;
	// 200 is ready.
	Probe Probe
	// FirstProbe, MaxProbeInterval and ProbeJitter shape the waits between probes;
	// zero values take the defaults.
	FirstProbe, MaxProbeInterval time.Duration
	ProbeJitter                  float64
	// ProbeTimeout bounds one probe. Default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// NotReadyLimit: after answers that are not ready for this long, the gate opens
	// anyway. Default DefaultNotReadyLimit.
	NotReadyLimit time.Duration
	// Clock defaults to the real clock.
	Clock clock.Clock
}

// Gate holds the GETs of the clients it wraps while the API server does not answer.
// It is safe for concurrent use.
type Gate struct {
	ctx context.Context
	o   Options

	mu sync.Mutex
	// closed is nil while the gate is open; while it is closed, a channel closed
	// when it opens.
	closed chan struct{}
	// gen counts openings: a failure of a request sent before the latest opening
	// says nothing about the server now.
	gen      uint64
	closedAt time.Time
	openedAt time.Time
	backoff  wait.Backoff  // the probes' schedule, kept across a flap
	probe    Probe         // for the request that closed the gate
	reopened chan struct{} // closed at the next opening (Reopened)
}

// New returns an open Gate whose prober, when the gate closes, runs until it opens
// again or ctx is done.
func New(ctx context.Context, o Options) *Gate {
	if o.FirstProbe <= 0 {
		o.FirstProbe = DefaultFirstProbe
	}
	if o.MaxProbeInterval <= 0 {
		o.MaxProbeInterval = DefaultMaxProbeInterval
	}
	if o.ProbeJitter == 0 {
		o.ProbeJitter = DefaultProbeJitter
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.NotReadyLimit <= 0 {
		o.NotReadyLimit = DefaultNotReadyLimit
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Gate{ctx: ctx, o: o}
}

// Config returns a copy of cfg whose requests pass through the gate (see Wrap).
func (g *Gate) Config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(g.Wrap)
	return c
}

// Wrap returns rt behind the gate: a GET waits while the gate is closed, and a GET
// that fails without an answer from the server closes the gate, waits until it opens
// and is sent again, until it gets an answer or its context ends. Other methods pass
// through untouched.
func (g *Gate) Wrap(rt http.RoundTripper) http.RoundTripper {
	return &roundTripper{g: g, next: rt}
}

// Open reports whether the gate lets requests through.
func (g *Gate) Open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed == nil
}

// Reopened returns a channel that is closed when the gate next opens after it was
// closed: the API server answers again after an outage.
func (g *Gate) Reopened() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reopened == nil {
		g.reopened = make(chan struct{})
	}
	return g.reopened
}

type roundTripper struct {
	g    *Gate
	next http.RoundTripper
}

func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.Body != nil && req.Body != http.NoBody {
		return t.next.RoundTrip(req)
	}
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		gen, err := t.g.wait(ctx)
		if err != nil {
			return nil, err
		}
		r := req
		if attempt > 0 {
			r = req.Clone(ctx) // a GET without a body: safe to send again
		}
		resp, err := t.next.RoundTrip(r)
		if err == nil || ctx.Err() != nil || t.g.ctx.Err() != nil || !unreachable(err) {
			return resp, err
		}
		probe := t.g.o.Probe
		if probe == nil {
			probe = readyz(t.next, req)
		}
		t.g.fail(gen, err, probe)
	}
}

// wait returns when the gate is open (or its context is done: it holds nothing any
// more), with the generation it is open in, or with ctx's error when ctx ends first.
func (g *Gate) wait(ctx context.Context) (uint64, error) {
	for {
		g.mu.Lock()
		closed, gen := g.closed, g.gen
		g.mu.Unlock()
		if closed == nil || g.ctx.Err() != nil {
			return gen, nil
		}
		select {
		case <-closed:
		case <-g.ctx.Done():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// fail closes the gate after a request sent in generation gen failed with err, and
// starts the prober with probe; a failure from an earlier generation, or while the
// gate is already closed, changes nothing.
func (g *Gate) fail(gen uint64, err error, probe Probe) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gen != g.gen || g.closed != nil || g.ctx.Err() != nil {
		return
	}
	g.probe = probe
	now := g.o.Clock.Now()
	if g.openedAt.IsZero() || now.Sub(g.openedAt) >= flapWindow {
		g.backoff = wait.Backoff{Duration: g.o.FirstProbe, Factor: 2, Jitter: g.o.ProbeJitter, Steps: 64, Cap: g.o.MaxProbeInterval}
	}
	g.closed, g.closedAt = make(chan struct{}), now
	klog.FromContext(g.ctx).Info("Warning: the API server does not answer: the informers' requests wait until it does",
		"event", "apiUnreachable", "err", err.Error(), "probeEvery", fmt.Sprintf("%v-%v", g.o.MaxProbeInterval, time.Duration(float64(g.o.MaxProbeInterval)*(1+g.o.ProbeJitter))))
	go g.probeUntilOpen()
}

// probeUntilOpen probes the API server on the backoff until a probe succeeds (or the
// server has answered "not ready" for NotReadyLimit), then opens the gate.
func (g *Gate) probeUntilOpen() {
	logger := klog.FromContext(g.ctx)
	var notReadySince time.Time
	for {
		g.mu.Lock()
		d := g.backoff.Step()
		g.mu.Unlock()
		select {
		case <-g.ctx.Done():
			g.open()
			return
		case <-g.o.Clock.After(d):
		}
		g.mu.Lock()
		probe := g.probe
		g.mu.Unlock()
		ctx, cancel := context.WithTimeout(g.ctx, g.o.ProbeTimeout)
		err := probe(ctx)
		cancel()
		switch {
		case err == nil:
			logger.Info("The API server answers again: the informers re-list and re-watch now", "event", "apiReachable", "after", g.open())
			return
		case errors.Is(err, ErrNotReady):
			now := g.o.Clock.Now()
			if notReadySince.IsZero() {
				notReadySince = now
			}
			if now.Sub(notReadySince) >= g.o.NotReadyLimit {
				logger.Info("Warning: the API server has answered without being ready for too long: the informers try anyway",
					"event", "apiNotReady", "limit", g.o.NotReadyLimit, "err", err.Error(), "after", g.open())
				return
			}
		default:
			notReadySince = time.Time{}
		}
		logger.V(4).Info("The API server is not back yet", "err", err)
	}
}

// open opens the gate, so every held request is sent, and returns how long it was
// closed.
func (g *Gate) open() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		return 0
	}
	now := g.o.Clock.Now()
	close(g.closed)
	g.closed, g.openedAt = nil, now
	g.gen++
	if g.reopened != nil {
		close(g.reopened)
		g.reopened = nil
	}
	return now.Sub(g.closedAt)
}

// unreachable reports whether err, from a RoundTrip, means that no answer came from
// the server: the connection was refused, reset or closed, or it could not be set up
// in time. An HTTP status is an answer and never reaches here.
func unreachable(err error) bool {
	var op *net.OpError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.ETIMEDOUT):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.As(err, &op) && op.Op == "dial":
		return true
	}
	return utilnet.IsProbableEOF(err) || utilnet.IsHTTP2ConnectionLost(err) || utilnet.IsTimeout(err)
}

// readyz returns the default Probe for a request failed: GET /readyz on its server,
// through rt (the transport under the gate) with its headers, which carry the
// client's credentials. 200 is ready, any other answer not ready (ErrNotReady), a
// transport error no answer.
func readyz(rt http.RoundTripper, failed *http.Request) Probe {
	u := *failed.URL
	u.Path, u.RawPath, u.RawQuery, u.Fragment = "/readyz", "", "", ""
	header := failed.Header.Clone()
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return err
		}
		req.Header = header.Clone()
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return fmt.Errorf("GET /readyz: %w", err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%w: GET /readyz: HTTP %d", ErrNotReady, resp.StatusCode)
		}
		return nil
	}
}
