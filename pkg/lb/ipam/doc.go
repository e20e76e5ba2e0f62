// Package ipam assigns load-balancer IPs to Services from the CloudConfig's address
// pools, following MetalLB's allocator (go.universe.tf/metallb internal/allocator
// and controller/service.go) where it has a rule.
//
// # State
//
// The Allocator keeps no state of its own that outlives the process: after a start
// or a leader change, Prime it with every existing Service's current IPs (from
// status.loadBalancer.ingress) before the first Assign. Prime keeps every IP that
// is not held incompatibly by an earlier-primed Service, in or out of the pools, so
// an IP in use is never handed out again.
//
// # Rules (as MetalLB)
//
//   - Pool choice: the pool named by baremetal-ccm.io/address-pool, else the
//     auto-assign pools that admit the Service (namespaces and serviceSelector,
//     both when both are set), by Priority (lower first) then name.
//   - Requested IPs (baremetal-ccm.io/load-balancer-ips or spec.loadBalancerIP,
//     not both) must be in a pool that admits the Service, and in the named pool
//     if there is one; a pool with autoAssign: false serves Services that name it
//     or one of its IPs.
//   - Dual stack: auto-assignment takes both families from one pool (the first
//     that offers both). PreferDualStack falls back to the first family alone,
//     then the second; RequireDualStack fails with ErrFamilyUnavailable (no pool
//     offers both) or ErrPoolExhausted.
//   - Sharing (baremetal-ccm.io/allow-shared-ip): Services may hold the same IP
//     when both carry the same non-empty key, no protocol/port pair is used twice,
//     they have the same externalTrafficPolicy, and Local ones the same selector.
//   - Current IPs are kept while valid; an IP that a changed pool no longer
//     contains is kept and reported (Assignment.OutOfPool), as is an .0/.255
//     address of a pool that turned on avoidBuggyIPs.
//
// # Deviations from MetalLB, and why
//
//   - Priority: lower first, 0 is the default and may be undercut by negative
//     values (MetalLB treats 0 as "unset, last"); pools of equal priority go in name
//     order (MetalLB: map order). Deterministic and as the CloudConfig documents.
//     MetalLB also tries restricted (namespace/selector) pools before open ones;
//     here only Priority orders them.
//   - A Service with a sharing key joins the lowest compatible IP of the pool that
//     already carries the key, before considering free addresses (MetalLB takes
//     whichever comes first in address order, so a freed lower address can split a
//     group that meant to share).
//   - A Local Service without a selector does not share with Cluster Services
//     (MetalLB's backend key lets it): the traffic policy decides which nodes
//     announce, and one IP has one set of announcers.
//   - Requested IPs may cover one family of a dual-stack Service; the other family
//     is auto-assigned from the requested IP's pool (MetalLB requires the requested
//     IPs to match the Service's families exactly).
//   - A RequireDualStack Service that keeps a working IP whose pool lacks the other
//     family gets that family from another admitting pool instead of being moved:
//     a working IP is never given up just to keep both families in one pool.
//   - Assignment of an IP that is out of every pool: kept (MetalLB clears it and
//     reallocates); the design says such Services are left alone and reported.
//
// # Cost
//
// Allocation and release are O(log f) (f: free addresses below a range's
// high-water mark) plus a few map operations; memory is O(1) per address in use.
// Ranges are never materialized: an IPv6 /64 costs what a /30 costs.
// Auto-assignment hands out the lowest free address of the pool's first range (in the
// order the pool lists its addresses, as MetalLB does) that has one.
package ipam
