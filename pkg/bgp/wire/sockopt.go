package wire

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// md5Sig sets (key != "") or clears (key == "") the TCP-MD5 key (RFC 2385) the
// socket uses with peer.
func md5Sig(fd int, peer netip.Addr, key string) error {
	if len(key) > unix.TCP_MD5SIG_MAXKEYLEN {
		return fmt.Errorf("TCP-MD5 password longer than %d bytes", unix.TCP_MD5SIG_MAXKEYLEN)
	}
	var t unix.TCPMD5Sig
	if peer.Is4() {
		t.Addr.Family = unix.AF_INET
		a := peer.As4()
		copy(t.Addr.Data[2:], a[:])
	} else {
		t.Addr.Family = unix.AF_INET6
		a := peer.As16()
		copy(t.Addr.Data[6:], a[:])
	}
	t.Keylen = uint16(len(key))
	copy(t.Key[:], key)
	if err := unix.SetsockoptTCPMD5Sig(fd, unix.IPPROTO_TCP, unix.TCP_MD5SIG, &t); err != nil {
		return fmt.Errorf("setting the TCP-MD5 key for %s: %w", peer, err)
	}
	return nil
}

// setTTL sets the unicast TTL (hop limit) of a socket of the given family.
func setTTL(fd int, v6 bool, ttl int) error {
	var err error
	if v6 {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, ttl)
	} else {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TTL, ttl)
	}
	if err != nil {
		return fmt.Errorf("setting TTL %d: %w", ttl, err)
	}
	return nil
}

// control runs fn on a raw connection's descriptor and returns the first error.
func control(c syscall.RawConn, fn func(fd int) error) error {
	var inner error
	if err := c.Control(func(fd uintptr) { inner = fn(int(fd)) }); err != nil {
		return err
	}
	return inner
}

// dialRouter connects to the router as the peer's settings say: from source (if
// valid), with the TCP-MD5 key and the outgoing TTL (0: the kernel's default).
func dialRouter(ctx context.Context, remote netip.AddrPort, source netip.Addr, password string, ttl int, timeout time.Duration) (*net.TCPConn, error) {
	d := net.Dialer{
		Timeout:   timeout,
		KeepAlive: -1, // BGP keeps its own
		Control: func(_, _ string, c syscall.RawConn) error {
			return control(c, func(fd int) error {
				if password != "" {
					if err := md5Sig(fd, remote.Addr(), password); err != nil {
						return err
					}
				}
				if ttl > 0 {
					return setTTL(fd, remote.Addr().Is6(), ttl)
				}
				return nil
			})
		},
	}
	d.SetMultipathTCP(false) // TCP-MD5 does not work with MPTCP
	if source.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: source.AsSlice(), Zone: source.Zone()}
	}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(remote.Addr().String(), strconv.Itoa(int(remote.Port()))))
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// addrPort is a connection end as a netip.AddrPort (IPv4 unmapped).
func addrPort(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// outq is the number of bytes written to the connection and not yet
// acknowledged by the other end (SIOCOUTQ).
func outq(c *net.TCPConn) (int, error) { return ioctlInt(c, unix.SIOCOUTQ) }

// inq is the number of received bytes not yet read (SIOCINQ).
func inq(c *net.TCPConn) (int, error) { return ioctlInt(c, unix.SIOCINQ) }

func ioctlInt(c *net.TCPConn, req uint) (int, error) {
	sc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	err = control(sc, func(fd int) error {
		var e error
		n, e = unix.IoctlGetInt(fd, req)
		return e
	})
	return n, err
}

// setV6Only makes an IPv6 socket IPv6-only (IPv4 has its own listener).
func setV6Only(fd int) error {
	return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
}
