package bird

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/routertest"
)

// TestPauseBGP checks PauseBGP as routertest.CheckPauseBGP does: with BIRD paused
// neither birdc nor a BGP OPEN is answered. A router left paused must be cleaned
// up within 3s: without resuming first, Stop's SIGTERM would wait 5s for nothing.
func TestPauseBGP(t *testing.T) {
	routertest.CheckPauseBGP(t, 3*time.Second, func(t *testing.T) routertest.PauseTarget {
		r := Start(t, Options{})
		return routertest.PauseTarget{Router: r, Process: r.proc,
			Speaker: r.SpeakerV4(0), Peer: netip.AddrPortFrom(r.RouterV4, 179),
			Control: func(ctx context.Context) (string, error) { return r.Birdc(ctx, "show", "status") },
			// After a session BIRD restarts the protocol, whose listening socket
			// is closed meanwhile: wait until s1 listens again.
			Ready: func(ctx context.Context) error {
				return WaitFor(ctx, func(ctx context.Context) (bool, error) {
					p, err := r.ProtocolState(ctx, "s1")
					return strings.HasPrefix(p.Info, "Passive"), err
				})
			}}
	})
}
