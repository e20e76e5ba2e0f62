package bgp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bfd"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp/wire"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// bfdReviewSpeaker is a Speaker reduced to what onBFD touches: one active peer
// with BFD configured whose relay is not started (its gate is what we observe).
// s.bfd is nil, so syncBFDLocked does nothing; s.srv is a GoBGP server that is
// never started (onBFD only checks it is set).
func bfdReviewSpeaker(t *testing.T) (*Speaker, *activePeer, netip.Addr) {
	t.Helper()
	peer := netip.MustParseAddr("192.0.2.1")
	e := peerEntry{cfg: config.BGPPeer{Address: peer.String(), ASN: 65001, BFD: &config.BFDConfig{}}, addr: peer}
	ap := &activePeer{entry: e, alias: netip.MustParseAddr("127.77.0.1"), state: "established", health: &peerHealth{}}
	ap.wire = wire.NewPeer(wire.Config{Remote: netip.AddrPortFrom(peer, 179)}, wire.Hooks{}, logr.Discard())
	s := &Speaker{
		active:   map[netip.Addr]*activePeer{peer: ap},
		aliases:  map[netip.Addr]netip.Addr{ap.alias: peer},
		bfdPeers: map[netip.Addr]bfd.PeerConfig{peer: {Peer: peer}},
		srv:      server.NewBgpServer(),
		log:      logr.Discard(),
		static:   map[netip.Addr]peerEntry{},
		dynamic:  map[netip.Addr]peerEntry{},

		bfdHoldMax: 3 * time.Second,
	}
	return s, ap, peer
}

func bfdFailed(peer netip.Addr) bfd.SessionState {
	return bfd.SessionState{Peer: peer, State: bfd.StateDown, PreviousState: bfd.StateUp, RemoteState: bfd.StateDown, Diag: bfd.DiagControlDetectionExpired}
}

func bfdUp(peer netip.Addr) bfd.SessionState {
	return bfd.SessionState{Peer: peer, State: bfd.StateUp, PreviousState: bfd.StateDown, RemoteState: bfd.StateUp}
}

func gated(s *Speaker, ap *activePeer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ap.wire.Status().Gated
}

// TestReviewBFDDownWhileConnectingHoldsAtMost30s: BFD came up again after holding
// a session down (bfdKeep: the relay is connecting, not established yet) and
// fails again before the BGP session is established. onBFD's "not established"
// branch holds the session (gate closed, bfdHeld) but arms no bfdHoldMax timer,
// so if the router's BFD does not come back (a router that runs BFD only while
// its BGP session is up, the case bfdHoldMax exists for) the BGP session stays
// down for good instead of at most 30 s.
func TestReviewBFDDownWhileConnectingHoldsAtMost30s(t *testing.T) {
	t.Parallel()
	s, ap, peer := bfdReviewSpeaker(t)
	// BFD came up after a hold: gate open, bfdKeep, the relay is connecting.
	s.mu.Lock()
	ap.state, ap.bfdKeep = "active", true
	s.mu.Unlock()
	s.onBFD(bfdFailed(peer))
	if !gated(s, ap) {
		t.Fatal("BFD down while connecting did not hold the session")
	}
	time.Sleep(s.bfdHoldMax + time.Second)
	s.mu.Lock()
	held := ap.bfdHeld
	s.mu.Unlock()
	if gated(s, ap) || held {
		t.Errorf("BGP session still held %v after BFD went down while connecting (bfdHeld %v): the hold is not bounded by bfdHoldMax", s.bfdHoldMax+time.Second, held)
	}
}

// TestReviewBFDFlapHoldsUntilBFDUp: BFD down (hold, timer A for 30 s), up 1 s
// later (session reconnects and is established), down again 10 s later (hold,
// timer B). Timer A still fires at 30 s, finds bfdHeld set (by the second
// failure) and opens the gate while BFD is down: the second hold lasts ~19 s,
// not "until BFD is up (at most 30 s)".
func TestReviewBFDFlapHoldsUntilBFDUp(t *testing.T) {
	t.Parallel()
	s, ap, peer := bfdReviewSpeaker(t)
	s.onBFD(bfdFailed(peer)) // t=0: established, BFD fails: hold, timer A at 30 s
	if !gated(s, ap) {
		t.Fatal("BFD down did not hold the session")
	}
	time.Sleep(s.bfdHoldMax / 10)
	s.onBFD(bfdUp(peer)) // up again: gate open
	if gated(s, ap) {
		t.Fatal("BFD up did not release the session")
	}
	s.mu.Lock()
	ap.state = "established" // the session came back
	s.mu.Unlock()
	time.Sleep(s.bfdHoldMax / 3)
	s.onBFD(bfdFailed(peer)) // fails again: hold, with a timer of its own
	secondDown := time.Now()
	s.mu.Lock()
	ap.state = "idle"
	s.mu.Unlock()
	for time.Since(secondDown) < s.bfdHoldMax*8/10 {
		if !gated(s, ap) {
			t.Fatalf("the hold after the second BFD failure ended after %v while BFD is still down (want until BFD is up, at most %v)",
				time.Since(secondDown).Round(100*time.Millisecond), s.bfdHoldMax)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
