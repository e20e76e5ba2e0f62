package controller

import (
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// ownedCondition reports whether this CCM owns a Service condition type (its
// prefix): the controller patches and removes only those.
func ownedCondition(t string) bool { return strings.HasPrefix(t, "baremetal-ccm.io/") }

// setCondition sets c in conds as meta.SetStatusCondition does (the transition time
// moves only when the status changes), at now.
func setCondition(conds *[]metav1.Condition, c metav1.Condition, now time.Time) {
	c.LastTransitionTime = metav1.NewTime(now)
	meta.SetStatusCondition(conds, c)
}

// conditionsPatch returns the strategic-merge list for status.conditions that turns
// old's owned conditions into want's: changed or new ones in full, removed ones as
// delete directives. Conditions of other types are not named, so others keep theirs.
func conditionsPatch(old, want []metav1.Condition) []any {
	var out []any
	for _, w := range want {
		if !ownedCondition(w.Type) {
			continue
		}
		o := meta.FindStatusCondition(old, w.Type)
		if o == nil || o.Status != w.Status || o.Reason != w.Reason || o.Message != w.Message || o.ObservedGeneration != w.ObservedGeneration {
			out = append(out, w)
		}
	}
	for _, o := range old {
		if ownedCondition(o.Type) && meta.FindStatusCondition(want, o.Type) == nil {
			out = append(out, map[string]any{"$patch": "delete", "type": o.Type})
		}
	}
	return out
}

var (
	pendingServices = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_lb", Name: "services_pending",
		Help:           "LoadBalancer Services this CCM serves that have no address yet (on the leader; 0 elsewhere).",
		StabilityLevel: metrics.ALPHA,
	})
	oldestPending = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: "baremetal_ccm_lb", Name: "oldest_pending_service_seconds",
		Help:           "How long the oldest LoadBalancer Service without an address has waited, in seconds (0 if none; on the leader).",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

// pendingSet tracks the Services waiting for an address, for the metrics.
type pendingSet struct {
	mu    sync.Mutex
	since map[string]time.Time
}

func newPendingSet() *pendingSet {
	registerOnce.Do(func() { legacyregistry.MustRegister(pendingServices, oldestPending) })
	return &pendingSet{since: map[string]time.Time{}}
}

func (p *pendingSet) waiting(key string, since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.since[key]; !ok {
		p.since[key] = since
	}
}

func (p *pendingSet) done(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.since, key)
}

// keys returns the waiting Services.
func (p *pendingSet) keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.since))
	for k := range p.since {
		out = append(out, k)
	}
	return out
}

// publish sets the gauges.
func (p *pendingSet) publish(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	oldest := 0.0
	for _, s := range p.since {
		oldest = max(oldest, now.Sub(s).Seconds())
	}
	pendingServices.Set(float64(len(p.since)))
	oldestPending.Set(oldest)
}

// reset forgets every Service (this replica stopped leading) and zeroes the gauges.
func (p *pendingSet) reset() {
	p.mu.Lock()
	p.since = map[string]time.Time{}
	p.mu.Unlock()
	p.publish(time.Now())
}
