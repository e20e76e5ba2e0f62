package bgp

import (
	"net/netip"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bfd"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp/wire"
)

// BFD (bgp peers[].bfd). The speaker runs one BFD session per peer that asks for
// it, from the session's local address (sourceAddress, else the one the BGP
// session came up from), so the router detects a dead host within the detection
// time (300 ms x 3 by default) instead of the BGP hold time.
//
// When the router's end goes away (detection time expired), the speaker ends that
// BGP session at once with a Cease "BFD Down" (RFC 9384) instead of waiting for
// its hold timer, and connects again only once the BFD session is Up again (at
// most bfdHoldMax later), so a link that is down does not make the session flap.
// When the router signals Down, the speaker first gives it neighborDownGrace to
// come up again. The router's deliberate AdminDown is no failure and resets
// nothing.
//
// A clean stop in mode withdraw sends BFD AdminDown after the Cease (Run stops BFD
// after the sessions); in mode retain BFD is left to the process exit like the
// BGP sessions: it falls silent without AdminDown.
//
// A BFD session that never came Up while its BGP session has been established for
// bfdWarnAfter (15 s) is a warning (checkBFDLocked) and shows in PeerStatus.BFDProblem:
// BFD then protects nothing.

// defaultBFDHoldMax bounds how long a session that BFD took down waits for BFD
// (Speaker.bfdHoldMax): a router that starts its BFD session only once BGP is up
// would otherwise never get one.
const defaultBFDHoldMax = 30 * time.Second

// defaultBFDWarnAfter is how long an established session's BFD may take to come
// up before the speaker warns.
const defaultBFDWarnAfter = 15 * time.Second

// wantBFDLocked: the peer's BFD session runs while its BGP session is
// established, while BFD holds it down, and from BFD coming up again until the
// BGP session is established again (bfdKeep). Not before a session is
// established: FRR re-creates its BFD session for a directly connected neighbor
// once the BGP session comes up (bound to the interface), and if that session was
// already up with ours, FRR ends the new BGP session with a Cease "BFD Down".
func wantBFDLocked(ap *activePeer) bool {
	return ap.entry.cfg.BFD != nil && (ap.state == "established" || ap.bfdHeld || ap.bfdKeep)
}

// syncBFDLocked runs the BFD sessions wantBFDLocked asks for (from sourceAddress,
// else the BGP session's local address) and removes the others (AdminDown).
func (s *Speaker) syncBFDLocked() {
	if s.bfd == nil {
		return
	}
	for a, ap := range s.active {
		if !wantBFDLocked(ap) {
			continue
		}
		b := ap.entry.cfg.BFD
		local := netip.Addr{}
		if src, err := netip.ParseAddr(ap.entry.cfg.SourceAddress); err == nil {
			local = src.Unmap()
		} else if ap.local.IsValid() {
			local = ap.local
		}
		if !local.IsValid() {
			continue
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
		if ap, ok := s.active[a]; !ok || !wantBFDLocked(ap) {
			s.bfd.RemovePeer(a)
			delete(s.bfdPeers, a)
		}
	}
}

// neighborDownGrace is how long a BFD session the router signaled down may take
// to come up again before the speaker ends the BGP session. A router that still
// sends BFD packets is reachable: FRR's bfdd, for one, signals Down once when a
// BGP session comes up (it re-arms BFD for it) and is Up again a second later;
// acting at once would reset every new session once. A router that lost its BFD
// for real takes its own BGP session down anyway.
const neighborDownGrace = 2500 * time.Millisecond

// onBFD handles a BFD state change (called by the BFD server, without its locks).
func (s *Speaker) onBFD(st bfd.SessionState) {
	s.mu.Lock()
	ap, ok := s.active[st.Peer]
	if _, ours := s.bfdPeers[st.Peer]; !ok || !ours || s.srv == nil {
		s.mu.Unlock()
		return
	}
	logger := s.log
	switch {
	case st.State == bfd.StateUp:
		ap.bfdEverUp = true
		ap.bfdProblem = ""
		ap.bfdDownAt = time.Time{}
		held := ap.bfdHeld
		if held {
			ap.bfdHeld, ap.bfdKeep = false, true
			ap.bfdGen++ // the hold's timer releases nothing any more
			gen := ap.bfdGen
			time.AfterFunc(s.bfdHoldMax, func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				if ap.bfdKeep && ap.bfdGen == gen {
					ap.bfdKeep = false
					s.syncBFDLocked()
				}
			})
		}
		s.mu.Unlock()
		if held {
			logger.Info("BFD session up again: connecting the BGP session", "peer", st.Peer)
			ap.wire.SetGate(true)
		}
		return
	case st.State == bfd.StateDown && st.PreviousState == bfd.StateUp && st.RemoteState != bfd.StateAdminDown:
		// A failure: not the router's deliberate AdminDown, not ours.
	default:
		s.mu.Unlock()
		return
	}
	if ap.state != "established" {
		// Not established (BFD came up and the session is being connected): hold
		// again, as long as for any failure.
		s.holdForBFDLocked(ap, st.Peer)
		s.mu.Unlock()
		return
	}
	if st.Diag == bfd.DiagNeighborSignaledDown {
		down := time.Now()
		ap.bfdDownAt = down
		s.mu.Unlock()
		logger.V(2).Info("The router signaled BFD down; waiting for it to come up again before ending the BGP session", "peer", st.Peer, "grace", neighborDownGrace)
		time.AfterFunc(neighborDownGrace, func() {
			s.mu.Lock()
			still := s.active[st.Peer] == ap && ap.bfdDownAt == down && s.srv != nil
			s.mu.Unlock()
			if still {
				s.bfdDown(ap, st)
			}
		})
		return
	}
	s.mu.Unlock()
	s.bfdDown(ap, st)
}

// bfdDown ends the peer's BGP session with a Cease "BFD Down" and holds
// connecting until BFD is up again, at most bfdHoldMax.
func (s *Speaker) bfdDown(ap *activePeer, st bfd.SessionState) {
	s.mu.Lock()
	s.holdForBFDLocked(ap, st.Peer)
	logger := s.log
	s.mu.Unlock()
	logger.Info("BFD session down: ending the BGP session until BFD is up again", "peer", st.Peer, "diag", st.Diag.String())
	ap.wire.Reset(wire.Cease(wire.SubCeaseBFDDown, ""), false)
}

// holdForBFDLocked holds the peer's connecting until BFD is up again or
// bfdHoldMax passed. Each hold has its own generation: the timer of an earlier
// hold (released by BFD coming up, then held again) releases nothing.
func (s *Speaker) holdForBFDLocked(ap *activePeer, peer netip.Addr) {
	ap.bfdHeld, ap.bfdKeep = true, false
	ap.bfdGen++
	gen := ap.bfdGen
	ap.wire.SetGate(false)
	logger := s.log
	time.AfterFunc(s.bfdHoldMax, func() {
		s.mu.Lock()
		still := s.active[peer] == ap && ap.bfdHeld && ap.bfdGen == gen
		if still {
			ap.bfdHeld = false
			s.syncBFDLocked()
		}
		s.mu.Unlock()
		if still {
			logger.Info("BFD still down: connecting the BGP session anyway", "peer", peer, "after", s.bfdHoldMax)
			ap.wire.SetGate(true)
		}
	})
}

// checkBFDLocked warns once when an established session's BFD has not come up
// for bfdWarnAfter, naming the likely causes.
func (s *Speaker) checkBFDLocked(ap *activePeer, st bfd.SessionState, now time.Time) {
	if ap.entry.cfg.BFD == nil || ap.bfdEverUp || ap.upAt.IsZero() || now.Sub(ap.upAt) < s.bfdWarnAfter || ap.bfdProblem != "" {
		return
	}
	switch {
	case st.Err != nil:
		ap.bfdProblem = "BFD cannot open its sockets: " + st.Err.Error()
	case st.RemoteDiscriminator == 0:
		ap.bfdProblem = "BFD is not up: the router sends no BFD packets to this host. Likely causes: BFD is not enabled for this neighbor on the router " +
			"(FRR: neighbor X bfd; BIRD: bfd on), the router runs multihop BFD (RFC 5883, UDP 4784) where this speaker runs single-hop (RFC 5881, UDP 3784), " +
			"or UDP 3784/3785 is filtered"
	default:
		ap.bfdProblem = "BFD is not up although the router answers (state " + st.State.String() + ", router " + st.RemoteState.String() +
			"): check the router's BFD timers and that it expects no authentication"
	}
	s.log.Info("Warning: "+ap.bfdProblem+"; until it is up, BFD protects nothing and a dead host is noticed only after the BGP hold time", "peer", ap.entry.addr)
}

// BFDSessions returns the BFD sessions' states.
func (s *Speaker) BFDSessions() []bfd.SessionState {
	if s.bfd == nil {
		return nil
	}
	return s.bfd.Sessions()
}
