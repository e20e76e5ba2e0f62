//go:build !linux

package procsignal

import (
	"errors"
	"os"
	"time"
)

// ErrPaused is returned by Pause for a Process already paused.
var ErrPaused = errors.New("already paused")

var errNoProc = errors.New("procsignal: needs Linux /proc")

// Process is a started child process; only Linux can pause one.
type Process struct{ pid int }

// New returns a Process that cannot be paused.
func New(p *os.Process, name string, exited <-chan struct{}) *Process { return &Process{pid: p.Pid} }

// Pid returns the process ID.
func (p *Process) Pid() int { return p.pid }

// StartTime returns "".
func (p *Process) StartTime() string { return "" }

// Check fails: without /proc a process cannot be identified.
func (p *Process) Check() error { return errNoProc }

// Pause fails.
func (p *Process) Pause(timeout time.Duration) error { return errNoProc }

// Resume does nothing: nothing was paused.
func (p *Process) Resume(timeout time.Duration) error { return nil }

// StartTime returns "": no process can be identified.
func StartTime(pid int) string { return "" }

// Running reports false: no process can be observed.
func Running(pid int) bool { return false }

// TasksStopped fails.
func TasksStopped(pid int, stopped bool) (bool, error) { return false, errNoProc }
