package nodehealth

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// endpoint is a real HTTP endpoint on loopback whose answer the test sets.
func endpoint(t *testing.T, status *atomic.Int32) Target {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	t.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	return Target{Node: "n-" + port, Addr: netip.MustParseAddr(host), Port: int32(p), Path: "/healthz"}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A target turns unhealthy after FailureThreshold failed probes in a row (503 or no
// answer), healthy again after one success; onChange is called on each flip; new
// and unknown targets are healthy.
func TestChecker(t *testing.T) {
	var aStatus, bStatus atomic.Int32
	aStatus.Store(200)
	bStatus.Store(200)
	a, b := endpoint(t, &aStatus), endpoint(t, &bStatus)
	// A port nobody listens on: connection refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dead := Target{Node: "dead", Addr: netip.MustParseAddr("127.0.0.1"), Port: int32(deadPort), Path: "/healthz"}

	var changes atomic.Int32
	c, err := New(Config{Period: 20 * time.Millisecond, Timeout: 200 * time.Millisecond, FailureThreshold: 3}, func() { changes.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	c.Set([]Target{a, b, dead})
	if !c.Healthy(a) || !c.Healthy(dead) || !c.Healthy(Target{Node: "unknown"}) {
		t.Fatal("new and unknown targets must start healthy")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	waitFor(t, "the refused target to turn unhealthy", func() bool { return !c.Healthy(dead) })
	if !c.Healthy(a) || !c.Healthy(b) {
		t.Error("answering targets turned unhealthy")
	}
	aStatus.Store(503)
	waitFor(t, "a 503 target to turn unhealthy", func() bool { return !c.Healthy(a) })
	aStatus.Store(200)
	waitFor(t, "the target to recover", func() bool { return c.Healthy(a) })
	if n := changes.Load(); n < 3 {
		t.Errorf("onChange called %d times, want at least 3 (dead down, a down, a up)", n)
	}
	// Kept targets keep their state across Set; dropped ones are forgotten.
	c.Set([]Target{dead, b})
	if c.Healthy(dead) {
		t.Error("Set reset a kept target's state")
	}
	c.Set([]Target{b})
	if !c.Healthy(dead) {
		t.Error("a target no longer probed must count as healthy (unknown)")
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{Period: time.Second, Timeout: time.Second}, nil); err == nil {
		t.Error("New without a failure threshold succeeded")
	}
}
