package inventory

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const subsystem = "baremetal_ccm_inventory"

var (
	reloads = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: subsystem, Name: "reloads_total",
		Help:           "Inventory reload attempts by result: loaded, unchanged, guarded (held by the deletion guard) or error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	loadDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem: subsystem, Name: "reload_duration_seconds",
		Help:           "Time to fetch, parse and apply the inventory.",
		Buckets:        metrics.ExponentialBuckets(0.001, 4, 8),
		StabilityLevel: metrics.ALPHA,
	})
	hostsGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "hosts",
		Help:           "Hosts in the inventory in use, by state.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})
	lastSuccess = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "last_successful_reload_timestamp_seconds",
		Help:           "Unix time of the last reload that fetched and parsed the inventory.",
		StabilityLevel: metrics.ALPHA,
	})
	lastReloadFailed = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "last_reload_failed",
		Help:           "1 while the latest reload failed (the last good inventory is served, no host is reported gone).",
		StabilityLevel: metrics.ALPHA,
	})
	guardTripped = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "deletion_guard_tripped",
		Help:           "1 while the deletion guard holds an inventory back and no host is reported gone.",
		StabilityLevel: metrics.ALPHA,
	})
	guardHeld = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "deletion_guard_held_hosts",
		Help:           "Hosts the held inventory would report gone.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(reloads, loadDuration, hostsGauge, lastSuccess, lastReloadFailed, guardTripped, guardHeld)
	})
}
