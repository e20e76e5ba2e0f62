package bfd

import (
	"net/netip"
	"time"

	"k8s.io/utils/clock"
)

// Port is the UDP destination port of single-hop BFD control packets (RFC 5881).
const Port = 3784

// Source ports of control packets (RFC 5881 section 4).
const (
	minSourcePort = 49152
	numSourcePort = 65536 - minSourcePort
)

// requiredTTL is the IP TTL or hop limit every control packet is sent with, and the
// only one accepted (RFC 5881 section 5).
const requiredTTL = 255

// Clock is the time source of a Server. k8s.io/utils/clock's RealClock and its
// testing.FakeClock implement it.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) clock.Timer
}

// Network opens the sockets of BFD sessions. The default opens UDP sockets as RFC
// 5881 describes; tests inject fakes.
type Network interface {
	// Listen opens the socket receiving control packets at local port 3784, bound to
	// the interface ifname when it is not empty. The Server opens one per local
	// address and interface, shared by the sessions using it.
	Listen(local netip.Addr, ifname string) (PacketConn, error)
	// Dial opens the socket a session sends from: local address and source port port
	// (bound to ifname when not empty) to peer port 3784, with IP TTL or hop limit
	// 255. An error for a port in use wraps syscall.EADDRINUSE.
	Dial(local netip.Addr, port uint16, ifname string, peer netip.Addr) (Sender, error)
}

// PacketConn receives control packets.
type PacketConn interface {
	// ReadPacket reads one datagram into b and returns its length, its source and
	// the IP TTL or hop limit it arrived with (-1 when unknown). It returns an error
	// once Close was called.
	ReadPacket(b []byte) (n int, src netip.AddrPort, ttl int, err error)
	Close() error
}

// Sender sends one session's control packets.
type Sender interface {
	Send(b []byte) error
	Close() error
}
