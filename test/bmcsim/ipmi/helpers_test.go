package ipmi_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/ipmi"
)

// hangLimit bounds every wait in these tests: it only detects a hang, it
// never measures speed.
const hangLimit = 60 * time.Second

// requireTools fails (never skips) the test when ipmi_sim or ipmitool is
// missing, naming the command that installs them.
func requireTools(t *testing.T) {
	t.Helper()
	if err := ipmi.CheckTools(ipmi.Options{}); err != nil {
		t.Fatal(err) // the error names the apt-get command
	}
}

// startLab starts n BMCs in a fresh directory whose name needs shell
// quoting, and stops them when the test ends.
func startLab(t *testing.T, n int, opts ipmi.Options) *ipmi.Lab {
	t.Helper()
	requireTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	lab, err := ipmi.Start(ctx, t.TempDir()+"/lab $x&y", n, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(lab.Stop)
	return lab
}

// ipmitool runs the real ipmitool against b, one try of one second (-N 1
// -R 1) so that a dead BMC fails fast, and returns its output and exit code.
func ipmitool(t *testing.T, b *ipmi.BMC, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	out, err := b.IPMITool(ctx, append([]string{"-N", "1", "-R", "1"}, args...)...)
	if ctx.Err() != nil {
		t.Fatalf("ipmitool %v hung: %v", args, ctx.Err())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out, 0
	case errors.As(err, &ee):
		return out, ee.ExitCode()
	}
	t.Fatalf("ipmitool %v: %v", args, err)
	return "", 0
}

// powerStatus asks b for its power over IPMI and fails the test if b does
// not answer.
func powerStatus(t *testing.T, b *ipmi.BMC) bool {
	t.Helper()
	out, code := ipmitool(t, b, "chassis", "power", "status")
	switch {
	case code == 0 && strings.Contains(out, "Chassis Power is on"):
		return true
	case code == 0 && strings.Contains(out, "Chassis Power is off"):
		return false
	}
	t.Fatalf("%s: chassis power status: exit %d: %s", b.Name(), code, out)
	return false
}

func wantPower(t *testing.T, b *ipmi.BMC, want bool) {
	t.Helper()
	got, err := b.Power()
	if err != nil {
		t.Fatalf("%s: Power: %v", b.Name(), err)
	}
	if got != want {
		t.Fatalf("%s: Power() = %v, want %v", b.Name(), got, want)
	}
}

// procState returns the state letter of /proc/PID/stat ("R", "S", "Z", ...)
// or "" when there is no such process.
func procState(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// pid (comm) state ...; comm may contain spaces and parentheses.
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+3 <= len(s) {
		return s[i+2 : i+3]
	}
	return "?"
}

// ipmiSimsIn lists the PIDs of every ipmi_sim whose command line mentions
// dir (read from /proc; nothing is signalled).
func ipmiSimsIn(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(cmdline) == 0 {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if strings.HasSuffix(args[0], "ipmi_sim") && strings.Contains(string(cmdline), dir) && procState(pid) != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitFor polls cond until it holds, failing the test after hangLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("hang: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
