//go:build linux

package procsignal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrPaused is returned by Pause for a Process already paused.
var ErrPaused = errors.New("already paused")

// Process is a started child process, identified by its PID, the start time it
// had at New and the program it is expected to run.
type Process struct {
	proc   *os.Process
	name   string
	start  string
	exited <-chan struct{}

	mu     sync.Mutex
	paused bool
}

// New identifies p, which must be a process this program started and has not
// yet waited for (call New right after starting it): it records p's start time.
// name is the program p is expected to run, as /proc/<pid>/comm has it once p
// has exec'd (e.g. "bird" for "ip netns exec ... bird"). exited, when not nil,
// is closed once p has been waited for.
func New(p *os.Process, name string, exited <-chan struct{}) *Process {
	return &Process{proc: p, name: name, start: StartTime(p.Pid), exited: exited}
}

// Pid returns the process ID.
func (p *Process) Pid() int { return p.proc.Pid }

// StartTime returns the start time recorded by New ("" if p had gone already).
func (p *Process) StartTime() string { return p.start }

// Check returns an error unless the process still runs as the one New was given
// (not waited for, same start time) and runs the program named at New.
func (p *Process) Check() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s has exited", p.name)
	default:
	}
	pid := p.proc.Pid
	if st := StartTime(pid); st == "" || st != p.start {
		return fmt.Errorf("%s (pid %d) is not the process started", p.name, pid)
	}
	if comm := comm(pid); comm != p.name {
		return fmt.Errorf("pid %d runs %q, not %s", pid, comm, p.name)
	}
	return nil
}

// Pause checks the process (Check), sends it SIGSTOP and waits until every
// thread is stopped. If that takes longer than timeout, it resumes the process
// and fails. A Process already paused is not signalled: the error is ErrPaused.
func (p *Process) Pause(timeout time.Duration) error {
	p.mu.Lock()
	if err := p.Check(); err != nil {
		p.mu.Unlock()
		return err
	}
	if p.paused {
		p.mu.Unlock()
		return ErrPaused
	}
	if err := p.proc.Signal(syscall.SIGSTOP); err != nil {
		p.mu.Unlock()
		return err
	}
	p.paused = true // from here on, Resume continues it
	p.mu.Unlock()
	if err := waitTasks(p.proc.Pid, true, timeout); err != nil {
		_ = p.Resume(timeout)
		return err
	}
	return nil
}

// Resume sends SIGCONT to a process paused by Pause and waits, up to timeout,
// until none of its threads is stopped. It returns nil at once when the process
// is not paused or no longer passes Check.
func (p *Process) Resume(timeout time.Duration) error {
	p.mu.Lock()
	if !p.paused {
		p.mu.Unlock()
		return nil
	}
	p.paused = false
	if p.Check() != nil {
		p.mu.Unlock()
		return nil
	}
	err := p.proc.Signal(syscall.SIGCONT)
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return waitTasks(p.proc.Pid, false, timeout)
}

// StartTime returns the start time of pid (field 22 of /proc/<pid>/stat, in
// clock ticks since boot), or "" if there is no such process.
func StartTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	f, ok := statFields(string(b))
	if !ok || len(f) < 20 {
		return ""
	}
	return f[19]
}

// Running reports whether pid is a process that has not exited: it is in /proc and
// not a zombie (exited, not yet reaped by its parent).
func Running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f, ok := statFields(string(b))
	return ok && f[0] != "Z"
}

// statFields returns the fields of a /proc stat line after the command name
// (state first); the name, in parentheses, may contain spaces and ")".
func statFields(stat string) ([]string, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(stat[i+1:])
	return f, len(f) > 0
}

// comm returns the program name of pid (/proc/<pid>/comm), or "".
func comm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// TasksStopped reports whether every thread of pid is stopped by a signal
// (state "T") and, with stopped false, whether none is. It fails when pid has
// no threads in /proc.
func TasksStopped(pid int, stopped bool) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, fmt.Errorf("pid %d: no tasks in /proc", pid)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		f, ok := statFields(string(b))
		if !ok {
			return false, fmt.Errorf("%s: %q", t, b)
		}
		if (f[0] == "T") != stopped {
			return false, nil
		}
	}
	return true, nil
}

// waitTasks polls until TasksStopped(pid, stopped) or the timeout passes.
func waitTasks(pid int, stopped bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := TasksStopped(pid, stopped)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			want := "running"
			if stopped {
				want = "stopped"
			}
			return fmt.Errorf("pid %d: threads not %s after %v", pid, want, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
