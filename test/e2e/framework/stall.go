package framework

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/procsignal"
)

// Component of a control plane that a test can stall.
const (
	APIServer = "apiserver"
	Etcd      = "etcd"
)

// PID returns the PID of one of the control plane's processes (APIServer, Etcd), as
// hack/lab/control-plane.sh recorded it.
func (cp *ControlPlane) PID(component string) (int, error) {
	b, err := os.ReadFile(filepath.Join(cp.Dir, component+".pid"))
	if err != nil {
		return 0, fmt.Errorf("control plane %s: %w", component, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("control plane %s pid file: %w", component, err)
	}
	return pid, nil
}

// Stall freezes one of the control plane's processes (SIGSTOP), as a stalled disk or
// a frozen VM does, and returns the function that resumes it (SIGCONT). The process
// is resumed at the latest when the test binary's cleanup runs.
func (cp *ControlPlane) Stall(component string) (resume func() error, err error) {
	pid, err := cp.PID(component)
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("stopping %s (pid %d): %w", component, pid, err)
	}
	return func() error { return syscall.Kill(pid, syscall.SIGCONT) }, nil
}

// Ready returns whether GET /readyz (unauthenticated, as probes do) answers 200, and
// its body.
func (c *CCM) Ready(ctx context.Context) (bool, string, error) {
	code, body, err := c.get(ctx, c.http, "/readyz", false)
	if err != nil {
		return false, "", err
	}
	return code == http.StatusOK, strings.TrimSpace(body), nil
}

// WaitReady waits until /readyz answers 200 (at most timeout); it fails at once if
// the process exits.
func (c *CCM) WaitReady(ctx context.Context, timeout time.Duration) error {
	var last string
	err := WaitFor(ctx, timeout, "the CCM's /readyz", func(ctx context.Context) (bool, error) {
		select {
		case <-c.done:
			return false, fmt.Errorf("CCM exited (%v) before it was ready", c.err)
		default:
		}
		ok, body, err := c.Ready(ctx)
		if err == nil {
			last = body
		}
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last answer: %s)", err, last)
	}
	return nil
}

// AddAddress adds prefix to a network interface the test created (in the root
// namespace); it is removed with the interface, or at cleanup by the caller.
func AddAddress(ctx context.Context, ifname string, prefix netip.Prefix) error {
	out, err := exec.CommandContext(ctx, "ip", "addr", "add", prefix.String(), "dev", ifname).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip addr add %s dev %s: %w: %s", prefix, ifname, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RestartAPIServer stops the API server (SIGTERM, as a rolling upgrade of a static pod
// does; SIGKILL after 30 s), leaves it down (connections refused) for down, as while
// the new version's container starts, starts it again with the same command line,
// and waits at most timeout until /readyz answers 200, polled every 50 ms. It returns
// when the old process had exited and when /readyz first answered 200: the API server
// was ready again.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context, down, timeout time.Duration) (exited, ready time.Time, err error) {
	pid, err := cp.PID(APIServer)
	if err != nil {
		return exited, ready, err
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return exited, ready, fmt.Errorf("the API server's command line: %w", err)
	}
	argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	began := time.Now()
	defer func() {
		end := ready
		if end.IsZero() {
			end = time.Now()
		}
		cp.mu.Lock()
		cp.restarts = append(cp.restarts, [2]time.Time{began, end.Add(time.Second)})
		cp.mu.Unlock()
	}()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return exited, ready, fmt.Errorf("stopping the API server (pid %d): %w", pid, err)
	}
	gone := func(context.Context) (bool, error) { return !procsignal.Running(pid), nil }
	if err := WaitForInterval(ctx, 30*time.Second, 20*time.Millisecond, "the API server to exit", gone); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if err := WaitForInterval(ctx, 10*time.Second, 20*time.Millisecond, "the API server to die", gone); err != nil {
			return exited, ready, err
		}
	}
	exited = time.Now()
	select {
	case <-ctx.Done():
		return exited, ready, ctx.Err()
	case <-time.After(down):
	}
	log, err := os.OpenFile(filepath.Join(cp.Dir, APIServer+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return exited, ready, err
	}
	defer log.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // as control-plane.sh's setsid
	if err := cmd.Start(); err != nil {
		return exited, ready, fmt.Errorf("starting the API server again: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reaped when control-plane.sh down stops it
	if err := os.WriteFile(filepath.Join(cp.Dir, APIServer+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return exited, ready, err
	}
	err = WaitForInterval(ctx, timeout, 50*time.Millisecond, "the restarted API server's /readyz", func(ctx context.Context) (bool, error) {
		if !procsignal.Running(cmd.Process.Pid) {
			return false, fmt.Errorf("the restarted API server exited; see %s", log.Name())
		}
		var code int
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = cp.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(rctx).StatusCode(&code)
		if code == http.StatusOK {
			ready = time.Now()
		}
		return code == http.StatusOK, nil
	})
	return exited, ready, err
}
