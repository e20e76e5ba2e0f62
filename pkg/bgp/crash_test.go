package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/internal/bgptest"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
)

// Crash isolation: whatever a router sends, at worst its own session resets; the
// process and every other session live on. Each case runs a speaker process as
// the product runs it (New, Announce, Run, Synced) with two raw routers on
// loopback: the victim gets the crafted messages, the bystander nothing. A panic
// anywhere in the process (GoBGP's goroutines included) ends the process, which
// the test sees as a failure.

var (
	crashPrefix4 = netip.MustParsePrefix("198.51.200.1/32")
	crashPrefix6 = netip.MustParsePrefix("2001:db8:200::1/128")
)

// rawRouterOpen is the OPEN of a raw test router: both unicast families, route
// refresh, 4-octet AS, ADD-PATH receive, graceful restart with the N bit.
func rawRouterOpen(asn uint32, id string) bgptest.Open {
	fams := []bgptest.Family{bgptest.IPv4Unicast, bgptest.IPv6Unicast}
	return bgptest.Open{
		ASN: asn, RouterID: netip.MustParseAddr(id), HoldTime: 9, Families: fams, RouteRefresh: true, FourOctetAS: true,
		AddPath: []bgptest.AddPath{{Family: fams[0], Mode: bgptest.AddPathReceive}, {Family: fams[1], Mode: bgptest.AddPathReceive}},
		GracefulRestart: &bgptest.GracefulRestart{Time: 120, Notification: true,
			Families: []bgptest.GRFamily{{Family: fams[0], Forwarding: true}, {Family: fams[1], Forwarding: true}}},
	}
}

func rawPeer(l *bgptest.Listener, asn uint32) config.BGPPeer {
	return config.BGPPeer{Address: l.Addr().Addr().String(), Port: int32(l.Port()), ASN: asn,
		HoldTime: &metav1.Duration{Duration: 9 * time.Second}, ConnectRetry: &metav1.Duration{Duration: time.Second},
		GracefulRestart: &metav1.Duration{Duration: 120 * time.Second}}
}

// acceptRouter accepts the speaker's connection, completes the OPEN exchange with
// o and keeps the session alive.
func acceptRouter(t *testing.T, l *bgptest.Listener, o bgptest.Open) (*bgptest.Session, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	s, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Handshake(ctx, o); err != nil {
		return s, err
	}
	s.KeepAlive(context.Background())
	return s, nil
}

func waitAnnounced(t *testing.T, s *bgptest.Session, what string, sp *speakerProc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	_, err := s.WaitRoutes(ctx, func(rs []bgptest.Route) bool {
		var v4, v6 bool
		for _, r := range rs {
			v4 = v4 || r.Prefix == crashPrefix4
			v6 = v6 || r.Prefix == crashPrefix6
		}
		return v4 && v6
	})
	if err != nil {
		t.Fatalf("%s: the speaker's paths did not arrive: %v (routes %v)\n%s", what, err, s.Routes(), sp.logText())
	}
}

// crashOutcome is what a crafted case did to the victim's session.
type crashOutcome struct {
	reset        bool
	notification string
}

func TestCraftedMessagesResetOnlyTheirSession(t *testing.T) {
	var table []string
	for _, c := range bgptest.Crafted() {
		t.Run(c.Name, func(t *testing.T) {
			out := craftedTrial(t, c)
			what := "session kept"
			if out.reset {
				what = "session reset (" + out.notification + ")"
			}
			table = append(table, fmt.Sprintf("%-40s %-16s %s", c.Name, c.CVE, what))
		})
	}
	t.Logf("crafted messages (case, CVE, what the victim's session saw; the process and the bystander lived in every case):\n%s", strings.Join(table, "\n"))
}

// craftedTrial runs one case and returns what happened to the victim's session.
func craftedTrial(t *testing.T, c bgptest.Case) crashOutcome {
	victimL, err := bgptest.Listen("127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer victimL.Close()
	bystanderL, err := bgptest.Listen("127.0.0.3:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bystanderL.Close()
	sp := startSpeakerProc(t, childSpec{RouterID: "10.0.0.1", Peers: []config.BGPPeer{rawPeer(victimL, 65001), rawPeer(bystanderL, 65002)},
		Prefixes: []string{crashPrefix4.String(), crashPrefix6.String()}, IPv6NextHop: "2001:db8:ffff::1"})
	bystander, err := acceptRouter(t, bystanderL, rawRouterOpen(65002, "10.0.0.3"))
	if err != nil {
		t.Fatalf("bystander: %v\n%s", err, sp.logText())
	}
	waitAnnounced(t, bystander, "bystander", sp)

	var out crashOutcome
	open := rawRouterOpen(65001, "10.0.0.2")
	if c.Open != nil {
		c.Open(&open)
	}
	victim, err := acceptRouter(t, victimL, open)
	switch {
	case err != nil && c.Open == nil:
		t.Fatalf("victim: %v\n%s", err, sp.logText())
	case err != nil:
		out = crashOutcome{reset: true, notification: notificationOf(victim, err)}
	default:
		waitAnnounced(t, victim, "victim", sp)
		if c.Messages != nil {
			for _, m := range c.Messages(victim.Negotiated()) {
				if err := victim.Send(m); err != nil {
					break // the speaker may reset the session before the last one
				}
			}
		}
		out = settle(victim)
	}

	// The process lives, the bystander's session and paths are untouched.
	select {
	case err := <-sp.exit:
		t.Fatalf("the speaker process exited: %v\n%s", err, sp.logText())
	default:
	}
	select {
	case <-bystander.Closed():
		t.Fatalf("the bystander's session closed: %v\n%s", bystander.Err(), sp.logText())
	default:
	}
	waitAnnounced(t, bystander, "bystander after the case", sp)
	if out.reset {
		// The victim's session comes back, with the paths.
		again, err := acceptRouter(t, victimL, rawRouterOpen(65001, "10.0.0.2"))
		if err != nil {
			t.Fatalf("the victim's session did not come back: %v\n%s", err, sp.logText())
		}
		waitAnnounced(t, again, "victim after the reset", sp)
	}
	sp.stop(t) // a clean exit, status 0
	return out
}

// settle waits until the speaker has dealt with what the victim sent: the
// session resets (a NOTIFICATION or a close), or a ROUTE-REFRESH sent after the
// case is answered with the paths again (the relay and GoBGP took everything
// before it).
func settle(victim *bgptest.Session) crashOutcome {
	// Drop what is queued from before the case.
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		m, err := victim.ReadMessage(ctx)
		cancel()
		if err != nil {
			break
		}
		if m.Type == bgptest.TypeNotification {
			return crashOutcome{reset: true, notification: notificationText(m)}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if victim.Send(bgptest.RouteRefresh(bgptest.IPv4Unicast)) == nil {
		m, err := victim.WaitFor(ctx, func(m bgptest.Message) bool {
			return m.Type == bgptest.TypeNotification || m.Type == bgptest.TypeUpdate
		})
		switch {
		case err == nil && m.Type == bgptest.TypeNotification:
			return crashOutcome{reset: true, notification: notificationText(m)}
		case err == nil:
			select {
			case <-victim.Closed():
			case <-time.After(200 * time.Millisecond):
				return crashOutcome{}
			}
		}
	}
	return crashOutcome{reset: true, notification: notificationOf(victim, nil)}
}

func notificationText(m bgptest.Message) string {
	n, err := bgptest.ParseNotification(m.Body)
	if err != nil {
		return "malformed NOTIFICATION"
	}
	return n.Error()
}

// notificationOf reads the NOTIFICATION the speaker sent, if any.
func notificationOf(s *bgptest.Session, err error) string {
	var n *bgptest.NotificationMsg
	if errors.As(err, &n) {
		return n.Error()
	}
	if s == nil {
		return "closed"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	n, werr := s.WaitNotification(ctx)
	if werr != nil {
		return "closed without NOTIFICATION"
	}
	return n.Error()
}

// TestListenAcceptsRouterSessions: with bgp.listenPort, a router that connects to
// the speaker gets a session (its TCP-MD5 key set on the listener), one from an
// address that is no peer is closed, and an OPEN the relay refuses gets its
// NOTIFICATION.
func TestListenAcceptsRouterSessions(t *testing.T) {
	port, err := freeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	dead, err := freeLoopbackPort() // nobody listens: the speaker's own dials fail
	if err != nil {
		t.Fatal(err)
	}
	peer := config.BGPPeer{Address: "127.0.0.2", Port: int32(dead), ASN: 65001,
		HoldTime: &metav1.Duration{Duration: 9 * time.Second}, ConnectRetry: &metav1.Duration{Duration: 30 * time.Second}}
	sp := runSpeaker(t, nil, 0, Config{RouterID: netip.MustParseAddr("10.0.0.1"), ListenPort: int32(port), Peers: []config.BGPPeer{peer},
		IPv6NextHop: netip.MustParseAddr("2001:db8:ffff::1")}, func(s *Speaker) {
		s.Announce("lb", []Path{{Prefix: crashPrefix4}, {Prefix: crashPrefix6}})
	})
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)).String()
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()

	dial := func(from string) (*bgptest.Session, error) {
		for {
			s, err := bgptest.DialFrom(ctx, netip.MustParseAddr(from), addr)
			if err == nil || ctx.Err() != nil {
				return s, err
			}
			time.Sleep(50 * time.Millisecond) // Run is starting the listener
		}
	}
	stranger, err := dial("127.0.0.9")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-stranger.Closed():
	case <-ctx.Done():
		t.Fatal("a connection from an address that is no peer stayed open")
	}

	// The listener may accept before the peer is registered with it: a connection
	// from an address that is no peer (yet) is closed unread, which the kernel turns
	// into a reset. Dial again while that happens.
	handshake := func(o bgptest.Open) (*bgptest.Session, error) {
		for {
			s, err := dial("127.0.0.2")
			if err != nil {
				return nil, err
			}
			_, err = s.Handshake(ctx, o)
			if err == nil || !strings.Contains(err.Error(), "connection reset") || ctx.Err() != nil {
				return s, err
			}
			_ = s.Close()
			time.Sleep(50 * time.Millisecond)
		}
	}
	o := rawRouterOpen(65001, "10.0.0.2")
	o.RawCapabilities = [][]byte{{bgptest.CapMultiprotocol, 3, 0, 1, 1}}
	bad, err := handshake(o)
	if err == nil || !strings.Contains(err.Error(), "2/0") {
		t.Errorf("a malformed OPEN got %v, want NOTIFICATION 2/0", err)
	}
	if bad != nil {
		_ = bad.Close()
	}

	router, err := handshake(rawRouterOpen(65001, "10.0.0.2"))
	if router != nil {
		defer router.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	router.KeepAlive(ctx)
	if _, err := router.WaitRoutes(ctx, func(rs []bgptest.Route) bool { return len(rs) == 2 }); err != nil {
		t.Fatalf("the paths over the router's own connection: %v", err)
	}
	err = bird.WaitFor(ctx, func(context.Context) (bool, error) {
		ps := sp.Peers()
		return len(ps) == 1 && ps[0].State == "established", nil
	})
	if err != nil {
		t.Errorf("Peers() = %+v: %v", sp.Peers(), err)
	}
}
