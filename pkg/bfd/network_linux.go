//go:build linux

package bfd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// tosNetworkControl is the IP precedence "internetwork control" (DSCP CS6) BFD
// packets are sent with, as routers expect of routing protocol traffic.
const tosNetworkControl = 0xc0

// udpNetwork opens real UDP sockets (RFC 5881).
type udpNetwork struct{}

func newUDPNetwork() (Network, error) { return udpNetwork{}, nil }

func network(a netip.Addr) string {
	if a.Is4() {
		return "udp4"
	}
	return "udp6"
}

// Listen binds local:3784 and asks the kernel for each datagram's TTL or hop limit
// (IP_RECVTTL, IPV6_RECVHOPLIMIT).
func (udpNetwork) Listen(local netip.Addr, ifname string) (PacketConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return setsockopts(c, ifname, func(fd int) error {
			if local.Is4() {
				return sockopt(unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTTL, 1), "IP_RECVTTL")
			}
			return sockopt(unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1), "IPV6_RECVHOPLIMIT")
		})
	}}
	pc, err := lc.ListenPacket(context.Background(), network(local), netip.AddrPortFrom(local, Port).String())
	if err != nil {
		return nil, err
	}
	return &udpConn{c: pc.(*net.UDPConn), oob: make([]byte, 128)}, nil
}

// Dial binds local:port and connects to peer:3784, sending with TTL or hop limit
// 255 and DSCP CS6.
func (udpNetwork) Dial(local netip.Addr, port uint16, ifname string, peer netip.Addr) (Sender, error) {
	d := net.Dialer{
		LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, port)),
		Control: func(_, _ string, c syscall.RawConn) error {
			return setsockopts(c, ifname, func(fd int) error {
				if local.Is4() {
					return errors.Join(
						sockopt(unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TTL, requiredTTL), "IP_TTL"),
						sockopt(unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, tosNetworkControl), "IP_TOS"))
				}
				return errors.Join(
					sockopt(unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, requiredTTL), "IPV6_UNICAST_HOPS"),
					sockopt(unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tosNetworkControl), "IPV6_TCLASS"))
			})
		},
	}
	c, err := d.Dial(network(local), netip.AddrPortFrom(peer, Port).String())
	if err != nil {
		return nil, err
	}
	return udpSender{c.(*net.UDPConn)}, nil
}

// setsockopts binds the socket to ifname (if set) and applies more options.
func setsockopts(c syscall.RawConn, ifname string, more func(fd int) error) error {
	var err error
	cerr := c.Control(func(fd uintptr) {
		if ifname != "" {
			if err = sockopt(unix.BindToDevice(int(fd), ifname), "SO_BINDTODEVICE "+ifname); err != nil {
				return
			}
		}
		err = more(int(fd))
	})
	return errors.Join(cerr, err)
}

func sockopt(err error, name string) error {
	if err != nil {
		return fmt.Errorf("setsockopt %s: %w", name, err)
	}
	return nil
}

type udpConn struct {
	c   *net.UDPConn
	oob []byte // used by the one reader only
}

func (u *udpConn) ReadPacket(b []byte) (int, netip.AddrPort, int, error) {
	n, oobn, _, src, err := u.c.ReadMsgUDPAddrPort(b, u.oob)
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return 0, src, -1, io.EOF
		}
		return 0, src, -1, err
	}
	return n, netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), receivedTTL(u.oob[:oobn]), nil
}

// receivedTTL returns the TTL or hop limit in the control messages, or -1.
func receivedTTL(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return -1
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		if (m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TTL) ||
			(m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_HOPLIMIT) {
			return int(int32(binary.NativeEndian.Uint32(m.Data)))
		}
	}
	return -1
}

func (u *udpConn) Close() error { return u.c.Close() }

type udpSender struct{ c *net.UDPConn }

func (u udpSender) Send(b []byte) error {
	_, err := u.c.Write(b)
	return err
}

func (u udpSender) Close() error { return u.c.Close() }
