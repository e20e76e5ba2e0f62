package routes

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

const (
	// viaLocal names a route to this host's own pod CIDR: none is programmed.
	viaLocal = "local"
	// viaFabric names a route whose gateway is not on-link and that the fabric
	// carries (ProviderOptions.OffLinkViaFabric): none is programmed.
	viaFabric = "fabric"
	// unknownNode stands for the node of a kernel route whose gateway is no Node's
	// InternalIP.
	unknownNode = "unknown-node"
)

// RouteName is the cloudprovider.Route name of the route to node's dst via via:
// "<node>/<cidr> via <gateway>" (or via "local"/"fabric" when no kernel route
// exists). Node names cannot contain "/" or spaces, so the name parses back.
func RouteName(node types.NodeName, dst netip.Prefix, via string) string {
	n := string(node)
	if n == "" {
		n = unknownNode
	}
	return fmt.Sprintf("%s/%s via %s", n, dst, via)
}

// parseRouteName returns the node and the "via" part of a RouteName.
func parseRouteName(name string) (node, via string, ok bool) {
	head, via, ok := strings.Cut(name, " via ")
	if !ok {
		return "", "", false
	}
	node, _, ok = strings.Cut(head, "/")
	return node, via, ok
}
