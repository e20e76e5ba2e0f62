package ipmi_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/ipmi"
)

// unreachableOrRefused is what ipmitool prints, with exit status 1, both for
// a wrong password and for a BMC that does not answer.
const unreachableOrRefused = "Error: Unable to establish IPMI v2 / RMCP+ session"

func TestLab(t *testing.T) {
	lab := startLab(t, 3, ipmi.Options{})
	bmcs := lab.BMCs()
	if len(bmcs) != 3 {
		t.Fatalf("BMCs() has %d entries, want 3", len(bmcs))
	}
	ports := map[int]bool{}
	for i, b := range bmcs {
		if b.Host() != "127.0.0.1" || b.Port() <= 0 || b.Username() != "admin" || b.Password() != "secret" || b.PID() <= 0 {
			t.Fatalf("bmc %d: host %q port %d user %q password %q pid %d", i, b.Host(), b.Port(), b.Username(), b.Password(), b.PID())
		}
		if b.Name() != "bmc"+strconv.Itoa(i+1) {
			t.Fatalf("bmc %d is named %q", i, b.Name())
		}
		ports[b.Port()] = true
	}
	if len(ports) != 3 {
		t.Fatalf("ports are not distinct: %v", ports)
	}
	if fi, err := os.Stat(filepath.Join(lab.Dir(), "chassis.sh")); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("chassis.sh: %v %v", fi, err)
	}
	assertLoopbackOnly(t, bmcs)

	var allPIDs []int
	for _, b := range bmcs {
		allPIDs = append(allPIDs, b.PID())
	}

	if !t.Run("status says on", func(t *testing.T) {
		for _, b := range bmcs {
			if !powerStatus(t, b) {
				t.Fatalf("%s: chassis power status says off, want on", b.Name())
			}
			wantPower(t, b, true)
		}
	}) {
		return
	}

	if !t.Run("power off through IPMI changes the state file", func(t *testing.T) {
		b := bmcs[0]
		out, code := ipmitool(t, b, "chassis", "power", "off")
		if code != 0 || !strings.Contains(out, "Chassis Power Control: Down/Off") {
			t.Fatalf("chassis power off: exit %d: %s", code, out)
		}
		wantPower(t, b, false)
		data, err := os.ReadFile(filepath.Join(b.Dir(), "chassis", "power"))
		if err != nil || strings.TrimSpace(string(data)) != "0" {
			t.Fatalf("power file: %q %v", data, err)
		}
		if powerStatus(t, b) {
			t.Fatal("chassis power status says on after power off")
		}
		calls, err := b.Calls()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(calls, "set power 0") {
			t.Fatalf("Calls() = %q, want a \"set power 0\"", calls)
		}
		// The other BMCs are separate hosts.
		wantPower(t, bmcs[1], true)
		wantPower(t, bmcs[2], true)
	}) {
		return
	}

	if !t.Run("SetPower is seen by chassis power status", func(t *testing.T) {
		b := bmcs[1]
		before, err := b.Calls()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SetPower(false); err != nil {
			t.Fatal(err)
		}
		if powerStatus(t, b) {
			t.Fatal("chassis power status says on after SetPower(false)")
		}
		if err := b.SetPower(true); err != nil {
			t.Fatal(err)
		}
		if !powerStatus(t, b) {
			t.Fatal("chassis power status says off after SetPower(true)")
		}
		after, err := b.Calls()
		if err != nil {
			t.Fatal(err)
		}
		// SetPower is no IPMI call: only the two status reads were logged.
		if got, want := after[len(before):], []string{"get power", "get power"}; !slices.Equal(got, want) {
			t.Fatalf("new calls %q, want %q", got, want)
		}
	}) {
		return
	}

	if !t.Run("wrong password and unknown user are refused", func(t *testing.T) {
		b := bmcs[2]
		before, _ := b.Calls()
		for _, creds := range [][]string{{"-U", "admin", "-P", "wrong"}, {"-U", "nobody", "-P", "secret"}} {
			ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
			args := []string{"-I", "lanplus", "-C", "3", "-N", "1", "-R", "1", "-H", b.Host(), "-p", strconv.Itoa(b.Port())}
			out, err := exec.CommandContext(ctx, "ipmitool", append(append(args, creds...), "chassis", "power", "off")...).CombinedOutput()
			cancel()
			if err == nil || !strings.Contains(string(out), unreachableOrRefused) {
				t.Fatalf("%v: chassis power off: %v: %s", creds, err, out)
			}
			if code := err.(*exec.ExitError).ExitCode(); code != 1 {
				t.Fatalf("%v: exit code %d, want 1", creds, code)
			}
		}
		wantPower(t, b, true)
		if after, _ := b.Calls(); len(after) != len(before) {
			t.Fatalf("refused logins reached the chassis: %q", after[len(before):])
		}
		if !powerStatus(t, b) { // the right credentials still work
			t.Fatal("power status says off")
		}
	}) {
		return
	}

	if !t.Run("Kill makes ipmitool fail and Restart brings the BMC back", func(t *testing.T) {
		b := bmcs[0] // powered off above
		pid, port := b.PID(), b.Port()
		if err := b.Kill(); err != nil {
			t.Fatal(err)
		}
		if s := procState(pid); s != "" {
			t.Fatalf("ipmi_sim %d still in /proc after Kill (state %s)", pid, s)
		}
		if b.PID() != 0 {
			t.Fatalf("PID() = %d after Kill", b.PID())
		}
		out, code := ipmitool(t, b, "chassis", "power", "status")
		if code != 1 || !strings.Contains(out, unreachableOrRefused) {
			t.Fatalf("dead BMC: exit %d: %s", code, out)
		}
		if err := b.Kill(); err == nil {
			t.Fatal("second Kill succeeded")
		}
		if !powerStatus(t, bmcs[1]) { // the others keep answering
			t.Fatal("bmc2 says off")
		}

		ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
		defer cancel()
		if err := b.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if b.Port() != port || b.PID() == 0 || b.PID() == pid {
			t.Fatalf("after Restart: port %d (was %d), pid %d (was %d)", b.Port(), port, b.PID(), pid)
		}
		allPIDs = append(allPIDs, b.PID())
		if powerStatus(t, b) { // the host stayed off while its BMC rebooted
			t.Fatal("power status says on after Restart, want off")
		}
		if out, code := ipmitool(t, b, "chassis", "power", "on"); code != 0 {
			t.Fatalf("chassis power on: exit %d: %s", code, out)
		}
		wantPower(t, b, true)

		// Restart of a running BMC is a reboot.
		pid = b.PID()
		if err := b.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if s := procState(pid); s != "" || b.PID() == pid {
			t.Fatalf("old ipmi_sim %d: state %q, PID() %d", pid, s, b.PID())
		}
		allPIDs = append(allPIDs, b.PID())
		if !powerStatus(t, b) {
			t.Fatal("power status says off after the reboot")
		}
	}) {
		return
	}

	t.Run("Stop leaves no process", func(t *testing.T) {
		lab.Stop()
		for _, pid := range allPIDs {
			if s := procState(pid); s != "" {
				t.Errorf("ipmi_sim %d still in /proc after Stop (state %s)", pid, s)
			}
		}
		if pids := ipmiSimsIn(t, lab.Dir()); len(pids) != 0 {
			t.Errorf("ipmi_sim processes of this lab after Stop: %v", pids)
		}
		for _, b := range bmcs {
			if b.PID() != 0 {
				t.Errorf("%s: PID() = %d after Stop", b.Name(), b.PID())
			}
		}
		lab.Stop() // idempotent
		ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
		defer cancel()
		if err := bmcs[0].Restart(ctx); err == nil {
			t.Error("Restart after Stop succeeded")
		}
		if err := bmcs[0].Kill(); err == nil {
			t.Error("Kill after Stop succeeded")
		}
		wantPower(t, bmcs[0], true) // the files remain readable
	})
}

// assertLoopbackOnly checks in /proc/net/udp that every BMC's port is bound
// to 127.0.0.1 and to nothing else.
func assertLoopbackOnly(t *testing.T, bmcs []*ipmi.BMC) {
	t.Helper()
	f, err := os.Open("/proc/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bound := map[int][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		addr, portHex, ok := strings.Cut(fields[1], ":")
		port, err := strconv.ParseUint(portHex, 16, 16)
		if ok && err == nil {
			bound[int(port)] = append(bound[int(port)], addr)
		}
	}
	for _, b := range bmcs {
		addrs := bound[b.Port()]
		if len(addrs) == 0 {
			t.Fatalf("%s: port %d not bound", b.Name(), b.Port())
		}
		for _, a := range addrs {
			if a != "0100007F" && a != "7F000001" {
				t.Fatalf("%s: port %d bound to %s, not 127.0.0.1", b.Name(), b.Port(), a)
			}
		}
	}
}

func TestOptions(t *testing.T) {
	lab := startLab(t, 1, ipmi.Options{Username: "operator7", Password: "s3cr3t!#$%-9876543", PoweredOff: true})
	b := lab.BMCs()[0]
	wantPower(t, b, false)
	if powerStatus(t, b) {
		t.Fatal("PoweredOff: status says on")
	}
	if out, code := ipmitool(t, b, "chassis", "power", "on"); code != 0 {
		t.Fatalf("chassis power on with custom credentials: exit %d: %s", code, out)
	}
	wantPower(t, b, true)
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ipmitool", "-I", "lanplus", "-C", "3", "-N", "1", "-R", "1",
		"-H", b.Host(), "-p", strconv.Itoa(b.Port()), "-U", "admin", "-P", "secret", "chassis", "power", "status").CombinedOutput()
	if err == nil {
		t.Fatalf("the default credentials work on a BMC with custom ones: %s", out)
	}
}

func TestStartRejects(t *testing.T) {
	requireTools(t)
	ctx := context.Background()
	for name, c := range map[string]struct {
		dir  string
		n    int
		opts ipmi.Options
	}{
		"n=0":               {n: 0},
		"16-byte username":  {n: 1, opts: ipmi.Options{Username: "abcdefghijklmnop"}},
		"20-byte password":  {n: 1, opts: ipmi.Options{Password: "abcdefghijklmnopqrst"}},
		"space in password": {n: 1, opts: ipmi.Options{Password: "se cret"}},
		"quote in username": {n: 1, opts: ipmi.Options{Username: `ad"min`}},
		"quote in dir":      {n: 1, dir: "it's"},
		"missing ipmi_sim":  {n: 1, opts: ipmi.Options{IPMISimPath: "/nonexistent/ipmi_sim"}},
	} {
		dir := filepath.Join(t.TempDir(), c.dir)
		lab, err := ipmi.Start(ctx, dir, c.n, c.opts)
		if err == nil {
			lab.Stop()
			t.Errorf("%s: Start succeeded", name)
			continue
		}
		if name == "missing ipmi_sim" && !strings.Contains(err.Error(), ipmi.InstallCommand) {
			t.Errorf("%s: error does not name the install command: %v", name, err)
		}
		if pids := ipmiSimsIn(t, dir); len(pids) != 0 {
			t.Errorf("%s: ipmi_sim left running: %v", name, pids)
		}
	}

	// A directory that already holds a lab is refused: ipmi_sim needs a
	// fresh state directory.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bmc1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if lab2, err := ipmi.Start(ctx, dir, 1, ipmi.Options{}); err == nil {
		lab2.Stop()
		t.Error("Start in a directory with bmc1/ succeeded")
	}
}

// TestStartFailureCleansUp: a BMC that never answers makes Start fail with
// the sim.log tail and leaves no ipmi_sim behind.
func TestStartFailureCleansUp(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	// /bin/false plays an ipmitool that never gets an answer.
	lab, err := ipmi.Start(ctx, dir, 2, ipmi.Options{IPMIToolPath: "/bin/false", StartTimeout: 2 * time.Second})
	if err == nil {
		lab.Stop()
		t.Fatal("Start succeeded with /bin/false as ipmitool")
	}
	if !strings.Contains(err.Error(), "no answer") || !strings.Contains(err.Error(), "sim.log:") {
		t.Fatalf("error: %v", err)
	}
	if pids := ipmiSimsIn(t, dir); len(pids) != 0 {
		t.Fatalf("ipmi_sim left running after a failed Start: %v", pids)
	}
}
