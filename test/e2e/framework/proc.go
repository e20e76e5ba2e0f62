package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/childproc"
)

// Process is a child process a test started (the CCM, an agent, a MetalLB speaker):
// its output goes to a log file, it dies with the test binary (Pdeathsig), and it is
// stopped (SIGTERM) when the test ends, with its log's tail printed if the test
// failed.
type Process struct {
	name string
	t    testing.TB
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // exit status; set before done is closed
}

// startProcess starts argv with env added to the test's environment. A wrapper such
// as `ip netns exec NS` execs the real program, so the PID stays the program's.
func startProcess(t testing.TB, name string, env, argv []string, tailLines int) (*Process, error) {
	p := &Process{name: name, t: t, log: filepath.Join(t.TempDir(), name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := childproc.Start(p.cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("last lines of %s log %s:\n%s", name, p.log, tail(p.Log(), tailLines))
		}
	})
	return p, nil
}

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM, waits up to 10 s for the process to exit, then kills it. It
// returns how the process exited (nil for status 0) and is idempotent.
func (p *Process) Stop() error {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Logf("%s pid %d still runs 10 s after SIGTERM; killing it", p.name, p.PID())
		p.Kill()
	}
	return p.ExitErr()
}

// Kill sends SIGKILL (a crash) and waits up to 10 s for the process to be gone.
func (p *Process) Kill() {
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Errorf("%s pid %d still runs 10 s after SIGKILL", p.name, p.PID())
	}
}

// Signal sends s (SIGSTOP and SIGCONT to freeze and resume it) unless the process has
// exited.
func (p *Process) Signal(s os.Signal) { p.signal(s) }

// signal signals the process unless it has exited (Go's os.Process never signals a
// reused PID after Wait).
func (p *Process) signal(s os.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(s)
	}
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitErr returns how the process exited (nil for status 0) once Done is closed, and
// nil before.
func (p *Process) ExitErr() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// LogPath is the file holding the process's stdout and stderr.
func (p *Process) LogPath() string { return p.log }

// Log returns the process's output so far.
func (p *Process) Log() string {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.log, err)
	}
	return string(data)
}
