// Package identity checks that a Node, its inventory host and the host's BMC describe
// the same machine before anything acts on "powered off". The three sources are the
// Node's status.nodeInfo.systemUUID (kubelet reads it from SMBIOS), the inventory
// host's systemUUID, and the system UUID the BMC reports for the system it read power
// from (Redfish ComputerSystem.UUID, IPMI system GUID).
//
// A missing value is not a contradiction; two present values that differ (in either
// byte order, see inventory.SameSystemUUID) are, and Check then returns an error that
// names both.
package identity

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// ErrMismatch is wrapped by every error Check returns.
var ErrMismatch = errors.New("node, inventory host and BMC disagree on the machine")

// ReasonMismatch is the event reason recorded on the Node.
const ReasonMismatch = "IdentityMismatch"

// Check returns nil when no two of the Node's systemUUID, the host's systemUUID and
// bmcUUID (the BMC's answer; "" when it reported none) contradict each other.
func Check(node *v1.Node, host *inventory.Host, bmcUUID string) error {
	nodeUUID := inventory.NodeSystemUUID(node) // "" when the kubelet reported its machine ID instead
	if same, ok := inventory.SameSystemUUID(nodeUUID, host.SystemUUID); ok && !same {
		return fmt.Errorf("%w: Node %s reports systemUUID %s but inventory host %q has systemUUID %s; fix the inventory (or the Node's providerID) so they name the same machine",
			ErrMismatch, node.Name, nodeUUID, host.Name, host.SystemUUID)
	}
	if same, ok := inventory.SameSystemUUID(bmcUUID, host.SystemUUID); ok && !same {
		return fmt.Errorf("%w: the BMC of inventory host %q reports system UUID %s but the host's systemUUID is %s; the BMC address may belong to another machine: fix bmc.address or systemUUID in the inventory",
			ErrMismatch, host.Name, bmcUUID, host.SystemUUID)
	}
	if same, ok := inventory.SameSystemUUID(bmcUUID, nodeUUID); ok && !same {
		return fmt.Errorf("%w: the BMC of inventory host %q reports system UUID %s but Node %s reports systemUUID %s; the BMC address may belong to another machine: fix bmc.address in the inventory",
			ErrMismatch, host.Name, bmcUUID, node.Name, nodeUUID)
	}
	return nil
}
