package bgp

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/bgptest"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// FuzzSpeakerReceive feeds what a router sends into the speaker's receive path
// over a real session: a speaker in this process (New, Announce, Run, Synced, as
// the product runs it) peers with a raw router on loopback, and each input is
// sent on that session. Any panic, in the relay or in GoBGP, ends the fuzzing
// worker and is reported with its input. After each input the test checks that
// the speaker still serves: the session answers a ROUTE-REFRESH, or it was reset
// and comes back with the paths.
//
// An input is (mode, type, body): mode%4 == 0 sends body as raw bytes (framing
// included), 1 and 2 send body as a well-framed UPDATE (what routers send most),
// 3 a well-framed message of the given type. An input that makes the speaker
// reset the session costs about a second (the reconnection), so this runs at a
// few inputs per second; the relay's decoders are fuzzed on their own, much
// faster, in package wire. `make fuzz` runs both with a fixed budget.
func FuzzSpeakerReceive(f *testing.F) {
	h := newFuzzHarness(f)
	n := h.negotiated
	for _, c := range bgptest.Crafted() {
		if c.Messages == nil {
			continue
		}
		for _, m := range c.Messages(n) {
			f.Add(byte(0), byte(0), m)
			if len(m) >= 19 {
				f.Add(byte(3), m[18], m[19:])
			}
		}
	}
	f.Add(byte(3), byte(bgptest.TypeKeepalive), []byte{})
	f.Add(byte(1), byte(0), []byte{0, 0, 0, 0})
	f.Add(byte(3), byte(bgptest.TypeNotification), []byte{6, 9, 6, 2})
	f.Add(byte(3), byte(bgptest.TypeRouteRefresh), []byte{0, 2, 0, 1})
	f.Add(byte(3), byte(bgptest.TypeOpen), bgptest.Open{ASN: 65001, RouterID: netip.MustParseAddr("10.0.0.2"), HoldTime: 9}.Body())
	f.Fuzz(func(t *testing.T, mode, typ byte, body []byte) {
		s := h.session(t)
		if len(body) > 4096 {
			body = body[:4096]
		}
		var msg []byte
		switch mode % 4 {
		case 0:
			msg = body
		case 1, 2:
			msg = bgptest.Msg(bgptest.TypeUpdate, body)
		default:
			msg = bgptest.Msg(typ, body)
		}
		_ = s.Send(msg)
		h.check(s)
	})
}

// fuzzHarness is a running speaker and its raw router's current session.
type fuzzHarness struct {
	sp         *Speaker
	l          *bgptest.Listener
	negotiated *bgptest.Negotiated

	mu   sync.Mutex
	sess *bgptest.Session
}

func newFuzzHarness(tb testing.TB) *fuzzHarness {
	l, err := bgptest.Listen("127.0.0.2:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	p := rawPeer(l, 65001)
	p.ConnectRetry = &metav1.Duration{Duration: 100 * time.Millisecond}
	sp, err := New(Config{LocalASN: 65000, RouterID: netip.MustParseAddr("10.0.0.1"), Peers: []config.BGPPeer{p},
		IPv6NextHop: netip.MustParseAddr("2001:db8:ffff::1"), DeferSessions: true})
	if err != nil {
		tb.Fatal(err)
	}
	sp.Announce("lb", []Path{{Prefix: crashPrefix4}, {Prefix: crashPrefix6}})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	done := make(chan struct{})
	go func() { defer close(done); _ = sp.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	if err := sp.Synced(); err != nil {
		tb.Fatal(err)
	}
	h := &fuzzHarness{sp: sp, l: l}
	s := h.accept(tb)
	h.negotiated = s.Negotiated()
	return h
}

// accept takes the speaker's next connection and waits for its paths.
func (h *fuzzHarness) accept(tb testing.TB) *bgptest.Session {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	s, err := h.l.Accept(ctx)
	if err != nil {
		tb.Fatalf("the speaker did not connect: %v", err)
	}
	if _, err := s.Handshake(ctx, rawRouterOpen(65001, "10.0.0.2")); err != nil {
		tb.Fatalf("handshake: %v", err)
	}
	s.KeepAlive(context.Background())
	if _, err := s.WaitRoutes(ctx, func(rs []bgptest.Route) bool { return len(rs) == 2 }); err != nil {
		tb.Fatalf("the speaker's paths did not arrive: %v", err)
	}
	h.mu.Lock()
	h.sess = s
	h.mu.Unlock()
	return s
}

// session returns an established session, accepting a new one if the last
// input reset it.
func (h *fuzzHarness) session(tb testing.TB) *bgptest.Session {
	h.mu.Lock()
	s := h.sess
	h.mu.Unlock()
	if s != nil {
		select {
		case <-s.Closed():
		default:
			return s
		}
	}
	return h.accept(tb)
}

// check waits until the speaker has dealt with the input: the session answers a
// ROUTE-REFRESH with its paths, or the speaker resets it. A session that does
// neither within a second (an input cut short leaves the relay waiting for the
// rest of a message, as a real one would until the hold timer) is closed from the
// router's side. Either way the next input's session proves that the speaker
// serves again.
func (h *fuzzHarness) check(s *bgptest.Session) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := s.ReadMessage(ctx)
		cancel()
		if err != nil {
			break
		}
	}
	if s.Send(bgptest.RouteRefresh(bgptest.IPv4Unicast)) == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m, err := s.WaitFor(ctx, func(m bgptest.Message) bool {
			return m.Type == bgptest.TypeUpdate || m.Type == bgptest.TypeNotification
		})
		cancel()
		if err == nil && m.Type == bgptest.TypeUpdate {
			return
		}
	}
	h.reset(s)
}

func (h *fuzzHarness) reset(s *bgptest.Session) {
	_ = s.Close()
	h.mu.Lock()
	if h.sess == s {
		h.sess = nil
	}
	h.mu.Unlock()
}
