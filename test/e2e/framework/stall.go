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
	code, body, err := c.get(ctx, "/readyz", false)
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
