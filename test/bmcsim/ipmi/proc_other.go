//go:build !linux

package ipmi

import "os/exec"

// startProcess: only Linux can tie a child's life to the test binary.
func startProcess(cmd *exec.Cmd) error { return cmd.Start() }

// ownsUDPPort cannot look into other processes' sockets here: assume the
// port is bound and let the ipmitool probe decide.
func ownsUDPPort(pid, port int) (bool, error) { return true, nil }
