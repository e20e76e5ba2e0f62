package bmc

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
)

const (
	pollsPerOp     = 10_000
	pollWorkers    = 64
	pollEmulators  = 4
	goroutineSlack = 5
)

// BenchmarkPolls10k: 10,000 uncached PowerState calls per op, from 64 goroutines, through
// a Service over the real bmclib driver against 4 Redfish emulators over TLS. It fails
// if a Redfish session is left open or goroutines grow by more than goroutineSlack, and
// reports the goroutines before and after, the sessions created and ns per call.
func BenchmarkPolls10k(b *testing.B) {
	dir := b.TempDir()
	ca, err := redfish.NewCA()
	if err != nil {
		b.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM(), 0o600); err != nil {
		b.Fatal(err)
	}
	creds := filepath.Join(dir, "creds")
	if err := os.WriteFile(creds, []byte("username: admin\npassword: bench-secret\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	var emus []*redfish.BMC
	var targets []Target
	for i := range pollEmulators {
		e := redfish.StartForTest(b, redfish.Options{CA: ca, Username: "admin", Password: "bench-secret"})
		emus = append(emus, e)
		port, _ := strconv.Atoi(e.Port())
		targets = append(targets, Target{Host: fmt.Sprintf("poll-%d", i), Protocol: "redfish",
			Address: "https://" + e.Host(), Port: int32(port), CredentialsFile: creds, CAFile: caFile})
	}
	cfg := DefaultConfig()
	cfg.CacheTTL = 0
	s := NewService(BMCLib{}, cfg, nil)
	ctx := context.Background()

	// Warm up once per emulator (lazy package state, metrics), then count goroutines.
	for _, t := range targets {
		if _, err := s.PowerState(ctx, t); err != nil {
			b.Fatal(err)
		}
	}
	before := settledGoroutines(0)
	created0 := 0
	for _, e := range emus {
		created0 += e.SessionsCreated()
	}

	var failures atomic.Int64
	var firstErr atomic.Value
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range pollWorkers {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= pollsPerOp {
						return
					}
					if _, err := s.PowerState(ctx, targets[i%pollEmulators]); err != nil {
						failures.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}
			})
		}
		wg.Wait()
	}
	elapsed := time.Since(start)
	b.StopTimer()

	after := settledGoroutines(before + goroutineSlack)
	created, active := 0, 0
	for _, e := range emus {
		created += e.SessionsCreated()
		active += e.ActiveSessions()
	}
	created -= created0
	calls := float64(b.N) * pollsPerOp
	b.ReportMetric(float64(elapsed.Nanoseconds())/calls, "ns/call")
	b.ReportMetric(float64(before), "goroutines-before")
	b.ReportMetric(float64(after), "goroutines-after")
	b.ReportMetric(float64(created)/float64(b.N), "sessions/op")
	b.ReportMetric(float64(active), "sessions-open")
	b.Logf("b.N=%d: %d PowerState calls in %v (%.0f ns/call), %d sessions created (%.1f asks per BMC call, coalesced), %d open at the end, goroutines %d -> %d, %d failed",
		b.N, int(calls), elapsed.Round(time.Millisecond), float64(elapsed.Nanoseconds())/calls, created, calls/float64(max(created, 1)), active, before, after, failures.Load())
	if n := failures.Load(); n > 0 {
		b.Errorf("%d PowerState calls failed; first: %v", n, firstErr.Load())
	}
	if active != 0 {
		b.Errorf("%d Redfish sessions left open", active)
	}
	if after > before+goroutineSlack {
		buf := make([]byte, 1<<20)
		b.Errorf("goroutines grew from %d to %d:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// settledGoroutines closes idle HTTP connections, collects garbage and waits up to 3 s
// for the goroutine count to drop to target (0: just settle 200 ms), and returns it.
func settledGoroutines(target int) int {
	deadline := time.Now().Add(3 * time.Second)
	for {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		runtime.GC()
		time.Sleep(200 * time.Millisecond)
		n := runtime.NumGoroutine()
		if target == 0 || n <= target || time.Now().After(deadline) {
			return n
		}
	}
}
