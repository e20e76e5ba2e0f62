// Command baremetal-ccmctl is the operators' tool for baremetal-ccm: manifests, agent
// credentials, BMC checks, explain and pool reports (see internal/ctl, and
// `baremetal-ccmctl help`).
package main

import (
	"os"

	"github.com/baremetal-ccm/baremetal-ccm/internal/ctl"
)

func main() {
	os.Exit(ctl.Run(os.Args[1:], os.Stdout, os.Stderr))
}
