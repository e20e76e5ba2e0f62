package routes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2"
)

// Netlink is the part of *netlink.Handle this package uses; tests substitute a fake.
// Use a handle from netlink.NewHandle (this process's network namespace) or
// netlink.NewHandleAt (another namespace, without moving any thread into it).
// Implementations must be safe for concurrent use (*netlink.Handle is: each
// request locks its socket).
type Netlink interface {
	RouteListFiltered(family int, filter *netlink.Route, filterMask uint64) ([]netlink.Route, error)
	RouteAdd(route *netlink.Route) error
	RouteReplace(route *netlink.Route) error
	RouteDel(route *netlink.Route) error
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
}

var _ Netlink = (*netlink.Handle)(nil)

var (
	// ErrNoCapability: the process may not change routes (no CAP_NET_ADMIN in the
	// network namespace's owning user namespace).
	ErrNoCapability = errors.New("routes need CAP_NET_ADMIN: run as root or grant the capability (systemd: AmbientCapabilities=CAP_NET_ADMIN; pod: securityContext.capabilities.add: [NET_ADMIN])")
	// ErrGatewayNotOnLink: the gateway is not on a subnet connected to this host, so
	// the kernel cannot route via it (see the package documentation).
	ErrGatewayNotOnLink = errors.New("gateway is not on a subnet connected to this host")
	// ErrForeignRoute: a route of another protocol holds the destination with our
	// metric in our table; it is left alone.
	ErrForeignRoute = errors.New("destination is held by a route that is not ours")
	// ErrNoNodeAddress: the Node has no InternalIP of the pod CIDR's family.
	ErrNoNodeAddress = errors.New("node has no InternalIP of the pod CIDR's family")
)

// maxDumpAttempts bounds the retries of a route dump the kernel marked interrupted
// (the table changed during the dump, NLM_F_DUMP_INTR).
const maxDumpAttempts = 5

// Route is one kernel route of our table, as read.
type Route struct {
	Dst      netip.Prefix
	Gw       netip.Addr // invalid when the route has no single gateway
	Protocol int
	Priority int // the kernel's metric, normalized (IPv6 0 reads as 1024)
}

// Kernel reads and writes the routes of one table and protocol. It is safe for
// concurrent use. Every method checks ctx before each netlink call; a netlink call
// itself is not cancellable.
type Kernel struct {
	nl       Netlink
	table    int
	protocol int
	close    func()
}

// Open returns a Kernel on a new NETLINK_ROUTE handle in this process's network
// namespace; Close releases the handle.
func Open(table, protocol int) (*Kernel, error) {
	h, err := netlink.NewHandle(syscall.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("routes: open netlink: %w", err)
	}
	k, err := NewKernel(h, table, protocol)
	if err != nil {
		h.Close()
		return nil, err
	}
	k.close = h.Close
	return k, nil
}

// Close releases the netlink handle Open created; it does nothing for a Kernel
// made by NewKernel (the caller owns that handle).
func (k *Kernel) Close() {
	if k.close != nil {
		k.close()
	}
}

// NewKernel returns a Kernel owning the routes of table with protocol (as validated
// by pkg/config: table 1..2^32-1 except 252/253/255, protocol 5..255).
func NewKernel(nl Netlink, table, protocol int) (*Kernel, error) {
	if nl == nil {
		return nil, errors.New("routes: nil netlink handle")
	}
	if table < 1 || table > 1<<32-1 || table == 252 || table == 253 || table == 255 {
		return nil, fmt.Errorf("routes: table %d is not a table of our own (use 1-4294967295 except 252, 253, 255)", table)
	}
	if protocol < 5 || protocol > 255 {
		return nil, fmt.Errorf("routes: protocol %d is outside 5-255", protocol)
	}
	return &Kernel{nl: nl, table: table, protocol: protocol}, nil
}

// Table is the routing table the Kernel owns routes in.
func (k *Kernel) Table() int { return k.table }

// Protocol is the protocol number that marks our routes.
func (k *Kernel) Protocol() int { return k.protocol }

// CheckAccess verifies at startup that this process may change routes. It reads
// the table (a dump needs no privilege but proves netlink works) and then deletes
// a route that cannot exist (255.255.255.255/32 with our table and protocol): the
// kernel checks CAP_NET_ADMIN before it looks the route up, so "no such route"
// proves the capability and "operation not permitted" its absence, which is
// returned as an error wrapping ErrNoCapability. Nothing is changed either way.
func (k *Kernel) CheckAccess(ctx context.Context) error {
	if _, _, err := k.List(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	probe := &netlink.Route{
		Dst:      &net.IPNet{IP: net.IPv4bcast.To4(), Mask: net.CIDRMask(32, 32)},
		Table:    k.table,
		Protocol: netlink.RouteProtocol(k.protocol),
	}
	err := k.nl.RouteDel(probe)
	switch {
	case err == nil, errors.Is(err, syscall.ESRCH), errors.Is(err, syscall.ENOENT):
		return nil
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%w (probe delete in table %d: %v)", ErrNoCapability, k.table, err)
	default:
		return fmt.Errorf("routes: netlink access probe in table %d: %w", k.table, err)
	}
}

// List returns the routes of our table: ours (our protocol) and foreign (any other
// protocol). An interrupted dump is retried up to maxDumpAttempts times; after
// that the error wraps netlink.ErrDumpInterrupted.
func (k *Kernel) List(ctx context.Context) (ours, foreign []Route, err error) {
	filter := &netlink.Route{Table: k.table}
	var raw []netlink.Route
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		raw, err = k.nl.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_TABLE)
		if err == nil {
			break
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, nil, fmt.Errorf("routes: list table %d: %w", k.table, err)
		}
		dumpRetries.Inc()
		if attempt == maxDumpAttempts {
			return nil, nil, fmt.Errorf("routes: list table %d: still interrupted after %d attempts: %w", k.table, attempt, err)
		}
		klog.FromContext(ctx).V(4).Info("Route dump interrupted, retrying", "table", k.table, "attempt", attempt)
	}
	for i := range raw {
		r, ok := fromNetlink(&raw[i])
		if !ok {
			continue
		}
		if r.Protocol == k.protocol {
			ours = append(ours, r)
		} else {
			foreign = append(foreign, r)
		}
	}
	return ours, foreign, nil
}

// LocalAddrs returns the addresses of this host (its network namespace).
func (k *Kernel) LocalAddrs(ctx context.Context) (map[netip.Addr]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	addrs, err := k.nl.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("routes: list local addresses: %w", err)
	}
	// An interrupted address dump may miss an address; it is only used to skip
	// routes to ourselves, which the kernel refuses anyway.
	local := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			local[ip.Unmap()] = true
		}
	}
	return local, nil
}

// Ensure makes the route dst via gw exist in our table with our protocol: it adds
// it exclusively and, when the destination exists, replaces it only if the holder
// is ours (changed reports whether the kernel changed). A foreign holder gives
// ErrForeignRoute, an off-link gateway ErrGatewayNotOnLink.
func (k *Kernel) Ensure(ctx context.Context, dst netip.Prefix, gw netip.Addr) (changed bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	err = k.nl.RouteAdd(k.netlinkRoute(dst, gw))
	if !errors.Is(err, syscall.EEXIST) {
		countOp("add", err)
		return err == nil, k.wrap("add", dst, gw, err)
	}
	ours, foreign, err := k.List(ctx)
	if err != nil {
		return false, err
	}
	metric := defaultMetric(dst)
	for _, r := range foreign {
		if r.Dst == dst && r.Priority == metric {
			return false, fmt.Errorf("routes: %s in table %d: %w (protocol %d)", dst, k.table, ErrForeignRoute, r.Protocol)
		}
	}
	for _, r := range ours {
		if r.Dst == dst && r.Priority == metric && r.Gw == gw {
			return false, nil
		}
	}
	return true, k.Replace(ctx, dst, gw)
}

// Replace sets the route dst via gw, replacing the route with the same destination
// and metric. Callers must know that route is ours (Ensure checks; the Mirror
// has just listed the table).
func (k *Kernel) Replace(ctx context.Context, dst netip.Prefix, gw netip.Addr) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := k.nl.RouteReplace(k.netlinkRoute(dst, gw))
	countOp("replace", err)
	return k.wrap("replace", dst, gw, err)
}

// add adds the route exclusively (EEXIST when the destination is held).
func (k *Kernel) add(ctx context.Context, dst netip.Prefix, gw netip.Addr) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := k.nl.RouteAdd(k.netlinkRoute(dst, gw))
	countOp("add", err)
	return k.wrap("add", dst, gw, err)
}

// Delete removes our route to dst via gw (any gateway when gw is invalid). The
// kernel matches table, protocol and gateway, so no other route can go. A route
// already gone is success (deleted is then false).
func (k *Kernel) Delete(ctx context.Context, dst netip.Prefix, gw netip.Addr) (deleted bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	r := k.netlinkRoute(dst, gw)
	r.Priority = 0 // any metric of ours
	err = k.nl.RouteDel(r)
	if errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.ENOENT) {
		return false, nil
	}
	countOp("delete", err)
	return err == nil, k.wrap("delete", dst, gw, err)
}

func (k *Kernel) wrap(op string, dst netip.Prefix, gw netip.Addr, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return fmt.Errorf("routes: %s %s via %s in table %d: %w (%v)", op, dst, gw, k.table, ErrGatewayNotOnLink, err)
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("routes: %s %s via %s in table %d: %w (%v)", op, dst, gw, k.table, ErrNoCapability, err)
	default:
		return fmt.Errorf("routes: %s %s via %s in table %d: %w", op, dst, gw, k.table, err)
	}
}

func (k *Kernel) netlinkRoute(dst netip.Prefix, gw netip.Addr) *netlink.Route {
	r := &netlink.Route{
		Dst:      &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())},
		Table:    k.table,
		Protocol: netlink.RouteProtocol(k.protocol),
		Priority: defaultMetric(dst),
		Type:     syscall.RTN_UNICAST,
	}
	if gw.IsValid() {
		r.Gw = gw.AsSlice()
	}
	return r
}

// defaultMetric is the kernel's metric for a route added without one.
func defaultMetric(dst netip.Prefix) int {
	if dst.Addr().Is4() {
		return 0
	}
	return 1024
}

func fromNetlink(r *netlink.Route) (Route, bool) {
	if r.Dst == nil {
		return Route{}, false // a default route: never ours to program
	}
	ip, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return Route{}, false
	}
	ip = ip.Unmap()
	ones, bits := r.Dst.Mask.Size()
	if bits != ip.BitLen() {
		return Route{}, false
	}
	out := Route{Dst: netip.PrefixFrom(ip, ones).Masked(), Protocol: int(r.Protocol), Priority: r.Priority}
	if !ip.Is4() && out.Priority == 0 {
		out.Priority = 1024
	}
	if len(r.MultiPath) == 0 && r.Gw != nil {
		if gw, ok := netip.AddrFromSlice(r.Gw); ok {
			out.Gw = gw.Unmap()
		}
	}
	return out, true
}
