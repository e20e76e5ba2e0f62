package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/test/frr"
)

// The failover properties of stop.go and bfd.go against FRR 8.4 (what SONiC and
// Cumulus switches run), configured as test/frr documents (ebgp-requires-policy
// on, explicit route-maps).

func frrPeer(r *frr.Router) config.BGPPeer {
	return config.BGPPeer{Address: r.RouterV4.String(), ASN: r.ASN, SourceAddress: r.SpeakerV4(0).String(),
		HoldTime: &metav1.Duration{Duration: 9 * time.Second}, ConnectRetry: &metav1.Duration{Duration: time.Second}}
}

func frrPaths(r *frr.Router) func(context.Context, netip.Prefix) (int, error) {
	return func(ctx context.Context, p netip.Prefix) (int, error) {
		rs, err := r.RoutesFor(ctx, p)
		return len(rs), err
	}
}

func waitFRR(t testing.TB, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := frr.WaitFor(waitCtx(t), cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestFRRPlannedRestart: mode retain against FRR's graceful-restart helper (its
// default): the prefixes both processes announce never lose their path (polled
// every 20 ms), FRR marks them stale meanwhile, and the new process's End-of-RIB
// flushes the one it no longer announces.
func TestFRRPlannedRestart(t *testing.T) {
	t.Run("BGP", func(t *testing.T) { frrPlannedRestart(t, false) })
	t.Run("BGP+BFD", func(t *testing.T) { frrPlannedRestart(t, true) })
}

func frrPlannedRestart(t *testing.T, withBFD bool) {
	opts := frr.Options{}
	if withBFD {
		opts.BFD = &frr.BFD{}
	}
	r := frr.Start(t, opts)
	peer := frrPeer(r)
	if withBFD {
		peer.BFD = &config.BFDConfig{MinTx: &metav1.Duration{Duration: 300 * time.Millisecond}, MinRx: &metav1.Duration{Duration: 300 * time.Millisecond}, Multiplier: 3}
	}
	spec := childSpec{RouterID: r.SpeakerV4(0).String(), OnStop: config.StopRetain, Peers: []config.BGPPeer{peer},
		Prefixes: []string{restartA.String(), restartB.String(), restartC.String()}}
	a := startSpeakerProc(t, spec)
	a.waitReady(t)
	waitFRR(t, "the paths at FRR", func(ctx context.Context) (bool, error) {
		n, err := r.CountRoutes(ctx)
		return n == 3, err
	})
	w := watchGaps(frrPaths(r), restartA, restartB)
	a.stop(t)
	waitFRR(t, "FRR to keep the paths as stale", func(ctx context.Context) (bool, error) {
		rs, err := r.RoutesFor(ctx, restartC)
		return len(rs) == 1 && rs[0].Stale, err
	})
	spec.Prefixes = []string{restartA.String(), restartB.String(), restartD.String()}
	b := startSpeakerProc(t, spec)
	b.waitReady(t)
	waitFRR(t, "the new path and the stale one flushed", func(ctx context.Context) (bool, error) {
		c, err1 := r.RoutesFor(ctx, restartC)
		d, err2 := r.RoutesFor(ctx, restartD)
		return len(c) == 0 && len(d) == 1, errors.Join(err1, err2)
	})
	rs, err := r.RoutesFor(waitCtx(t), restartA)
	if err != nil || len(rs) != 1 || rs[0].Stale {
		t.Errorf("%s after the restart: %+v %v, want one fresh path", restartA, rs, err)
	}
	gaps, polls := w.stop()
	if len(gaps) > 0 {
		t.Errorf("prefixes without a path during the restart (%d of %d polls): %v", len(gaps), polls, gaps)
	}
}

// TestFRRBFDHostSilent: a speaker with BFD 300 ms x 3 falls silent (frozen, as on
// power loss); FRR's bfdd declares it down and bgpd removes its paths well before
// the 9 s hold time, by FRR's own log.
func TestFRRBFDHostSilent(t *testing.T) {
	r := frr.Start(t, frr.Options{BFD: &frr.BFD{}})
	p := frrPeer(r)
	p.BFD = &config.BFDConfig{MinTx: &metav1.Duration{Duration: 300 * time.Millisecond}, MinRx: &metav1.Duration{Duration: 300 * time.Millisecond}, Multiplier: 3}
	prefixes := []string{"198.51.103.1/32", "198.51.103.2/32"}
	start := time.Now()
	sp := startSpeakerProc(t, childSpec{RouterID: r.SpeakerV4(0).String(), Peers: []config.BGPPeer{p}, Prefixes: prefixes})
	sp.waitReady(t)
	t.Logf("speaker ready after %v", time.Since(start))
	waitFRR(t, "the paths at FRR and BFD up", func(ctx context.Context) (bool, error) {
		n, err := r.CountRoutes(ctx)
		if err != nil || n != len(prefixes) {
			return false, err
		}
		ps, err := r.BFDPeers(ctx)
		return err == nil && len(ps) > 0 && ps[0].Status == "up", nil
	})
	t.Logf("paths and BFD up at FRR after %v", time.Since(start))
	time.Sleep(2 * time.Second) // past FRR's one BFD reset at the first establishment
	waitFRR(t, "the paths at FRR", func(ctx context.Context) (bool, error) {
		n, err := r.CountRoutes(ctx)
		return n == len(prefixes), err
	})
	silent := sp.freeze()
	waitFRR(t, "the paths gone from FRR", func(ctx context.Context) (bool, error) {
		n, err := r.CountRoutes(ctx)
		return n == 0, err
	})
	events, err := r.LogEvents(silent)
	if err != nil {
		t.Fatal(err)
	}
	var bfdDown, removed time.Time
	for _, e := range events {
		switch {
		case e.Kind == frr.EventBFDState && e.To == "down" && bfdDown.IsZero():
			bfdDown = e.Time
		case e.Kind == frr.EventRouteDelete && slices.Contains(prefixes, e.Prefix.String()) && e.Time.After(removed):
			removed = e.Time
		}
	}
	if bfdDown.IsZero() || removed.IsZero() {
		t.Fatalf("FRR's log shows no BFD down (%v) or route delete (%v) after the speaker fell silent:\n%s", bfdDown, removed, r.Log())
	}
	t.Logf("host silent to FRR's BFD down %v, to the last path removed %v (FRR's log)", bfdDown.Sub(silent), removed.Sub(silent))
	if removed.Sub(silent) > 5*time.Second {
		t.Errorf("FRR removed the paths %v after the speaker fell silent: BFD did not act (hold time 9 s)", removed.Sub(silent))
	}
}

// BenchmarkFRRStopStalePaths is BenchmarkStopStalePaths against FRR: helper mode
// (graceful restart negotiated, with the N bit, so our Cease arrives as a Hard
// Reset) and graceful restart disabled.
func BenchmarkFRRStopStalePaths(b *testing.B) {
	for _, mode := range []frr.GRMode{frr.GRHelper, frr.GRDisabled} {
		b.Run(fmt.Sprintf("frr/gr=%v", mode != frr.GRDisabled), func(b *testing.B) {
			r := frr.Start(b, frr.Options{GracefulRestart: mode})
			p := frrPeer(r)
			if mode != frr.GRDisabled {
				p.GracefulRestart = &metav1.Duration{Duration: 120 * time.Second}
			}
			stopStaleTrials(b, r.CountRoutes, childSpec{RouterID: r.SpeakerV4(0).String(), Peers: []config.BGPPeer{p}})
		})
	}
}
