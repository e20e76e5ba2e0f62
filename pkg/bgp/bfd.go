package bgp

import (
	"context"
	"net/netip"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bfd"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// BFD (bgp peers[].bfd). The speaker runs one BFD session per peer that asks for
// it, from the session's local address (sourceAddress, else the one the BGP
// session came up from), so the router detects a dead host within the detection
// time (300 ms x 3 by default) instead of the BGP hold time. When the router's end
// goes away (detection time expired, or the router signaled Down), the speaker
// resets that BGP session at once instead of waiting for its hold timer. A clean
// stop sends BFD AdminDown after the Cease (mode withdraw), or before leaving the
// sessions to the process exit (mode retain), so the router never takes a
// deliberate stop for a failure.

// syncBFDLocked adds the BFD session of a peer with bfd configured once its local
// address is known, and removes the sessions of peers that no longer need one.
func (s *Speaker) syncBFDLocked() {
	if s.bfd == nil {
		return
	}
	for a, e := range s.active {
		b := e.cfg.BFD
		if b == nil {
			continue
		}
		local := netip.Addr{}
		if src, err := netip.ParseAddr(e.cfg.SourceAddress); err == nil {
			local = src.Unmap()
		} else if l, ok := s.sessionLocal[a]; ok {
			local = l
		}
		if !local.IsValid() {
			continue // added when the BGP session comes up and shows its local address
		}
		c := bfd.PeerConfig{Peer: a, Local: local, DesiredMinTx: durOf(b.MinTx), RequiredMinRx: durOf(b.MinRx), DetectMult: uint8(b.Multiplier)}
		if have, ok := s.bfdPeers[a]; ok && have == c {
			continue
		}
		if err := s.bfd.AddPeer(c); err != nil {
			s.log.Error(err, "Starting BFD with the peer failed", "peer", a)
			continue
		}
		s.bfdPeers[a] = c
	}
	for a := range s.bfdPeers {
		if e, ok := s.active[a]; !ok || e.cfg.BFD == nil {
			s.bfd.RemovePeer(a)
			delete(s.bfdPeers, a)
		}
	}
}

// onBFD handles a BFD state change (called by the BFD server, without its locks).
func (s *Speaker) onBFD(st bfd.SessionState) {
	if st.State != bfd.StateDown || st.PreviousState != bfd.StateUp || st.RemoteState == bfd.StateAdminDown {
		return // only a failure: not the router's deliberate AdminDown, not ours
	}
	s.mu.Lock()
	srv, logger := s.srv, s.log
	_, ours := s.bfdPeers[st.Peer]
	up := s.established[st.Peer]
	s.mu.Unlock()
	if srv == nil || !ours || !up {
		return // a session that is down already has nothing to reset
	}
	logger.Info("BFD session down: resetting the BGP session", "peer", st.Peer, "diag", st.Diag.String())
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: st.Peer.String(), Communication: "BFD down"}); err != nil {
		logger.Error(err, "Resetting the BGP session after BFD down failed", "peer", st.Peer)
	}
}

// AppliedPaths returns how many paths the speaker has announced (0 when stopped).
func (s *Speaker) AppliedPaths() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return 0
	}
	return len(s.rib.applied)
}

// BFDSessions returns the BFD sessions' states.
func (s *Speaker) BFDSessions() []bfd.SessionState {
	if s.bfd == nil {
		return nil
	}
	return s.bfd.Sessions()
}

func bfdEqual(a, b *config.BFDConfig) bool {
	if a == nil || b == nil {
		return a == b
	}
	return durEq(a.MinTx, b.MinTx) && durEq(a.MinRx, b.MinRx) && a.Multiplier == b.Multiplier
}
