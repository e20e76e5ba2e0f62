package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
)

// gapWatcher polls a router every 20ms and records every moment one of the watched
// prefixes had no path.
type gapWatcher struct {
	mu     sync.Mutex
	gaps   []string
	polls  int
	cancel context.CancelFunc
	done   chan struct{}
}

func watchGaps(routes func(context.Context, netip.Prefix) (int, error), prefixes ...netip.Prefix) *gapWatcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &gapWatcher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			for _, p := range prefixes {
				n, err := routes(ctx, p)
				if ctx.Err() != nil {
					return
				}
				w.mu.Lock()
				w.polls++
				if err == nil && n == 0 {
					w.gaps = append(w.gaps, time.Now().Format("15:04:05.000")+" "+p.String())
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *gapWatcher) stop() ([]string, int) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gaps, w.polls
}

func birdPaths(r *bird.Router) func(context.Context, netip.Prefix) (int, error) {
	return func(ctx context.Context, p netip.Prefix) (int, error) {
		rs, err := r.RoutesFor(ctx, p)
		return len(rs), err
	}
}

var (
	restartA = netip.MustParsePrefix("198.51.100.41/32")
	restartB = netip.MustParsePrefix("198.51.100.42/32")
	restartC = netip.MustParsePrefix("198.51.100.43/32")
	restartD = netip.MustParsePrefix("198.51.100.44/32")
)

// TestBIRDPlannedRestart: mode retain. The speaker process stops (SIGTERM) and a new
// one starts: BIRD, a graceful-restart helper, keeps the paths meanwhile, so the
// prefixes both processes announce never lose their path (polled every 20ms); the
// new process's End-of-RIB, sent after everything it announces, flushes the stale
// path it no longer announces; the new path arrives.
func TestBIRDPlannedRestart(t *testing.T) {
	t.Run("BGP", func(t *testing.T) { birdPlannedRestart(t, false) })
	t.Run("BGP+BFD", func(t *testing.T) { birdPlannedRestart(t, true) })
}

func birdPlannedRestart(t *testing.T, withBFD bool) {
	opts := bird.Options{GracefulRestart: true}
	if withBFD {
		opts.BFD = &bird.BFD{BGP: true, Graceful: true}
	}
	r := bird.Start(t, opts)
	p := peerV4(r, 0)
	if withBFD {
		p = bfdPeer(r)
	}
	spec := childSpec{RouterID: r.SpeakerV4(0).String(), OnStop: config.StopRetain, Peers: []config.BGPPeer{p},
		Prefixes: []string{restartA.String(), restartB.String(), restartC.String()}}
	a := startSpeakerProc(t, spec)
	a.waitReady(t)
	for _, pfx := range []netip.Prefix{restartA, restartB, restartC} {
		waitRoutes(t, r, pfx, "announced", hasNextHops(r.SpeakerV4(0)))
	}
	w := watchGaps(birdPaths(r), restartA, restartB)
	a.stop(t)
	time.Sleep(time.Second)
	if rs, err := r.RoutesFor(waitCtx(t), restartC); err != nil || len(rs) != 1 {
		t.Errorf("1s after a planned stop, BIRD has %d paths for %s (%v), want the stale one kept", len(rs), restartC, err)
	}
	spec.Prefixes = []string{restartA.String(), restartB.String(), restartD.String()}
	b := startSpeakerProc(t, spec)
	b.waitReady(t)
	waitRoutes(t, r, restartD, "announced by the restarted speaker", hasNextHops(r.SpeakerV4(0)))
	waitRoutes(t, r, restartC, "stale path flushed by End-of-RIB", gone)
	gaps, polls := w.stop()
	if len(gaps) > 0 {
		t.Errorf("prefixes without a path during the restart (%d of %d polls): %v", len(gaps), polls, gaps)
	}
	out, _ := r.Birdc(waitCtx(t), "show", "protocols", "all", r.Protocol(0, false))
	t.Logf("%d polls; BIRD after the restart:\n%s", polls, out)
}

// TestBIRDStopLeavesNoStalePaths: mode withdraw with graceful restart negotiated.
// A SIGTERM'd speaker process leaves no path at BIRD 1s after it exited (each
// trial), and BIRD received the Cease.
func TestBIRDStopLeavesNoStalePaths(t *testing.T) {
	r := bird.Start(t, bird.Options{GracefulRestart: true})
	p := peerV4(r, 0)
	p.GracefulRestart = &metav1.Duration{Duration: 120 * time.Second}
	var prefixes []string
	for i := range 50 {
		prefixes = append(prefixes, netip.AddrFrom4([4]byte{198, 51, 101, byte(i + 1)}).String()+"/32")
	}
	for trial := range 3 {
		sp := startSpeakerProc(t, childSpec{RouterID: r.SpeakerV4(0).String(), Peers: []config.BGPPeer{p}, Prefixes: prefixes})
		sp.waitReady(t)
		err := bird.WaitFor(waitCtx(t), func(ctx context.Context) (bool, error) {
			n, err := r.CountRoutes(ctx)
			return n == len(prefixes), err
		})
		if err != nil {
			t.Fatalf("trial %d: not all %d paths at BIRD: %v", trial, len(prefixes), err)
		}
		exited := sp.stop(t)
		time.Sleep(time.Until(exited.Add(time.Second)))
		if n, err := r.CountRoutes(waitCtx(t)); err != nil || n != 0 {
			t.Errorf("trial %d: 1s after the speaker exited BIRD holds %d paths (%v), want 0\n%s", trial, n, err, sp.logText())
		}
		if !strings.Contains(sp.logText(), "sessionsConfirmed=1") {
			t.Errorf("trial %d: the stop was not confirmed at BIRD's TCP:\n%s", trial, sp.logText())
		}
	}
}

// BenchmarkStopStalePaths: 20 SIGTERMs of a speaker process announcing 50 /32s to
// BIRD, with and without graceful restart negotiated (mode withdraw): reports the
// paths BIRD still holds 1 s after each exit (target 0 in 20 of 20) and how long
// the stop took.
func BenchmarkStopStalePaths(b *testing.B) {
	for _, gr := range []bool{false, true} {
		b.Run(fmt.Sprintf("bird/gr=%v", gr), func(b *testing.B) {
			r := bird.Start(b, bird.Options{GracefulRestart: gr})
			p := peerV4(r, 0)
			if gr {
				p.GracefulRestart = &metav1.Duration{Duration: 120 * time.Second}
			}
			stopStaleTrials(b, func(ctx context.Context) (int, error) { return r.CountRoutes(ctx) }, childSpec{RouterID: r.SpeakerV4(0).String(), Peers: []config.BGPPeer{p}})
		})
	}
}

// stopStaleTrials runs 20 SIGTERM trials against a router (count: its paths).
func stopStaleTrials(b *testing.B, count func(context.Context) (int, error), spec childSpec) {
	const trials = 20
	for i := range 50 {
		spec.Prefixes = append(spec.Prefixes, netip.AddrFrom4([4]byte{198, 51, 102, byte(i + 1)}).String()+"/32")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for range b.N {
		stale, worst := 0, 0
		var stops []time.Duration
		for trial := range trials {
			sp := startSpeakerProc(b, spec)
			sp.waitReady(b)
			err := bird.WaitFor(ctx, func(ctx context.Context) (bool, error) {
				n, err := count(ctx)
				return n == len(spec.Prefixes), err
			})
			if err != nil {
				b.Fatalf("trial %d: not all paths at the router: %v", trial, err)
			}
			sigterm := time.Now()
			exited := sp.stop(b)
			stops = append(stops, exited.Sub(sigterm))
			time.Sleep(time.Until(exited.Add(time.Second)))
			n, err := count(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if n > 0 {
				stale++
				worst = max(worst, n)
				b.Logf("trial %d: %d paths 1 s after the exit\n%s", trial, n, sp.logText())
			}
		}
		slices.Sort(stops)
		b.ReportMetric(float64(trials-stale), "clean-trials")
		b.ReportMetric(float64(worst), "max-stale-paths")
		b.ReportMetric(stops[len(stops)/2].Seconds()*1000, "median-stop-ms")
		b.Logf("%d of %d trials left 0 paths 1 s after the exit; stop (SIGTERM to exit) median %v, max %v", trials-stale, trials, stops[len(stops)/2], stops[len(stops)-1])
	}
}
