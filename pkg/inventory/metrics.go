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
	settlingGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "settling",
		Help:           "1 while a document that would report hosts gone waits to be seen unchanged for deletionGuard.settleTime.",
		StabilityLevel: metrics.ALPHA,
	})
	windowGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "removals_in_window",
		Help:           "Host removals accepted within the limits during the deletion guard's window.",
		StabilityLevel: metrics.ALPHA,
	})
	powerUsedGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "baremetal_ccm", Subsystem: "power_budget", Name: "used_hosts",
		Help:           "Hosts granted a power-based action (deleteAfter, out-of-service) within instances.powerOffBudget.window.",
		StabilityLevel: metrics.ALPHA,
	})
	powerWaitingGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "baremetal_ccm", Subsystem: "power_budget", Name: "waiting_hosts",
		Help:           "Hosts whose power-based action waits for an acknowledgement because the power-off budget is used up.",
		StabilityLevel: metrics.ALPHA,
	})
	stormGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "baremetal_ccm", Subsystem: "remediation", Name: "storm",
		Help:           "1 while a remediation storm (more unhealthy Nodes than instances.maxUnhealthy) or its cooldown holds every power-based action; on the leader.",
		StabilityLevel: metrics.ALPHA,
	})
	unhealthyGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "baremetal_ccm", Subsystem: "remediation", Name: "unhealthy_nodes",
		Help:           "Initialized Nodes of inventory hosts that are not Ready and not in maintenance, counted against instances.maxUnhealthy; on the leader.",
		StabilityLevel: metrics.ALPHA,
	})
	maxUnhealthyGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "baremetal_ccm", Subsystem: "remediation", Name: "max_unhealthy_nodes",
		Help:           "instances.maxUnhealthy resolved against the initialized Nodes of inventory hosts; on the leader.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(reloads, loadDuration, hostsGauge, lastSuccess, lastReloadFailed, guardTripped, guardHeld,
			settlingGauge, windowGauge, powerUsedGauge, powerWaitingGauge, stormGauge, unhealthyGauge, maxUnhealthyGauge)
	})
}
