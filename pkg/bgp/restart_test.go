package bgp

import (
	"context"
	"net/netip"
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
	r := bird.Start(t, bird.Options{GracefulRestart: true})
	p := peerV4(r, 0)
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
