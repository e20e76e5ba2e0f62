package routes

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	operations = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "baremetal_ccm_routes", Name: "operations_total",
		Help:           "Kernel route changes by operation (add, replace, delete) and result (success, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation", "result"})
	programmed = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_routes", Name: "programmed",
		Help:           "Routes of ours in this host's kernel after the latest mirror reconcile.",
		StabilityLevel: metrics.ALPHA,
	})
	skipped = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_routes", Name: "skipped",
		Help:           "Pod-CIDR routes the latest mirror reconcile did not program, by reason (self, offlink).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	reconcileErrors = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem: "baremetal_ccm_routes", Name: "reconcile_errors_total",
		Help:           "Routes the mirror failed to add, replace or delete, or could not compute (no InternalIP of the family, conflicts).",
		StabilityLevel: metrics.ALPHA,
	})
	lastReconcile = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_routes", Name: "last_reconcile_duration_seconds",
		Help:           "Duration of the latest mirror reconcile.",
		StabilityLevel: metrics.ALPHA,
	})
	dumpRetries = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem: "baremetal_ccm_routes", Name: "dump_retries_total",
		Help:           "Route dumps retried because the kernel reported them interrupted.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

// RegisterMetrics registers the package's metrics with the legacy registry once.
// NewProvider and NewMirror call it.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(operations, programmed, skipped, reconcileErrors, lastReconcile, dumpRetries)
	})
}

func countOp(op string, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	operations.WithLabelValues(op, result).Inc()
}
