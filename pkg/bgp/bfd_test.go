package bgp

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bfd"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
)

// bfdPeer is peerV4 with BFD 300 ms x 3 (the BGP hold time stays 9 s).
func bfdPeer(r *bird.Router) config.BGPPeer {
	p := peerV4(r, 0)
	ms := func(n int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(n) * time.Millisecond} }
	p.BFD = &config.BFDConfig{MinTx: ms(300), MinRx: ms(300), Multiplier: 3}
	return p
}

// silentTrial starts a speaker process with BFD to r and, once BIRD has its paths,
// makes the host fall silent as a power loss or a kernel panic does: the process is
// frozen (SIGSTOP), so no BGP keepalive, BFD packet, FIN or RST leaves it (a kill
// -9 would have the kernel close the connections, which routers notice at once).
// It returns how long after that BIRD's own log shows the last path removed.
func silentTrial(t testing.TB, r *bird.Router, prefixes []string) time.Duration {
	t.Helper()
	sp := startSpeakerProc(t, childSpec{RouterID: r.SpeakerV4(0).String(), Peers: []config.BGPPeer{bfdPeer(r)}, Prefixes: prefixes})
	sp.waitReady(t)
	err := bird.WaitFor(waitCtx(t), func(ctx context.Context) (bool, error) {
		if n, err := r.CountRoutes(ctx); err != nil || n != len(prefixes) {
			return false, err
		}
		s, err := r.BFDSession(ctx, r.SpeakerV4(0))
		return err == nil && s.State == "Up", nil
	})
	if err != nil {
		t.Fatalf("paths and BFD session not up at BIRD: %v\n%s", err, r.Log())
	}
	killed := sp.freeze()
	err = bird.WaitFor(waitCtx(t), func(ctx context.Context) (bool, error) {
		n, err := r.CountRoutes(ctx)
		return n == 0, err
	})
	if err != nil {
		t.Fatalf("paths still at BIRD after the host fell silent: %v", err)
	}
	events, err := r.LogEvents(killed)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	bfdDown := false
	for _, e := range events {
		switch e.Kind {
		case bird.EventRouteRemoved:
			if slices.Contains(prefixes, e.Prefix.String()) && e.Time.After(last) {
				last = e.Time
			}
		case bird.EventBFDDown:
			bfdDown = true
		}
	}
	if last.IsZero() || !bfdDown {
		t.Fatalf("BIRD's log shows no BFD down and path removal after the host fell silent (bfd down %v):\n%s", bfdDown, r.Log())
	}
	return last.Sub(killed)
}

// TestBIRDBFDHostSilent: a speaker with BFD 300 ms x 3 falls silent; BIRD's BFD
// declares the session down and drops its paths well before the 9 s hold time, as
// BIRD's own log timestamps show. The target is 1 s (docs/development.md: Benchmarks).
func TestBIRDBFDHostSilent(t *testing.T) {
	r := bird.Start(t, bird.Options{BFD: &bird.BFD{BGP: true}, EventLog: true})
	took := silentTrial(t, r, []string{"198.51.103.1/32", "198.51.103.2/32"})
	t.Logf("host silent to the last path removed at BIRD (BIRD's log): %v", took)
	if took > 5*time.Second {
		t.Errorf("BIRD dropped the paths %v after the host fell silent: BFD did not act (hold time 9 s)", took)
	}
}

// TestBIRDBFDStopSendsAdminDown: a clean stop (mode withdraw) withdraws, closes the
// session, then says AdminDown: BIRD's BFD sees the session administratively down,
// not a failure.
func TestBIRDBFDStopSendsAdminDown(t *testing.T) {
	r := bird.Start(t, bird.Options{BFD: &bird.BFD{BGP: true}, EventLog: true})
	sp := runSpeaker(t, r, 0, Config{Peers: []config.BGPPeer{bfdPeer(r)}}, func(s *Speaker) { s.Announce("lb", []Path{{Prefix: lb4}}) })
	waitRoutes(t, r, lb4, "announced", hasNextHops(r.SpeakerV4(0)))
	err := bird.WaitFor(waitCtx(t), func(ctx context.Context) (bool, error) {
		ss := sp.BFDSessions()
		return len(ss) == 1 && ss[0].State == bfd.StateUp, nil
	})
	if err != nil {
		t.Fatalf("our BFD session not Up: %+v", sp.BFDSessions())
	}
	sp.stop(t)
	removed := false
	removedLine := "bfd1: Session to " + r.SpeakerV4(0).String() + " removed"
	err = bird.WaitFor(waitCtx(t), func(ctx context.Context) (bool, error) {
		s, err := r.BFDSession(ctx, r.SpeakerV4(0))
		if errors.Is(err, bird.ErrNotFound) || strings.Contains(r.Log(), removedLine) {
			// BIRD removed it with the BGP session (and may have added a new one
			// for the protocol's restart at once)
			removed = true
			return true, nil
		}
		return err == nil && s.State != "Up", nil
	})
	if err != nil {
		t.Fatalf("BIRD's BFD session still up after the stop: %v", err)
	}
	if removed {
		// The stop's Cease closed the BGP session first and BIRD dropped the BFD
		// session with it, before our AdminDown arrived: nothing left to observe
		// (it happens in about one run of three).
		if events, err := r.LogEvents(time.Time{}); err == nil {
			for _, e := range events {
				if e.Kind == bird.EventBFDState && e.From == "Up" && e.To != "Down" && e.To != "AdminDown" {
					t.Errorf("BIRD's BFD session went %s->%s after the stop", e.From, e.To)
				}
			}
		}
		t.Log("BIRD removed its BFD session with the BGP session before the AdminDown arrived")
		return
	}
	var saw []string
	err = bird.WaitFor(waitCtx(t), func(context.Context) (bool, error) {
		events, err := r.LogEvents(time.Time{})
		saw = nil
		for _, e := range events {
			if e.Kind == bird.EventBFDState {
				saw = append(saw, e.From+"->"+e.To)
			}
		}
		return slices.Contains(saw, "Up->Down") || slices.Contains(saw, "Up->AdminDown"), err
	})
	if err != nil {
		t.Errorf("BIRD's BFD transitions %v, want the session taken down by our AdminDown: %v", saw, err)
	}
}
