package routes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// MirrorOptions configure a Mirror.
type MirrorOptions struct {
	// NodeName is the Node this host runs as, if any: its pod CIDRs are never
	// routed. Nodes whose InternalIP is an address of this host are skipped too.
	NodeName string
}

// Mirror keeps this host's kernel equal to the pod-CIDR routes of all Nodes: each
// Node's spec.podCIDRs via its InternalIP of that family, except routes to this
// host. Only routes of the Kernel's table and protocol are read or changed.
type Mirror struct {
	k    *Kernel
	opts MirrorOptions
	mu   sync.Mutex // one Reconcile at a time
}

// NewMirror returns a Mirror programming k.
func NewMirror(k *Kernel, opts MirrorOptions) *Mirror {
	RegisterMetrics()
	return &Mirror{k: k, opts: opts}
}

// Result counts what one Reconcile did. Routes that failed are in the returned
// error, one wrapped error per route.
type Result struct {
	Desired   int // routes this host should have (after skips)
	Present   int // routes of ours in the kernel before
	Added     int
	Updated   int // gateway changed
	Deleted   int
	Unchanged int
	Failed    int
	// SkippedSelf: pod CIDRs of this host. SkippedOffLink: gateways not on a
	// connected subnet, left to the fabric (see the package doc).
	SkippedSelf    int
	SkippedOffLink int
}

// Changed reports whether the kernel was changed.
func (r Result) Changed() bool { return r.Added+r.Updated+r.Deleted > 0 }

type want struct {
	node string
	gw   netip.Addr
}

// Reconcile makes our routes in the kernel equal to the routes nodes call for. It
// lists the table once, then adds, replaces and deletes what differs; a failure of
// one route (no InternalIP of the family, two Nodes claiming one CIDR, a foreign
// route holding a destination, a netlink error) is collected into the returned
// error (errors.Join; each wraps its cause, e.g. ErrForeignRoute) and the rest
// proceeds. Off-link gateways are skipped, not errors. Failing to read the kernel,
// or ctx ending, stops the reconcile. Calls are serialized; call it from Node
// informer events and from a periodic resync, which repairs drift.
//
// nodes must be every Node, from an informer that has synced: a Node missing from
// it loses its routes.
func (m *Mirror) Reconcile(ctx context.Context, nodes []*v1.Node) (Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := time.Now()
	logger := klog.FromContext(ctx)
	res, err := m.reconcile(ctx, nodes)
	lastReconcile.Set(time.Since(start).Seconds())
	if res.Failed > 0 {
		reconcileErrors.Add(float64(res.Failed))
	}
	skipped.WithLabelValues("self").Set(float64(res.SkippedSelf))
	skipped.WithLabelValues("offlink").Set(float64(res.SkippedOffLink))
	if err != nil {
		logger.Error(err, "Route mirror reconcile had failures", "failed", res.Failed, "added", res.Added, "updated", res.Updated, "deleted", res.Deleted)
	} else if res.Changed() {
		logger.Info("Route mirror reconciled", "added", res.Added, "updated", res.Updated, "deleted", res.Deleted, "unchanged", res.Unchanged, "skippedOffLink", res.SkippedOffLink, "duration", time.Since(start))
	} else {
		logger.V(4).Info("Route mirror unchanged", "routes", res.Unchanged, "duration", time.Since(start))
	}
	return res, err
}

func (m *Mirror) reconcile(ctx context.Context, nodes []*v1.Node) (Result, error) {
	var res Result
	var errs []error
	fail := func(err error) {
		res.Failed++
		errs = append(errs, err)
	}
	local, err := m.k.LocalAddrs(ctx)
	if err != nil {
		return res, err
	}

	// Desired routes, deterministic when two Nodes claim one CIDR: the first name wins.
	sorted := append([]*v1.Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	desired := make(map[netip.Prefix]want, len(nodes))
	for _, n := range sorted {
		for _, c := range n.Spec.PodCIDRs {
			dst, err := parseCIDR(c)
			if err != nil {
				fail(fmt.Errorf("node %q: %w", n.Name, err))
				continue
			}
			if n.Name == m.opts.NodeName {
				res.SkippedSelf++
				continue
			}
			gw, ok := nodeGateway(n.Status.Addresses, dst)
			if !ok {
				fail(fmt.Errorf("node %q pod CIDR %s: %w: it has no %s InternalIP in status.addresses", n.Name, dst, ErrNoNodeAddress, familyName(dst)))
				continue
			}
			if local[gw] {
				res.SkippedSelf++
				continue
			}
			if prev, dup := desired[dst]; dup {
				fail(fmt.Errorf("node %q pod CIDR %s: also claimed by node %q, which keeps the route", n.Name, dst, prev.node))
				continue
			}
			desired[dst] = want{node: n.Name, gw: gw}
		}
	}

	ours, foreign, err := m.k.List(ctx)
	if err != nil {
		return res, errors.Join(append(errs, err)...)
	}
	res.Present = len(ours)

	// Present routes: keep, replace (ours with an old gateway) or delete.
	done := make(map[netip.Prefix]bool, len(ours))
	type change struct {
		dst netip.Prefix
		w   want
	}
	var replace []change
	var remove []Route
	for _, r := range ours {
		w, ok := desired[r.Dst]
		switch {
		case !ok || done[r.Dst] || r.Priority != defaultMetric(r.Dst):
			remove = append(remove, r)
		case r.Gw == w.gw:
			done[r.Dst] = true
			res.Unchanged++
		default:
			done[r.Dst] = true
			replace = append(replace, change{r.Dst, w})
		}
	}
	held := make(map[netip.Prefix]int, len(foreign))
	for _, r := range foreign {
		if r.Priority == defaultMetric(r.Dst) {
			held[r.Dst] = r.Protocol
		}
	}
	logger := klog.FromContext(ctx)
	offLink := func(dst netip.Prefix, w want, err error) bool {
		if !errors.Is(err, ErrGatewayNotOnLink) {
			return false
		}
		res.SkippedOffLink++
		logger.V(2).Info("Skipping pod-CIDR route: the node's InternalIP is not on a connected subnet, the fabric must route it", "node", w.node, "cidr", dst, "gateway", w.gw)
		return true
	}

	for _, r := range remove {
		deleted, err := m.k.Delete(ctx, r.Dst, r.Gw)
		if err != nil {
			if ctx.Err() != nil {
				return res, errors.Join(append(errs, err)...)
			}
			fail(err)
			continue
		}
		if deleted {
			res.Deleted++
		}
	}
	for _, c := range replace {
		err := m.k.Replace(ctx, c.dst, c.w.gw)
		switch {
		case err == nil:
			res.Updated++
		case ctx.Err() != nil:
			return res, errors.Join(append(errs, err)...)
		case offLink(c.dst, c.w, err):
			// The old route of ours stays wrong: remove it, the fabric routes.
			if deleted, err := m.k.Delete(ctx, c.dst, netip.Addr{}); err != nil {
				fail(fmt.Errorf("node %q pod CIDR %s: %w", c.w.node, c.dst, err))
			} else if deleted {
				res.Deleted++
			}
		default:
			fail(fmt.Errorf("node %q pod CIDR %s: %w", c.w.node, c.dst, err))
		}
	}
	// New routes, in a stable order.
	var add []change
	for dst, w := range desired {
		if !done[dst] {
			add = append(add, change{dst, w})
		}
	}
	sort.Slice(add, func(i, j int) bool {
		if add[i].dst.Addr() != add[j].dst.Addr() {
			return add[i].dst.Addr().Less(add[j].dst.Addr())
		}
		return add[i].dst.Bits() < add[j].dst.Bits()
	})
	for _, c := range add {
		if proto, ok := held[c.dst]; ok {
			fail(fmt.Errorf("node %q pod CIDR %s in table %d: %w (protocol %d); remove it or choose another table", c.w.node, c.dst, m.k.Table(), ErrForeignRoute, proto))
			continue
		}
		err := m.k.add(ctx, c.dst, c.w.gw)
		switch {
		case err == nil:
			res.Added++
		case ctx.Err() != nil:
			return res, errors.Join(append(errs, err)...)
		case offLink(c.dst, c.w, err):
		case !errors.Is(err, syscall.EEXIST):
			fail(fmt.Errorf("node %q pod CIDR %s: %w", c.w.node, c.dst, err))
		default:
			// A route appeared since the dump; Ensure sorts out whose it is.
			changed, err2 := m.k.Ensure(ctx, c.dst, c.w.gw)
			switch {
			case err2 == nil && changed:
				res.Added++
			case err2 == nil:
				res.Unchanged++
			case offLink(c.dst, c.w, err2):
			default:
				fail(fmt.Errorf("node %q pod CIDR %s: %w", c.w.node, c.dst, err2))
			}
		}
	}
	res.Desired = len(desired) - res.SkippedOffLink
	programmed.Set(float64(res.Unchanged + res.Added + res.Updated))
	return res, errors.Join(errs...)
}
