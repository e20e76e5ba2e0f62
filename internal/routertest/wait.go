package routertest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// WaitFor polls cond every 50ms until it returns true or ctx ends; an error from
// cond does not end the wait, but the last one is wrapped in the error returned
// when ctx ends. It is for convergence, not for timing assertions: give ctx a
// generous deadline.
func WaitFor(ctx context.Context, cond func(ctx context.Context) (bool, error)) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		ok, err := cond(ctx)
		if err != nil {
			lastErr = err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("%w (last error: %w)", ctx.Err(), lastErr)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// EventLog is a router's log of events of type E (the Routers of test/frr and
// test/bird).
type EventLog[E any] interface {
	// LogEvents returns the events logged at or after since, in log order.
	LogEvents(since time.Time) ([]E, error)
	// Log returns the whole log, for a failure message.
	Log() string
}

// WaitEvent waits (WaitFor) until r has logged an event at or after since that
// match accepts, and returns the first such event; if ctx ends first, it fails t
// with what (the event awaited) and r's log.
func WaitEvent[E any](ctx context.Context, t testing.TB, r EventLog[E], since time.Time, what string, match func(E) bool) E {
	t.Helper()
	var found E
	err := WaitFor(ctx, func(context.Context) (bool, error) {
		evs, err := r.LogEvents(since)
		for _, e := range evs {
			if match(e) {
				found = e
				return true, nil
			}
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("%s not logged: %v\n%s", what, err, r.Log())
	}
	return found
}
