package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestMaxUnhealthy(t *testing.T) {
	for _, tt := range []struct {
		limit   intstr.IntOrString
		matched int
		want    int
	}{
		{intstr.FromString("30%"), 20, 6},
		{intstr.FromString("30%"), 19, 5}, // rounded down
		{intstr.FromString("0%"), 20, 0},
		{intstr.FromString("100%"), 7, 7},
		{intstr.FromInt32(3), 20, 3},
	} {
		if got, err := MaxUnhealthy(tt.limit, tt.matched); err != nil || got != tt.want {
			t.Errorf("MaxUnhealthy(%s, %d) = %d, %v; want %d", tt.limit.String(), tt.matched, got, err, tt.want)
		}
	}
	if _, err := MaxUnhealthy(intstr.FromString("many"), 20); err == nil {
		t.Error(`MaxUnhealthy("many") succeeded`)
	}
}

// TestStormNext walks the storm's states: none, started (over the limit), over (at
// or below it: cooldown), resumed in the cooldown, ended after the cooldown, and
// cleared when the limit is no longer configured.
func TestStormNext(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	cd := 5 * time.Minute
	st, what := stormNext(nil, 6, 20, 6, t0, cd)
	if st != nil || what != "" {
		t.Fatalf("at the limit: %+v %q", st, what)
	}
	st, what = stormNext(nil, 7, 20, 6, t0, cd)
	if st == nil || what != ReasonStormStarted || st.Unhealthy != 7 || st.Max != 6 {
		t.Fatalf("over the limit: %+v %q", st, what)
	}
	if s2, what := stormNext(st, 10, 20, 6, t0.Add(time.Minute), cd); s2 != st || what != "" {
		t.Fatalf("still over: %+v %q", s2, what)
	}
	over, what := stormNext(st, 4, 20, 6, t0.Add(2*time.Minute), cd)
	if over == nil || over.Ended == nil || !over.Ended.Equal(t0.Add(2*time.Minute)) || what != ReasonStormOver || st.Ended != nil {
		t.Fatalf("back at the limit: %+v %q (the old value must not change)", over, what)
	}
	if s2, what := stormNext(over, 4, 20, 6, t0.Add(6*time.Minute), cd); s2 != over || what != "" {
		t.Fatalf("in the cooldown: %+v %q", s2, what)
	}
	if s2, what := stormNext(over, 8, 20, 6, t0.Add(6*time.Minute), cd); s2 == nil || s2.Ended != nil || !s2.Since.Equal(t0.Add(6*time.Minute)) || what != ReasonStormStarted {
		t.Fatalf("over the limit again in the cooldown: %+v %q", s2, what)
	}
	if s2, what := stormNext(over, 4, 20, 6, t0.Add(7*time.Minute), cd); s2 != nil || what != ReasonStormEnded {
		t.Fatalf("after the cooldown: %+v %q", s2, what)
	}
	if s2, what := stormNext(st, 10, 20, -1, t0, cd); s2 != nil || what != ReasonStormEnded {
		t.Fatalf("limit no longer configured: %+v %q", s2, what)
	}
}

// TestRemediationStorm: with maxUnhealthy 30% of 20 Nodes, 10 unhealthy start a storm:
// every power-based action is refused (not queued for an acknowledgement) with a
// RemediationStormStarted event; the storm is saved, so a restarted Store (a new
// leader) holds too; at 5 unhealthy the cooldown starts, at its end actions resume.
func TestRemediationStorm(t *testing.T) {
	f := newFixture(t, 10, 25)
	limit := intstr.FromString("30%")
	f.guard.MaxUnhealthy, f.guard.StormCooldown = &limit, 5*time.Minute
	f.restart()
	f.setNodes(nodesFor(0, 20)...)
	f.settle(t, hostsDoc(0, 20))
	if err := f.store.ObserveHealth(f.ctx, 6, 20); err != nil || f.store.RemediationHold() != nil {
		t.Fatalf("6 of 20: %v, hold %v", err, f.store.RemediationHold())
	}
	if err := f.store.ObserveHealth(f.ctx, 10, 20); err != nil {
		t.Fatal(err)
	}
	hold := f.store.RemediationHold()
	if !errors.Is(hold, ErrRemediationStorm) || !strings.Contains(hold.Error(), "10 of 20 Nodes") || !strings.Contains(hold.Error(), "30% (6)") {
		t.Fatalf("hold = %v", hold)
	}
	if f.sink.count(ReasonStormStarted) != 1 {
		t.Errorf("%d %s events", f.sink.count(ReasonStormStarted), ReasonStormStarted)
	}
	if err := f.store.TakePowerBudget(f.ctx, "h1", "outOfService", false); !errors.Is(err, ErrRemediationStorm) {
		t.Fatalf("TakePowerBudget in a storm = %v", err)
	}
	if f.store.PowerTrip() != nil {
		t.Errorf("a storm queued hosts for an acknowledgement: %+v", f.store.PowerTrip())
	}
	// A new leader finds the storm in the saved state.
	f.restart()
	f.settle(t, hostsDoc(0, 20))
	if err := f.store.TakePowerBudget(f.ctx, "h1", "outOfService", false); !errors.Is(err, ErrRemediationStorm) {
		t.Fatalf("TakePowerBudget after a restart = %v", err)
	}
	// Recovery: the cooldown holds, then actions resume.
	if err := f.store.ObserveHealth(f.ctx, 5, 20); err != nil {
		t.Fatal(err)
	}
	if err := f.store.TakePowerBudget(f.ctx, "h1", "outOfService", false); !errors.Is(err, ErrRemediationStorm) || !strings.Contains(err.Error(), "cooldown") {
		t.Fatalf("TakePowerBudget in the cooldown = %v", err)
	}
	f.clock.Step(5 * time.Minute)
	if err := f.store.ObserveHealth(f.ctx, 5, 20); err != nil {
		t.Fatal(err)
	}
	if err := f.store.TakePowerBudget(f.ctx, "h1", "outOfService", false); err != nil {
		t.Fatalf("TakePowerBudget after the cooldown = %v", err)
	}
	if f.sink.count(ReasonStormOver) != 1 || f.sink.count(ReasonStormEnded) != 1 {
		t.Errorf("events: %d over, %d ended", f.sink.count(ReasonStormOver), f.sink.count(ReasonStormEnded))
	}
}

// TestStormClearedWhenLimitRemoved: a storm saved while maxUnhealthy was set holds
// nothing once the limit is removed from the config, and the next pass clears it.
func TestStormClearedWhenLimitRemoved(t *testing.T) {
	f := newFixture(t, 10, 25)
	limit := intstr.FromInt32(2)
	f.guard.MaxUnhealthy = &limit
	f.restart()
	f.setNodes(nodesFor(0, 5)...)
	f.settle(t, hostsDoc(0, 5))
	if err := f.store.ObserveHealth(f.ctx, 3, 5); err != nil || f.store.RemediationHold() == nil {
		t.Fatalf("3 of 5 with a limit of 2: %v, hold %v", err, f.store.RemediationHold())
	}
	f.guard.MaxUnhealthy = nil
	f.restart()
	f.settle(t, hostsDoc(0, 5))
	if err := f.store.TakePowerBudget(f.ctx, "h1", "outOfService", false); err != nil {
		t.Fatalf("TakePowerBudget without a limit = %v", err)
	}
	if err := f.store.ObserveHealth(f.ctx, 3, 5); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := f.state.Load(f.ctx); st.Storm != nil {
		t.Errorf("saved storm %+v after the limit was removed", st.Storm)
	}
	if f.sink.count(ReasonStormEnded) != 1 {
		t.Errorf("%d %s events", f.sink.count(ReasonStormEnded), ReasonStormEnded)
	}
}
