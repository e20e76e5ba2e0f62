package bmc

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	requests = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "baremetal_ccm_bmc", Name: "requests_total",
		Help:           "Power-state requests by protocol, operation and result (success, error, unknown, cached, backoff).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"protocol", "operation", "result"})
	duration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: "baremetal_ccm_bmc", Name: "request_duration_seconds",
		Help:           "Latency of BMC calls.",
		Buckets:        []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		StabilityLevel: metrics.ALPHA,
	}, []string{"protocol", "operation"})
	unreachable = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_bmc", Name: "unreachable",
		Help:           "BMCs whose latest call failed.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(requests, duration, unreachable) })
}
