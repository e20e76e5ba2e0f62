//go:build linux

package bfd

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
)

// TestUDPLoopback runs two Servers over real sockets on two loopback addresses
// (no root needed): they come Up (so packets carry TTL 255 and the receive path
// reads it), source ports are in range, a packet with another TTL is dropped, and
// stopping one side reaches the other as AdminDown.
func TestUDPLoopback(t *testing.T) {
	x, y := byte(rand.IntN(200)+20), byte(rand.IntN(250)+1)
	addr1, addr2 := netip.AddrFrom4([4]byte{127, x, y, 1}), netip.AddrFrom4([4]byte{127, x, y, 2})
	_, ctx := ktesting.NewTestContext(t)
	start := func(local, peer netip.Addr) (*Server, context.CancelFunc, chan error) {
		s, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AddPeer(PeerConfig{Peer: peer, Local: local, DesiredMinTx: 50 * ms, RequiredMinRx: 50 * ms}); err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(c) }()
		return s, cancel, done
	}
	a, cancelA, doneA := start(addr1, addr2)
	b, cancelB, doneB := start(addr2, addr1)
	defer func() { cancelA(); cancelB(); <-doneA; <-doneB }()
	waitFor(t, "both Up", func() bool {
		return a.Sessions()[0].State == StateUp && b.Sessions()[0].State == StateUp
	})
	waitFor(t, "fast timers", func() bool { return a.Sessions()[0].TxInterval == 50*ms && b.Sessions()[0].DetectionTime == 150*ms })
	a.mu.Lock()
	port := a.sessions[addr2].port
	a.mu.Unlock()
	if port < minSourcePort {
		t.Errorf("source port %d", port)
	}

	// A packet from the right source with TTL 64 is dropped.
	before, _ := testutil.GetCounterMetricValue(droppedPackets.WithLabelValues(dropTTL))
	d := net.Dialer{LocalAddr: &net.UDPAddr{IP: addr1.AsSlice()}, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, 64) })
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("udp4", netip.AddrPortFrom(addr2, Port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := controlPacket{state: StateDown, detectMult: 3, myDiscr: 99, desiredMinTx: time.Second, requiredMinRx: time.Second}
	if _, err := c.Write(p.encode(nil)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "TTL 64 dropped", func() bool {
		after, _ := testutil.GetCounterMetricValue(droppedPackets.WithLabelValues(dropTTL))
		return after > before
	})
	if st := b.Sessions()[0]; st.State != StateUp {
		t.Errorf("B after the bad packet: %+v", st)
	}

	cancelA()
	if err := <-doneA; err != nil {
		t.Errorf("Run: %v", err)
	}
	doneA <- nil
	waitFor(t, "B sees AdminDown", func() bool {
		st := b.Sessions()[0]
		return st.State == StateDown && st.RemoteState == StateAdminDown && st.Diag == DiagNeighborSignaledDown
	})
}

func TestUDPListenErrors(t *testing.T) {
	n, _ := newUDPNetwork()
	// 192.0.2.1 (TEST-NET-1) is on no interface: EADDRNOTAVAIL.
	if _, err := n.Listen(netip.MustParseAddr("192.0.2.1"), ""); err == nil {
		t.Error("listening on a foreign address succeeded")
	}
	if _, err := n.Listen(netip.MustParseAddr("127.0.0.1"), "no-such-if0"); err == nil {
		t.Error("binding to a missing interface succeeded")
	}
}
