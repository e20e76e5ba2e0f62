package bgp

import (
	"fmt"
	"net/netip"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// countDownLocked tells the log adapter whether any session is down (it then lets
// GoBGP's connection errors through, see diagnose.go).
func (s *Speaker) countDownLocked() {
	n := 0
	for a := range s.active {
		if !s.established[a] {
			n++
		}
	}
	s.connErrs.down.Store(int32(n))
}

// checkHealth warns, once per change of state or cause, about each session that
// has been down for longer than its grace, and ends the restarting phase once the
// speaker is ready.
func (s *Speaker) checkHealth() {
	ready, _ := s.Ready()
	s.mu.Lock()
	defer s.mu.Unlock()
	if ready && s.restarting {
		s.restarting = false
	}
	if s.srv == nil {
		return
	}
	now := time.Now()
	for a, e := range s.active {
		h := s.health[a]
		if h == nil || s.established[a] || h.downSince.IsZero() || now.Sub(h.downSince) < downGrace(durOf(e.cfg.ConnectRetry)) {
			continue
		}
		err := s.connErrs.get(a)
		key := s.state[a] + "/" + causeOf(err)
		if key == h.warned {
			continue
		}
		h.warned = key
		s.log.Info("Warning: "+downWarning(s.state[a], err, e.password != ""), "peer", a, "asn", e.cfg.ASN,
			"down", now.Sub(h.downSince).Round(time.Second).String(), "sourceAddress", e.cfg.SourceAddress)
	}
}

// readySettle is how long after a session is established its first UPDATEs are
// surely written: GoBGP queues them when the session comes up.
const readySettle = 250 * time.Millisecond

// Ready reports whether every session is open, established and its first UPDATEs
// (every path, then End-of-RIB; for a restarting speaker after the routers'
// End-of-RIB) are acknowledged by the router's TCP, so this host's paths are at
// every router. Not ready, it names the peers that are not. A speaker without
// peers is ready once its sessions may open (Synced, with DeferSessions).
func (s *Speaker) Ready() (bool, []string) {
	s.mu.Lock()
	open := s.openLocked()
	s.mu.Unlock()
	if !open {
		return false, []string{"BGP sessions not opened yet (waiting for the first full sync of the announcements)"}
	}
	var waiting []string
	for _, st := range s.Peers() {
		if !st.Ready {
			msg := fmt.Sprintf("%s: %s", st.Address, st.State)
			if st.LastError != "" {
				msg += " (" + st.LastError + ")"
			}
			waiting = append(waiting, msg)
		}
	}
	return len(waiting) == 0, waiting
}

// peerReady: established for readySettle, not waiting for the routers'
// End-of-RIB (restarting), and nothing written on the connection unacknowledged.
func peerReady(p *api.Peer, upAt time.Time, c conn, prober tcpProber) bool {
	if p.State == nil || p.State.SessionState != api.PeerState_ESTABLISHED || upAt.IsZero() || time.Since(upAt) < readySettle {
		return false
	}
	if g := p.GracefulRestart; g != nil && g.LocalRestarting {
		return false
	}
	if !c.local.IsValid() {
		return false
	}
	state, unacked, found, err := prober.probe(c.local, c.remote)
	if err != nil {
		return time.Since(upAt) >= 2*time.Second // no sock_diag: a settled session
	}
	return found && state == tcpEstablished && unacked == 0
}

// negotiated returns the unicast families the peer's OPEN offered (IPv4 unicast
// when it sent no multiprotocol capability, RFC 4760) and whether it offered
// graceful restart.
func negotiated(p *api.Peer) (fams map[string]bool, gr bool) {
	fams = map[string]bool{}
	if p.State == nil {
		return fams, false
	}
	caps, err := apiutil.UnmarshalCapabilities(p.State.RemoteCap)
	if err != nil {
		return fams, false
	}
	mp := false
	for _, c := range caps {
		switch c := c.(type) {
		case *bgp.CapMultiProtocol:
			mp = true
			switch c.CapValue {
			case bgp.RF_IPv4_UC:
				fams["ipv4"] = true
			case bgp.RF_IPv6_UC:
				fams["ipv6"] = true
			}
		case *bgp.CapGracefulRestart:
			gr = true
		}
	}
	if !mp {
		fams["ipv4"] = true
	}
	return fams, gr
}

// advertised is what the peer has been sent, per family: GoBGP's adj-RIB-out count
// less its End-of-RIB placeholder (counted once per family when graceful restart is
// negotiated); families the peer did not negotiate are absent.
func advertised(p *api.Peer) map[string]uint64 {
	out := map[string]uint64{}
	if p.State == nil || p.State.SessionState != api.PeerState_ESTABLISHED {
		return out
	}
	fams, peerGR := negotiated(p)
	localGR := p.GracefulRestart != nil && p.GracefulRestart.Enabled
	for _, af := range p.AfiSafis {
		if af.State == nil || af.State.Family == nil {
			continue
		}
		fam := "ipv4"
		if af.State.Family.Afi == api.Family_AFI_IP6 {
			fam = "ipv6"
		}
		if !fams[fam] {
			continue
		}
		n := af.State.Advertised
		if localGR && peerGR && n > 0 {
			n-- // the End-of-RIB marker
		}
		out[fam] = n
	}
	return out
}

func peerAddr(p *api.Peer) (netip.Addr, bool) {
	if p.State == nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(p.State.NeighborAddress)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}
