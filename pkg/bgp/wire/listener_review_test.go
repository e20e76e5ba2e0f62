package wire

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// reviewListen listens on a free port (IPv4 and IPv6) and returns the IPv4 address.
func reviewListen(t *testing.T) (*Listener, netip.AddrPort) {
	t.Helper()
	l, err := Listen(context.Background(), 0, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	var v4 netip.AddrPort
	for _, ln := range l.lns {
		if a := addrPort(ln.Addr()); a.Addr().Is4() {
			v4 = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), a.Port())
		}
	}
	return l, v4
}

func dialFrom(t *testing.T, from string, to netip.AddrPort) *net.TCPConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", to.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// stillOpen reports whether c is neither closed nor reset by the other end within d.
func stillOpen(c *net.TCPConn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err != nil {
			return errors.Is(err, os.ErrDeadlineExceeded)
		}
	}
}

// TestReviewListenerCloseEndsPendingConnections: Close stops accepting, but a
// connection already accepted and waiting for its OPEN (openWait, 10 s) keeps its
// goroutine and socket: they outlive the Listener (and the Speaker, whose Run has
// returned by then), and the router is answered 10 s later with a Cease 7
// "Connection Collision Resolution" by a speaker that has stopped.
func TestReviewListenerCloseEndsPendingConnections(t *testing.T) {
	l, addr := reviewListen(t)
	p := NewPeer(Config{Remote: netip.MustParseAddrPort("127.0.0.2:179"), RouterID: netip.MustParseAddr("10.0.0.1")}, Hooks{}, logr.Discard())
	if err := l.Register(p); err != nil {
		t.Fatal(err)
	}
	c := dialFrom(t, "127.0.0.2", addr) // a router that has not sent its OPEN yet
	time.Sleep(100 * time.Millisecond)  // accepted, handle() is reading
	l.Unregister(p)
	l.Close()
	if stillOpen(c, 2*time.Second) {
		t.Errorf("a connection accepted before Close is still open 2 s after the Listener closed (and its peer was unregistered)")
	}
}

// TestReviewCollisionThenFinishLeaksConnection: with a listen port, the router
// connects while the Peer's own connection is still in its OPEN exchange (both
// sides connect at startup; a connection collision, RFC 4271 6.8). The router's
// identifier is higher, so offer ends the Peer's session with a Cease 7 and
// queues the router's connection in p.incoming, to be taken when that session
// has ended (up to closeWait, or innerWait while GoBGP refuses). If the Peer is
// finished meanwhile (peer removed or changed, password rotated, speaker
// stopping), its loop ends on the cancelled context and never reads p.incoming:
// the router's connection is neither answered nor closed, no NOTIFICATION, no
// FIN, and the router's side waits in OpenSent for its own timers.
func TestReviewCollisionThenFinishLeaksConnection(t *testing.T) {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := NewPeer(Config{Remote: addrPort(ln.Addr()), RouterID: netip.MustParseAddr("10.0.0.1"), ConnectRetry: time.Second}, Hooks{}, logr.Discard())
	p.Start(context.Background())
	// The Peer's own connection: the router accepts it and has sent nothing yet.
	a, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for p.Status().State != StateOpen {
		time.Sleep(time.Millisecond)
	}
	// The router's own connection, its OPEN read by the Listener.
	router := dialFrom(t, "127.0.0.1", addrPort(ln.Addr()))
	ours, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	if !p.offer(ours, &Open{ID: netip.MustParseAddr("10.0.0.2")}, nil) {
		t.Fatal("collision: the router's connection (higher identifier) was not taken")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	p.Finish(ctx, Cease(SubCeasePeerDeconfig, ""), true)
	<-p.Done()
	if n := len(p.incoming); n > 0 {
		t.Errorf("the finished Peer left %d router connection(s) in its incoming queue", n)
	}
	if stillOpen(router, time.Second) {
		t.Errorf("the router's connection taken in the collision is still open, unanswered, 1 s after Finish returned")
	}
}
