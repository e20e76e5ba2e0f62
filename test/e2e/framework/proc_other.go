//go:build !linux

package framework

// processAlive: assume it is, so nothing is swept.
func processAlive(pid int) bool { return true }
