// Package routes programs pod-CIDR routes into the Linux kernel over netlink: the
// leader's cloudprovider.Routes (Provider) and every replica's route mirror (Mirror).
//
// # Ownership
//
// Every route this package creates lives in one configured table and carries one
// configured protocol number (config.RoutesConfig; defaults: table 254 "main",
// protocol 196). Only routes with both are ever listed as ours, replaced or deleted.
// A route of another protocol in the same table is never changed: deletes name our
// protocol (the kernel matches it), and a new route whose destination and metric
// are held by a foreign route is refused with ErrForeignRoute rather than replaced.
//
// A route is "<pod CIDR> via <node InternalIP of that family>" with the kernel's
// default metric (0 for IPv4, 1024 for IPv6) and no device: the kernel resolves the
// device from the gateway.
//
// # Gateways that are not on a connected subnet
//
// Linux has no recursive next hops: a route via a gateway that is not on a subnet
// connected to this host is refused (ENETUNREACH). The package does not use
// "onlink": it would need a guessed device and would send pod traffic as if the
// node were on that link, black-holing it silently when it is not. Such a failure is
// reported as ErrGatewayNotOnLink, and then:
//
//   - the Mirror skips the route (counted in Result.SkippedOffLink, metric
//     baremetal_ccm_routes_skipped{reason="offlink"}, logged): a node in another rack is
//     reached through the fabric, which learns pod CIDRs from the BGP export;
//   - Provider.CreateRoute returns the error (the route controller turns it into a
//     FailedToCreateRoute event and NetworkUnavailable=True on the Node), unless
//     ProviderOptions.OffLinkViaFabric is set because BGP exports pod CIDRs; then it
//     succeeds without a kernel route and ListRoutes reports the route as present.
//
// In a single-subnet cluster an off-link InternalIP is a misconfiguration, and the
// default surfaces it on the Node.
//
// # Routes to this host
//
// Pods on this host are reached through the CNI's local routes, so neither the
// Mirror nor the Provider programs a route to this host's own pod CIDRs: a Node
// named like this host (the configured node name) or whose InternalIP is an address
// of this host is skipped. The Provider lists such routes as present (they are
// "local"), so the route controller marks the Node's network available.
package routes
