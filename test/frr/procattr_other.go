//go:build !linux

package frr

import "syscall"

// daemonProcAttr runs a daemon as cred (FRR in network namespaces needs Linux;
// Start fails elsewhere when the binaries are missing).
func daemonProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
