// Package metallb is the "metallb" LoadBalancer announcer: the CCM keeps doing IPAM and
// Service status, and existing MetalLB speakers announce the IPs. It has three parts:
//
//   - Objects, a pure function from the CloudConfig and the inventory to the metallb.io
//     objects (and the password Secrets) that make MetalLB announce the CCM's pools;
//   - Reconciler, run on the elected leader, which applies those objects with the
//     dynamic client, garbage-collects the ones it owns that are no longer generated,
//     and never touches an object it does not own;
//   - Services, which the LoadBalancer implementation calls to set MetalLB's Service
//     annotations (metallb.io/loadBalancerIPs, metallb.io/address-pool,
//     metallb.io/allow-shared-ip) to exactly what the CCM allocated.
//
// Both writers are the leader's: every write first asks the term's lease fence when one
// is set (ReconcilerOptions.Fence, NewServices), so a leader paused past its Lease
// writes nothing when it resumes; every patch, update and delete is conditional on
// the version it was computed from (a Service's resourceVersion; an object's
// resourceVersion and UID), and a create fails when the name is taken.
//
// Ownership: every object this package writes carries the label
// app.kubernetes.io/managed-by=baremetal-ccm and a name starting with baremetal-ccm-.
// Only objects carrying the label are updated or deleted; an object with one of our
// names but without the label is a conflict (an error and a Warning event on it), never
// an overwrite.
//
// Only MetalLB's api/v1beta1 and api/v1beta2 packages are imported (they pull in
// controller-runtime's scheme and conversion packages, not its client).
//
// See docs/metallb.md for the operator's side: MetalLB settings, which objects appear,
// and the ownership rules.
package metallb
