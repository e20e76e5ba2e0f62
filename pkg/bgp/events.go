package bgp

import (
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// enqueueEvent is GoBGP's watcher: it only queues the event (never blocks).
func (s *Speaker) enqueueEvent(ev *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
	s.evMu.Lock()
	s.evQueue = append(s.evQueue, ev)
	s.evMu.Unlock()
	select {
	case s.evSignal <- struct{}{}:
	default:
	}
}

// handleEvents handles the queued events in order.
func (s *Speaker) handleEvents() {
	s.evMu.Lock()
	q := s.evQueue
	s.evQueue = nil
	s.evMu.Unlock()
	for _, ev := range q {
		s.onEvent(ev)
	}
}

// onEvent handles GoBGP's peer state events (GoBGP names the peer by its alias):
// state, metrics and log lines.
func (s *Speaker) onEvent(ev *apiutil.WatchEventMessage_PeerEvent) {
	if ev == nil || ev.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	state := stateName(ev.Peer.State.SessionState)
	alias := ev.Peer.State.NeighborAddress.Unmap()
	s.mu.Lock()
	logger := s.log
	addr, ok := s.aliases[alias]
	ap := s.active[addr]
	if !ok || ap == nil || ap.alias != alias || s.srv == nil {
		s.mu.Unlock()
		return
	}
	was := ap.state == "established"
	ap.state = state
	switch {
	case state == "established" && !was:
		ap.upAt = time.Now()
		ap.health = &peerHealth{}
		ap.bfdKeep = false
		s.syncBFDLocked()
	case state != "established" && was:
		ap.upAt = time.Time{}
		ap.health = &peerHealth{downSince: time.Now()}
		s.syncBFDLocked()
	}
	local := ap.local
	asn := ap.entry.cfg.ASN
	s.mu.Unlock()
	peer := addr.String()
	stateChanges.WithLabelValues(peer, state).Inc()
	up := 0.0
	if state == "established" {
		up = 1
	}
	sessionUp.WithLabelValues(peer).Set(up)
	if state == "established" || was {
		kv := []any{"peer", addr, "state", state, "asn", asn}
		if local.IsValid() {
			kv = append(kv, "localAddress", local)
		}
		if r := ev.Peer.State.DisconnectMessage; r != "" && state != "established" {
			kv = append(kv, "reason", r)
		}
		logger.Info("BGP session state changed", kv...)
	} else {
		logger.V(2).Info("BGP session state changed", "peer", addr, "state", state)
	}
}

func stateName(st bgp.FSMState) string {
	switch st {
	case bgp.BGP_FSM_IDLE:
		return "idle"
	case bgp.BGP_FSM_CONNECT:
		return "connect"
	case bgp.BGP_FSM_ACTIVE:
		return "active"
	case bgp.BGP_FSM_OPENSENT:
		return "opensent"
	case bgp.BGP_FSM_OPENCONFIRM:
		return "openconfirm"
	case bgp.BGP_FSM_ESTABLISHED:
		return "established"
	default:
		return "unknown"
	}
}
