package framework

import (
	"context"
	"fmt"
	"net"
	"time"
)

// WaitFor calls cond every 200 ms until it returns true and a nil error. It gives up when
// timeout passes or ctx is done, with an error naming what and cond's last error.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	return WaitForInterval(ctx, timeout, 200*time.Millisecond, what, cond)
}

// WaitForInterval is WaitFor calling cond every interval.
func WaitForInterval(ctx context.Context, timeout, interval time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond(ctx)
		if ok && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last error: %w)", what, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w after %s", what, ctx.Err(), timeout)
		case <-tick.C:
		}
	}
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago (chosen by the
// kernel, from the ephemeral range).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
