package bgp

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp/wire"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// A clean stop in mode withdraw (config.StopWithdraw) must be complete at the
// router: every withdrawal read, then a Cease that tells a graceful-restart helper
// to drop the session's paths at once rather than keep them as stale.
//
// The relay (package wire) owns each router connection, so the stop is its own:
// for every session at once, it stops passing GoBGP's output, writes the
// withdrawals of every path the router holds, then a Cease "Administrative
// Shutdown" (wrapped in a Hard Reset where the router negotiated RFC 8538), and
// waits until the router closes its side: a router closes only after it has read
// the NOTIFICATION, so everything before it has been read too. Only then does the
// relay close its socket. A router that has not closed within 2 s (finishWait) is
// logged as unconfirmed and the connection closed anyway.
//
// Waiting for the router's close, not for TCP acknowledgements, matters for a busy
// router: FRR's bgpd that is slow to read (paused for a second) has its kernel
// acknowledge every byte long before bgpd reads them, and a FIN that arrives
// meanwhile makes bgpd drop what it has not processed yet and keep the paths as
// stale for its restart time.

// finishWait bounds the wait for the routers to close their side at a stop.
const finishWait = 2 * time.Second

// shutdown ends the speaker as Config.OnStop says.
//
// Mode withdraw: every session finished as above, in parallel; then the relays,
// the listener and the GoBGP server stop.
//
// Mode retain: nothing is sent; the sessions stay up until the process exits and
// the kernel closes the connections without a NOTIFICATION, which graceful-restart
// routers treat as a restart: they keep the paths for the restart time.
func (s *Speaker) shutdown(stopWires context.CancelFunc) {
	s.peersMu.Lock()
	defer s.peersMu.Unlock()
	s.mu.Lock()
	srv := s.srv
	s.srv = nil // from here on no other method touches the server
	if srv == nil {
		s.mu.Unlock()
		return
	}
	n := len(s.rib.applied)
	logger := s.log
	if s.cfg.OnStop == config.StopRetain {
		s.mu.Unlock()
		logger.Info("BGP speaker stopped for a restart: paths and sessions left for the process exit; graceful-restart routers keep the paths until this host's next start refreshes them", "paths", n)
		return
	}
	s.rib.reset()
	peers := make([]*activePeer, 0, len(s.active))
	for _, ap := range s.active {
		peers = append(peers, ap)
	}
	s.active = map[netip.Addr]*activePeer{}
	lis := s.lis
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), finishWait)
	defer cancel()
	var confirmed, unconfirmed atomic.Int32
	var wg sync.WaitGroup
	for _, ap := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			up := ap.wire.Status().Established
			ok := ap.wire.Finish(ctx, wire.Cease(wire.SubCeaseAdminShutdown, "baremetal-ccm stopping"), true)
			switch {
			case ok:
				confirmed.Add(1)
			case up:
				unconfirmed.Add(1)
				logger.Info("Warning: the router did not close the session within the stop's wait; it may keep stale paths until its hold or restart timer", "peer", ap.entry.addr, "wait", finishWait)
			}
			forgetPeerMetrics(ap.entry.addr.String())
		}()
	}
	wg.Wait()
	stopWires()
	if lis != nil {
		lis.Close()
	}
	stopServer(srv)
	logger.Info("BGP speaker stopped: paths withdrawn, sessions closed", "withdrawn", n, "sessionsConfirmed", confirmed.Load(), "sessionsUnconfirmed", unconfirmed.Load())
}

// stopServer stops GoBGP (its sessions are the relays', already closed), bounded.
func stopServer(srv interface{ Stop() }) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Stop()
	}()
	select {
	case <-done:
	case <-time.After(shutdownTimeout):
	}
}
