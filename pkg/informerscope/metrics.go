package informerscope

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var handlers = metrics.NewGauge(&metrics.GaugeOpts{
	Subsystem: "baremetal_ccm", Name: "informer_event_handlers",
	Help:           "Event handlers registered on the process's shared informers (the agent's and the current leadership term's): flat across terms unless a term leaves handlers behind.",
	StabilityLevel: metrics.ALPHA,
})

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(handlers) })
}
