package kick

import (
	"context"
	"testing"
	"time"
)

// Pokes coalesce: a burst leaves one wake-up; Loop passes at once and once per wake-up.
func TestPokesCoalesceAndLoopPasses(t *testing.T) {
	s := New()
	for range 100 {
		s.Poke()
	}
	if len(s) != 1 {
		t.Fatalf("%d wake-ups pending after a burst, want 1", len(s))
	}
	ctx, cancel := context.WithCancel(context.Background())
	passes := make(chan int, 10)
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Loop(ctx, s, 0, func() { n++; passes <- n })
	}()
	for want := 1; want <= 2; want++ { // the first pass, then the pending wake-up's
		if got := <-passes; got != want {
			t.Fatalf("pass %d, want %d", got, want)
		}
	}
	h := s.Handler()
	h.OnUpdate(nil, nil)
	if got := <-passes; got != 3 {
		t.Fatalf("pass %d after an update event, want 3", got)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Loop did not end with its context")
	}
}

// A Gate waits until opened (at most its bound), opens once, and a nil Gate
// ignores Open.
func TestGate(t *testing.T) {
	g := NewGate()
	if g.Wait(context.Background(), 10*time.Millisecond) {
		t.Fatal("a new Gate is open")
	}
	go g.Open()
	if !g.Wait(context.Background(), time.Minute) {
		t.Fatal("an opened Gate is not")
	}
	g.Open()
	if !g.Wait(context.Background(), 0) {
		t.Fatal("an open Gate with no time left")
	}
	var none *Gate
	none.Open()
}
