//go:build linux

package sdnotify

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// patience bounds every wait: it only turns a deadlock into a failure, it is not a
// performance expectation.
const patience = 60 * time.Second

// fakeSystemd is the receiving end of a notify socket, as systemd's manager has it.
type fakeSystemd struct {
	t    *testing.T
	conn *net.UnixConn
	addr string
}

// listen creates a unixgram socket in a temporary directory; it does not set
// NOTIFY_SOCKET (see serve).
func listen(t *testing.T) *fakeSystemd {
	t.Helper()
	dir := t.TempDir()
	if len(dir) > 90 { // sun_path holds 108 bytes
		var err error
		if dir, err = os.MkdirTemp("", "sdn"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	addr := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &fakeSystemd{t: t, conn: conn, addr: addr}
}

// serve listens and points NOTIFY_SOCKET at the socket (restored after the test).
func serve(t *testing.T) *fakeSystemd {
	t.Helper()
	s := listen(t)
	t.Setenv("NOTIFY_SOCKET", s.addr)
	return s
}

// recv waits for the next datagram.
func (s *fakeSystemd) recv() string {
	s.t.Helper()
	if err := s.conn.SetReadDeadline(time.Now().Add(patience)); err != nil {
		s.t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, _, err := s.conn.ReadFrom(buf)
	if err != nil {
		s.t.Fatalf("no notification received: %v", err)
	}
	return string(buf[:n])
}

// expect waits for the next datagram and requires it to be want.
func (s *fakeSystemd) expect(want string) {
	s.t.Helper()
	if got := s.recv(); got != want {
		s.t.Fatalf("notification = %q, want %q", got, want)
	}
}

// queued returns the datagram waiting on the socket, if any, without waiting for one.
func (s *fakeSystemd) queued() (string, bool) {
	s.t.Helper()
	rc, err := s.conn.SyscallConn()
	if err != nil {
		s.t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var n int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
		return true
	}); err != nil {
		s.t.Fatal(err)
	}
	switch {
	case rerr == nil:
		return string(buf[:n]), true
	case errors.Is(rerr, syscall.EAGAIN):
		return "", false
	}
	s.t.Fatalf("reading the notify socket: %v", rerr)
	return "", false
}

// expectNothingQueued requires that no datagram is waiting, without waiting for one:
// callers make sure that anything that would have been sent was sent already
// (a datagram is queued on the receiving socket before the sender's write returns).
func (s *fakeSystemd) expectNothingQueued() {
	s.t.Helper()
	if msg, ok := s.queued(); ok {
		s.t.Fatalf("unexpected notification %q", msg)
	}
}

// setWatchdog sets WATCHDOG_USEC (and WATCHDOG_PID to pid unless it is 0) as systemd
// does for a unit with WatchdogSec=.
func setWatchdog(t *testing.T, interval time.Duration, pid int) {
	t.Helper()
	t.Setenv("WATCHDOG_USEC", strconv.FormatInt(interval.Microseconds(), 10))
	if pid != 0 {
		t.Setenv("WATCHDOG_PID", strconv.Itoa(pid))
	} else {
		unsetenv(t, "WATCHDOG_PID")
	}
}

// unsetenv unsets key for the test; t.Setenv restores the previous value afterwards.
func unsetenv(t *testing.T, key string) {
	t.Helper()
	t.Setenv(key, "")
	os.Unsetenv(key)
}

// bufferedLogger returns a context whose klog logger writes to the test log and keeps
// a copy for assertions.
func bufferedLogger(t *testing.T) (context.Context, func() string) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	buf := logger.GetSink().(ktesting.Underlier).GetBuffer()
	return klog.NewContext(context.Background(), logger), buf.String
}

// startWatchdog runs RunWatchdog in a goroutine; the returned stop cancels it and
// waits until it has returned (so that it never logs after the test).
func startWatchdog(t *testing.T, ctx context.Context, n *Notifier, check func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.RunWatchdog(ctx, check)
	}()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(patience):
			t.Fatal("RunWatchdog did not return after its context was canceled")
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitReturn requires RunWatchdog to return by itself (ctx is never canceled).
func waitReturn(t *testing.T, n *Notifier, ctx context.Context, check func(context.Context) error) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.RunWatchdog(ctx, check)
	}()
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatal("RunWatchdog did not return although the watchdog is not enabled")
	}
}

func TestReadyStatusStopping(t *testing.T) {
	sd := serve(t)
	unsetenv(t, "WATCHDOG_USEC")
	n := New()
	if !n.Enabled() {
		t.Fatal("Enabled() = false with NOTIFY_SOCKET set")
	}
	if got := n.WatchdogInterval(); got != 0 {
		t.Errorf("WatchdogInterval() = %v without WATCHDOG_USEC, want 0", got)
	}

	if err := n.Ready(); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	sd.expect("READY=1")
	if err := n.Status("serving, 3 Nodes initialized"); err != nil {
		t.Fatalf("Status: %v", err)
	}
	sd.expect("STATUS=serving, 3 Nodes initialized")
	if err := n.Stopping(); err != nil {
		t.Fatalf("Stopping: %v", err)
	}
	// Read without waiting: this is what expectNothingQueued relies on.
	if msg, ok := sd.queued(); !ok || msg != "STOPPING=1" {
		t.Fatalf("queued notification = %q, %v; want \"STOPPING=1\", true", msg, ok)
	}
	sd.expectNothingQueued()
}

func TestStatusIsOneAssignment(t *testing.T) {
	sd := serve(t)
	n := New()
	if err := n.Status("line one\nREADY=1\r\x00end"); err != nil {
		t.Fatalf("Status: %v", err)
	}
	sd.expect("STATUS=line one READY=1  end")
}

func TestNotSystemd(t *testing.T) {
	sd := listen(t) // a socket nobody is told about
	unsetenv(t, "NOTIFY_SOCKET")
	setWatchdog(t, time.Second, os.Getpid())
	n := New()
	if n.Enabled() {
		t.Error("Enabled() = true without NOTIFY_SOCKET")
	}
	if got := n.WatchdogInterval(); got != 0 {
		t.Errorf("WatchdogInterval() = %v without NOTIFY_SOCKET, want 0", got)
	}
	for name, f := range map[string]func() error{
		"Ready": n.Ready, "Stopping": n.Stopping, "Status": func() error { return n.Status("x") },
	} {
		if err := f(); err != nil {
			t.Errorf("%s without NOTIFY_SOCKET: %v, want nil", name, err)
		}
	}
	ctx, logs := bufferedLogger(t)
	waitReturn(t, n, ctx, func(context.Context) error {
		t.Error("check called without NOTIFY_SOCKET")
		return nil
	})
	sd.expectNothingQueued()
	if l := logs(); l != "" {
		t.Errorf("RunWatchdog logged without systemd:\n%s", l)
	}
}

func TestNilNotifier(t *testing.T) {
	var n *Notifier
	if n.Enabled() || n.WatchdogInterval() != 0 {
		t.Error("nil Notifier claims to be enabled")
	}
	if err := errors.Join(n.Ready(), n.Stopping(), n.Status("x")); err != nil {
		t.Errorf("nil Notifier: %v", err)
	}
	waitReturn(t, n, context.Background(), func(context.Context) error {
		t.Error("check called on a nil Notifier")
		return nil
	})
}

func TestSocketWithoutListener(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody"))
	n := New()
	if err := n.Ready(); err == nil {
		t.Error("Ready to a socket nobody listens on: no error")
	}
	if err := n.Status("x"); err == nil || !strings.Contains(err.Error(), `"STATUS"`) {
		t.Errorf("Status error = %v, want one naming STATUS", err)
	}
}

func TestSocketUnsetAfterNew(t *testing.T) {
	serve(t)
	n := New()
	unsetenv(t, "NOTIFY_SOCKET")
	if err := n.Ready(); !errors.Is(err, errSocketGone) {
		t.Errorf("Ready after NOTIFY_SOCKET was unset: %v, want %v", err, errSocketGone)
	}
}

func TestWatchdogDisabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(t *testing.T)
	}{
		{"no WATCHDOG_USEC", func(t *testing.T) { unsetenv(t, "WATCHDOG_USEC"); unsetenv(t, "WATCHDOG_PID") }},
		{"WATCHDOG_PID of another process", func(t *testing.T) { setWatchdog(t, time.Second, os.Getpid()+1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sd := serve(t)
			tc.set(t)
			n := New()
			if got := n.WatchdogInterval(); got != 0 {
				t.Errorf("WatchdogInterval() = %v, want 0", got)
			}
			ctx, logs := bufferedLogger(t)
			waitReturn(t, n, ctx, func(context.Context) error {
				t.Error("check called without a watchdog")
				return nil
			})
			sd.expectNothingQueued()
			if l := logs(); l != "" {
				t.Errorf("RunWatchdog logged without a watchdog:\n%s", l)
			}
		})
	}
}

func TestWatchdogInvalidEnvironment(t *testing.T) {
	sd := serve(t)
	t.Setenv("WATCHDOG_USEC", "thirty seconds")
	n := New()
	ctx, logs := bufferedLogger(t)
	waitReturn(t, n, ctx, func(context.Context) error {
		t.Error("check called with an invalid WATCHDOG_USEC")
		return nil
	})
	sd.expectNothingQueued()
	if l := logs(); !strings.Contains(l, "WATCHDOG_USEC") {
		t.Errorf("the invalid WATCHDOG_USEC was not logged; log:\n%s", l)
	}
}

func TestWatchdogPingsWhileCheckPasses(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  int
	}{{"WATCHDOG_PID set", os.Getpid()}, {"no WATCHDOG_PID", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			sd := serve(t)
			const interval = 200 * time.Millisecond
			setWatchdog(t, interval, tc.pid)
			n := New()
			if got := n.WatchdogInterval(); got != interval {
				t.Fatalf("WatchdogInterval() = %v, want %v", got, interval)
			}

			ctx, _ := bufferedLogger(t)
			checks := make(chan time.Duration, 100)
			stop := startWatchdog(t, ctx, n, func(ctx context.Context) error {
				deadline, ok := ctx.Deadline()
				if !ok {
					deadline = time.Now().Add(time.Hour)
				}
				select {
				case checks <- time.Until(deadline):
				default:
				}
				return nil
			})
			for range 3 {
				sd.expect("WATCHDOG=1")
			}
			stop()
			for len(checks) > 0 {
				// The deadline is computed before the check runs: it can only be
				// closer than interval/4 by the time the check reads it.
				if left := <-checks; left > interval/4 {
					t.Errorf("check deadline %v away, want at most %v (a quarter of the interval)", left, interval/4)
				}
			}
		})
	}
}

func TestWatchdogStopsPingingWhileCheckFails(t *testing.T) {
	sd := serve(t)
	setWatchdog(t, 200*time.Millisecond, os.Getpid())
	n := New()
	ctx, logs := bufferedLogger(t)

	// The check reports what the test feeds it, one result per call, so that every
	// step is decided by the test and none by timing. It ignores its own deadline on
	// purpose (RunWatchdog trusts the check's result) and returns once runCtx is
	// canceled.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	calls := make(chan struct{})
	results := make(chan error)
	stop := startWatchdog(t, runCtx, n, func(context.Context) error {
		select {
		case calls <- struct{}{}:
		case <-runCtx.Done():
			return runCtx.Err()
		}
		select {
		case err := <-results:
			return err
		case <-runCtx.Done():
			return runCtx.Err()
		}
	})
	nextCall := func() {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(patience):
			t.Fatal("the check was not called")
		}
	}
	wedged := errors.New("main loop wedged")

	nextCall()
	results <- nil
	sd.expect("WATCHDOG=1")
	for range 2 {
		nextCall()
		results <- wedged
		nextCall()
		// The next check has started, so the previous round is over: a ping it had
		// sent would be queued by now.
		sd.expectNothingQueued()
		results <- wedged
		nextCall()
		sd.expectNothingQueued()
		results <- nil // recovered
		sd.expect("WATCHDOG=1")
	}
	cancel()
	stop()
	sd.expectNothingQueued()

	l := logs()
	if !strings.Contains(l, "main loop wedged") || !strings.Contains(l, "Self-check failed") {
		t.Errorf("failed checks were not logged; log:\n%s", l)
	}
	if !strings.Contains(l, "Self-check passes again") {
		t.Errorf("the recovery was not logged; log:\n%s", l)
	}
}

func TestWatchdogNilCheck(t *testing.T) {
	sd := serve(t)
	setWatchdog(t, 200*time.Millisecond, os.Getpid())
	ctx, _ := bufferedLogger(t)
	stop := startWatchdog(t, ctx, New(), nil)
	sd.expect("WATCHDOG=1")
	sd.expect("WATCHDOG=1")
	stop()
}
