//go:build linux

package framework

import "syscall"

// processAlive reports whether a process with this PID exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
