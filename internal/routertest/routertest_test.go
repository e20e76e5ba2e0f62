package routertest

import (
	"context"
	"encoding/hex"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/bgptest"
)

// TestSpeakerOpen: the OPEN bodies are those the tests' former hand-written
// speaker sent, octet for octet.
func TestSpeakerOpen(t *testing.T) {
	id := netip.MustParseAddr("10.255.34.1")
	for _, tc := range []struct {
		nBit bool
		want string
	}{
		{false, "04fde8005a0aff2201" + "14" + "0212" + "010400010001" + "010400020001" + "41040000fde8"},
		{true, "04fde8005a0aff2201" + "1c" + "021a" + "010400010001" + "010400020001" + "41040000fde8" + "4006407800010100"},
	} {
		if got := hex.EncodeToString(SpeakerOpen(id, tc.nBit).Body()); got != tc.want {
			t.Errorf("nBit %v: OPEN body\n got %s\nwant %s", tc.nBit, got, tc.want)
		}
	}
}

// TestSessionHelpers runs Connect, Notify and ExpectNotification against a
// bgptest peer standing in for a router.
func TestSessionHelpers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := bgptest.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	router := bgptest.Open{ASN: 65001, RouterID: netip.MustParseAddr("10.0.0.254"), HoldTime: 90}
	got := make(chan *bgptest.NotificationMsg, 1)
	go func() {
		defer close(got)
		// First session: read the speaker's NOTIFICATION, then close as a router does.
		s, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		if _, err := s.Handshake(ctx, router); err == nil {
			n, _ := s.WaitNotification(ctx)
			got <- n
		}
		_ = s.Close()
		// Second session: send one.
		if s, err = ln.Accept(ctx); err != nil {
			return
		}
		if _, err := s.Handshake(ctx, router); err == nil {
			_ = s.Send(bgptest.Notification(4, 0, nil))
		}
		<-ctx.Done()
		_ = s.Close()
	}()
	local := netip.MustParseAddr("127.0.0.1")
	s := Connect(ctx, t, local, ln.Addr(), SpeakerOpen(local, true))
	Notify(ctx, t, s, bgptest.Notification(6, 2, bgptest.ShutdownCommunication("bye")))
	if n := <-got; n == nil || n.Code != 6 || n.Subcode != 2 || string(n.Data) != "\x03bye" {
		t.Errorf("the router read %v", n)
	}
	s = Connect(ctx, t, local, ln.Addr(), SpeakerOpen(local, false))
	ExpectNotification(ctx, t, s, 4, 0, nil)
}

type event struct{ at, name string }

type fakeLog []event

func (l fakeLog) LogEvents(since time.Time) ([]event, error) { return l, nil }
func (l fakeLog) Log() string                                { return "the log" }

func TestWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	calls := 0
	if err := WaitFor(ctx, func(context.Context) (bool, error) { calls++; return calls == 3, nil }); err != nil || calls != 3 {
		t.Errorf("WaitFor = %v after %d calls", err, calls)
	}
	short, scancel := context.WithTimeout(ctx, 120*time.Millisecond)
	defer scancel()
	errFlaky := errors.New("flaky")
	err := WaitFor(short, func(context.Context) (bool, error) { return false, errFlaky })
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errFlaky) {
		t.Errorf("WaitFor = %v, want the deadline and the last error", err)
	}

	log := fakeLog{{"1", "bfd-down"}, {"2", "notification"}, {"3", "notification"}}
	if e := WaitEvent(ctx, t, log, time.Time{}, "a NOTIFICATION", func(e event) bool { return e.name == "notification" }); e.at != "2" {
		t.Errorf("WaitEvent = %+v, want the first match", e)
	}
}
