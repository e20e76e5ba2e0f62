//go:build e2e

package e2e

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestSystemdNotify runs the real binary against a fake notify socket, as systemd
// would with Type=notify and WatchdogSec=: READY=1 comes only once the process serves
// (/healthz answers at that moment), WATCHDOG=1 pings follow, and SIGTERM sends
// STOPPING=1 before a clean exit.
func TestSystemdNotify(t *testing.T) {
	l := newLabNoCCM(t, host{name: "sd-1", ip: "10.70.0.1"})
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			for _, line := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				msgs <- line
			}
		}
	}()
	next := func(want string) {
		t.Helper()
		deadline := time.After(90 * time.Second) // a hang detector, not a speed check
		for {
			select {
			case m := <-msgs:
				if m == want {
					return
				}
				if strings.HasPrefix(m, "READY") || strings.HasPrefix(m, "STOPPING") {
					t.Logf("notify: %s", m)
				}
			case <-deadline:
				t.Fatalf("no %s on the notify socket", want)
			}
		}
	}

	ccm := framework.StartCCMEnv(t, l.cp, []string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=2000000"}, l.config)
	next("READY=1")
	// At READY the process serves: /healthz answers at once.
	ctx, cancel := context.WithTimeout(l.ctx, 3*time.Second)
	defer cancel()
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatalf("READY=1 before /healthz answers: %v", err)
	}
	next("WATCHDOG=1")
	next("WATCHDOG=1")
	ccm.Stop()
	next("STOPPING=1")
	if err := ccm.ExitErr(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}
