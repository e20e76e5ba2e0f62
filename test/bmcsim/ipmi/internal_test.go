package ipmi

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTakenPortIsRetried: when the port probed as free is taken before
// ipmi_sim binds it, Start moves on to another port.
func TestTakenPortIsRetried(t *testing.T) {
	if err := CheckTools(Options{}); err != nil {
		t.Fatal(err) // the error names the apt-get command
	}
	squatter, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	taken := squatter.LocalAddr().(*net.UDPAddr).Port

	orig := pickPort
	t.Cleanup(func() { pickPort = orig })
	calls := 0
	pickPort = func() (int, error) {
		calls++
		if calls == 1 {
			return taken, nil
		}
		return orig()
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lab, err := Start(ctx, t.TempDir(), 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Stop()
	b := lab.BMCs()[0]
	if b.Port() == taken || calls < 2 {
		t.Fatalf("port %d (taken: %d), %d picks", b.Port(), taken, calls)
	}
	log, err := os.ReadFile(filepath.Join(b.Dir(), "sim.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "Unable to bind to LAN port: Address already in use") {
		t.Fatalf("sim.log does not show the failed bind:\n%s", log)
	}
	if owned, err := ownsUDPPort(b.PID(), taken); err != nil || owned {
		t.Fatalf("ownsUDPPort(taken) = %v, %v", owned, err)
	}
	if owned, err := ownsUDPPort(b.PID(), b.Port()); err != nil || !owned {
		t.Fatalf("ownsUDPPort(port) = %v, %v", owned, err)
	}
}
