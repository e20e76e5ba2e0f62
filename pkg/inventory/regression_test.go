package inventory

// Regression tests from a hostile review: each reproduces a sequence of events that
// broke the deletion guard's promise (docs/operations.md "The deletion guard", DESIGN "Instances").
// Each failed before its fix.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hookState is a MemoryState whose Save can run a hook first (the Store holds its mutex
// across Save, so the hook sees the Store mid-decision) or fail.
type hookState struct {
	*MemoryState
	mu       sync.Mutex
	onSave   func()
	failSave error
}

func (h *hookState) Save(ctx context.Context, st *GuardState) error {
	h.mu.Lock()
	hook, fail := h.onSave, h.failSave
	h.onSave = nil
	h.mu.Unlock()
	if hook != nil {
		hook()
	}
	if fail != nil {
		return fail
	}
	return h.MemoryState.Save(ctx, st)
}

// TestPowerBudgetIgnoresTripInLoadedState: TakePowerBudget checks Ready() on the
// published status only, and never looks at the Trip of the state it loads. A replica
// whose status is stale (a paused former leader, or see the race test below) grants a
// power-based action (deleteAfter, out-of-service) while the state store holds an
// inventory trip. docs/configuration.md: "A held inventory change ... stops power-based actions too."
func TestPowerBudgetIgnoresTripInLoadedState(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.setNodes(nodesFor(0, 20)...)
	f.settle(t, hostsDoc(0, 20))
	if err := f.store.Ready(); err != nil {
		t.Fatal(err)
	}
	// Another writer (the current leader) saved a trip since this replica's last
	// decision.
	f.tripByAnotherWriter(t)
	err := f.store.TakePowerBudget(f.ctx, "h3", "outOfService", false)
	if err == nil {
		t.Fatal("TakePowerBudget granted a power-based action although the state it loaded holds an inventory trip")
	}
	if !errors.Is(err, ErrDeletionGuard) {
		t.Errorf("TakePowerBudget = %v, want ErrDeletionGuard", err)
	}
}

// TestPowerBudgetRacesTrip: the single-process version. Ready() is checked before
// s.mu is taken; a reload that is deciding a trip holds s.mu (across the state store's
// Save, up to 10 s on a ConfigMap) and publishes the trip only when it returns. A
// TakePowerBudget that checked Ready() meanwhile then takes the lock and grants.
func TestPowerBudgetRacesTrip(t *testing.T) {
	f := newFixture(t, 10, 25)
	hs := &hookState{MemoryState: f.state}
	f.lead(hs)
	f.setNodes(nodesFor(0, 20)...)
	f.settle(t, hostsDoc(0, 20))

	held := hostsDoc(15, 20) // 15 of 20 gone: trips
	if err := f.load(t, held); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(11 * time.Second)

	result := make(chan error, 1)
	hs.mu.Lock()
	hs.onSave = func() {
		// s.mu is held by the deciding reload and the trip is not published yet.
		go func() { result <- f.store.TakePowerBudget(f.ctx, "h3", "deleteAfter", false) }()
		time.Sleep(300 * time.Millisecond) // let it pass Ready() and wait for s.mu
	}
	hs.mu.Unlock()
	if err := f.store.Reload(f.ctx); err != nil {
		t.Fatal(err)
	}
	if f.store.Trip() == nil {
		t.Fatal("the shrunk document did not trip the guard")
	}
	if err := <-result; err == nil {
		t.Fatal("TakePowerBudget granted a power-based action decided concurrently with an inventory trip")
	}
}

// TestSettleSpansAnInvalidDocument: a shrunk document B, then a different
// (invalid) content, then B again: the guard counts B's first sighting and the later
// one as "unchanged for settleTime and two polls", although the source changed in
// between. docs/operations.md: "used only after it was fetched unchanged for settleTime and by two
// polls".
func TestSettleSpansAnInvalidDocument(t *testing.T) {
	f := newFixture(t, 10, 100)
	f.setNodes(nodesFor(0, 10)...)
	f.settle(t, hostsDoc(0, 10))
	shrunk := hostsDoc(1, 10) // h0 gone
	if err := f.load(t, shrunk); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(6 * time.Second)
	_ = f.load(t, "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: h1\n  addres") // mid-write
	f.clock.Step(6 * time.Second)
	if err := f.load(t, shrunk); err != nil {
		t.Fatal(err)
	}
	if err := f.store.GoneAllowed("h0"); err == nil {
		t.Fatal("h0 reported gone from a document seen once since the source last changed")
	}
}

// TestMidWriteDropsMaintenance: settling only protects documents that would report
// hosts gone. A document read mid-write that lost only the last host's trailing
// "state: maintenance" line is valid, removes no host, and is installed at the first
// read: the host loses its exemption from the power-off policies (deleteAfter,
// out-of-service) until the next poll.
func TestMidWriteDropsMaintenance(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.setNodes("h0", "h1", "h2")
	full := hostsDoc(0, 3) + "  state: maintenance\n" // h2, the last host, in maintenance
	f.settle(t, full)
	if h, _ := mustView(t, f).Host("h2"); h.State != StateMaintenance {
		t.Fatalf("h2 = %s", h.State)
	}
	cut := hostsDoc(0, 3) // the same bytes, cut before the last line
	if err := f.load(t, cut); err != nil {
		t.Fatal(err)
	}
	if h, _ := mustView(t, f).Host("h2"); h.State != StateMaintenance {
		t.Fatalf("a document seen once took h2 out of maintenance (state %s); the power-off policies now apply to it", h.State)
	}
}

// TestMaintenanceInSettlingDocument: a document that puts h2 in maintenance and
// also removes h0 waits to settle (or never settles, for a feed that flips); meanwhile
// the view still says h2 is active and the store is Ready, so power-based actions go
// on for a host the latest inventory exempts.
func TestMaintenanceInSettlingDocument(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.setNodes("h0", "h1", "h2")
	f.settle(t, hostsDoc(0, 3))
	doc := hostsDoc(1, 3) + "  state: maintenance\n" // h0 removed, h2 in maintenance
	if err := f.load(t, doc); err != nil {
		t.Fatal(err)
	}
	h, _ := mustView(t, f).Host("h2")
	if h.State == StateMaintenance {
		return
	}
	if err := f.store.TakePowerBudget(f.ctx, "h2", "deleteAfter", false); err == nil {
		t.Fatalf("the latest inventory puts h2 in maintenance, but the store serves it as %s and grants it a power-based action", h.State)
	}
}

// TestTripIDSurvivesRestart: a trip that lists hosts known from the accepted
// inventory but without Nodes changes its ID after a restart (the accepted inventory is
// not remembered, so those hosts drop out of the comparison): the acknowledgement of
// the ID the event and every error announced no longer applies. docs/operations.md: "a restart or
// a leader change forgets nothing"; "Editing the document otherwise ... keeps the trip".
func TestTripIDSurvivesRestart(t *testing.T) {
	f := newFixture(t, 10, 100)
	f.setNodes(nodesFor(0, 10)...) // h10..h19 have no Node (yet)
	f.settle(t, hostsDoc(0, 20))
	held := hostsDoc(15, 20) // h0..h14 gone: 15 > 10
	f.settle(t, held)
	trip := f.store.Trip()
	if trip == nil || len(trip.Hosts) != 15 {
		t.Fatalf("trip = %+v", trip)
	}
	f.restart()
	f.settle(t, held)
	if got := f.store.Trip(); got == nil || got.ID != trip.ID {
		t.Errorf("after a restart the trip is %+v, was %s", got, trip.ID)
	}
	f.acknowledge(t, trip.ID)
	if err := f.store.GoneAllowed("h0"); err != nil {
		t.Fatalf("the acknowledgement of the announced trip %s does not apply after a restart: %v", trip.ID, err)
	}
}

// TestClearedEventBeforeSave: an acknowledgement records DeletionGuardCleared (and
// logs deletionGuardAcknowledged) before the state is saved; when the save fails the
// trip stands, but the event told the operator it cleared.
func TestClearedEventBeforeSave(t *testing.T) {
	f := newFixture(t, 2, 100)
	hs := &hookState{MemoryState: f.state}
	f.lead(hs)
	f.setNodes(nodesFor(0, 10)...)
	f.settle(t, hostsDoc(0, 10))
	f.settle(t, hostsDoc(5, 10))
	trip := f.store.Trip()
	if trip == nil {
		t.Fatal("no trip")
	}
	hs.mu.Lock()
	hs.failSave = errors.New("conflict")
	hs.mu.Unlock()
	f.acknowledge(t, trip.ID)
	if f.store.GoneAllowed("h0") == nil {
		t.Fatal("reported gone although the acknowledgement was not saved")
	}
	if n := f.sink.count(ReasonGuardCleared); n != 0 {
		t.Errorf("%d DeletionGuardCleared events for an acknowledgement that was not saved: %q", n, f.sink.last(ReasonGuardCleared))
	}
}

// TestMatchUUIDByteOrder: matching by systemUUID looks the Node's UUID up as is,
// while the identity check accepts either SMBIOS byte order. A Node whose UUID is host
// A's in the other byte order, and whose name is host B's (B has no systemUUID), is
// matched to B without a word: the ambiguity (A by UUID, B by name) is not seen, and
// B's BMC, decommissioning and deletion then apply to machine A's Node. DESIGN:
// "Ambiguity is an error, never a guess"; docs/operations.md: UUIDs "compared ... in either SMBIOS
// byte order".
func TestMatchUUIDByteOrder(t *testing.T) {
	v, err := Parse([]byte(`apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
hosts:
- name: host-a
  systemUUID: 4c4c4544-0042-3510-8052-b4c04f4e4d32
- name: host-b
`))
	if err != nil {
		t.Fatal(err)
	}
	swapped := "44454c4c-4200-1035-8052-b4c04f4e4d32" // host-a's UUID, first three fields byte-swapped
	if same, ok := SameSystemUUID(swapped, "4c4c4544-0042-3510-8052-b4c04f4e4d32"); !same || !ok {
		t.Fatal("fixture: not the same UUID")
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "host-b"}}
	node.Status.NodeInfo.SystemUUID = swapped
	h, by, err := v.Match(node)
	if err == nil {
		t.Fatalf("Match = host %q by %s; want ErrAmbiguous (host-a by systemUUID, host-b by name)", h.Name, by)
	}
	if !errors.Is(err, ErrAmbiguous) {
		t.Errorf("Match error = %v, want ErrAmbiguous", err)
	}
	// Without the name, the UUID alone must find host-a.
	node.Name = "other"
	if h, _, err := v.Match(node); err != nil || h.Name != "host-a" {
		t.Errorf("Match by byte-swapped UUID = %v, %v; want host-a", h, err)
	}
}

// tripByAnotherWriter saves an inventory trip of h0..h14 into the state, as the
// current leader would behind this Store's back.
func (f *storeFixture) tripByAnotherWriter(t *testing.T) {
	t.Helper()
	gs, _, err := f.state.Load(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	gs.Trip = newTrip(tripInventory, nodesFor(0, 15), f.clock.Now())
	if err := f.state.Save(f.ctx, gs); err != nil {
		t.Fatal(err)
	}
}

func mustView(t *testing.T, f *storeFixture) *View {
	t.Helper()
	v, err := f.store.View()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestBadDocumentAtStart (issue 25): within the settle time of a start no document
// has been accepted yet, and every valid document fetched was put in use for lookups:
// an emptied one replaced the first good one, so a new Node was not initialized
// (InstanceMetadata found no host) until a good document settled. The first good
// document must serve lookups; a document that takes hosts away must never replace
// it, while one that only adds hosts serves at once.
func TestBadDocumentAtStart(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.setNodes(nodesFor(0, 10)...)
	good := hostsDoc(0, 10)
	if err := f.load(t, good); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(time.Second)
	empty := "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts: []\n"
	if err := f.load(t, empty); err != nil {
		t.Fatal(err)
	}
	if v := mustView(t, f); v.Digest() != Digest([]byte(good)) {
		t.Fatalf("lookups use %s (%d hosts) after an emptied document, want the first good one %s", v.Digest(), v.Len(), Digest([]byte(good)))
	}
	// Settled, the emptied document trips the guard: still the good one.
	for range 3 {
		f.clock.Step(6 * time.Second)
		if err := f.load(t, empty); err != nil {
			t.Fatal(err)
		}
	}
	if f.store.Trip() == nil {
		t.Fatal("the emptied document did not trip the guard")
	}
	if v := mustView(t, f); v.Len() != 10 {
		t.Fatalf("lookups use %d hosts after the emptied document settled, want the 10 of the good one", v.Len())
	}
	// A document that adds a host serves at once: its new Node is initialized.
	if err := f.load(t, hostsDoc(0, 11)); err != nil {
		t.Fatal(err)
	}
	if _, ok := mustView(t, f).Host("h10"); !ok {
		t.Fatal("a document that only adds h10 does not serve lookups")
	}
}

// TestHeldGrantReadsSavedState (issue 25): a host that already held a power grant
// got it again from memory, without the saved state being read, so an inventory trip
// saved by another writer (the current leader) was ignored.
func TestHeldGrantReadsSavedState(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.setNodes(nodesFor(0, 20)...)
	f.settle(t, hostsDoc(0, 20))
	if err := f.store.TakePowerBudget(f.ctx, "h3", "outOfService", false); err != nil {
		t.Fatal(err)
	}
	f.tripByAnotherWriter(t)
	if err := f.store.TakePowerBudget(f.ctx, "h3", "outOfService", false); !errors.Is(err, ErrDeletionGuard) {
		t.Fatalf("TakePowerBudget(h3, held grant) = %v, want ErrDeletionGuard: the saved state holds an inventory trip", err)
	}
}
