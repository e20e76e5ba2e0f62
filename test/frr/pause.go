package frr

import (
	"fmt"
	"time"
)

// PauseBGP stops bgpd with SIGSTOP, as a router whose BGP process is too busy to
// read its sockets: the kernel still accepts connections to port 179 and buffers
// what the speakers send, but bgpd answers nothing (no OPEN, KEEPALIVE or
// NOTIFICATION, and vtysh's BGP commands hang) until resumed. zebra and bfdd keep
// running, so BFD sessions stay up. Once bgpd is stopped in every thread, PauseBGP
// returns resume, which sends SIGCONT (ResumeBGP). Paused longer than the hold
// time, bgpd finds its hold timers expired as soon as it runs again.
//
// A paused bgpd is resumed by Stop, StopDaemon and the test's cleanup, so it never
// blocks them. Pausing a paused bgpd is an error.
func (r *Router) PauseBGP() (resume func() error, err error) {
	if err := r.pauseDaemon("bgpd"); err != nil {
		return nil, err
	}
	return r.ResumeBGP, nil
}

// ResumeBGP continues a bgpd stopped by PauseBGP (SIGCONT). It does nothing when
// bgpd is not paused, so it is safe to call twice.
func (r *Router) ResumeBGP() error { return r.resumeDaemon("bgpd") }

// PauseBFD stops bfdd as PauseBGP stops bgpd: the router's BFD falls silent (the
// speakers' BFD sessions go down after their detection time) while bgpd keeps
// its BGP sessions. A paused bfdd is resumed by Stop, StopDaemon and the test's
// cleanup.
func (r *Router) PauseBFD() (resume func() error, err error) {
	if err := r.pauseDaemon("bfdd"); err != nil {
		return nil, err
	}
	return func() error { return r.resumeDaemon("bfdd") }, nil
}

// pauseTimeout bounds the wait for every thread of a daemon to stop or continue.
const pauseTimeout = 5 * time.Second

// pauseDaemon sends SIGSTOP to a running daemon this Router started and waits
// until all its threads are stopped (procsignal.Process.Pause).
func (r *Router) pauseDaemon(name string) error {
	r.mu.Lock()
	d := r.daemons[name]
	r.mu.Unlock()
	if d == nil {
		return fmt.Errorf("frr: pause %s: %w", name, ErrNotFound)
	}
	if err := d.proc.Pause(pauseTimeout); err != nil {
		return fmt.Errorf("frr: pause %s: %w", name, err)
	}
	return nil
}

// resumeDaemon sends SIGCONT to a daemon paused by pauseDaemon and waits until it
// runs again. It returns nil when the daemon is not paused (or has exited).
func (r *Router) resumeDaemon(name string) error {
	r.mu.Lock()
	d := r.daemons[name]
	r.mu.Unlock()
	if d == nil {
		return nil
	}
	if err := d.proc.Resume(pauseTimeout); err != nil {
		return fmt.Errorf("frr: resume %s: %w", name, err)
	}
	return nil
}
