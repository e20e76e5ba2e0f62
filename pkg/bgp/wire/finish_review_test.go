package wire

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// handshakingPeer starts a Peer towards a router listener whose GoBGP side
// (Inner) refuses connections, so the session stays in dialInner (as it does
// while GoBGP's idle hold timer runs, up to innerWait); the router accepts and
// sends its OPEN. It returns the Peer and the router's end.
func handshakingPeer(t *testing.T) (*Peer, *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	p := NewPeer(Config{Remote: addrPort(ln.Addr()), RouterID: netip.MustParseAddr("10.0.0.1"), ConnectRetry: time.Hour,
		Inner: netip.MustParseAddrPort("127.0.0.1:1"), InnerFrom: netip.MustParseAddr("127.0.0.1")}, Hooks{}, logr.Discard())
	p.Start(context.Background())
	c, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Write(frame(TypeOpen, openBody(65001, 90, "10.0.0.2", mpCap(1, 1)))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the relay read the OPEN and is giving GoBGP its side
	return p, c
}

// TestReviewFinishMidHandshakeSendsOneNotification: Finish while the session
// waits for GoBGP (dialInner) writes its Cease, then, when the cancelled
// dialInner returns, run writes a second NOTIFICATION (Cease 6/8 "Out of
// Resources") after it: the router is told two different reasons, the second
// after the session ended.
func TestReviewFinishMidHandshakeSendsOneNotification(t *testing.T) {
	p, c := handshakingPeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.Finish(ctx, Cease(SubCeasePeerDeconfig, ""), true)
	var got []string
	for _, m := range readAll(c, 2*time.Second) {
		if m.Type == TypeNotification {
			got = append(got, ParseNotification(m.Body).String())
		}
	}
	if len(got) != 1 {
		t.Errorf("the router got %d NOTIFICATIONs %q, want the one Cease", len(got), got)
	}
}

// TestReviewFinishMidHandshakeDoesNotWaitForNothing: the same, with a router that
// closes as soon as it read the Cease. Finish still waits the whole closeWait
// (2 s): routerDone is closed only by fromRouter, which has not started. In
// applyPeers that is 2 s of the speaker's main loop per peer removed or changed
// mid-handshake, and the stop reports nothing.
func TestReviewFinishMidHandshakeDoesNotWaitForNothing(t *testing.T) {
	p, c := handshakingPeer(t)
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			m, err := ReadMessage(c, MaxLen)
			if err != nil || m.Type == TypeNotification {
				_ = c.Close()
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	p.Finish(ctx, Cease(SubCeasePeerDeconfig, ""), true)
	if d := time.Since(start); d > time.Second {
		t.Errorf("Finish took %v although the router closed at once after the Cease", d.Round(10*time.Millisecond))
	}
}
