package routes

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
)

// nodeGateway returns the first InternalIP of dst's family in addrs (the order of
// status.addresses, which puts kubelet's --node-ip first).
func nodeGateway(addrs []v1.NodeAddress, dst netip.Prefix) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.Type != v1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() == dst.Addr().Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// parseCIDR parses a pod CIDR into its canonical (masked) prefix.
func parseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("routes: pod CIDR %q: %w", s, err)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("routes: pod CIDR %q: an IPv4-mapped IPv6 prefix is not a pod CIDR", s)
	}
	return p.Masked(), nil
}

func familyName(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}
