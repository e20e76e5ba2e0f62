package bgp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/baremetal-ccm/baremetal-ccm/internal/bgptest"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// TestReviewSlowRouterDoesNotBlockStatus: a router that completes the OPEN
// exchange and then stops reading (bgpd busy or paused, a full receive window)
// keeps the relay's writer blocked in writeRouterLocked for up to writeTimeout
// (10 s) while it holds the session's wmu. session.status takes wmu for the
// per-family counts, so Peer.Status, and with it Speaker.Peers and Speaker.Ready
// (the agent's /readyz, and checkHealth on the speaker's main loop, which then
// handles no GoBGP event, peer change or health check) block for every peer, not
// just this router's.
// stalledRouter runs a speaker with 60000 paths and a raw router (small receive
// buffer) that completes the OPEN exchange with hold time hold, then reads
// nothing; it sends a KEEPALIVE every second, so it is alive. It returns the
// speaker and the router's connection.
func stalledRouter(t *testing.T, hold uint16) (*Speaker, net.Conn) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	p := config.BGPPeer{Address: "127.0.0.2", Port: int32(port), ASN: 65001}
	sp, err := New(Config{LocalASN: 65000, RouterID: netip.MustParseAddr("10.0.0.1"), Peers: []config.BGPPeer{p}, IPv6NextHop: netip.MustParseAddr("2001:db8:ffff::1")})
	if err != nil {
		t.Fatal(err)
	}
	// Many paths with distinct attributes: one UPDATE each, megabytes in all.
	var paths []Path
	for i := range 60000 {
		paths = append(paths, Path{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32),
			Communities: []string{fmt.Sprintf("65000:%d", i%65536)}, LargeCommunities: []string{fmt.Sprintf("65000:1:%d", i)}})
	}
	sp.Announce("lb", paths)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	o := rawRouterOpen(65001, "10.0.0.2")
	o.HoldTime = hold
	if _, err := c.Write(o.Message()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the relay passed our OPEN, GoBGP's OPEN is in our receive buffer
	if _, err := c.Write(bgptest.Keepalive()); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			time.Sleep(time.Second)
			if _, err := c.Write(bgptest.Keepalive()); err != nil {
				return
			}
		}
	}()
	return sp, c
}

func TestReviewSlowRouterDoesNotBlockStatus(t *testing.T) {
	sp, _ := stalledRouter(t, 90)
	deadline := time.Now().Add(20 * time.Second)
	var worst time.Duration
	for time.Now().Before(deadline) {
		start := time.Now()
		sp.Peers()
		if d := time.Since(start); d > worst {
			worst = d
		}
		if worst > 2*time.Second {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if worst > time.Second {
		t.Errorf("Speaker.Peers() took %v while one router was not reading (a readiness probe times out after 1 s by default)", worst.Round(100*time.Millisecond))
	}
}

// TestReviewSlowRouterKeepsSessionWithinHoldTime: the same router, alive (it
// sends KEEPALIVEs) but not reading for 15 s, well within the 90 s hold time. The
// relay's write deadline (writeTimeout, 10 s) closes the connection without a
// NOTIFICATION: a router busy for more than 10 s loses its session, where GoBGP on
// its own bounds a write by the negotiated hold time.
func TestReviewSlowRouterKeepsSessionWithinHoldTime(t *testing.T) {
	_, c := stalledRouter(t, 90)
	time.Sleep(15 * time.Second)
	// The router reads again: everything the speaker sent, up to now.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var buf []byte
	tmp := make([]byte, 1<<16)
	var readErr error
	for {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			readErr = err
			break
		}
	}
	if readErr != nil && !errors.Is(readErr, os.ErrDeadlineExceeded) {
		notif := "no NOTIFICATION"
		for b := buf; len(b) >= bgptest.HeaderLen; {
			l := int(b[16])<<8 | int(b[17])
			if l < bgptest.HeaderLen || l > len(b) {
				break
			}
			if b[18] == bgptest.TypeNotification {
				notif = fmt.Sprintf("NOTIFICATION %d/%d", b[19], b[20])
			}
			b = b[l:]
		}
		t.Errorf("the session of a router that was alive but not reading for 15 s (hold time 90 s) ended: %v after %d bytes, %s", readErr, len(buf), notif)
	}
}
