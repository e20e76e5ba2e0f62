package bird

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/bgptest"
	"github.com/baremetal-ccm/baremetal-ccm/internal/routertest"
)

// TestParseLogNotifications: BIRD 2.0.12's NOTIFICATION lines as
// TestNotificationsAtRouter makes it log them, with the default millisecond
// timestamps and EventLog's microseconds.
func TestParseLogNotifications(t *testing.T) {
	log := `2026-11-27 08:22:00.800 <INFO> Started
2026-11-27 08:22:00.813 <WARN> s1: Missing link-local address
2026-11-27 08:22:01.114 <RMT> s1: Received: Unknown error 6.9: 0602
2026-11-27 08:22:01.719 <RMT> s1: Received: Unknown error 6.9: 0602196d61696e74656e616e63653a20
2026-11-27 08:22:02.929 <RMT> s1: Received: Unknown error 6.9
2026-11-27 08:22:04.138 <RMT> s1v6: Received: Unknown error 6.9: 1662
2026-11-27 08:22:04.742 <RMT> s1: Received: Unknown error 6.10
2026-11-27 08:22:05.347 <RMT> s1: Received: Administrative shutdown: "maintenance: node drained"
2026-11-27 08:22:06.557 <RMT> s1: Received: Administrative reset
2026-11-27 08:22:07.161 <RMT> s1: Received: Hold timer expired
2026-11-27 08:22:08.467 <RMT> s1: Received: Unknown error 6.42: 010203
2026-11-27 08:22:09.774 <INFO> Restarting protocol s1
2026-11-27 08:27:47.725608 <RMT> s1: Error: Hold timer expired
2026-11-27 08:27:47.725608 <TRACE> s1: BGP session closed
2026-11-27 08:27:47.725608 <TRACE> s1: State changed to stop
2026-11-27 08:27:48.000001 <RMT> s1: Received: Something BIRD never says
`
	var got []string
	for _, e := range parseLog(log, time.Time{}) {
		s := fmt.Sprintf("%s %s %s", e.Time.Format("15:04:05.000000"), e.Kind, e.Protocol)
		if e.Notification != nil {
			s += " " + e.Notification.String()
		}
		got = append(got, s)
	}
	want := []string{
		"08:22:01.114000 notification s1 received 6/9 inner 6/2 (Unknown error 6.9) data 06 02",
		"08:22:01.719000 notification s1 received 6/9 inner 6/2 (Unknown error 6.9) data 06 02 19 6d 61 69 6e 74 65 6e 61 6e 63 65 3a 20",
		"08:22:02.929000 notification s1 received 6/9 (Unknown error 6.9)",
		"08:22:04.138000 notification s1v6 received 6/9 inner 22/98 (Unknown error 6.9) data 16 62",
		"08:22:04.742000 notification s1 received 6/10 (Unknown error 6.10)",
		`08:22:05.347000 notification s1 received 6/2 (Administrative shutdown) "maintenance: node drained"`,
		"08:22:06.557000 notification s1 received 6/4 (Administrative reset)",
		"08:22:07.161000 notification s1 received 4/0 (Hold timer expired)",
		"08:22:08.467000 notification s1 received 6/42 (Unknown error 6.42) data 01 02 03",
		"08:27:47.725608 notification s1 sent 4/0 (Hold timer expired)",
		"08:27:47.725608 protocol-state s1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	since, _ := time.ParseInLocation(logTimeLayout, "2026-11-27 08:22:06.557000", time.Local)
	if evs := parseLog(log, since); len(evs) != 5 {
		t.Errorf("since: %+v", evs)
	}
}

func TestParseProtocolDetail(t *testing.T) {
	shutdown := `BIRD 2.0.12 ready.
Name       Proto      Table      State  Since         Info
s1         BGP        ---        start  08:22:05.347  Passive       Received: Administrative shutdown
  Message:        maintenance: node drained
  BGP state:          Passive
    Neighbor address: 10.255.184.1
    Neighbor AS:      65000
    Local AS:         65001
    Last error:       Received: Administrative shutdown
  Channel ipv4
    State:          DOWN
    Table:          master4
    Preference:     100
    Input filter:   ACCEPT
    Output filter:  REJECT
`
	d, err := parseProtocolDetail(shutdown, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "s1" || d.State != "start" || d.BGPState != "Passive" || d.NeighborAddr != netip.MustParseAddr("10.255.184.1") || d.NeighborAS != 65000 ||
		d.LastError != "Received: Administrative shutdown" || d.Message != "maintenance: node drained" || d.Info != "Passive Received: Administrative shutdown" {
		t.Errorf("%+v", d)
	}
	if n := d.LastNotification; n == nil || n.String() != `received 6/2 (Administrative shutdown) "maintenance: node drained"` {
		t.Errorf("last notification %v", n)
	}
	for _, tc := range []struct{ lastError, want string }{
		{"Received: Unknown error 6.9", "received 6/9 (Unknown error 6.9)"},
		{"Received: Unknown error 6.10", "received 6/10 (Unknown error 6.10)"},
		{"BGP Error: Hold timer expired", "sent 4/0 (Hold timer expired)"},
		{"BFD session down", "<nil>"},
		{"Socket: Connection closed", "<nil>"},
		{"", "<nil>"},
	} {
		out := strings.Replace(shutdown, "Last error:       Received: Administrative shutdown", "Last error:       "+tc.lastError, 1)
		out = strings.Replace(out, "  Message:        maintenance: node drained\n", "", 1)
		d, err := parseProtocolDetail(out, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(d.LastNotification); d.LastError != tc.lastError || got != tc.want {
			t.Errorf("%q: %q, %s; want %s", tc.lastError, d.LastError, got, tc.want)
		}
	}
	if _, err := parseProtocolDetail(shutdown, "s2"); err == nil {
		t.Error("found s2")
	}
}

// TestNotificationsAtRouter has a raw BGP speaker send BIRD the NOTIFICATIONs the
// speaker sends (Hard Reset, BFD Down, Administrative Shutdown with a
// communication) and malformed ones, and checks what BIRD logged (LogEvents) and
// keeps as the protocol's last error (ProtocolDetail); then BIRD sends some (hold
// timer expired, birdc restart), and the speaker checks the bytes on the wire.
func TestNotificationsAtRouter(t *testing.T) {
	r := Start(t, Options{})
	v4 := routertest.SpeakerOpen(r.SpeakerV4(0), true)
	for _, tc := range []struct {
		name          string
		v6            bool
		code, subcode byte
		data          []byte
		want          string // the logged event
		wantLastError string
		wantMessage   string
	}{
		{name: "HardReset", code: 6, subcode: 9, data: []byte{6, 2},
			want: "received 6/9 inner 6/2 (Unknown error 6.9) data 06 02", wantLastError: "Received: Unknown error 6.9"},
		{name: "HardResetBFDDownIPv6", v6: true, code: 6, subcode: 9, data: []byte{6, 10},
			want: "received 6/9 inner 6/10 (Unknown error 6.9) data 06 0a", wantLastError: "Received: Unknown error 6.9"},
		{name: "BFDDown", code: 6, subcode: 10,
			want: "received 6/10 (Unknown error 6.10)", wantLastError: "Received: Unknown error 6.10"},
		{name: "ShutdownCommunication", code: 6, subcode: 2, data: bgptest.ShutdownCommunication("maintenance: node drained"),
			want:          `received 6/2 (Administrative shutdown) "maintenance: node drained"`,
			wantLastError: "Received: Administrative shutdown", wantMessage: "maintenance: node drained"},
		{name: "HardResetWithoutData", code: 6, subcode: 9,
			want: "received 6/9 (Unknown error 6.9)", wantLastError: "Received: Unknown error 6.9"},
		// A communication where the encapsulated code and subcode belong; BIRD prints
		// the first 16 bytes.
		{name: "HardResetCommunicationOnly", code: 6, subcode: 9, data: bgptest.ShutdownCommunication("baremetal-ccm stopping"),
			want:          "received 6/9 inner 22/98 (Unknown error 6.9) data 16 62 61 72 65 6d 65 74 61 6c 2d 63 63 6d 20 73",
			wantLastError: "Received: Unknown error 6.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := session(t, r, tc.v6, v4)
			// BIRD's default log timestamps have milliseconds.
			since := time.Now().Truncate(time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			routertest.Notify(ctx, t, s, bgptest.Notification(tc.code, tc.subcode, tc.data))
			ev := waitNotification(ctx, t, r, r.Protocol(0, tc.v6), since)
			if got := ev.Notification.String(); got != tc.want {
				t.Errorf("logged %s\n    want %s\n%s", got, tc.want, ev.Line)
			}
			peer := r.SpeakerV4(0)
			if tc.v6 {
				peer = r.SpeakerV6(0)
			}
			if ev.Peer != peer {
				t.Errorf("event peer %s, want %s", ev.Peer, peer)
			}
			d, err := r.ProtocolDetail(ctx, r.Protocol(0, tc.v6))
			if err != nil {
				t.Fatal(err)
			}
			// The message stays until the next Administrative Shutdown or Reset.
			if d.LastError != tc.wantLastError || (tc.wantMessage != "" && d.Message != tc.wantMessage) || d.LastNotification == nil ||
				d.LastNotification.Code != tc.code || d.LastNotification.Subcode != tc.subcode || d.LastNotification.Communication != tc.wantMessage {
				t.Errorf("protocol detail: last error %q, message %q, notification %v; want %q, %q", d.LastError, d.Message, d.LastNotification, tc.wantLastError, tc.wantMessage)
			}
		})
	}

	t.Run("SentHoldTimerExpired", func(t *testing.T) {
		o := v4
		o.HoldTime = 3 // and no KEEPALIVEs
		s := session(t, r, false, o)
		since := time.Now().Truncate(time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		routertest.ExpectNotification(ctx, t, s, 4, 0, nil) // Hold Timer Expired
		ev := waitNotification(ctx, t, r, "s1", since)
		if got, want := ev.Notification.String(), "sent 4/0 (Hold timer expired)"; got != want {
			t.Errorf("logged %s, want %s", got, want)
		}
		d, err := r.ProtocolDetail(ctx, "s1")
		if err != nil || d.LastError != "BGP Error: Hold timer expired" || d.LastNotification == nil || d.LastNotification.String() != "sent 4/0 (Hold timer expired)" {
			t.Errorf("protocol detail %+v %v: %v", d, d.LastNotification, err)
		}
	})

	t.Run("SentRestartNotLogged", func(t *testing.T) {
		s := session(t, r, false, v4)
		since := time.Now().Truncate(time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := r.Birdc(ctx, "restart", "s1"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		routertest.ExpectNotification(ctx, t, s, 6, 4, nil) // Administrative Reset
		// BIRD logs no Cease it sends, and a restart clears the last error.
		evs, err := r.LogEvents(since)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == EventNotification {
				t.Errorf("logged %s", e.Line)
			}
		}
		if d, err := r.ProtocolDetail(ctx, "s1"); err != nil || d.LastError != "" || d.LastNotification != nil {
			t.Errorf("protocol detail after restart %+v: %v", d, err)
		}
	})
}

// waitNotification waits for the first NOTIFICATION BIRD logged for protocol at or
// after since.
func waitNotification(ctx context.Context, t *testing.T, r *Router, protocol string, since time.Time) Event {
	t.Helper()
	return routertest.WaitEvent(ctx, t, r, since, "NOTIFICATION for "+protocol, func(e Event) bool {
		return e.Kind == EventNotification && e.Protocol == protocol
	})
}

// session connects a raw speaker from speaker 0's address of the family to
// BIRD and waits until BIRD has the protocol Established too, for up to 30s:
// BIRD refuses the neighbor for a moment after each session.
func session(t *testing.T, r *Router, v6 bool, o bgptest.Open) *bgptest.Session {
	t.Helper()
	local, remote := r.SpeakerV4(0), r.RouterV4
	if v6 {
		local, remote = r.SpeakerV6(0), r.RouterV6
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := routertest.Connect(ctx, t, local, netip.AddrPortFrom(remote, 179), o)
	err := WaitFor(ctx, func(ctx context.Context) (bool, error) {
		p, err := r.ProtocolState(ctx, r.Protocol(0, v6))
		return p.Established(), err
	})
	if err != nil {
		t.Fatalf("protocol %s not Established at the router: %v", r.Protocol(0, v6), err)
	}
	return s
}
