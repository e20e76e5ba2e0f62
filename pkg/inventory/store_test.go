package inventory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
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
	ack   string
	ctx   context.Context
}

func newFixture(t *testing.T, maxHosts, maxPercent int) *storeFixture {
	_, ctx := ktesting.NewTestContext(t)
	f := &storeFixture{src: &fakeSource{}, sink: &fakeSink{}, ctx: ctx}
	f.ack = filepath.Join(t.TempDir(), "ack")
	f.store = NewStore(f.src, Guard{MaxHosts: maxHosts, MaxPercent: maxPercent, AckFile: f.ack}, f.sink, nil)
	return f
}

func (f *storeFixture) load(t *testing.T, doc string) error {
	t.Helper()
	f.src.set(doc, nil)
	return f.store.Reload(f.ctx)
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
	if err := f.store.DeletionAllowed(f.ctx); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("DeletionAllowed(f.ctx) = %v, want ErrNotLoaded", err)
	}
}

func TestStoreKeepsLastGoodOnBadReload(t *testing.T) {
	f := newFixture(t, 10, 25)
	good := hostsDoc(0, 5)
	if err := f.load(t, good); err != nil {
		t.Fatal(err)
	}
	if err := f.store.DeletionAllowed(f.ctx); err != nil {
		t.Fatalf("DeletionAllowed after a good load = %v", err)
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
	if err := f.store.DeletionAllowed(f.ctx); !errors.Is(err, ErrReloadFailing) {
		t.Fatalf("DeletionAllowed while failing = %v, want ErrReloadFailing", err)
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
	if err := f.load(t, hostsDoc(0, 6)); err != nil {
		t.Fatal(err)
	}
	if err := f.store.DeletionAllowed(f.ctx); err != nil {
		t.Fatalf("DeletionAllowed after recovery = %v", err)
	}
	if v, _ := testutil.GetGaugeMetricValue(lastReloadFailed); v != 0 {
		t.Errorf("last_reload_failed = %v, want 0", v)
	}
}

func TestStoreUnchangedSourceKeepsFailure(t *testing.T) {
	f := newFixture(t, 10, 25)
	if err := f.load(t, hostsDoc(0, 3)); err != nil {
		t.Fatal(err)
	}
	_ = f.load(t, "kind: nope")
	// The source now says "unchanged" (same bad bytes): still failing.
	if err := f.store.Reload(f.ctx); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Reload(unchanged bad document) = %v, want ErrInvalid", err)
	}
	if err := f.store.DeletionAllowed(f.ctx); !errors.Is(err, ErrReloadFailing) {
		t.Fatalf("DeletionAllowed = %v, want ErrReloadFailing", err)
	}
	// A fetch error, then "unchanged" again for a good document: recovered.
	_ = f.load(t, hostsDoc(0, 3))
	f.src.set(hostsDoc(0, 3), errors.New("timeout"))
	if err := f.store.Reload(f.ctx); err == nil {
		t.Fatal("fetch error not returned")
	}
	f.src.set(hostsDoc(0, 3), nil)
	if err := f.store.Reload(f.ctx); err != nil {
		t.Fatalf("Reload(unchanged good document) = %v", err)
	}
	if err := f.store.DeletionAllowed(f.ctx); err != nil {
		t.Fatalf("DeletionAllowed after recovery = %v", err)
	}
}

func TestDeletionGuard(t *testing.T) {
	f := newFixture(t, 10, 25)
	if err := f.load(t, hostsDoc(0, 20)); err != nil {
		t.Fatal(err)
	}

	// 2 of 20 (10%) gone: within limits.
	if err := f.load(t, hostsDoc(2, 20)); err != nil {
		t.Fatal(err)
	}
	if err := f.store.DeletionAllowed(f.ctx); err != nil {
		t.Fatalf("2 of 20 removed: %v", err)
	}
	if !strings.Contains(f.sink.last(ReasonLoaded), "hosts newly reported gone: 2 (h0, h1)") {
		t.Errorf("loaded event = %q", f.sink.last(ReasonLoaded))
	}

	// 6 of 18 (33%) gone, 3 of them by decommissioning: trips the share limit.
	lastGood := Digest([]byte(hostsDoc(2, 20)))
	held := hostsDoc(5, 20, "h17", "h18", "h19")
	if err := f.load(t, held); err != nil {
		t.Fatalf("a guarded reload is not an error: %v", err)
	}
	v, _ := f.store.View()
	if v.Digest() != lastGood {
		t.Fatalf("view = %s, want the last good %s", v.Digest(), lastGood)
	}
	err := f.store.DeletionAllowed(f.ctx)
	if !errors.Is(err, ErrDeletionGuard) {
		t.Fatalf("DeletionAllowed = %v, want ErrDeletionGuard", err)
	}
	heldDigest := Digest([]byte(held))
	for _, want := range []string{heldDigest, f.ack, "6 of 18"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("guard error does not mention %q: %v", want, err)
		}
	}
	trip := f.store.Trip()
	if trip == nil || strings.Join(trip.Gone, ",") != "h17,h18,h19,h2,h3,h4" {
		t.Fatalf("trip = %+v", trip)
	}
	if msg := f.sink.last(ReasonGuardTripped); !strings.Contains(msg, "echo "+heldDigest+" > "+f.ack) {
		t.Errorf("tripped event does not say how to acknowledge: %q", msg)
	}
	if v, _ := testutil.GetGaugeMetricValue(guardTripped); v != 1 {
		t.Errorf("deletion_guard_tripped = %v", v)
	}
	if v, _ := testutil.GetGaugeMetricValue(guardHeld); v != 6 {
		t.Errorf("deletion_guard_held_hosts = %v", v)
	}

	// A stale acknowledgement does nothing.
	if err := os.WriteFile(f.ack, []byte("sha256:0000000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = f.store.Reload(f.ctx)
	if f.store.Trip() == nil {
		t.Fatal("a stale acknowledgement cleared the guard")
	}

	// The operator acknowledges the held inventory: it is installed on the next reload.
	if err := os.WriteFile(f.ack, []byte(heldDigest+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Reload(f.ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.store.View(); v.Digest() != heldDigest {
		t.Fatalf("view after ack = %s, want %s", v.Digest(), heldDigest)
	}
	if err := f.store.DeletionAllowed(f.ctx); err != nil {
		t.Fatalf("DeletionAllowed after ack = %v", err)
	}
	if f.sink.count(ReasonGuardCleared) != 1 {
		t.Error("no DeletionGuardCleared event")
	}
	if v, _ := testutil.GetGaugeMetricValue(guardTripped); v != 0 {
		t.Errorf("deletion_guard_tripped = %v after ack", v)
	}
}

func TestDeletionGuardClearedByAFixedInventory(t *testing.T) {
	f := newFixture(t, 10, 25)
	_ = f.load(t, hostsDoc(0, 10))
	_ = f.load(t, hostsDoc(0, 0)) // emptied
	if f.store.Trip() == nil {
		t.Fatal("emptying the inventory did not trip the guard")
	}
	if v, _ := f.store.View(); v.Len() != 10 {
		t.Fatalf("view has %d hosts, want the last good 10", v.Len())
	}
	_ = f.load(t, hostsDoc(0, 11)) // the operator restores it, plus one
	if f.store.Trip() != nil {
		t.Fatal("a good inventory did not clear the guard")
	}
	if v, _ := f.store.View(); v.Len() != 11 {
		t.Fatalf("view has %d hosts, want 11", v.Len())
	}
}

func TestDeletionGuardCountLimit(t *testing.T) {
	f := newFixture(t, 1, 100)
	_ = f.load(t, hostsDoc(0, 100))
	_ = f.load(t, hostsDoc(1, 100))
	if f.store.Trip() != nil {
		t.Fatal("1 removal tripped a limit of 1")
	}
	_ = f.load(t, hostsDoc(3, 100))
	if f.store.Trip() == nil {
		t.Fatal("2 removals did not trip maxRemovedHosts=1")
	}
}

func TestDeletionGuardIgnoresMaintenanceAndKnownGone(t *testing.T) {
	f := newFixture(t, 0, 0) // any removal trips
	_ = f.load(t, hostsDoc(0, 3, "h2"))
	doc := strings.Replace(hostsDoc(0, 3, "h2"), "- name: h1\n", "- name: h1\n  state: maintenance\n", 1)
	_ = f.load(t, doc)
	if f.store.Trip() != nil {
		t.Fatalf("maintenance or an already-decommissioned host tripped the guard: %+v", f.store.Trip())
	}
	_ = f.load(t, hostsDoc(1, 3, "h2"))
	if f.store.Trip() == nil {
		t.Fatal("removing h0 did not trip a zero limit")
	}
}

// TestDeletionGuardAtStartup: an inventory that lost hosts while the CCM was down is
// caught by comparing it with the hosts the Nodes reference.
func TestDeletionGuardAtStartup(t *testing.T) {
	nodeHosts := func() ([]string, bool) {
		var ids []string
		for i := range 10 {
			ids = append(ids, fmt.Sprintf("h%d", i))
		}
		return ids, true
	}
	t.Run("nodes known at first load", func(t *testing.T) {
		f := newFixture(t, 10, 25)
		f.store.SetNodeHosts(nodeHosts)
		_ = f.load(t, hostsDoc(0, 5))
		if f.store.Trip() == nil || len(f.store.Trip().Gone) != 5 {
			t.Fatalf("trip = %+v, want 5 hosts held", f.store.Trip())
		}
		if _, err := f.store.View(); err != nil {
			t.Fatalf("the first inventory must still serve metadata: %v", err)
		}
		if err := f.store.DeletionAllowed(f.ctx); !errors.Is(err, ErrDeletionGuard) {
			t.Fatalf("DeletionAllowed = %v", err)
		}
	})
	t.Run("nodes known after first load", func(t *testing.T) {
		f := newFixture(t, 10, 25)
		_ = f.load(t, hostsDoc(0, 5))
		synced := false
		f.store.SetNodeHosts(func() ([]string, bool) {
			if !synced {
				return nil, false
			}
			return nodeHosts()
		})
		_ = f.store.Reload(f.ctx)
		if f.store.Trip() != nil {
			t.Fatal("tripped before the Nodes were synced")
		}
		// Not compared with the Nodes yet: nothing may be reported gone.
		err := f.store.DeletionAllowed(f.ctx)
		if !errors.Is(err, ErrDeletionGuard) || !strings.Contains(err.Error(), "not been compared") {
			t.Fatalf("DeletionAllowed before the Nodes are synced = %v", err)
		}
		// Once synced, DeletionAllowed itself runs the comparison (no reload needed).
		synced = true
		if err := f.store.DeletionAllowed(f.ctx); !errors.Is(err, ErrDeletionGuard) || f.store.Trip() == nil {
			t.Fatalf("DeletionAllowed = %v, want the guard tripped by the Node comparison", err)
		}
		// Acknowledge the view itself.
		v, _ := f.store.View()
		_ = os.WriteFile(f.ack, []byte(v.Digest()), 0o600)
		_ = f.store.Reload(f.ctx)
		if err := f.store.DeletionAllowed(f.ctx); err != nil {
			t.Fatalf("after ack: %v", err)
		}
	})
}

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

// TestDeletionAllowedDoesNotWaitForTheSource: a hung inventory server must not stall
// the lifecycle controller's InstanceExists calls.
func TestDeletionAllowedDoesNotWaitForTheSource(t *testing.T) {
	f := newFixture(t, 10, 25)
	_ = f.load(t, hostsDoc(0, 3))
	f.store.SetNodeHosts(func() ([]string, bool) { return nil, false }) // forces the locked path
	bs := &blockingSource{entered: make(chan struct{}), release: make(chan struct{})}
	bs.set(hostsDoc(0, 3), nil)
	f.store.src = bs
	go func() { _ = f.store.Reload(f.ctx) }()
	<-bs.entered

	done := make(chan error, 1)
	go func() { done <- f.store.DeletionAllowed(f.ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrDeletionGuard) {
			t.Errorf("DeletionAllowed = %v, want ErrDeletionGuard (Nodes not synced)", err)
		}
	case <-time.After(30 * time.Second): // a deadlock detector, not a speed assertion
		t.Fatal("DeletionAllowed waited for the Source's Fetch")
	}
	close(bs.release)
}

// TestDeletionGuardClearedByRevert: reverting a held change to exactly the inventory in
// use clears the guard.
func TestDeletionGuardClearedByRevert(t *testing.T) {
	f := newFixture(t, 10, 25)
	good := hostsDoc(0, 10)
	_ = f.load(t, good)
	_ = f.load(t, hostsDoc(0, 2))
	if f.store.Trip() == nil {
		t.Fatal("removing 8 of 10 did not trip the guard")
	}
	_ = f.load(t, good)
	if f.store.Trip() != nil {
		t.Fatal("reverting to the inventory in use did not clear the guard")
	}
	if err := f.store.DeletionAllowed(f.ctx); err != nil {
		t.Fatalf("DeletionAllowed after revert = %v", err)
	}
	if msg := f.sink.last(ReasonGuardCleared); !strings.Contains(msg, "serves the inventory in use again") {
		t.Errorf("cleared event = %q", msg)
	}
}
