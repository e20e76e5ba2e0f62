package provider

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// Fence tells whether this replica still holds the leader's Lease
// (lbcontroller.LeaseFence): client-go's leader election does not fence, so a leader
// paused past its Lease believes it leads until its next renewal fails.
type Fence interface {
	Check(ctx context.Context) error
}

// SetFence makes each leadership term ask a fence of its own, made by newFence when
// SetInformers starts the term's deletion guard, before the guard saves its state or
// grants a power-based action (the first check, at the term's start, takes note of the
// Lease just acquired). Call it before the first term; without it only the term's end
// stops the guard.
func (c *Cloud) SetFence(newFence func() Fence) { c.newFence = newFence }

// term is one leadership term: its context, which ends when the stop channel given to
// Initialize closes, and the goroutines it started, which WaitTermEnd joins.
type term struct {
	n      int
	ctx    context.Context
	logger klog.Logger
	wg     sync.WaitGroup
}

// beginTerm starts the term that lasts until stop closes.
func (c *Cloud) beginTerm(stop <-chan struct{}) *term {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.terms++
	logger := klog.Background().WithValues("term", c.terms)
	t := &term{n: c.terms, logger: logger, ctx: klog.NewContext(wait.ContextForChannel(stop), logger)}
	c.term = t
	return t
}

// currentTerm returns the term that has not ended, or nil.
func (c *Cloud) currentTerm() *term {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term == nil || c.term.ctx.Err() != nil {
		return nil
	}
	return c.term
}

// goRun runs f in a goroutine of the term, with the term's context (its logger named
// name, unless name is empty).
func (t *term) goRun(name string, f func(context.Context)) {
	ctx := t.ctx
	if name != "" {
		ctx = klog.NewContext(ctx, t.logger.WithName(name))
	}
	t.wg.Go(func() { f(ctx) })
}

// WaitTermEnd waits until every part of the last leadership term has stopped, after
// its stop channel closed: its loops returned, their writes ended and its BMC sessions
// are logged out (each is bounded by its own deadlines). It returns ctx's error if ctx
// ends first, nil at once when no term ran.
func (c *Cloud) WaitTermEnd(ctx context.Context) error {
	c.mu.Lock()
	t := c.term
	c.mu.Unlock()
	if t == nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.wg.Wait()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("term %d has not stopped: %w", t.n, context.Cause(ctx))
	}
}
