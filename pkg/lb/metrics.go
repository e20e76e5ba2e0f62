package lb

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
)

var (
	poolSize = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_lb", Name: "pool_addresses",
		Help:           "Addresses in each pool and family (IPv6 pools are capped at 2^64-1).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"pool", "family"})
	poolUsed = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_lb", Name: "pool_addresses_in_use",
		Help:           "Addresses assigned to Services in each pool and family.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"pool", "family"})
	outOfPool = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_lb", Name: "service_ips_outside_pools",
		Help:           "IPs a Service holds that no configured pool contains any more (left assigned; see the LoadBalancerIPOutsidePools event).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "service"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(poolSize, poolUsed, outOfPool) })
}

func updateUsage(a *ipam.Allocator) {
	for _, u := range a.Usage() {
		poolSize.WithLabelValues(u.Pool, string(u.Family)).Set(float64(u.Size))
		poolUsed.WithLabelValues(u.Pool, string(u.Family)).Set(float64(u.Used))
	}
}
