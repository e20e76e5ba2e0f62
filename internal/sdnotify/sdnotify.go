// Package sdnotify tells systemd about the state of the process: the sd_notify(3)
// protocol (READY=1, STOPPING=1, STATUS=..., WATCHDOG=1) over
// github.com/coreos/go-systemd/v22/daemon, for a unit with Type=notify and,
// optionally, WatchdogSec=.
//
// Guarantees:
//   - Outside systemd (no NOTIFY_SOCKET when New is called) every method is a no-op
//     that returns no error and sends nothing; so is every method of a nil *Notifier.
//   - Under systemd, a message that cannot be delivered is reported as an error (for
//     Ready, Stopping and Status) or logged (for watchdog pings); nothing is retried.
//   - WATCHDOG=1 is sent only after the caller's check passed: a wedged process stops
//     pinging and systemd restarts it (Restart=on-failure covers watchdog timeouts).
//   - The environment is left as it is: child processes inherit NOTIFY_SOCKET and
//     WATCHDOG_*; the unit's NotifyAccess=main makes systemd ignore anything they
//     send, and WATCHDOG_PID names this process only.
//   - A Notifier is immutable after New and safe for concurrent use.
package sdnotify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"k8s.io/klog/v2"
)

// Notifier sends state notifications to systemd. Create it with New.
type Notifier struct {
	// enabled: NOTIFY_SOCKET was set when New ran.
	enabled bool
	// watchdog is the watchdog timeout systemd set for this process (WATCHDOG_USEC,
	// WATCHDOG_PID); 0 when the watchdog is off or enabled is false.
	watchdog time.Duration
	// watchdogErr: WATCHDOG_USEC or WATCHDOG_PID could not be parsed (RunWatchdog
	// logs it and does nothing).
	watchdogErr error
}

// New decides once, from NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID (the latter two
// through go-systemd), what the Notifier does. Without NOTIFY_SOCKET it is a no-op.
// The watchdog counts as enabled only when NOTIFY_SOCKET is set and systemd set
// WATCHDOG_USEC for this very process (WATCHDOG_PID, when set, is our PID). Each
// message goes to NOTIFY_SOCKET as go-systemd reads it when sending: if something
// unsets it after New, sends fail with an error instead of being dropped silently.
func New() *Notifier {
	n := &Notifier{enabled: os.Getenv("NOTIFY_SOCKET") != ""}
	if !n.enabled {
		return n
	}
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		n.watchdogErr = err
		return n
	}
	n.watchdog = interval
	return n
}

// Enabled reports whether the process runs under systemd with a notify socket.
func (n *Notifier) Enabled() bool { return n != nil && n.enabled }

// WatchdogInterval is the watchdog timeout systemd set for this process, or 0 when
// there is no watchdog (RunWatchdog then does nothing).
func (n *Notifier) WatchdogInterval() time.Duration {
	if n == nil {
		return 0
	}
	return n.watchdog
}

// Ready sends READY=1: start-up is complete. Call it once the process really serves
// (for a Type=notify unit, systemd holds back units ordered after this one, and
// enforces TimeoutStartSec=, until then).
func (n *Notifier) Ready() error { return n.send(daemon.SdNotifyReady) }

// Stopping sends STOPPING=1: the process has begun shutting down (call it on SIGTERM,
// before the shutdown work).
func (n *Notifier) Stopping() error { return n.send(daemon.SdNotifyStopping) }

// Status sends STATUS=msg, the one-line status `systemctl status` shows. Newlines
// and NUL bytes in msg are replaced by spaces, so msg cannot smuggle in other
// assignments (such as READY=1) nor have systemd drop the message.
func (n *Notifier) Status(msg string) error {
	return n.send("STATUS=" + strings.Map(func(r rune) rune {
		switch r {
		case '\n', '\r', 0:
			return ' '
		}
		return r
	}, msg))
}

// send delivers one notification datagram; a no-op when not under systemd.
func (n *Notifier) send(state string) error {
	if !n.Enabled() {
		return nil
	}
	sent, err := daemon.SdNotify(false, state)
	if err != nil {
		return fmt.Errorf("sd_notify %q: %w", firstField(state), err)
	}
	if !sent {
		return fmt.Errorf("sd_notify %q: %w", firstField(state), errSocketGone)
	}
	return nil
}

var errSocketGone = errors.New("NOTIFY_SOCKET was unset after sdnotify.New")

// firstField names a message in errors without repeating a whole status text.
func firstField(state string) string {
	if i := strings.IndexByte(state, '='); i >= 0 {
		return state[:i]
	}
	return state
}

// RunWatchdog keeps the systemd watchdog fed for as long as check passes, and returns
// when ctx is done. It does nothing (returns at once, never calls check) when
// systemd did not enable the watchdog for this process.
//
// Every WatchdogInterval()/2, starting at once, it calls check with a context whose
// deadline is WatchdogInterval()/4 away (so that, while checks pass within their
// deadline, pings are at most 3/4 of the interval apart) and sends WATCHDOG=1 only if
// check returned nil. check is
// how the caller proves that the process is not wedged (for example a request to its
// own /healthz); it must honor the context's deadline: RunWatchdog waits for it, and
// a check that hangs stops the pings, which is the point. A failed check is logged
// (klog.FromContext(ctx)) and not retried before the next period; when check passes
// again the pings resume. A nil check always passes: the pings then only prove that
// this goroutine runs.
//
// Start it after Ready: systemd enforces the watchdog only once start-up is complete,
// and checks that fail before the process serves would only log noise.
func (n *Notifier) RunWatchdog(ctx context.Context, check func(context.Context) error) {
	logger := klog.FromContext(ctx).WithName("sd-watchdog")
	if n != nil && n.watchdogErr != nil {
		logger.Error(n.watchdogErr, "Invalid systemd watchdog environment; not pinging the watchdog")
		return
	}
	interval := n.WatchdogInterval()
	if interval <= 0 {
		return
	}
	period, timeout := interval/2, interval/4
	logger.Info("Pinging the systemd watchdog while the self-check passes", "watchdogSec", interval, "period", period, "checkTimeout", timeout)

	ticker := time.NewTicker(period)
	defer ticker.Stop()
	failures := 0
	for {
		err := runCheck(ctx, check, timeout)
		if ctx.Err() != nil {
			return // shutting down: neither a ping nor a failure to report
		}
		if err != nil {
			failures++
			logger.Error(err, "Self-check failed; not pinging the systemd watchdog (systemd restarts the service when the watchdog times out)",
				"consecutiveFailures", failures, "watchdogSec", interval)
		} else {
			if failures > 0 {
				logger.Info("Self-check passes again; pinging the systemd watchdog", "failedChecks", failures)
				failures = 0
			}
			if err := n.send(daemon.SdNotifyWatchdog); err != nil {
				logger.Error(err, "Cannot ping the systemd watchdog")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func runCheck(ctx context.Context, check func(context.Context) error, timeout time.Duration) error {
	if check == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return check(ctx)
}
