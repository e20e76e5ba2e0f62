//go:build linux

package framework

import "syscall"

// procAttr makes a child process get SIGKILL when the test binary dies, so a test run
// that is killed or times out leaves no CCM behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// processAlive reports whether a process with this PID exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
