package bird

import (
	"fmt"
	"time"
)

// PauseBGP stops BIRD with SIGSTOP, as a router too busy to read its sockets: the
// kernel still accepts connections to port 179 and buffers what the speakers send,
// but BIRD answers nothing (no OPEN, KEEPALIVE or NOTIFICATION, no BFD packets:
// BFD runs in the same process, unlike FRR's bfdd, and birdc hangs) until resumed.
// Once every thread of BIRD is stopped, PauseBGP returns resume, which sends
// SIGCONT (ResumeBGP). Paused longer than the hold time, BIRD finds its hold timers
// expired as soon as it runs again.
//
// A paused BIRD is resumed by Stop and the test's cleanup, so it never blocks
// them. Pausing a paused BIRD is an error.
func (r *Router) PauseBGP() (resume func() error, err error) {
	if r.proc == nil {
		return nil, fmt.Errorf("bird: pause: not started")
	}
	if err := r.proc.Pause(pauseTimeout); err != nil {
		return nil, fmt.Errorf("bird: pause: %w", err)
	}
	return r.ResumeBGP, nil
}

// ResumeBGP continues a BIRD stopped by PauseBGP (SIGCONT) and waits until it runs
// again. It does nothing when BIRD is not paused, so it is safe to call twice.
func (r *Router) ResumeBGP() error {
	if r.proc == nil {
		return nil
	}
	if err := r.proc.Resume(pauseTimeout); err != nil {
		return fmt.Errorf("bird: resume: %w", err)
	}
	return nil
}

// pauseTimeout bounds the wait for every thread of BIRD to stop or continue.
const pauseTimeout = 5 * time.Second
