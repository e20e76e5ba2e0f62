// Package kick wakes a controller's loop on informer events. A Signal holds at most
// one pending wake-up, so a burst of events costs one pass, and poking never blocks
// an informer's event delivery. Watch runs such a loop over one informer; a Gate
// says when a first pass is done.
package kick

import (
	"context"
	"sync"
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

// Watch registers a wake-up on inf, waits for its cache, then runs Loop (pass at
// once, after every add, update or delete, and every interval) until ctx ends,
// removing its handler at the end. It returns an error only when the handler
// cannot be registered, and nil when ctx ends first.
func Watch(ctx context.Context, inf cache.SharedIndexInformer, interval time.Duration, pass func()) error {
	wake := New()
	reg, err := inf.AddEventHandler(wake.Handler())
	if err != nil {
		return err
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	Loop(ctx, wake, interval, pass)
	return nil
}

// Gate opens once and is waited for with a bound: a first read done.
type Gate struct {
	once sync.Once
	ch   chan struct{}
}

// NewGate returns a Gate not yet open.
func NewGate() *Gate { return &Gate{ch: make(chan struct{})} }

// Open opens g (again: nothing). A nil Gate ignores it.
func (g *Gate) Open() {
	if g != nil {
		g.once.Do(func() { close(g.ch) })
	}
}

// Wait waits up to timeout for g to open and reports whether it is.
func (g *Gate) Wait(ctx context.Context, timeout time.Duration) bool {
	select {
	case <-g.ch:
		return true
	default:
	}
	t := time.NewTimer(max(timeout, 0))
	defer t.Stop()
	select {
	case <-g.ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}
