//go:build linux

// Package childproc starts test helper processes (BIRD, ipmi_sim, the CCM) so that
// they never outlive the test binary.
package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

var (
	spawnOnce sync.Once
	spawnReqs chan func()
)

// Start starts cmd with Pdeathsig SIGKILL from a dedicated goroutine locked to its OS
// thread for the life of the test binary. The kernel sends Pdeathsig when the thread
// that forked the child exits (https://go.dev/issue/27505), and Go terminates a thread
// whose goroutine exits while locked to it; forking from a thread that never exits
// makes the signal mean "the test binary died", so a child never outlives a crashed
// or timed-out test, and never dies early because some other test locked and left a
// thread.
func Start(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for f := range spawnReqs {
				f()
			}
		}()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	errc := make(chan error, 1)
	spawnReqs <- func() { errc <- cmd.Start() }
	return <-errc
}
