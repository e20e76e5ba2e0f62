package agent

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
)

// drains remembers, per draining Node, when this agent first saw it drain (the
// start of a drain the API keeps no time for: a plain cordon with onCordon), and
// holds the timer of the next pass that withdraws paths whose time ran out. It is
// in-memory: after a restart the time of a plain cordon counts again from the
// restart, which keeps paths longer, never shorter.
type drains struct {
	mu        sync.Mutex
	firstSeen map[string]time.Time
	logged    string
	timer     *time.Timer
}

// gracefulShutdown returns this pass's lb.GracefulShutdown (nil without
// bgp.gracefulShutdown), logging when the set of draining Nodes changes.
func (a *Agent) gracefulShutdown(ctx context.Context, nodes []*v1.Node) *lb.GracefulShutdown {
	cfg := a.o.Config.BGP.GracefulShutdown
	if cfg == nil {
		return nil
	}
	now := a.o.Clock()
	d := &a.drains
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.firstSeen == nil {
		d.firstSeen = map[string]time.Time{}
	}
	seen := make(map[string]bool, len(d.firstSeen))
	var names []string
	for _, n := range nodes {
		if _, ok := lb.Draining(n, cfg.OnCordon); ok {
			seen[n.Name] = true
			names = append(names, n.Name)
			if _, known := d.firstSeen[n.Name]; !known {
				d.firstSeen[n.Name] = now
			}
		}
	}
	for name := range d.firstSeen {
		if !seen[name] {
			delete(d.firstSeen, name)
		}
	}
	firstSeen := make(map[string]time.Time, len(d.firstSeen))
	for k, v := range d.firstSeen {
		firstSeen[k] = v
	}
	sort.Strings(names)
	if msg := strings.Join(names, ","); msg != d.logged {
		d.logged = msg
		klog.FromContext(ctx).Info("Draining Nodes changed: their paths carry GRACEFUL_SHUTDOWN until withdrawn", "draining", names, "time", cfg.Time.Duration, "onCordon", cfg.OnCordon)
	}
	return &lb.GracefulShutdown{
		Draining: func(n *v1.Node) (time.Time, bool) {
			since, ok := lb.Draining(n, cfg.OnCordon)
			if ok && since.IsZero() {
				since = firstSeen[n.Name]
				if since.IsZero() {
					since = now
				}
			}
			return since, ok
		},
		Time: cfg.Time.Duration,
		Now:  now,
	}
}

// wakeAt runs kick after d (plus a margin), replacing any earlier timer.
func (d *drains) wakeAt(after time.Duration, kick func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timer = time.AfterFunc(after+10*time.Millisecond, kick)
}

func (d *drains) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
	}
}
