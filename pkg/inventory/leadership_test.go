package inventory

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingState counts the calls to a MemoryState; a Save can be made to block until
// its context ends.
type countingState struct {
	*MemoryState
	loads, saves atomic.Int32
	block        atomic.Bool
	blocked      chan error // receives the blocked Save's context error
}

func (c *countingState) Load(ctx context.Context) (*GuardState, []string, error) {
	c.loads.Add(1)
	return c.MemoryState.Load(ctx)
}

func (c *countingState) Save(ctx context.Context, st *GuardState) error {
	c.saves.Add(1)
	if c.block.Load() {
		<-ctx.Done()
		c.blocked <- ctx.Err()
		return ctx.Err()
	}
	return c.MemoryState.Save(ctx, st)
}

// newTermFixture is newFixture whose Store leads a term that the test ends with the
// returned function, with cs as its state.
func newTermFixture(t *testing.T) (*storeFixture, *countingState, context.CancelFunc) {
	f := newFixture(t, 10, 100)
	cs := &countingState{MemoryState: f.state, blocked: make(chan error, 1)}
	f.store = NewStore(f.src, f.guard, f.sink, f.clock)
	ctx, end := context.WithCancel(f.ctx)
	f.store.Lead(ctx, Leadership{State: cs, NodeHosts: f.nodeHosts})
	return f, cs, end
}

// TestNothingDecidedAfterTheTerm (issue 25): a replica that lost the Lease kept
// deciding and saving the guard's state beside the new leader. Once its term ends the
// Store reads and writes no state, reports nothing gone and grants nothing, while the
// View keeps serving; the next term decides again, from the saved state.
func TestNothingDecidedAfterTheTerm(t *testing.T) {
	f, cs, end := newTermFixture(t)
	f.setNodes(nodesFor(0, 10)...)
	f.settle(t, hostsDoc(0, 10))
	if err := f.store.TakePowerBudget(f.ctx, "h1", "outOfService", false); err != nil {
		t.Fatal(err)
	}
	if !f.store.Leading() {
		t.Fatal("not leading within the term")
	}
	end()
	if err := waitFor(func() bool { return !f.store.Leading() }); err != nil {
		t.Fatal(err)
	}
	loads, saves := cs.loads.Load(), cs.saves.Load()
	f.settle(t, hostsDoc(1, 10)) // h0 removed: within the limits, were it decided
	if got := cs.loads.Load() - loads + cs.saves.Load() - saves; got != 0 {
		t.Fatalf("%d state calls after the term ended", got)
	}
	for _, h := range []string{"h0", "h1"} {
		if err := f.store.GoneAllowed(h); !errors.Is(err, ErrDeletionGuard) || !strings.Contains(err.Error(), "not the leader") {
			t.Errorf("GoneAllowed(%s) after the term = %v, want ErrDeletionGuard (not the leader)", h, err)
		}
	}
	if err := f.store.TakePowerBudget(f.ctx, "h1", "outOfService", false); !errors.Is(err, ErrDeletionGuard) {
		t.Errorf("TakePowerBudget(h1, held grant) after the term = %v, want ErrDeletionGuard", err)
	}
	if cs.saves.Load() != saves {
		t.Error("TakePowerBudget saved after the term ended")
	}
	if _, ok := mustView(t, f).Host("h5"); !ok {
		t.Error("the View stopped serving with the term")
	}

	// The next term: the saved grant holds, h0's removal is decided (and saved).
	f.lead(cs)
	if err := f.store.Reload(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.store.GoneAllowed("h0"); err != nil {
		t.Errorf("GoneAllowed(h0) in the next term = %v", err)
	}
	if err := f.store.TakePowerBudget(f.ctx, "h1", "outOfService", false); err != nil {
		t.Errorf("TakePowerBudget(h1) in the next term = %v", err)
	}
	if cs.saves.Load() == saves {
		t.Error("the next term saved nothing")
	}
}

// TestTermEndCancelsItsSave: a save under way when the term ends is cancelled, and
// what it would have saved is not reported.
func TestTermEndCancelsItsSave(t *testing.T) {
	f, cs, end := newTermFixture(t)
	f.setNodes(nodesFor(0, 10)...)
	f.settle(t, hostsDoc(0, 10))
	cs.block.Store(true)
	if err := f.load(t, hostsDoc(1, 10)); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(time.Minute) // settled at its second fetch
	reloaded := make(chan error, 1)
	go func() { reloaded <- f.store.Reload(f.ctx) }()
	time.Sleep(50 * time.Millisecond)
	end()
	select {
	case err := <-cs.blocked:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the blocked save ended with %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second): // a deadlock detector
		t.Fatal("the save under way was not cancelled by the term's end")
	}
	<-reloaded
	if err := f.store.GoneAllowed("h0"); err == nil {
		t.Fatal("h0 reported gone from a decision whose save the term's end cancelled")
	}
	if n := f.sink.count(ReasonGuardStateFailing); n != 0 {
		t.Errorf("%d %s events for a save the term's end cancelled", n, ReasonGuardStateFailing)
	}
}

// TestFenceStopsSavesAndGrants: when the fence says another replica holds the Lease,
// nothing is saved or granted although the term's context has not ended yet.
func TestFenceStopsSavesAndGrants(t *testing.T) {
	f := newFixture(t, 10, 100)
	cs := &countingState{MemoryState: f.state}
	var mu sync.Mutex
	var fenced error
	f.store = NewStore(f.src, f.guard, f.sink, f.clock)
	f.store.Lead(f.ctx, Leadership{State: cs, NodeHosts: f.nodeHosts, Fence: func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		return fenced
	}})
	f.setNodes(nodesFor(0, 10)...)
	f.settle(t, hostsDoc(0, 10))
	if err := f.store.TakePowerBudget(f.ctx, "h1", "outOfService", false); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	fenced = errors.New("Lease held by replica-b")
	mu.Unlock()
	saves := cs.saves.Load()
	f.settle(t, hostsDoc(1, 10))
	if cs.saves.Load() != saves {
		t.Error("saved although the fence refused")
	}
	if err := f.store.GoneAllowed("h0"); !errors.Is(err, ErrDeletionGuard) {
		t.Errorf("GoneAllowed(h0) = %v, want ErrDeletionGuard", err)
	}
	for _, h := range []string{"h1", "h2"} { // a held grant and a new one
		if err := f.store.TakePowerBudget(f.ctx, h, "outOfService", false); !errors.Is(err, ErrDeletionGuard) || !strings.Contains(err.Error(), "replica-b") {
			t.Errorf("TakePowerBudget(%s) = %v, want ErrDeletionGuard naming the fence's answer", h, err)
		}
	}
}

// TestStandbyView: on a replica that does not lead, a document that adds hosts serves
// at once, one that changes a host settles first, one that removes a host never
// serves (the leader's guard decides on removals).
func TestStandbyView(t *testing.T) {
	f := newFixture(t, 10, 100)
	f.store = NewStore(f.src, f.guard, f.sink, f.clock) // never leads
	if err := f.load(t, hostsDoc(0, 5)); err != nil {
		t.Fatal(err)
	}
	if err := f.load(t, hostsDoc(0, 6)); err != nil {
		t.Fatal(err)
	}
	if _, ok := mustView(t, f).Host("h5"); !ok {
		t.Fatal("an added host does not serve at once")
	}
	moved := strings.Replace(hostsDoc(0, 6), "10.0.0.1}", "10.0.9.1}", 1) // h0's address
	for i := range 3 {
		if err := f.load(t, moved); err != nil {
			t.Fatal(err)
		}
		served := mustView(t, f).Digest() == Digest([]byte(moved))
		if settled := i == 2; served != settled {
			t.Fatalf("fetch %d of a changed address: served %v, want %v (after it settled only)", i+1, served, settled)
		}
		f.clock.Step(6 * time.Second)
	}
	for range 4 {
		if err := f.load(t, hostsDoc(1, 6)); err != nil {
			t.Fatal(err)
		}
		f.clock.Step(6 * time.Second)
	}
	if _, ok := mustView(t, f).Host("h0"); !ok {
		t.Fatal("a document that removes h0 serves on a replica whose guard does not decide")
	}
	if err := f.store.GoneAllowed("h0"); !errors.Is(err, ErrDeletionGuard) {
		t.Errorf("GoneAllowed(h0) without a term = %v, want ErrDeletionGuard", err)
	}
}
