package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	api "github.com/osrg/gobgp/v4/api"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bfd"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp/wire"
)

// checkHealth warns, once per change of state or cause, about each session that
// has been down for longer than its grace and about BFD that never came up on an
// established session, and ends the restarting phase once the speaker is ready.
func (s *Speaker) checkHealth() {
	ready, _ := s.Ready()
	bfdUp := map[netip.Addr]bfd.SessionState{}
	for _, b := range s.BFDSessions() {
		bfdUp[b.Peer] = b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ready && s.restarting {
		s.restarting = false
	}
	if s.srv == nil {
		return
	}
	now := time.Now()
	for a, ap := range s.active {
		h := ap.health
		e := ap.entry
		if ap.state == "established" {
			s.checkBFDLocked(ap, bfdUp[a], now)
			continue
		}
		if h == nil || h.downSince.IsZero() || now.Sub(h.downSince) < downGrace(durOf(e.cfg.ConnectRetry)) {
			continue
		}
		st := ap.wire.Status()
		state := st.State
		if state == wire.StateOpen {
			state = ap.state
		}
		// The relay alternates between connect and active while the router does
		// not answer: the key is the cause, and whether a connection is open.
		key := causeOf(st.LastError)
		if st.State == wire.StateOpen {
			key = state + "/" + key
		}
		if ap.bfdHeld {
			key = "bfd-held"
		}
		if key == h.warned {
			continue
		}
		h.warned = key
		msg := downWarning(state, st.LastError, e.password != "")
		if ap.bfdHeld {
			msg = "BGP session held down: BFD took it down and it stays down until the router's BFD session is up again. " +
				"Check the link to the router and the router's BFD (FRR: show bfd peers; BIRD: show bfd sessions)."
		}
		s.log.Info("Warning: "+msg, "peer", a, "asn", e.cfg.ASN,
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

// localRestarting reports whether GoBGP still defers the first UPDATEs of a
// restarting speaker to the peer (waiting for the router's End-of-RIB).
func (s *Speaker) localRestarting(alias netip.Addr) bool {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	restarting := false
	_ = srv.ListPeer(ctx, &api.ListPeerRequest{Address: alias.String()}, func(p *api.Peer) {
		if g := p.GracefulRestart; g != nil && g.LocalRestarting {
			restarting = true
		}
	})
	return restarting
}

// Peers returns the status of every configured peer (static and dynamic), sorted
// by address.
func (s *Speaker) Peers() []PeerStatus {
	type view struct {
		entry      peerEntry
		ap         *activePeer
		state      string
		upAt       time.Time
		bfdHeld    bool
		bfdProblem string
	}
	s.mu.Lock()
	running := s.srv != nil
	all := s.wantedLocked()
	views := make([]view, 0, len(all))
	for _, e := range sortedPeers(all) {
		v := view{entry: e, state: "stopped"}
		if ap, ok := s.active[e.addr]; ok && running {
			v.ap, v.state, v.upAt, v.bfdHeld, v.bfdProblem = ap, ap.state, ap.upAt, ap.bfdHeld, ap.bfdProblem
		}
		views = append(views, v)
	}
	s.mu.Unlock()
	out := make([]PeerStatus, 0, len(views))
	for _, v := range views {
		st := PeerStatus{Address: v.entry.addr, ASN: v.entry.cfg.ASN, Dynamic: v.entry.dynamic, State: v.state, BFDHeld: v.bfdHeld, BFDProblem: v.bfdProblem}
		if v.ap != nil {
			ws := v.ap.wire.Status()
			if ws.State != wire.StateOpen || st.State == "active" || st.State == "idle" {
				// No connection to the router, or GoBGP has not taken it yet: the
				// relay's state says where the session is.
				st.State = ws.State
				if ws.State == wire.StateOpen {
					st.State = "connect"
				}
			}
			for _, n := range ws.Sent {
				st.PrefixesSent += uint64(n)
			}
			if st.State == "established" {
				st.UpSince = v.upAt
				st.Ready = s.peerReady(v.ap, v.upAt)
			} else if ws.LastError != nil {
				st.LastError = ws.LastError.Error()
			}
		}
		out = append(out, st)
	}
	return out
}

// peerReady: established for readySettle, not waiting for the routers'
// End-of-RIB (restarting), and everything GoBGP wrote acknowledged by the router.
func (s *Speaker) peerReady(ap *activePeer, upAt time.Time) bool {
	if upAt.IsZero() || time.Since(upAt) < readySettle {
		return false
	}
	pending, ok := ap.wire.Pending()
	if !ok || pending > 0 {
		return false
	}
	return !s.localRestarting(ap.alias)
}
