// Package nodehealth probes nodes the way cloud load balancers do, for next-hop mode
// nodes (bgp.nodeHealthCheck): kube-proxy's /healthz (port 10256) says whether a
// node forwards Services of externalTrafficPolicy Cluster, and a Local Service's
// healthCheckNodePort whether the node has a ready local endpoint that kube-proxy
// serves. A target that failed FailureThreshold probes in a row is unhealthy until
// one succeeds; a target never probed yet is healthy (no evidence, no withdrawal).
package nodehealth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// Target is one health endpoint of one node.
type Target struct {
	Node string
	Addr netip.Addr
	Port int32
	// Path is "/healthz" for kube-proxy, "/" for a healthCheckNodePort.
	Path string
}

func (t Target) url() string {
	return "http://" + net.JoinHostPort(t.Addr.String(), strconv.Itoa(int(t.Port))) + t.Path
}

// Config of a Checker.
type Config struct {
	// Period between two probes of a target; Timeout of one probe.
	Period, Timeout time.Duration
	// FailureThreshold consecutive failures make a target unhealthy.
	FailureThreshold int
	// MaxConcurrent bounds the probes in flight. Default 64.
	MaxConcurrent int
	// Client makes the probes (default: no keep-alive, no proxy, no redirects).
	Client *http.Client
}

// Checker probes a set of targets.
type Checker struct {
	cfg      Config
	onChange func()

	mu      sync.Mutex
	targets map[Target]*state
}

type state struct {
	fails   int
	healthy bool
	last    string // the last failure, for the log
}

var (
	probes = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "baremetal_ccm", Name: "node_health_probes_total",
		Help:           "Node health probes (bgp.nodeHealthCheck), by result (ok, failed).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	unhealthy = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm", Name: "node_health_unhealthy_targets",
		Help:           "Node health endpoints currently failing (their next hops withdrawn).",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

// New returns a Checker; onChange is called (from Run's goroutine) whenever a
// target turns healthy or unhealthy.
func New(cfg Config, onChange func()) (*Checker, error) {
	if cfg.Period <= 0 || cfg.Timeout <= 0 || cfg.FailureThreshold < 1 {
		return nil, errors.New("nodehealth: period, timeout and failure threshold must be positive")
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 64
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{
			Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	registerOnce.Do(func() { legacyregistry.MustRegister(probes, unhealthy) })
	return &Checker{cfg: cfg, onChange: onChange, targets: map[Target]*state{}}, nil
}

// Set replaces the targets to probe; new ones start healthy, kept ones keep their
// state.
func (c *Checker) Set(targets []Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := make(map[Target]*state, len(targets))
	for _, t := range targets {
		if st, ok := c.targets[t]; ok {
			next[t] = st
		} else {
			next[t] = &state{healthy: true}
		}
	}
	c.targets = next
	c.updateGaugeLocked()
}

// Healthy reports whether t is healthy (unknown targets are).
func (c *Checker) Healthy(t Target) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.targets[t]
	return !ok || st.healthy
}

// Run probes every target each Period until ctx ends.
func (c *Checker) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("nodehealth")
	tick := time.NewTicker(c.cfg.Period)
	defer tick.Stop()
	for {
		c.round(klog.NewContext(ctx, logger))
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// round probes every target once, MaxConcurrent at a time.
func (c *Checker) round(ctx context.Context) {
	c.mu.Lock()
	targets := make([]Target, 0, len(c.targets))
	for t := range c.targets {
		targets = append(targets, t)
	}
	c.mu.Unlock()
	sem := make(chan struct{}, c.cfg.MaxConcurrent)
	var wg sync.WaitGroup
	changed := false
	var cmu sync.Mutex
	for _, t := range targets {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := c.probe(ctx, t)
			if ctx.Err() != nil {
				return
			}
			if c.record(ctx, t, err) {
				cmu.Lock()
				changed = true
				cmu.Unlock()
			}
		}()
	}
	wg.Wait()
	if changed && c.onChange != nil {
		c.onChange()
	}
}

// probe is one HTTP GET: 2xx is healthy, anything else (503 from a kube-proxy that
// is not up to date or a node without local endpoints, no answer) a failure.
func (c *Checker) probe(ctx context.Context, t Target) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url(), nil)
	if err != nil {
		return err
	}
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// record counts a probe's result and reports whether the target's health changed.
func (c *Checker) record(ctx context.Context, t Target, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.targets[t]
	if !ok {
		return false // removed meanwhile
	}
	if err == nil {
		probes.WithLabelValues("ok").Inc()
		st.fails = 0
		if !st.healthy {
			st.healthy = true
			c.updateGaugeLocked()
			klog.FromContext(ctx).Info("Node health endpoint answers again: its next hops are restored", "node", t.Node, "url", t.url())
			return true
		}
		return false
	}
	probes.WithLabelValues("failed").Inc()
	st.fails++
	st.last = err.Error()
	if st.healthy && st.fails >= c.cfg.FailureThreshold {
		st.healthy = false
		c.updateGaugeLocked()
		klog.FromContext(ctx).Info("Warning: node health endpoint failed; its next hops are withdrawn until it answers", "node", t.Node, "url", t.url(), "failures", st.fails, "err", st.last)
		return true
	}
	return false
}

func (c *Checker) updateGaugeLocked() {
	n := 0
	for _, st := range c.targets {
		if !st.healthy {
			n++
		}
	}
	unhealthy.Set(float64(n))
}
