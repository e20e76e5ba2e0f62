package routes

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
)

// fakeNetlink models the kernel semantics the package relies on: exclusive add
// (EEXIST on the same table, destination and metric, any protocol), replace of
// that key, delete matching table, protocol, gateway and metric when given,
// ENETUNREACH for gateways outside the connected prefixes, and interrupted dumps.
type fakeNetlink struct {
	mu        sync.Mutex
	routes    []netlink.Route
	connected []netip.Prefix
	local     []netip.Addr
	// interrupt is how many following dumps return ErrDumpInterrupted.
	interrupt int
	// failAdd fails adding or replacing these destinations.
	failAdd map[netip.Prefix]error
	denied  bool
	writes  int
	dumps   int
}

func newFake(connected ...string) *fakeNetlink {
	f := &fakeNetlink{failAdd: map[netip.Prefix]error{}}
	for _, c := range connected {
		p := netip.MustParsePrefix(c)
		f.connected = append(f.connected, p.Masked())
		f.local = append(f.local, p.Addr())
	}
	return f
}

func prefixOf(n *net.IPNet) netip.Prefix {
	ip, _ := netip.AddrFromSlice(n.IP)
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones).Masked()
}

func metricOf(r *netlink.Route) int {
	if r.Priority == 0 && r.Dst.IP.To4() == nil {
		return 1024
	}
	return r.Priority
}

func (f *fakeNetlink) find(r *netlink.Route) int {
	for i := range f.routes {
		e := &f.routes[i]
		if e.Table == r.Table && prefixOf(e.Dst) == prefixOf(r.Dst) && metricOf(e) == metricOf(r) {
			return i
		}
	}
	return -1
}

func (f *fakeNetlink) check(r *netlink.Route) error {
	f.writes++
	if f.denied {
		return syscall.EPERM
	}
	if err := f.failAdd[prefixOf(r.Dst)]; err != nil {
		return err
	}
	gw, _ := netip.AddrFromSlice(r.Gw)
	gw = gw.Unmap()
	for _, l := range f.local {
		if l == gw {
			return syscall.EINVAL
		}
	}
	for _, c := range f.connected {
		if c.Contains(gw) {
			return nil
		}
	}
	return syscall.ENETUNREACH
}

func clone(r *netlink.Route) netlink.Route {
	c := *r
	c.Dst = &net.IPNet{IP: append(net.IP(nil), r.Dst.IP...), Mask: append(net.IPMask(nil), r.Dst.Mask...)}
	c.Gw = append(net.IP(nil), r.Gw...)
	c.Priority = metricOf(r)
	return c
}

func (f *fakeNetlink) RouteAdd(r *netlink.Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(r); err != nil {
		return err
	}
	if f.find(r) >= 0 {
		return syscall.EEXIST
	}
	f.routes = append(f.routes, clone(r))
	return nil
}

func (f *fakeNetlink) RouteReplace(r *netlink.Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(r); err != nil {
		return err
	}
	if i := f.find(r); i >= 0 {
		f.routes[i] = clone(r)
		return nil
	}
	f.routes = append(f.routes, clone(r))
	return nil
}

func (f *fakeNetlink) RouteDel(r *netlink.Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	if f.denied {
		return syscall.EPERM
	}
	for i := range f.routes {
		e := &f.routes[i]
		if e.Table != r.Table || prefixOf(e.Dst) != prefixOf(r.Dst) ||
			(r.Protocol != 0 && e.Protocol != r.Protocol) ||
			(r.Gw != nil && !e.Gw.Equal(r.Gw)) ||
			(r.Priority != 0 && e.Priority != r.Priority) {
			continue
		}
		f.routes = append(f.routes[:i], f.routes[i+1:]...)
		return nil
	}
	return syscall.ESRCH
}

func (f *fakeNetlink) RouteListFiltered(family int, filter *netlink.Route, mask uint64) ([]netlink.Route, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dumps++
	var out []netlink.Route
	for i := range f.routes {
		if mask&netlink.RT_FILTER_TABLE != 0 && f.routes[i].Table != filter.Table {
			continue
		}
		out = append(out, clone(&f.routes[i]))
	}
	if f.interrupt > 0 {
		f.interrupt--
		if len(out) > 0 {
			out = out[:len(out)/2] // a partial, inconsistent dump
		}
		return out, netlink.ErrDumpInterrupted
	}
	return out, nil
}

func (f *fakeNetlink) AddrList(link netlink.Link, family int) ([]netlink.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []netlink.Addr
	for _, c := range f.connected {
		ip := c.Addr()
		for _, l := range f.local {
			if c.Contains(l) {
				ip = l
			}
		}
		out = append(out, netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(c.Bits(), ip.BitLen())}})
	}
	return out, nil
}

// put installs a route as if by someone else (any protocol/table).
func (f *fakeNetlink) put(table, proto int, dst, gw string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := netip.MustParsePrefix(dst)
	r := netlink.Route{
		Dst:      &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
		Table:    table,
		Protocol: netlink.RouteProtocol(proto),
		Gw:       netip.MustParseAddr(gw).AsSlice(),
	}
	f.routes = append(f.routes, clone(&r))
}

// state renders the routes as sorted "table/proto dst via gw" strings.
func (f *fakeNetlink) state() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for i := range f.routes {
		r := &f.routes[i]
		gw, _ := netip.AddrFromSlice(r.Gw)
		out[fmt.Sprintf("%d/%d %s via %s", r.Table, r.Protocol, prefixOf(r.Dst), gw.Unmap())] = true
	}
	return out
}
