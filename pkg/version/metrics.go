package version

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	buildInfo = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "baremetal_ccm", Name: "build_info",
		Help:           "Always 1; labels give the baremetal-ccm version and commit.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"version", "commit"})
	registerOnce sync.Once
)

// RegisterMetrics publishes baremetal_ccm_build_info on the process's /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(buildInfo)
		buildInfo.WithLabelValues(Version, Commit).Set(1)
	})
}
