package bgp

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/frr"
)

// A clean stop while the router is busy: the router's BGP daemon is paused
// (SIGSTOP) just before the speaker's SIGTERM and resumed 1 s later, as a router
// that is slow to read. Mode withdraw with graceful restart negotiated (the
// router a helper): 1 s after the router resumed, it must hold none of the
// speaker's paths, and FRR must log the Cease as a Hard Reset. The kernel of a
// paused router acknowledges every byte; only waiting for the router's own close
// (stop.go) makes the stop complete.

// busyRouter is what a trial needs of BIRD or FRR.
type busyRouter interface {
	CountRoutes(ctx context.Context) (int, error)
	PauseBGP() (resume func() error, err error)
}

// busyTrial is one trial's result.
type busyTrial struct {
	stale   int           // paths at the router 1 s after it resumed
	stop    time.Duration // SIGTERM to the speaker's exit
	started time.Time
}

// runBusyStop runs one trial against r with spec's prefixes.
func runBusyStop(tb testing.TB, r busyRouter, spec childSpec) busyTrial {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*converge)
	defer cancel()
	sp := startSpeakerProc(tb, spec)
	sp.waitReady(tb)
	err := bird.WaitFor(ctx, func(ctx context.Context) (bool, error) {
		n, err := r.CountRoutes(ctx)
		return n == len(spec.Prefixes), err
	})
	if err != nil {
		tb.Fatalf("not all %d paths at the router: %v", len(spec.Prefixes), err)
	}
	tr := busyTrial{started: time.Now()}
	resume, err := r.PauseBGP()
	if err != nil {
		tb.Fatal(err)
	}
	paused := time.Now()
	exited := make(chan time.Time, 1)
	sigterm := time.Now()
	go func() { exited <- sp.stop(tb) }()
	time.Sleep(time.Until(paused.Add(time.Second)))
	if err := resume(); err != nil {
		tb.Fatal(err)
	}
	resumed := time.Now()
	tr.stop = (<-exited).Sub(sigterm)
	time.Sleep(time.Until(resumed.Add(time.Second)))
	tr.stale, err = r.CountRoutes(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if tr.stale > 0 {
		tb.Logf("%d paths at the router 1 s after it resumed; the speaker's log:\n%s", tr.stale, sp.logText())
	}
	return tr
}

func busyPrefixes(n int) []string {
	var out []string
	for i := range n {
		out = append(out, netip.AddrFrom4([4]byte{198, 51, 104, byte(i + 1)}).String()+"/32")
	}
	return out
}

func grPeer(p config.BGPPeer) config.BGPPeer {
	p.GracefulRestart = &metav1.Duration{Duration: 120 * time.Second}
	return p
}

// TestStopWhileRouterBusy: 3 trials at BIRD and at FRR (BenchmarkStopWhileRouterBusy
// runs 20 for the numbers).
func TestStopWhileRouterBusy(t *testing.T) {
	t.Run("BIRD", func(t *testing.T) {
		r := bird.Start(t, bird.Options{GracefulRestart: true})
		spec := childSpec{RouterID: r.SpeakerV4(0).String(), Peers: []config.BGPPeer{grPeer(peerV4(r, 0))}, Prefixes: busyPrefixes(50)}
		for trial := range 3 {
			if tr := runBusyStop(t, r, spec); tr.stale != 0 {
				t.Errorf("trial %d: %d stale paths at BIRD 1 s after it resumed", trial, tr.stale)
			}
		}
	})
	t.Run("FRR", func(t *testing.T) {
		r := frr.Start(t, frr.Options{GracefulRestart: frr.GRHelper})
		spec := childSpec{RouterID: r.SpeakerV4(0).String(), Peers: []config.BGPPeer{grPeer(frrPeer(r))}, Prefixes: busyPrefixes(50)}
		for trial := range 3 {
			tr := runBusyStop(t, r, spec)
			if tr.stale != 0 {
				t.Errorf("trial %d: %d stale paths at FRR 1 s after it resumed", trial, tr.stale)
			}
			checkFRRHardReset(t, r, tr.started)
		}
	})
}

// checkFRRHardReset: FRR logged the speaker's Cease since since as a Hard Reset
// of an Administrative Shutdown.
func checkFRRHardReset(t *testing.T, r *frr.Router, since time.Time) {
	t.Helper()
	var got []string
	err := frr.WaitFor(waitCtx(t), func(context.Context) (bool, error) {
		events, err := r.LogEvents(since)
		got = nil
		for _, e := range events {
			if e.Kind != frr.EventNotification || e.Notification.Direction != frr.Received {
				continue
			}
			n := e.Notification
			got = append(got, n.String())
			if n.HardReset && n.HasInner && n.InnerCode == 6 && n.InnerSubcode == 2 {
				return true, nil
			}
		}
		return false, err
	})
	if err != nil {
		t.Errorf("FRR did not log a Hard Reset of 6/2 (Administrative Shutdown); it logged %v: %v", got, err)
	}
}

// BenchmarkStopWhileRouterBusy: 20 trials each at BIRD and FRR (graceful restart
// helpers); reports the trials with 0 paths 1 s after the router resumed
// (target 20), the most paths left, and the median SIGTERM-to-exit time (about
// the 1 s pause: the speaker waits for the router's close).
func BenchmarkStopWhileRouterBusy(b *testing.B) {
	run := func(b *testing.B, r busyRouter, spec childSpec) {
		for range b.N {
			clean, worst := 0, 0
			var stops []time.Duration
			for range 20 {
				tr := runBusyStop(b, r, spec)
				if tr.stale == 0 {
					clean++
				}
				worst = max(worst, tr.stale)
				stops = append(stops, tr.stop)
			}
			slices.Sort(stops)
			b.ReportMetric(float64(clean), "clean-trials")
			b.ReportMetric(float64(worst), "max-stale-paths")
			b.ReportMetric(stops[len(stops)/2].Seconds()*1000, "median-stop-ms")
			b.Logf("%d of 20 trials left 0 paths 1 s after the router resumed; SIGTERM to exit median %v, max %v", clean, stops[len(stops)/2], stops[len(stops)-1])
		}
	}
	b.Run("bird", func(b *testing.B) {
		r := bird.Start(b, bird.Options{GracefulRestart: true})
		run(b, r, childSpec{RouterID: r.SpeakerV4(0).String(), Peers: []config.BGPPeer{grPeer(peerV4(r, 0))}, Prefixes: busyPrefixes(50)})
	})
	b.Run("frr", func(b *testing.B) {
		r := frr.Start(b, frr.Options{GracefulRestart: frr.GRHelper})
		run(b, r, childSpec{RouterID: r.SpeakerV4(0).String(), Peers: []config.BGPPeer{grPeer(frrPeer(r))}, Prefixes: busyPrefixes(50)})
	})
}
