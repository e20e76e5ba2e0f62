//go:build linux

package ipmi_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/ipmi"
)

// TestLockedThreadExit: Start called from a goroutine locked to its OS
// thread, which then exits (Go terminates the thread). With Pdeathsig set
// on a fork from that thread, the kernel would SIGKILL the BMCs; they must
// keep answering.
func TestLockedThreadExit(t *testing.T) {
	requireTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	var (
		lab *ipmi.Lab
		err error
		tid int
	)
	dir := t.TempDir()
	tid = onDoomedThread(func() { lab, err = ipmi.Start(ctx, dir, 2, ipmi.Options{}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Stop)
	// Once the thread is gone, the kernel has sent any Pdeathsig tied to it.
	waitFor(t, "the locked thread to exit", func() bool {
		_, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid))
		return os.IsNotExist(err)
	})
	for _, b := range lab.BMCs() {
		if !powerStatus(t, b) {
			t.Fatalf("%s says off", b.Name())
		}
		if s := procState(b.PID()); s == "" || s == "Z" {
			t.Fatalf("%s: ipmi_sim %d is dead (state %q)", b.Name(), b.PID(), s)
		}
	}
}

// onDoomedThread runs f on an OS thread that Go terminates when f returns,
// and returns the thread's ID. Go cannot terminate the main thread (it
// parks it instead), so a goroutine that finds itself there keeps that
// thread locked and runs f in another goroutine, which is then on another
// thread.
func onDoomedThread(f func()) (tid int) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if syscall.Gettid() == syscall.Getpid() {
			defer runtime.UnlockOSThread()
			tid = onDoomedThread(f)
			return
		}
		tid = syscall.Gettid()
		f() // returns without UnlockOSThread: the thread exits with the goroutine
	}()
	<-done
	return tid
}

// TestDeathOfTestBinary: a test binary that is SIGKILLed takes its BMCs with
// it. The helper below runs in a child test binary.
func TestDeathOfTestBinary(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	// Become the subreaper of the helper's orphans, so that their exit
	// status can be checked and no zombie is left to a PID 1 that may not
	// reap.
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", e)
	}
	defer syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperLab$", "-test.count=1")
	cmd.Env = append(os.Environ(), "IPMI_HELPER_DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "PIDS "); ok {
			for _, f := range strings.Fields(rest) {
				pid, _ := strconv.Atoi(f)
				pids = append(pids, pid)
			}
			break
		}
	}
	if len(pids) != 2 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper reported PIDs %v (ctx %v)", pids, ctx.Err())
	}
	t.Cleanup(func() { // if the test fails, do not leak the helper's BMCs
		for _, pid := range ipmiSimsIn(t, dir) {
			if slices.Contains(pids, pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	for _, pid := range pids {
		if s := procState(pid); s == "" || s == "Z" {
			t.Fatalf("ipmi_sim %d not running before the kill (state %q)", pid, s)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	// The orphans are now this process's children (unless the dying helper
	// reaped them itself): reap them and check that SIGKILL ended them.
	for _, pid := range pids {
		waitFor(t, "ipmi_sim processes to die with their test binary", func() bool {
			var ws syscall.WaitStatus
			wpid, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			switch {
			case wpid == pid:
				if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("ipmi_sim %d ended with status %#x, want SIGKILL", pid, ws)
				}
				t.Logf("ipmi_sim %d died of SIGKILL", pid)
				return true
			case err == syscall.ECHILD: // reaped by a helper thread still in wait4 as the helper died, or not ours yet
				s := procState(pid)
				return s == "" || s == "Z"
			}
			return false
		})
	}
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

func TestHelperLab(t *testing.T) {
	dir := os.Getenv("IPMI_HELPER_DIR")
	if dir == "" {
		t.Skip("helper for TestDeathOfTestBinary")
	}
	lab, err := ipmi.Start(context.Background(), dir, 2, ipmi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, b := range lab.BMCs() {
		pids = append(pids, strconv.Itoa(b.PID()))
	}
	os.Stdout.WriteString("PIDS " + strings.Join(pids, " ") + "\n")
	time.Sleep(hangLimit) // until SIGKILL
}
