package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bfd"
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

// TestPeerRemovalEndsWithCease: a removed or changed peer's session ends with the
// withdrawals of its paths and a Cease, never a bare close that a
// graceful-restart router would take for a restart: right after SetPeers the
// router holds none of the speaker's paths (not even stale ones), and logged a
// Hard Reset of "Peer De-configured" (removal) or "Other Configuration Change"
// (a changed peer).
func TestPeerRemovalEndsWithCease(t *testing.T) {
	r := frr.Start(t, frr.Options{GracefulRestart: frr.GRHelper})
	sp := runSpeaker(t, nil, 0, Config{RouterID: r.SpeakerV4(0)}, func(s *Speaker) { s.Announce("lb", []Path{{Prefix: lb4}, {Prefix: lb6}}) })
	peer := grPeer(frrPeer(r))
	for _, step := range []struct {
		name     string
		peers    []config.BGPPeer
		sub      uint8
		restored bool
	}{
		{"changed (hold time)", []config.BGPPeer{withHold(peer, 12*time.Second)}, 6, true},
		{"removed", nil, 3, false},
	} {
		if err := sp.SetPeers([]config.BGPPeer{peer}); err != nil {
			t.Fatal(err)
		}
		waitFRR(t, "the paths at FRR", func(ctx context.Context) (bool, error) {
			n, err := r.CountRoutes(ctx)
			return n == 2, err
		})
		since := time.Now()
		if err := sp.SetPeers(step.peers); err != nil {
			t.Fatal(err)
		}
		waitFRR(t, step.name+": the Cease at FRR", func(ctx context.Context) (bool, error) {
			events, err := r.LogEvents(since)
			for _, e := range events {
				if n := e.Notification; e.Kind == frr.EventNotification && n.Direction == frr.Received && n.HardReset && n.InnerCode == 6 && n.InnerSubcode == step.sub {
					return true, nil
				}
			}
			return false, err
		})
		rs4, err1 := r.RoutesFor(waitCtx(t), lb4)
		rs6, err2 := r.RoutesFor(waitCtx(t), lb6)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		for _, rt := range append(rs4, rs6...) {
			if rt.Stale {
				t.Errorf("%s: FRR keeps a stale path %+v", step.name, rt)
			}
		}
		if step.restored {
			waitFRR(t, step.name+": the new session's paths", func(ctx context.Context) (bool, error) {
				n, err := r.CountRoutes(ctx)
				return n == 2, err
			})
			peer = step.peers[0]
		}
	}
}

func withHold(p config.BGPPeer, d time.Duration) config.BGPPeer {
	p.HoldTime = &metav1.Duration{Duration: d}
	return p
}

// TestFRRBFDDownHoldsSession: the router's BFD falls silent (FRR's bfdd paused)
// while bgpd runs: the speaker ends the BGP session at once with a Cease "BFD
// Down" (RFC 9384, as FRR logs it) and does not connect again while BFD is down
// (no flapping session), then connects as soon as BFD is up again.
func TestFRRBFDDownHoldsSession(t *testing.T) {
	r := frr.Start(t, frr.Options{BFD: &frr.BFD{}})
	p := frrPeer(r)
	p.BFD = &config.BFDConfig{MinTx: &metav1.Duration{Duration: 300 * time.Millisecond}, MinRx: &metav1.Duration{Duration: 300 * time.Millisecond}, Multiplier: 3}
	sp := runSpeaker(t, nil, 0, Config{RouterID: r.SpeakerV4(0), Peers: []config.BGPPeer{p}}, func(s *Speaker) { s.Announce("lb", []Path{{Prefix: lb4}}) })
	upAndRoutes := func(ctx context.Context) (bool, error) {
		ps := sp.Peers()
		bs := sp.BFDSessions()
		n, err := r.CountRoutes(ctx)
		return len(ps) == 1 && ps[0].State == "established" && len(bs) == 1 && bs[0].State == bfd.StateUp && n == 1, err
	}
	waitFRR(t, "the session, BFD and the path up", upAndRoutes)
	time.Sleep(2 * time.Second) // past FRR's one BFD reset at the first establishment
	waitFRR(t, "the session, BFD and the path up", upAndRoutes)

	since := time.Now()
	resume, err := r.PauseBFD()
	if err != nil {
		t.Fatal(err)
	}
	waitFRR(t, "FRR to receive the Cease BFD Down", func(context.Context) (bool, error) {
		events, err := r.LogEvents(since)
		for _, e := range events {
			if n := e.Notification; e.Kind == frr.EventNotification && n.Direction == frr.Received && n.Code == 6 && n.Subcode == 10 && !n.HardReset {
				return true, nil
			}
		}
		return false, err
	})
	// FRR may log the Cease a few milliseconds before GoBGP's state leaves
	// established: wait for the speaker to report the session held down first.
	waitFRR(t, "the speaker to report the session held down", func(context.Context) (bool, error) {
		ps := sp.Peers()
		return len(ps) == 1 && ps[0].State != "established" && ps[0].BFDHeld, nil
	})
	// Held: 5 s without a session, polled.
	held := time.Now()
	for time.Since(held) < 5*time.Second {
		ps := sp.Peers()
		if len(ps) != 1 || ps[0].State == "established" || ps[0].State == "opensent" || !ps[0].BFDHeld {
			t.Fatalf("while BFD is down the session is %+v, want held down", ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	waitFRR(t, "the session and the path back after BFD came up", upAndRoutes)
	t.Logf("session and path back %v after FRR's bfdd resumed", time.Since(resumed).Round(10*time.Millisecond))
}

// TestBFDNeverUpWarns: BFD configured here but not at the router: once the BGP
// session has been up for the warning delay, a warning at the default log level
// names the likely causes, and Peers reports the problem (it reaches the
// Announced condition and explain through the speaker status).
func TestBFDNeverUpWarns(t *testing.T) {
	r := frr.Start(t, frr.Options{})
	p := frrPeer(r)
	p.BFD = &config.BFDConfig{MinTx: &metav1.Duration{Duration: 300 * time.Millisecond}, MinRx: &metav1.Duration{Duration: 300 * time.Millisecond}, Multiplier: 3}
	var logs logLines
	s, err := New(Config{LocalASN: 65000, RouterID: r.SpeakerV4(0), Peers: []config.BGPPeer{p}})
	if err != nil {
		t.Fatal(err)
	}
	s.bfdWarnAfter = 2 * time.Second
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.logger()))
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var warned []string
	waitFRR(t, "the warning", func(context.Context) (bool, error) {
		warned = logs.matching("Warning: BFD is not up", r.RouterV4.String())
		return len(warned) > 0, nil
	})
	for _, want := range []string{"sends no BFD packets", "neighbor X bfd", "multihop"} {
		if !strings.Contains(warned[0], want) {
			t.Errorf("warning %q does not say %q", warned[0], want)
		}
	}
	if ps := s.Peers(); len(ps) != 1 || ps[0].State != "established" || !strings.Contains(ps[0].BFDProblem, "no BFD packets") {
		t.Errorf("Peers() = %+v, want the established session with its BFD problem", ps)
	}
	time.Sleep(2 * time.Second)
	if n := len(logs.matching("Warning: BFD is not up")); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
}

// TestFRRBFDNoResetOnEstablishment: FRR re-creates its BFD session for a directly
// connected neighbor when the BGP session comes up (bound to the interface); had
// the speaker's BFD been up with the old one, FRR would end that first session
// with a Cease "BFD Down". The speaker runs BFD only once the session is
// established, so neither the first session nor the first one after a router
// restart is reset: each stays established (5 s watched, polled every 20 ms).
func TestFRRBFDNoResetOnEstablishment(t *testing.T) {
	r := frr.Start(t, frr.Options{BFD: &frr.BFD{}})
	p := frrPeer(r)
	p.BFD = &config.BFDConfig{MinTx: &metav1.Duration{Duration: 300 * time.Millisecond}, MinRx: &metav1.Duration{Duration: 300 * time.Millisecond}, Multiplier: 3}
	sp := runSpeaker(t, nil, 0, Config{RouterID: r.SpeakerV4(0), Peers: []config.BGPPeer{p}}, func(s *Speaker) { s.Announce("lb", []Path{{Prefix: lb4}}) })
	stays := func(what string) {
		t.Helper()
		waitFRR(t, what+": established with BFD up", func(context.Context) (bool, error) {
			ps, bs := sp.Peers(), sp.BFDSessions()
			return len(ps) == 1 && ps[0].State == "established" && len(bs) == 1 && bs[0].State == bfd.StateUp, nil
		})
		start := time.Now()
		for time.Since(start) < 5*time.Second {
			if ps := sp.Peers(); len(ps) != 1 || ps[0].State != "established" {
				t.Fatalf("%s: the session left Established %v after BFD came up: %+v\n%s", what, time.Since(start), ps, r.Log())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stays("first session")
	for _, d := range []string{"bgpd", "bfdd"} {
		if err := r.StopDaemon(d, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"bfdd", "bgpd"} {
		if err := r.StartDaemon(waitCtx(t), d); err != nil {
			t.Fatal(err)
		}
	}
	stays("after the router's restart")
}
