// Package version carries the build's version, stamped by the linker:
//
//	-X github.com/baremetal-ccm/baremetal-ccm/pkg/version.Version=v0.1.0
//	-X github.com/baremetal-ccm/baremetal-ccm/pkg/version.Commit=<git sha>
package version

import (
	"fmt"
	"runtime"
)

// Set by -ldflags -X at build time.
var (
	Version = "v0.0.0-dev"
	Commit  = "unknown"
)

// String is the one-line version report printed by --version.
func String(program string) string {
	return fmt.Sprintf("%s %s (commit %s, %s, %s/%s)", program, Version, Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
