package inventory

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"
)

// Leadership is what the Store needs to decide for one leadership term.
type Leadership struct {
	// State keeps the guard's state (in the cluster: ConfigMapState). Required.
	State StateStore
	// NodeHosts returns the hosts the cluster's Nodes reference. Required.
	NodeHosts NodeHostsFunc
	// Fence, when set, must answer nil right before every save and every grant: a
	// replica whose Lease another one has taken (paused past it, then resumed) saves
	// and grants nothing, even before its term's context ends.
	Fence func(context.Context) error
}

// errNotLeading is why nothing is decided outside a leadership term.
var errNotLeading = errors.New("this replica is not the leader (only the leader's deletion guard decides)")

// errFenced is wrapped when the term's fence refuses a save or a grant.
var errFenced = errors.New("this replica may no longer lead")

// term is one leadership term of a Store.
type term struct {
	ctx context.Context // ends with the term
	Leadership
}

// Lead makes the Store the deletion guard of one leadership term, until ctx ends: it
// loads and saves the guard's state in l.State, compares documents with l.NodeHosts,
// reports hosts gone and grants power-based actions. The term starts like a new
// leader: nothing accepted yet, the state read anew at the next decision. When ctx
// ends, the state calls under way are cancelled, what the term decided is forgotten,
// and GoneAllowed and TakePowerBudget refuse (ErrDeletionGuard) until the next term;
// the View stays in use. A later Lead replaces the current term.
func (s *Store) Lead(ctx context.Context, l Leadership) {
	t := &term{ctx: ctx, Leadership: l}
	s.mu.Lock()
	s.lead.Store(t)
	s.forgetDecisions(nil)
	s.publish()
	s.mu.Unlock()
	context.AfterFunc(ctx, func() { s.endTerm(t) })
}

// Leading reports whether the Store is in a leadership term.
func (s *Store) Leading() bool {
	t := s.lead.Load()
	return t != nil && t.ctx.Err() == nil
}

// endTerm ends t, unless another term replaced it. It waits for a decision under way
// (whose state calls t's end cancelled).
func (s *Store) endTerm(t *term) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lead.CompareAndSwap(t, nil) {
		return
	}
	s.forgetDecisions(errNotLeading)
	s.publish()
}

// forgetDecisions drops what a term decided; why (nil at a term's start) is why
// nothing is reported gone meanwhile. It runs with s.mu held.
func (s *Store) forgetDecisions(why error) {
	s.gs, s.accepted, s.stateErr = nil, nil, why
	s.powerEventID = ""
	s.settleDone()
}

// notLeading records that the fence refused a save: nothing is reported gone.
func (s *Store) notLeading(ctx context.Context, err error) {
	klog.FromContext(ctx).Info("Deletion guard state not saved: this replica may no longer lead", "event", "deletionGuardFenced", "err", err)
	s.stateErr = err
}

// callContext bounds one state call by stateTimeout, ctx and the term.
func (t *term) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	stop := context.AfterFunc(t.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// check asks the term's fence, if any; its refusal wraps errFenced.
func (t *term) check(ctx context.Context) error {
	if err := t.ctx.Err(); err != nil {
		return fmt.Errorf("%w: its leadership term ended", errFenced)
	}
	if t.Fence == nil {
		return nil
	}
	if err := t.Fence(ctx); err != nil {
		return fmt.Errorf("%w: %w", errFenced, err)
	}
	return nil
}

// load reads the saved state (bounded by callContext) and returns it with a clone to
// change; a failure wraps ErrDeletionGuard.
func (t *term) load(ctx context.Context) (loaded, clone *GuardState, err error) {
	ctx, cancel := t.callContext(ctx)
	defer cancel()
	loaded, _, err = t.State.Load(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: cannot read its state from %s: %w", ErrDeletionGuard, t.State, err)
	}
	return loaded, loaded.clone(), nil
}

// checkBounded is check bounded by callContext.
func (t *term) checkBounded(ctx context.Context) error {
	ctx, cancel := t.callContext(ctx)
	defer cancel()
	return t.check(ctx)
}

// save asks the fence, then saves gs; both bounded by callContext.
func (t *term) save(ctx context.Context, gs *GuardState) error {
	ctx, cancel := t.callContext(ctx)
	defer cancel()
	if err := t.check(ctx); err != nil {
		return err
	}
	return t.State.Save(ctx, gs)
}
