package wire

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// readAll reads what the other end sends until it closes or d passes.
func readAll(c net.Conn, d time.Duration) []Message {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var out []Message
	for {
		m, err := ReadMessage(c, MaxExtendedLen)
		if err != nil {
			return out
		}
		out = append(out, m)
	}
}

// TestReviewNotificationBeforeOpenIsNotAnswered: a router that refuses the
// session before its OPEN sends a NOTIFICATION first (BIRD's Cease "Connection
// Rejected" while its protocol waits out an error delay, a router at its session
// limit, a neighbor shut down). awaitRouterOpen treats it as "NOTIFICATION before
// OPEN": it answers with a NOTIFICATION of its own (FSM error 5/1), which RFC 4271
// 8.2.2 rules out (NotifMsg in Connect/Active/OpenSent: drop the connection), and
// the Peer's LastError, what the speaker's down warning and PeerStatus show,
// says the relay refused a message instead of naming the router's reason.
func TestReviewNotificationBeforeOpenIsNotAnswered(t *testing.T) {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := NewPeer(Config{Remote: addrPort(ln.Addr()), RouterID: netip.MustParseAddr("10.0.0.1"), ConnectRetry: time.Hour}, Hooks{}, logr.Discard())
	p.Start(context.Background())
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Finish(ctx, Cease(SubCeaseAdminShutdown, ""), false)
	}()
	c, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rejected := Notification{Code: CodeCease, Subcode: 5} // Connection Rejected
	if _, err := c.Write(rejected.Bytes()); err != nil {
		t.Fatal(err)
	}
	for _, m := range readAll(c, time.Second) {
		if m.Type == TypeNotification {
			t.Errorf("the router's NOTIFICATION %s was answered with NOTIFICATION %s", rejected, ParseNotification(m.Body))
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for p.Status().State != StateActive && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := p.Status(); !errors.Is(st.LastError, ErrRouterNotification) {
		t.Errorf("LastError = %v, want the router's NOTIFICATION (%v)", st.LastError, ErrRouterNotification)
	}
}

// TestReviewListenerNotificationBeforeOpenIsNotAnswered: the same on a
// connection the router opened (bgp.listenPort): Listener.handle answers a
// NOTIFICATION with a NOTIFICATION 5/0.
func TestReviewListenerNotificationBeforeOpenIsNotAnswered(t *testing.T) {
	l, addr := reviewListen(t)
	defer l.Close()
	p := NewPeer(Config{Remote: netip.MustParseAddrPort("127.0.0.2:179"), RouterID: netip.MustParseAddr("10.0.0.1")}, Hooks{}, logr.Discard())
	if err := l.Register(p); err != nil {
		t.Fatal(err)
	}
	c := dialFrom(t, "127.0.0.2", addr)
	if _, err := c.Write(Cease(SubCeaseAdminShutdown, "maintenance").Bytes()); err != nil {
		t.Fatal(err)
	}
	for _, m := range readAll(c, time.Second) {
		if m.Type == TypeNotification {
			t.Errorf("the router's NOTIFICATION was answered with NOTIFICATION %s", ParseNotification(m.Body))
		}
	}
}
