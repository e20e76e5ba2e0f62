package bfd

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Reasons a received packet is dropped (the "reason" label).
const (
	dropMalformed  = "malformed"       // fails the checks of RFC 5880 section 6.8.6 before the session lookup
	dropTTL        = "ttl"             // TTL or hop limit other than 255 (RFC 5881 section 5)
	dropAuth       = "auth"            // authentication present; no session uses it
	dropNoDiscr    = "no_discr"        // Your Discriminator 0 in a packet that is not Down or AdminDown
	dropNoSession  = "unknown_session" // no session for the discriminator or source
	dropNotStarted = "not_ready"       // the session's sending socket is not open yet
)

var (
	sessionUp = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_bfd", Name: "session_up",
		Help:           "1 when the BFD session to the peer is Up, else 0.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer"})
	stateChanges = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "baremetal_ccm_bfd", Name: "session_state_changes_total",
		Help:           "BFD session state transitions, by peer and new state (admin_down, down, init, up).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer", "state"})
	droppedPackets = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "baremetal_ccm_bfd", Name: "received_packets_dropped_total",
		Help:           "Received BFD control packets discarded, by reason (malformed, ttl, auth, no_discr, unknown_session, not_ready).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(sessionUp, stateChanges, droppedPackets) })
}
