//go:build linux

package bird

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

// startProcess starts cmd with Pdeathsig SIGKILL from a dedicated goroutine locked to
// its OS thread for the life of the test binary. The kernel sends Pdeathsig when the
// thread that forked the child exits (https://go.dev/issue/27505); forking from a
// thread that never exits makes the signal mean "the test binary died", so BIRD never
// outlives a crashed test.
func startProcess(cmd *exec.Cmd) error {
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
