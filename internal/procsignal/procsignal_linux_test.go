//go:build linux

package procsignal

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/childproc"
)

const childEnv = "PROCSIGNAL_TEST_CHILD"

// TestMain makes the test binary, run with childEnv set, a child to pause: a
// process with several threads that runs until killed.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		for range 4 {
			go func() {
				runtime.LockOSThread()
				for {
					time.Sleep(time.Millisecond)
				}
			}()
		}
		select {}
	}
	os.Exit(m.Run())
}

// startChild starts the test binary as a child and returns it, the program name
// /proc gives it, and a channel closed once it has been waited for.
func startChild(t *testing.T) (*exec.Cmd, string, chan struct{}) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	if err := childproc.Start(cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	name := filepath.Base(os.Args[0])
	if len(name) > 15 { // TASK_COMM_LEN - 1
		name = name[:15]
	}
	return cmd, name, done
}

func threads(t *testing.T, pid int) int {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	return len(tasks)
}

func TestPauseResume(t *testing.T) {
	cmd, name, done := startChild(t)
	pid := cmd.Process.Pid
	p := New(cmd.Process, name, done)
	if p.StartTime() == "" || p.StartTime() != StartTime(pid) {
		t.Fatalf("start time %q, /proc says %q", p.StartTime(), StartTime(pid))
	}
	if err := p.Check(); err != nil || p.Pid() != pid {
		t.Fatalf("Check = %v, pid %d", err, p.Pid())
	}
	// Resume of a process never paused does nothing.
	if err := p.Resume(time.Second); err != nil {
		t.Errorf("Resume before Pause: %v", err)
	}
	if running, err := TasksStopped(pid, false); !running || err != nil {
		t.Fatalf("child not running: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); threads(t, pid) < 5 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := threads(t, pid); n < 5 {
		t.Fatalf("child has %d threads, want at least 5", n)
	}

	if err := p.Pause(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if stopped, err := TasksStopped(pid, true); !stopped || err != nil {
		t.Errorf("not every thread stopped after Pause: %v", err)
	}
	if err := p.Pause(5 * time.Second); !errors.Is(err, ErrPaused) {
		t.Errorf("second Pause = %v, want ErrPaused", err)
	}

	if err := p.Resume(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if running, err := TasksStopped(pid, false); !running || err != nil {
		t.Errorf("a thread still stopped after Resume: %v", err)
	}
	if err := p.Resume(5 * time.Second); err != nil {
		t.Errorf("second Resume: %v", err)
	}

	// Paused again, then killed: Resume has nothing to do.
	if err := p.Pause(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	<-done
	if err := p.Check(); err == nil {
		t.Error("Check passed for an exited process")
	}
	if err := p.Resume(time.Second); err != nil {
		t.Errorf("Resume of an exited process: %v", err)
	}
	if err := p.Pause(time.Second); err == nil {
		t.Error("paused an exited process")
	}
}

// TestOtherProgram: a process that does not run the program named at New is
// never signalled.
func TestOtherProgram(t *testing.T) {
	cmd, _, done := startChild(t)
	p := New(cmd.Process, "bird", done)
	if err := p.Check(); err == nil {
		t.Fatal("Check passed for another program")
	}
	if err := p.Pause(time.Second); err == nil {
		t.Error("paused another program")
	}
	if running, err := TasksStopped(cmd.Process.Pid, false); !running || err != nil {
		t.Errorf("the process was stopped: %v", err)
	}
}

func TestStatFields(t *testing.T) {
	f, ok := statFields("4242 (a b) c) T 1 4242 4242 0 -1 4194560")
	if !ok || f[0] != "T" || len(f) != 7 {
		t.Errorf("fields %q, %v", f, ok)
	}
	if _, ok := statFields("4242 (truncated"); ok {
		t.Error("parsed a line without the end of the name")
	}
	if _, ok := statFields("4242 (a)"); ok {
		t.Error("parsed a line with no fields after the name")
	}
	if StartTime(os.Getpid()) == "" {
		t.Error("no start time for this process")
	}
	if StartTime(-1) != "" {
		t.Error("start time for pid -1")
	}
	if _, err := TasksStopped(-1, true); err == nil {
		t.Error("threads for pid -1")
	}
}

// TestRunning: a process runs until it exits; an exited child that its parent has not
// reaped yet (a zombie) does not run, nor does a PID without a process.
func TestRunning(t *testing.T) {
	if !Running(os.Getpid()) {
		t.Error("this process does not run")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for Running(pid) { // exits at once; stays a zombie until Wait
		if time.Now().After(deadline) {
			t.Fatal("an exited, unreaped child still runs")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		t.Fatalf("the unreaped child is gone from /proc (%v): the zombie case was not tested", err)
	}
	_ = cmd.Wait()
	if Running(pid) {
		t.Error("a reaped child still runs")
	}
}
