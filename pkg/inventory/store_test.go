package inventory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeSource serves whatever document or error the test sets, and says "unchanged"
// when the document is the same as last time, like the real sources.
type fakeSource struct {
	mu   sync.Mutex
	data []byte
	err  error
	last []byte
}

func (f *fakeSource) set(data string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.data, f.err = []byte(data), err
}

func (f *fakeSource) Fetch(context.Context) ([]byte, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, false, f.err
	}
	if f.last != nil && string(f.last) == string(f.data) {
		return nil, true, nil
	}
	f.last = f.data
	return f.data, false, nil
}
func (f *fakeSource) Interval() time.Duration { return time.Second }
func (f *fakeSource) String() string          { return "fake" }

type recordedEvent struct{ typ, reason, msg string }

type fakeSink struct {
	mu     sync.Mutex
	events []recordedEvent
}

func (s *fakeSink) Eventf(typ, reason, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, recordedEvent{typ, reason, fmt.Sprintf(format, args...)})
}

func (s *fakeSink) count(reason string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.events {
		if e.reason == reason {
			n++
		}
	}
	return n
}

func (s *fakeSink) last(reason string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.events) - 1; i >= 0; i-- {
		if s.events[i].reason == reason {
			return s.events[i].msg
		}
	}
	return ""
}

// hostsDoc returns an inventory with hosts h<from>..h<to-1>; decommissioned names are
// marked so.
func hostsDoc(from, to int, decommissioned ...string) string {
	var b strings.Builder
	b.WriteString("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n")
	dec := map[string]bool{}
	for _, d := range decommissioned {
		dec[d] = true
	}
	for i := from; i < to; i++ {
		name := fmt.Sprintf("h%d", i)
		fmt.Fprintf(&b, "- name: %s\n  addresses: [{type: InternalIP, address: 10.0.%d.%d}]\n", name, i/250, i%250+1)
		if dec[name] {
			b.WriteString("  state: decommissioned\n")
		}
	}
	return b.String()
}

type storeFixture struct {
	src   *fakeSource
	sink  *fakeSink
	store *Store
	state *MemoryState
	clock *clocktesting.FakeClock
	guard Guard
	ack   string
	ctx   context.Context
	// endTerm ends the Store's leadership term.
	endTerm context.CancelFunc

	mu     sync.Mutex
	nodes  []string
	synced bool
}

// newFixture returns a Store whose Nodes (none at first) are synced, with a settle
// time of 10 s and a one-hour window.
func newFixture(t *testing.T, maxHosts, maxPercent int) *storeFixture {
	_, ctx := ktesting.NewTestContext(t)
	f := &storeFixture{src: &fakeSource{}, sink: &fakeSink{}, ctx: ctx, state: &MemoryState{},
		clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), synced: true}
	f.ack = filepath.Join(t.TempDir(), "ack")
	f.guard = Guard{MaxHosts: maxHosts, MaxPercent: maxPercent, AckFile: f.ack, Window: time.Hour, SettleTime: 10 * time.Second,
		PowerMaxHosts: 3, PowerWindow: time.Hour}
	f.restart()
	return f
}

// restart replaces the Store by a new one on the same state, as a restarted process
// or a new leader would be.
func (f *storeFixture) restart() {
	f.store = NewStore(f.src, f.guard, f.sink, f.clock)
	f.lead(f.state)
	f.src.mu.Lock()
	f.src.last = nil // a new process reads the document anew
	f.src.mu.Unlock()
}

// lead starts a leadership term of the Store, until endTerm or the test's end, with
// st as its state store.
func (f *storeFixture) lead(st StateStore) {
	ctx, end := context.WithCancel(f.ctx)
	f.endTerm = end
	f.store.Lead(ctx, Leadership{State: st, NodeHosts: f.nodeHosts})
}

func (f *storeFixture) nodeHosts() ([]string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.nodes), f.synced
}

func (f *storeFixture) setNodes(hosts ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes = hosts
}

// nodesFor returns h<from>..h<to-1>.
func nodesFor(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("h%d", i))
	}
	return out
}

// load serves doc and reloads once.
func (f *storeFixture) load(t *testing.T, doc string) error {
	t.Helper()
	f.src.set(doc, nil)
	return f.store.Reload(f.ctx)
}

// settle serves doc and reloads until the settle time has passed (three reloads,
// 6 s apart).
func (f *storeFixture) settle(t *testing.T, doc string) {
	t.Helper()
	for i := range 3 {
		if i > 0 {
			f.clock.Step(6 * time.Second)
		}
		if err := f.load(t, doc); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *storeFixture) acknowledge(t *testing.T, id string) {
	t.Helper()
	if err := os.WriteFile(f.ack, []byte(id+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Reload(f.ctx); err != nil {
		t.Fatal(err)
	}
}

// goneAllowed returns the hosts among names GoneAllowed accepts.
func (f *storeFixture) goneAllowed(names ...string) []string {
	var out []string
	for _, n := range names {
		if f.store.GoneAllowed(n) == nil {
			out = append(out, n)
		}
	}
	return out
}

func TestStoreNotLoaded(t *testing.T) {
	f := newFixture(t, 10, 25)
	if _, err := f.store.View(); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("View() = %v, want ErrNotLoaded", err)
	}
	f.src.set("", errors.New("connection refused"))
	if err := f.store.Reload(f.ctx); err == nil {
		t.Fatal("Reload succeeded on a failing source")
	}
	_, err := f.store.View()
	if !errors.Is(err, ErrNotLoaded) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("View() = %v, want ErrNotLoaded naming the cause", err)
	}
	if err := f.store.GoneAllowed("h0"); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("GoneAllowed = %v, want ErrNotLoaded", err)
	}
}

func TestStoreKeepsLastGoodOnBadReload(t *testing.T) {
	f := newFixture(t, 10, 100)
	f.setNodes(nodesFor(0, 6)...)
	good := hostsDoc(1, 5) // h0 and h5 gone: within limits
	f.settle(t, good)
	if got := f.goneAllowed("h0", "h5"); len(got) != 2 {
		t.Fatalf("GoneAllowed after a good load: %v, want h0 and h5", got)
	}
	if f.sink.count(ReasonLoaded) != 1 {
		t.Errorf("InventoryLoaded events = %d, want 1", f.sink.count(ReasonLoaded))
	}

	for range 3 { // the same failure thrice: one event
		if err := f.load(t, "garbage: [\n"); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Reload(garbage) = %v, want ErrInvalid", err)
		}
	}
	v, err := f.store.View()
	if err != nil || v.Digest() != Digest([]byte(good)) {
		t.Fatalf("View after bad reload = %v, %v; want the last good one", v, err)
	}
	if err := f.store.GoneAllowed("h0"); !errors.Is(err, ErrReloadFailing) {
		t.Fatalf("GoneAllowed while failing = %v, want ErrReloadFailing", err)
	}
	if n := f.sink.count(ReasonReloadFailed); n != 1 {
		t.Errorf("InventoryReloadFailed events = %d, want 1 for a repeated failure", n)
	}
	if msg := f.sink.last(ReasonReloadFailed); !strings.Contains(msg, "not valid YAML") || !strings.Contains(msg, Digest([]byte(good))) {
		t.Errorf("failure event does not say why and what is kept: %q", msg)
	}
	if v, _ := testutil.GetGaugeMetricValue(lastReloadFailed); v != 1 {
		t.Errorf("last_reload_failed = %v, want 1", v)
	}

	// A fixed document clears the failure.
	if err := f.load(t, hostsDoc(1, 5)); err != nil {
		t.Fatal(err)
	}
	if err := f.store.GoneAllowed("h0"); err != nil {
		t.Fatalf("GoneAllowed after recovery = %v", err)
	}
	if v, _ := testutil.GetGaugeMetricValue(lastReloadFailed); v != 0 {
		t.Errorf("last_reload_failed = %v, want 0", v)
	}
}

func TestStoreUnchangedSourceKeepsFailure(t *testing.T) {
	f := newFixture(t, 10, 100)
	f.setNodes("h0")
	f.settle(t, hostsDoc(1, 3))
	_ = f.load(t, "kind: nope")
	// The source now says "unchanged" (same bad bytes): still failing.
	if err := f.store.Reload(f.ctx); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Reload(unchanged bad document) = %v, want ErrInvalid", err)
	}
	if err := f.store.GoneAllowed("h0"); !errors.Is(err, ErrReloadFailing) {
		t.Fatalf("GoneAllowed = %v, want ErrReloadFailing", err)
	}
	// A fetch error, then "unchanged" again for a good document: recovered.
	_ = f.load(t, hostsDoc(1, 3))
	f.src.set(hostsDoc(1, 3), errors.New("timeout"))
	if err := f.store.Reload(f.ctx); err == nil {
		t.Fatal("fetch error not returned")
	}
	f.src.set(hostsDoc(1, 3), nil)
	if err := f.store.Reload(f.ctx); err != nil {
		t.Fatalf("Reload(unchanged good document) = %v", err)
	}
	if err := f.store.GoneAllowed("h0"); err != nil {
		t.Fatalf("GoneAllowed after recovery = %v", err)
	}
}

func TestDeletionGuard(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.setNodes(nodesFor(0, 20)...)
	f.settle(t, hostsDoc(0, 20))

	// 2 of 20 (10%) gone: within limits.
	f.settle(t, hostsDoc(2, 20))
	if got := f.goneAllowed(nodesFor(0, 20)...); !slices.Equal(got, []string{"h0", "h1"}) {
		t.Fatalf("gone = %v, want h0 h1", got)
	}
	if !strings.Contains(f.sink.last(ReasonLoaded), "hosts newly reported gone: 2 (h0, h1)") {
		t.Errorf("loaded event = %q", f.sink.last(ReasonLoaded))
	}

	// 4 more of 20 (6 = 30% within the window), 3 of them by decommissioning: trips
	// the share limit.
	lastGood := Digest([]byte(hostsDoc(2, 20)))
	held := hostsDoc(3, 20, "h17", "h18", "h19")
	f.settle(t, held)
	if v, _ := f.store.View(); v.Digest() != lastGood {
		t.Fatalf("view = %s, want the last good %s", v.Digest(), lastGood)
	}
	err := f.store.GoneAllowed("h0")
	if !errors.Is(err, ErrDeletionGuard) {
		t.Fatalf("GoneAllowed = %v, want ErrDeletionGuard", err)
	}
	trip := f.store.Trip()
	if trip == nil || strings.Join(trip.Hosts, ",") != "h17,h18,h19,h2" {
		t.Fatalf("trip = %+v", trip)
	}
	for _, want := range []string{Digest([]byte(held)), trip.ID, "4 of 18"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("guard error does not mention %q: %v", want, err)
		}
	}
	if msg := f.sink.last(ReasonGuardTripped); !strings.Contains(msg, "echo "+trip.ID+" > "+f.ack) || !strings.Contains(msg, "counting 2 removals already accepted") {
		t.Errorf("tripped event does not say how to acknowledge or what the window holds: %q", msg)
	}
	if v, _ := testutil.GetGaugeMetricValue(guardTripped); v != 1 {
		t.Errorf("deletion_guard_tripped = %v", v)
	}
	if v, _ := testutil.GetGaugeMetricValue(guardHeld); v != 4 {
		t.Errorf("deletion_guard_held_hosts = %v", v)
	}

	// A stale acknowledgement (the document's digest, the old way) does nothing.
	f.acknowledge(t, Digest([]byte(held)))
	if f.store.Trip() == nil {
		t.Fatal("a stale acknowledgement cleared the guard")
	}

	// The operator acknowledges the trip: the held inventory is installed.
	f.acknowledge(t, trip.ID)
	if v, _ := f.store.View(); v.Digest() != Digest([]byte(held)) {
		t.Fatalf("view after ack = %s, want %s", v.Digest(), Digest([]byte(held)))
	}
	if got := f.goneAllowed(nodesFor(0, 20)...); strings.Join(got, ",") != "h0,h1,h2,h17,h18,h19" {
		t.Fatalf("gone after ack = %v", got)
	}
	if !strings.Contains(f.sink.last(ReasonGuardCleared), "acknowledgement "+trip.ID) {
		t.Errorf("cleared event = %q", f.sink.last(ReasonGuardCleared))
	}
	if v, _ := testutil.GetGaugeMetricValue(guardTripped); v != 0 {
		t.Errorf("deletion_guard_tripped = %v after ack", v)
	}
}

func TestDeletionGuardClearedByAFixedInventory(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.setNodes(nodesFor(0, 10)...)
	f.settle(t, hostsDoc(0, 10))
	f.settle(t, hostsDoc(0, 0)) // emptied
	if f.store.Trip() == nil {
		t.Fatal("emptying the inventory did not trip the guard")
	}
	if v, _ := f.store.View(); v.Len() != 10 {
		t.Fatalf("view has %d hosts, want the last good 10", v.Len())
	}
	_ = f.load(t, hostsDoc(0, 11)) // the operator restores it, plus one: no settling needed
	if f.store.Trip() != nil {
		t.Fatal("a good inventory did not clear the guard")
	}
	if v, _ := f.store.View(); v.Len() != 11 {
		t.Fatalf("view has %d hosts, want 11", v.Len())
	}
}

func TestDeletionGuardIgnoresMaintenance(t *testing.T) {
	f := newFixture(t, 0, 0) // any removal trips
	f.setNodes("h0", "h1")
	f.settle(t, hostsDoc(0, 3))
	doc := strings.Replace(hostsDoc(0, 3), "- name: h1\n", "- name: h1\n  state: maintenance\n", 1)
	f.settle(t, doc)
	if f.store.Trip() != nil {
		t.Fatalf("a host put in maintenance tripped the guard: %+v", f.store.Trip())
	}
	f.settle(t, hostsDoc(1, 3))
	if f.store.Trip() == nil {
		t.Fatal("removing h0 did not trip a zero limit")
	}
}

// TestGuardRestartThenEdit is defect 1: after a restart the guard compares with the
// Nodes, and a later edit (a comment) of the held document no longer clears the trip;
// a document arriving before the Node informer synced is not decided on at all.
func TestGuardRestartThenEdit(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.setNodes(nodesFor(0, 50)...)
	f.settle(t, hostsDoc(0, 50))

	// Restarted with an inventory that lost 45 of 50 hosts, Nodes not synced yet.
	f.synced = false
	f.restart()
	lost := hostsDoc(45, 50)
	f.settle(t, lost)
	if err := f.store.GoneAllowed("h0"); !errors.Is(err, ErrDeletionGuard) {
		t.Fatalf("before the Nodes synced: GoneAllowed = %v, want ErrDeletionGuard", err)
	}
	f.synced = true
	f.settle(t, lost)
	trip := f.store.Trip()
	if trip == nil || len(trip.Hosts) != 45 {
		t.Fatalf("trip = %+v, want 45 hosts held", trip)
	}
	// A comment edited into the document, and restarts: the trip stands, same ID.
	for range 2 {
		f.settle(t, lost+"# edited\n")
		f.restart()
		f.settle(t, lost+"# edited again\n")
	}
	if got := f.store.Trip(); got == nil || got.ID != trip.ID {
		t.Fatalf("after edits and restarts trip = %+v, want %s", got, trip.ID)
	}
	if got := f.goneAllowed(nodesFor(0, 50)...); len(got) != 0 {
		t.Fatalf("reported gone while tripped: %v", got)
	}
	if n := f.sink.count(ReasonGuardCleared); n != 0 {
		t.Fatalf("the trip was cleared %d times", n)
	}
	f.acknowledge(t, trip.ID)
	if got := f.goneAllowed(nodesFor(0, 50)...); len(got) != 45 {
		t.Fatalf("after ack %d hosts may go, want 45", len(got))
	}
}

// TestGuardSlowDrift is defect 2: removals are counted over the window, and a shrunk
// document (read mid-write) is not used before it settles.
func TestGuardSlowDrift(t *testing.T) {
	f := newFixture(t, 10, 100)
	f.setNodes(nodesFor(0, 100)...)
	f.settle(t, hostsDoc(0, 100))
	for step := 1; step <= 6; step++ {
		f.settle(t, hostsDoc(10*step, 100))
		f.clock.Step(5 * time.Minute)
	}
	if got := f.goneAllowed(nodesFor(0, 100)...); len(got) != 0 {
		t.Fatalf("tripped guard still reports %d gone", len(got))
	}
	if trip := f.store.Trip(); trip == nil || len(trip.Hosts) != 50 {
		t.Fatalf("trip = %+v, want the 50 hosts beyond the first 10", trip)
	}
	// Only the first 10 were accepted; they stay accepted.
	f.setNodes(nodesFor(10, 100)...) // their Nodes were deleted
	// The window passing does not clear the trip; the hosts coming back does.
	f.clock.Step(time.Hour)
	f.settle(t, hostsDoc(60, 100))
	if f.store.Trip() == nil {
		t.Fatal("the trip cleared with the window")
	}
	_ = f.load(t, hostsDoc(10, 100))
	if f.store.Trip() != nil {
		t.Fatal("restoring the hosts did not clear the trip")
	}
	// The window has passed: the next 10 are within the limit again.
	f.settle(t, hostsDoc(20, 100))
	if f.store.Trip() != nil {
		t.Fatalf("10 removals an hour later tripped: %+v", f.store.Trip())
	}
	if got := f.goneAllowed(nodesFor(10, 100)...); len(got) != 10 {
		t.Fatalf("%d gone, want 10", len(got))
	}

	// Mid-write: a document cut at a host boundary is valid but seen once; it is
	// never acted on, and a complete one follows.
	f.src.set(hostsDoc(20, 25), nil)
	_ = f.store.Reload(f.ctx)
	if f.store.Trip() != nil || len(f.goneAllowed(nodesFor(25, 100)...)) != 0 {
		t.Fatal("a document seen once was acted on")
	}
	if v, _ := testutil.GetGaugeMetricValue(settlingGauge); v != 1 {
		t.Errorf("settling = %v, want 1", v)
	}
	f.clock.Step(time.Second)
	_ = f.load(t, hostsDoc(20, 100))
	// Seen twice, but not for the settle time: still not used.
	f.src.set(hostsDoc(20, 99), nil)
	_ = f.store.Reload(f.ctx)
	f.clock.Step(time.Second)
	_ = f.store.Reload(f.ctx)
	if got := f.goneAllowed("h99"); len(got) != 0 {
		t.Fatal("a document seen twice within the settle time was acted on")
	}
	// Settled, but the window already holds 10 removals: the 11th trips.
	f.clock.Step(10 * time.Second)
	_ = f.store.Reload(f.ctx)
	trip := f.store.Trip()
	if trip == nil || !slices.Equal(trip.Hosts, []string{"h99"}) {
		t.Fatalf("trip = %+v, want h99 held", trip)
	}
	// The window passing does not clear a trip: only its ack or h99's return does.
	f.clock.Step(2 * time.Hour)
	_ = f.store.Reload(f.ctx)
	if got := f.store.Trip(); got == nil || got.ID != trip.ID {
		t.Fatalf("trip after the window = %+v", got)
	}
	f.acknowledge(t, trip.ID)
	if got := f.goneAllowed("h99"); len(got) != 1 {
		t.Fatalf("an acknowledged removal is not reported gone: %v", f.store.GoneAllowed("h99"))
	}
}

// TestGuardAckUsedOnce is defect 3: an acknowledgement applies once; the same content
// held again later needs a new one.
func TestGuardAckUsedOnce(t *testing.T) {
	f := newFixture(t, 2, 100)
	f.setNodes(nodesFor(0, 10)...)
	full, shrunk := hostsDoc(0, 10), hostsDoc(5, 10)
	f.settle(t, full)
	f.settle(t, shrunk)
	first := f.store.Trip()
	f.acknowledge(t, first.ID)
	if f.store.Trip() != nil {
		t.Fatal("ack did not clear")
	}
	// The hosts come back, Nodes with them; weeks later a backup lacking them again.
	f.settle(t, full)
	f.clock.Step(21 * 24 * time.Hour)
	f.settle(t, full)
	f.settle(t, shrunk)
	second := f.store.Trip()
	if second == nil || second.ID == first.ID {
		t.Fatalf("trip = %+v; want a new one, not %s", second, first.ID)
	}
	_ = f.store.Reload(f.ctx) // the ack file still holds the first ID
	if f.store.Trip() == nil || len(f.goneAllowed(nodesFor(0, 5)...)) != 0 {
		t.Fatal("a used acknowledgement applied again")
	}
	// Through the state store's annotation, as on a ConfigMap.
	f.state.Acknowledge(second.ID)
	_ = f.store.Reload(f.ctx)
	if f.store.Trip() != nil || len(f.goneAllowed(nodesFor(0, 5)...)) != 5 {
		t.Fatal("the annotation's acknowledgement did not apply")
	}
}

// TestPowerBudget is defect 4 at the store: power-based actions over the window are
// limited, the rest wait for an acknowledgement that releases exactly them, and a
// restart remembers grants.
func TestPowerBudget(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.setNodes(nodesFor(0, 40)...)
	f.settle(t, hostsDoc(0, 40))
	var granted, waiting []string
	for _, h := range nodesFor(0, 40) {
		switch err := f.store.TakePowerBudget(f.ctx, h, "deleteAfter", false); {
		case err == nil:
			granted = append(granted, h)
		case errors.Is(err, ErrPowerBudget):
			waiting = append(waiting, h)
		default:
			t.Fatal(err)
		}
	}
	if len(granted) != 3 || len(waiting) != 37 {
		t.Fatalf("granted %d, waiting %d; want 3 and 37", len(granted), len(waiting))
	}
	if v, _ := testutil.GetGaugeMetricValue(powerWaitingGauge); v != 37 {
		t.Errorf("waiting_hosts = %v", v)
	}
	// One Inventory event per reload, naming the trip's current ID, not one per host.
	_ = f.store.Reload(f.ctx)
	if n, msg := f.sink.count(ReasonPowerBudget), f.sink.last(ReasonPowerBudget); n != 1 || !strings.Contains(msg, f.store.PowerTrip().ID) || !strings.Contains(msg, "of 37 hosts wait") {
		t.Errorf("%d %s events, last %q", n, ReasonPowerBudget, msg)
	}
	// Granted hosts keep their grant (repeated calls, a restart).
	f.restart()
	f.settle(t, hostsDoc(0, 40))
	if err := f.store.TakePowerBudget(f.ctx, "h0", "deleteAfter", false); err != nil {
		t.Fatalf("a granted host after a restart: %v", err)
	}
	err := f.store.TakePowerBudget(f.ctx, "h39", "outOfService", false)
	trip := f.store.PowerTrip()
	if !errors.Is(err, ErrPowerBudget) || trip == nil || !strings.Contains(err.Error(), trip.ID) {
		t.Fatalf("TakePowerBudget = %v, trip %+v", err, trip)
	}
	f.acknowledge(t, trip.ID)
	for _, h := range waiting {
		if err := f.store.TakePowerBudget(f.ctx, h, "deleteAfter", false); err != nil {
			t.Fatalf("after ack %s: %v", h, err)
		}
	}
	// A new host beyond the budget waits again, under a new ID.
	f.setNodes(append(nodesFor(0, 40), "h40")...)
	f.settle(t, hostsDoc(0, 41))
	if err := f.store.TakePowerBudget(f.ctx, "h40", "deleteAfter", false); !errors.Is(err, ErrPowerBudget) || f.store.PowerTrip().ID == trip.ID {
		t.Fatalf("h40: %v", err)
	}
}

// TestPowerBudgetControlPlaneOneAtATime: within the power window at most one
// control-plane host gets a power-based grant, even with budget left; the others wait
// in the power trip (same acknowledgement), worker hosts are not held by it, and the
// holder keeps its grant.
func TestPowerBudgetControlPlaneOneAtATime(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.setNodes(nodesFor(0, 10)...)
	f.settle(t, hostsDoc(0, 10))
	if err := f.store.TakePowerBudget(f.ctx, "h0", "outOfService", true); err != nil {
		t.Fatalf("first control-plane host: %v", err)
	}
	err := f.store.TakePowerBudget(f.ctx, "h1", "outOfService", true)
	if !errors.Is(err, ErrPowerBudget) || !strings.Contains(err.Error(), `control-plane host "h0"`) || !strings.Contains(err.Error(), "one control-plane host at a time") {
		t.Fatalf("second control-plane host: %v, want a wait naming h0", err)
	}
	if err := f.store.TakePowerBudget(f.ctx, "h2", "deleteAfter", false); err != nil {
		t.Fatalf("a worker host with budget left: %v", err)
	}
	if err := f.store.TakePowerBudget(f.ctx, "h0", "deleteAfter", true); err != nil {
		t.Fatalf("the holder again: %v", err)
	}
	trip := f.store.PowerTrip()
	if trip == nil || !slices.Equal(trip.Hosts, []string{"h1"}) {
		t.Fatalf("power trip %+v, want h1 waiting", trip)
	}
	f.acknowledge(t, trip.ID)
	if err := f.store.TakePowerBudget(f.ctx, "h1", "outOfService", true); err != nil {
		t.Fatalf("h1 after the acknowledgement: %v", err)
	}
}

// TestGuardStateUnavailable: a state store that cannot be read or written means
// nothing is reported gone and no power-based action is granted.
func TestGuardStateUnavailable(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.setNodes("h0")
	f.lead(&failingState{})
	f.settle(t, hostsDoc(1, 5))
	if err := f.store.GoneAllowed("h0"); !errors.Is(err, ErrDeletionGuard) || !strings.Contains(err.Error(), "etcd down") {
		t.Fatalf("GoneAllowed = %v", err)
	}
	if err := f.store.TakePowerBudget(f.ctx, "h1", "deleteAfter", false); !errors.Is(err, ErrDeletionGuard) {
		t.Fatalf("TakePowerBudget = %v", err)
	}
	if f.sink.count(ReasonGuardStateFailing) != 1 {
		t.Errorf("%d state events", f.sink.count(ReasonGuardStateFailing))
	}
}

type failingState struct{}

func (failingState) Load(context.Context) (*GuardState, []string, error) {
	return nil, nil, errors.New("etcd down")
}
func (failingState) Save(context.Context, *GuardState) error { return errors.New("etcd down") }
func (failingState) String() string                          { return "failing" }

func TestStoreRunStopsWithContext(t *testing.T) {
	f := newFixture(t, 10, 25)
	f.src.set(hostsDoc(0, 1), nil)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() {
		f.store.Run(ctx)
		close(done)
	}()
	if err := waitFor(func() bool { _, err := f.store.View(); return err == nil }); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
}

func waitFor(cond func() bool) error {
	for range 500 {
		if cond() {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("condition not met")
}

// blockingSource's Fetch blocks until release is closed.
type blockingSource struct {
	fakeSource
	entered chan struct{}
	release chan struct{}
}

func (b *blockingSource) Fetch(ctx context.Context) ([]byte, bool, error) {
	close(b.entered)
	<-b.release
	return b.fakeSource.Fetch(ctx)
}

// TestGoneAllowedDoesNotWaitForTheSource: a hung inventory server must not stall the
// lifecycle controller's InstanceExists calls.
func TestGoneAllowedDoesNotWaitForTheSource(t *testing.T) {
	f := newFixture(t, 10, 100)
	f.setNodes("h0")
	f.settle(t, hostsDoc(1, 3))
	bs := &blockingSource{entered: make(chan struct{}), release: make(chan struct{})}
	bs.set(hostsDoc(0, 3), nil)
	f.store.src = bs
	go func() { _ = f.store.Reload(f.ctx) }()
	<-bs.entered

	done := make(chan error, 1)
	go func() { done <- f.store.GoneAllowed("h0") }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("GoneAllowed = %v", err)
		}
	case <-time.After(30 * time.Second): // a deadlock detector, not a speed assertion
		t.Fatal("GoneAllowed waited for the Source's Fetch")
	}
	close(bs.release)
}
