package routertest

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/bgptest"
	"github.com/baremetal-ccm/baremetal-ccm/internal/procsignal"
)

// Pausable is a lab router whose BGP process can be paused (the Routers of
// test/frr and test/bird).
type Pausable interface {
	PauseBGP() (resume func() error, err error)
}

// PauseTarget is a started lab router as CheckPauseBGP checks it.
type PauseTarget struct {
	Router Pausable
	// Process is the router's BGP process.
	Process *procsignal.Process
	// Speaker is a configured speaker's address, Peer the router's BGP address.
	Speaker netip.Addr
	Peer    netip.AddrPort
	// Control runs a command of the router's control program (vtysh, birdc)
	// that the BGP process must answer.
	Control func(ctx context.Context) (string, error)
	// Ready, if not nil, waits until the router takes a new session from
	// Speaker after one ended.
	Ready func(ctx context.Context) error
}

// CheckPauseBGP checks PauseBGP on a router that start starts for the test:
// the router answers a BGP OPEN (a session from Speaker); paused, every thread of
// its BGP process is stopped, a second PauseBGP fails, and neither Control nor a
// BGP OPEN is answered (the kernel still accepts the TCP connection); resumed,
// both are answered again, and resuming twice is harmless. Then, in the subtest
// LeftPaused, a second router is left paused at the end of its test: its cleanup
// must take at most cleanupWithin and leave no BGP process behind.
func CheckPauseBGP(t *testing.T, cleanupWithin time.Duration, start func(t *testing.T) PauseTarget) {
	t.Helper()
	r := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := SpeakerOpen(r.Speaker, false)
	_ = Connect(ctx, t, r.Speaker, r.Peer, open).Close() // the router answers
	if r.Ready != nil {
		if err := r.Ready(ctx); err != nil {
			t.Fatalf("router not ready for a new session: %v", err)
		}
	}

	resume, err := r.Router.PauseBGP()
	if err != nil {
		t.Fatal(err)
	}
	if stopped, err := procsignal.TasksStopped(r.Process.Pid(), true); !stopped || err != nil {
		t.Errorf("BGP process (pid %d) not stopped: %v", r.Process.Pid(), err)
	}
	if _, err := r.Router.PauseBGP(); err == nil {
		t.Error("paused a paused BGP process")
	}
	cctx, ccancel := context.WithTimeout(ctx, time.Second)
	out, err := r.Control(cctx)
	ccancel()
	if err == nil || !errors.Is(cctx.Err(), context.DeadlineExceeded) {
		t.Errorf("control program answered with BGP paused: %q %v", out, err)
	}
	if err := bgptest.Silent(ctx, r.Speaker, r.Peer.String(), open, 2*time.Second); err != nil {
		t.Errorf("BGP probe of a paused router: %v", err)
	}

	if err := resume(); err != nil {
		t.Fatal(err)
	}
	if err := resume(); err != nil {
		t.Errorf("second resume: %v", err)
	}
	if out, err := r.Control(ctx); err != nil {
		t.Errorf("control program after resume: %v: %s", err, out)
	}
	_ = Connect(ctx, t, r.Speaker, r.Peer, open).Close() // the router answers again

	var left *procsignal.Process
	var end time.Time
	t.Run("LeftPaused", func(t *testing.T) {
		r := start(t)
		if _, err := r.Router.PauseBGP(); err != nil {
			t.Fatal(err)
		}
		left, end = r.Process, time.Now()
	})
	if left == nil {
		return // LeftPaused failed
	}
	if took := time.Since(end); took > cleanupWithin {
		t.Errorf("cleanup of a router left paused took %v", took)
	}
	if left.Check() == nil {
		t.Errorf("BGP process (pid %d) of the router left paused still runs", left.Pid())
	}
}
