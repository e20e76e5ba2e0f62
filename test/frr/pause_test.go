package frr

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/routertest"
)

// TestPauseBGP runs routertest.CheckPauseBGP on bgpd, with vtysh as the control
// program that hangs while bgpd is paused. Cleanup of a router left paused gets
// 5s: without resuming bgpd first, StopDaemon's SIGTERM would wait 10s for nothing.
func TestPauseBGP(t *testing.T) {
	routertest.CheckPauseBGP(t, 5*time.Second, startBGPDTarget)
}

// startBGPDTarget starts a router and returns its bgpd for CheckPauseBGP.
func startBGPDTarget(t *testing.T) routertest.PauseTarget {
	r := Start(t, Options{})
	vtysh := func(ctx context.Context) (string, error) { return r.Vtysh(ctx, "show bgp summary json") }
	return routertest.PauseTarget{Router: r, Process: r.daemons["bgpd"].proc, Control: vtysh,
		Speaker: r.SpeakerV4(0), Peer: netip.AddrPortFrom(r.RouterV4, 179)}
}
