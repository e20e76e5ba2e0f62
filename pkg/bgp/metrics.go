package bgp

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	sessionUp = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_bgp", Name: "session_up",
		Help:           "1 when the BGP session to the peer is established, else 0.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer"})
	prefixesAnnounced = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_bgp", Name: "prefixes_announced",
		Help:           "Paths advertised to the peer (adj-RIB-out), by address family (ipv4, ipv6).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer", "family"})
	stateChanges = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "baremetal_ccm_bgp", Name: "session_state_changes_total",
		Help:           "BGP session state transitions, by peer and new state.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer", "state"})
	desiredPaths = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_bgp", Name: "paths",
		Help:           "Paths the speaker wants announced, by source (lb, podcidr, ...).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(sessionUp, prefixesAnnounced, stateChanges, desiredPaths) })
}

func forgetPeerMetrics(peer string) {
	sessionUp.DeleteLabelValues(peer)
	prefixesAnnounced.DeleteLabelValues(peer, "ipv4")
	prefixesAnnounced.DeleteLabelValues(peer, "ipv6")
}
