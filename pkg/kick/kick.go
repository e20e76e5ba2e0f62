// Package kick wakes a controller's loop on informer events. A Signal holds at most
// one pending wake-up, so a burst of events costs one pass, and poking never blocks
// an informer's event delivery.
package kick

import (
	"context"
	"time"

	"k8s.io/client-go/tools/cache"
)

// Signal is a wake-up with room for one pending poke.
type Signal chan struct{}

// New returns a Signal with nothing pending.
func New() Signal { return make(Signal, 1) }

// Poke leaves a wake-up pending, if none is.
func (s Signal) Poke() {
	select {
	case s <- struct{}{}:
	default:
	}
}

// Handler pokes s on every add, update and delete.
func (s Signal) Handler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.Poke() },
		UpdateFunc: func(_, _ any) { s.Poke() },
		DeleteFunc: func(any) { s.Poke() },
	}
}

// Loop calls pass at once, then after every wake-up on s and every interval (0:
// wake-ups only), until ctx ends.
func Loop(ctx context.Context, s <-chan struct{}, interval time.Duration, pass func()) {
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		pass()
		select {
		case <-ctx.Done():
			return
		case <-s:
		case <-tick:
		}
	}
}
