//go:build !linux

package bird

import "os/exec"

// startProcess: only Linux can tie a child's life to the test binary (and only Linux
// has network namespaces; Start skips before getting here).
func startProcess(cmd *exec.Cmd) error { return cmd.Start() }
