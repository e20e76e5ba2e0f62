package frr

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/bgptest"
	"github.com/baremetal-ccm/baremetal-ccm/internal/routertest"
)

// TestParseNotification: FRR 8.4.4's NOTIFICATION lines (message part), as
// TestNotificationsAtRouter makes it log them.
func TestParseNotification(t *testing.T) {
	for _, tc := range []struct{ msg, peer, want string }{
		// 6/9 with data 06 02, N-bit negotiated: FRR prints the encapsulated 6/2.
		{"%NOTIFICATION(Hard Reset): received from neighbor 10.255.34.1 6/2 (Cease/Administrative Shutdown) 0 bytes ", "10.255.34.1", "received 6/9 inner 6/2 (Cease/Administrative Shutdown) hard-reset"},
		// ... with a shutdown communication after 06 02.
		{`%NOTIFICATION(Hard Reset): received from neighbor 10.255.34.1 6/2 (Cease/Administrative Shutdown) "maintenance: node drained"`, "10.255.34.1", `received 6/9 inner 6/2 (Cease/Administrative Shutdown) hard-reset "maintenance: node drained"`},
		// 6/9 with data 06 0a over IPv6.
		{"%NOTIFICATION(Hard Reset): received from neighbor fd00:255:46::1 6/10 (Cease/BFD Down) 0 bytes ", "fd00:255:46::1", "received 6/9 inner 6/10 (Cease/BFD Down) hard-reset"},
		// 6/9 without data (malformed: no encapsulated error).
		{"%NOTIFICATION(Hard Reset): received from neighbor 10.255.34.1 6/9 (Cease/Hard Reset) 0 bytes ", "10.255.34.1", "received 6/9 (Cease/Hard Reset) hard-reset"},
		// 6/9 whose data is a shutdown communication (length 22, "baremetal-ccm stopping")
		// instead of code and subcode: FRR prints the inner length, the outer bytes.
		{"%NOTIFICATION(Hard Reset): received from neighbor 10.255.29.1 22/98 (Unrecognized Error Code) 21 bytes 16 62 61 72 65 6d 65 74 61 6c 2d 63 63 6d 20 73 74 6f 70 70 69", "10.255.29.1", "received 6/9 inner 22/98 (Unrecognized Error Code) hard-reset data 16 62 61 72 65 6d 65 74 61 6c 2d 63 63 6d 20 73 74 6f 70 70 69"},
		// 6/9 without the N-bit: printed as it is.
		{"%NOTIFICATION: received from neighbor 10.255.34.1 6/9 (Cease/Hard Reset) 2 bytes 06 02", "10.255.34.1", "received 6/9 (Cease/Hard Reset) data 06 02"},
		{"%NOTIFICATION: received from neighbor 10.255.34.1 6/10 (Cease/BFD Down) 0 bytes ", "10.255.34.1", "received 6/10 (Cease/BFD Down)"},
		{`%NOTIFICATION: received from neighbor 10.255.34.1 6/2 (Cease/Administrative Shutdown) "maintenance: node drained"`, "10.255.34.1", `received 6/2 (Cease/Administrative Shutdown) "maintenance: node drained"`},
		{"%NOTIFICATION: received from neighbor 10.255.34.1 4/0 (Hold Timer Expired) 0 bytes ", "10.255.34.1", "received 4/0 (Hold Timer Expired)"},
		// Sent: "clear bgp" and "neighbor shutdown message" with the N-bit, a hold timer.
		{"%NOTIFICATION(Hard Reset): sent to neighbor 10.255.34.1 6/4 (Cease/Administrative Reset) 0 bytes ", "10.255.34.1", "sent 6/9 inner 6/4 (Cease/Administrative Reset) hard-reset"},
		{`%NOTIFICATION(Hard Reset): sent to neighbor 10.255.34.1 6/2 (Cease/Administrative Shutdown) "going down for maintenance"`, "10.255.34.1", `sent 6/9 inner 6/2 (Cease/Administrative Shutdown) hard-reset "going down for maintenance"`},
		{"%NOTIFICATION: sent to neighbor 10.255.46.1 4/0 (Hold Timer Expired) 0 bytes ", "10.255.46.1", "sent 4/0 (Hold Timer Expired)"},
		// An OPEN from AS 65099: on the wire 02 02 fe 4b, the data printed truncated.
		{"%NOTIFICATION: sent to neighbor 10.255.35.1 2/2 (OPEN Message Error/Bad Peer AS) 2 bytes f", "10.255.35.1", "sent 2/2 (OPEN Message Error/Bad Peer AS)"},
	} {
		n, peer, err := parseNotification(tc.msg)
		if err != nil {
			t.Errorf("%s: %v", tc.msg, err)
			continue
		}
		if got := n.String(); got != tc.want || peer != tc.peer {
			t.Errorf("%s:\n got %s (peer %s)\nwant %s (peer %s)", tc.msg, got, peer, tc.want, tc.peer)
		}
	}
	n, _, _ := parseNotification("%NOTIFICATION(Hard Reset): received from neighbor 10.255.34.1 6/10 (Cease/BFD Down) 0 bytes ")
	if n.CodeName != "Cease" || n.SubcodeName != "BFD Down" || n.DataLen != 0 || n.Data != nil || n.Direction != Received {
		t.Errorf("%+v", n)
	}
	n, _, _ = parseNotification("%NOTIFICATION: received from neighbor 10.255.34.1 4/0 (Hold Timer Expired) 0 bytes ")
	if n.CodeName != "Hold Timer Expired" || n.SubcodeName != "" {
		t.Errorf("%+v", n)
	}
	for _, bad := range []string{
		"%NOTIFICATION: received from neighbor 10.255.34.1 6/x (Cease) 0 bytes ",
		"%NOTIFICATION: received from neighbor 10.255.34.1 6/300 (Cease) 0 bytes ",
		"%NOTIFICATION: went somewhere",
	} {
		if n, _, err := parseNotification(bad); err == nil {
			t.Errorf("%s: parsed as %s", bad, n)
		}
	}
}

func TestParseLogNotifications(t *testing.T) {
	log := `2026/11/27 08:20:31.528234 BGP: [HZN6M-XRM1G] %NOTIFICATION(Hard Reset): received from neighbor 10.255.34.1 6/2 (Cease/Administrative Shutdown) 0 bytes 
2026/11/27 08:20:31.528243 BGP: [ZWCSR-M7FG9] 10.255.34.1 [FSM] Receive_NOTIFICATION_message (Established->Clearing), fd 18
2026/11/27 08:20:31.528490 BGP: [ZQHFG-DQGX1] 10.255.34.1 went from Established to Clearing
2026/11/27 08:20:35.763377 BGP: [HZN6M-XRM1G] %NOTIFICATION: received from neighbor 10.255.34.1 6/10 (Cease/BFD Down) 0 bytes 
2026/11/27 08:29:18.178944 BGP: [HZN6M-XRM1G] %NOTIFICATION(Hard Reset): received from neighbor fd00:255:46::1 6/10 (Cease/BFD Down) 0 bytes 
2026/11/27 08:20:42.166133 BGP: [H7QV4-WR3ZD] %NOTIFICATION(Hard Reset): sent to neighbor 10.255.34.1 6/2 (Cease/Administrative Shutdown) "going down for maintenance"
`
	evs, err := parseLog(log, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"08:20:31.528234 notification 10.255.34.1 received 6/9 inner 6/2 (Cease/Administrative Shutdown) hard-reset",
		"08:20:31.528490 bgp-state 10.255.34.1 <nil>",
		"08:20:35.763377 notification 10.255.34.1 received 6/10 (Cease/BFD Down)",
		"08:29:18.178944 notification fd00:255:46::1 received 6/9 inner 6/10 (Cease/BFD Down) hard-reset",
		`08:20:42.166133 notification 10.255.34.1 sent 6/9 inner 6/2 (Cease/Administrative Shutdown) hard-reset "going down for maintenance"`,
	}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(evs), len(want), evs)
	}
	for i, e := range evs {
		if got := fmt.Sprintf("%s %s %s %v", e.Time.Format("15:04:05.000000"), e.Kind, e.Peer, e.Notification); got != want[i] {
			t.Errorf("event %d:\n got %s\nwant %s", i, got, want[i])
		}
	}
}

// TestParseNeighborNotificationJSON: the last-reset fields of "show bgp neighbors
// <addr> json" after a Hard Reset received (6/9 with 06 02 and a communication), a
// hold timer expiry FRR sent, and "clear bgp".
func TestParseNeighborNotificationJSON(t *testing.T) {
	addr := netip.MustParseAddr("10.255.34.1")
	for _, tc := range []struct {
		fields string
		want   *NeighborNotification
	}{
		{`"lastErrorCodeSubcode":"0602","lastNotificationReason":"Cease/Administrative Shutdown","lastNotificationHardReset":true,
		"lastShutdownDescription":"maintenance: node drained","lastResetDueTo":"BGP Notification received","lastResetCode":13`,
			&NeighborNotification{Received, 6, 2, "Cease/Administrative Shutdown", "maintenance: node drained"}},
		{`"lastErrorCodeSubcode":"060A","lastNotificationReason":"Cease/BFD Down","lastNotificationHardReset":true,"lastResetDueTo":"BGP Notification received","lastResetCode":13`,
			&NeighborNotification{Received, 6, 10, "Cease/BFD Down", ""}},
		{`"lastErrorCodeSubcode":"0400","lastNotificationReason":"Hold Timer Expired","lastNotificationHardReset":false,"lastResetDueTo":"BGP Notification send","lastResetCode":14`,
			&NeighborNotification{Sent, 4, 0, "Hold Timer Expired", ""}},
		{`"lastResetTimerMsecs":0,"lastResetDueTo":"User reset","lastResetCode":12`, nil},
	} {
		out := `{"10.255.34.1":{"remoteAs":65000,"bgpState":"Active",` + tc.fields + `}}`
		n, err := parseNeighborJSON([]byte(out), addr)
		if err != nil {
			t.Fatal(err)
		}
		if (n.LastNotification == nil) != (tc.want == nil) || (tc.want != nil && *n.LastNotification != *tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.fields, n.LastNotification, tc.want)
		}
	}
	if _, err := parseNeighborJSON([]byte(`{"10.255.34.1":{"lastErrorCodeSubcode":"6"}}`), addr); err == nil {
		t.Error("accepted a bad lastErrorCodeSubcode")
	}
}

// TestNotificationsAtRouter has a raw BGP speaker send FRR the NOTIFICATIONs the
// speaker sends (Hard Reset, BFD Down, Administrative Shutdown with a
// communication) and malformed ones, and checks what FRR logged (LogEvents) and
// recorded (Neighbor.LastNotification); then FRR sends some (clear bgp, hold
// timer), and the speaker checks the bytes on the wire too.
func TestNotificationsAtRouter(t *testing.T) {
	r := Start(t, Options{})
	for _, tc := range []struct {
		name          string
		v6, noNBit    bool
		code, subcode byte
		data          []byte
		want          string // the logged event
		wantNeighbor  NeighborNotification
	}{
		{name: "HardReset", code: 6, subcode: 9, data: []byte{6, 2},
			want:         "received 6/9 inner 6/2 (Cease/Administrative Shutdown) hard-reset",
			wantNeighbor: NeighborNotification{Received, 6, 2, "Cease/Administrative Shutdown", ""}},
		{name: "HardResetCommunication", code: 6, subcode: 9, data: append([]byte{6, 2}, bgptest.ShutdownCommunication("node drained")...),
			want:         `received 6/9 inner 6/2 (Cease/Administrative Shutdown) hard-reset "node drained"`,
			wantNeighbor: NeighborNotification{Received, 6, 2, "Cease/Administrative Shutdown", "node drained"}},
		{name: "HardResetBFDDownIPv6", v6: true, code: 6, subcode: 9, data: []byte{6, 10},
			want:         "received 6/9 inner 6/10 (Cease/BFD Down) hard-reset",
			wantNeighbor: NeighborNotification{Received, 6, 10, "Cease/BFD Down", ""}},
		{name: "BFDDown", code: 6, subcode: 10,
			want:         "received 6/10 (Cease/BFD Down)",
			wantNeighbor: NeighborNotification{Received, 6, 10, "Cease/BFD Down", ""}},
		{name: "ShutdownCommunication", code: 6, subcode: 2, data: bgptest.ShutdownCommunication("maintenance: node drained"),
			want:         `received 6/2 (Cease/Administrative Shutdown) "maintenance: node drained"`,
			wantNeighbor: NeighborNotification{Received, 6, 2, "Cease/Administrative Shutdown", "maintenance: node drained"}},
		{name: "HardResetWithoutData", code: 6, subcode: 9,
			want:         "received 6/9 (Cease/Hard Reset) hard-reset",
			wantNeighbor: NeighborNotification{Received, 6, 9, "Cease/Hard Reset", ""}},
		// A communication where the encapsulated code and subcode belong: FRR's "22/98".
		{name: "HardResetCommunicationOnly", code: 6, subcode: 9, data: bgptest.ShutdownCommunication("baremetal-ccm stopping"),
			want:         "received 6/9 inner 22/98 (Unrecognized Error Code) hard-reset data 16 62 61 72 65 6d 65 74 61 6c 2d 63 63 6d 20 73 74 6f 70 70 69",
			wantNeighbor: NeighborNotification{Received, 22, 98, "Unrecognized Error Code", ""}},
		{name: "HardResetWithoutNBit", noNBit: true, code: 6, subcode: 9, data: []byte{6, 2},
			want:         "received 6/9 (Cease/Hard Reset) data 06 02",
			wantNeighbor: NeighborNotification{Received, 6, 9, "Cease/Hard Reset", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local, remote := r.SpeakerV4(0), r.RouterV4
			if tc.v6 {
				local, remote = r.SpeakerV6(0), r.RouterV6
			}
			s := session(t, r, local, remote, routertest.SpeakerOpen(r.SpeakerV4(0), !tc.noNBit))
			since := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			routertest.Notify(ctx, t, s, bgptest.Notification(tc.code, tc.subcode, tc.data))
			ev := waitNotification(ctx, t, r, local, since)
			if got := ev.Notification.String(); got != tc.want {
				t.Errorf("logged %s\n    want %s\n%s", got, tc.want, ev.Line)
			}
			waitLastNotification(ctx, t, r, local, &tc.wantNeighbor)
		})
	}

	t.Run("SentClear", func(t *testing.T) {
		s := session(t, r, r.SpeakerV4(0), r.RouterV4, routertest.SpeakerOpen(r.SpeakerV4(0), true))
		since := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := r.Vtysh(ctx, "clear bgp "+r.SpeakerV4(0).String()); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		routertest.ExpectNotification(ctx, t, s, 6, 9, []byte{6, 4}) // Hard Reset of an Administrative Reset
		ev := waitNotification(ctx, t, r, r.SpeakerV4(0), since)
		if got, want := ev.Notification.String(), "sent 6/9 inner 6/4 (Cease/Administrative Reset) hard-reset"; got != want {
			t.Errorf("logged %s, want %s", got, want)
		}
		if n := waitLastNotification(ctx, t, r, r.SpeakerV4(0), nil); n.LastResetReason != "User reset" {
			t.Errorf("neighbor after clear: last reset %q", n.LastResetReason)
		}
	})

	t.Run("SentHoldTimerExpired", func(t *testing.T) {
		o := routertest.SpeakerOpen(r.SpeakerV4(0), true)
		o.HoldTime = 3 // and no KEEPALIVEs
		s := session(t, r, r.SpeakerV4(0), r.RouterV4, o)
		since := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		routertest.ExpectNotification(ctx, t, s, 4, 0, nil) // Hold Timer Expired
		ev := waitNotification(ctx, t, r, r.SpeakerV4(0), since)
		if got, want := ev.Notification.String(), "sent 4/0 (Hold Timer Expired)"; got != want {
			t.Errorf("logged %s, want %s", got, want)
		}
		waitLastNotification(ctx, t, r, r.SpeakerV4(0), &NeighborNotification{Sent, 4, 0, "Hold Timer Expired", ""})
	})
}

// waitNotification waits for the first NOTIFICATION FRR logged for peer at or
// after since.
func waitNotification(ctx context.Context, t *testing.T, r *Router, peer netip.Addr, since time.Time) Event {
	t.Helper()
	return routertest.WaitEvent(ctx, t, r, since, "NOTIFICATION for "+peer.String(), func(e Event) bool {
		return e.Kind == EventNotification && e.Peer == peer
	})
}

// waitLastNotification waits until FRR's view of the neighbor has the last
// notification want (nil: none), which it records just after logging it.
func waitLastNotification(ctx context.Context, t *testing.T, r *Router, addr netip.Addr, want *NeighborNotification) Neighbor {
	t.Helper()
	var n Neighbor
	err := WaitFor(ctx, func(ctx context.Context) (bool, error) {
		var err error
		n, err = r.Neighbor(ctx, addr)
		got := n.LastNotification
		return err == nil && (got == nil) == (want == nil) && (want == nil || *got == *want), err
	})
	if err != nil {
		t.Errorf("neighbor's last notification %+v, want %+v (last reset %q): %v", n.LastNotification, want, n.LastResetReason, err)
	}
	return n
}

// session connects a raw speaker from local to the router's address remote and
// waits until FRR has the neighbor Established too (FRR answers the OPEN with its
// KEEPALIVE before it takes the connection for the neighbor), for up to 30s: the
// router refuses the neighbor for a moment after each session.
func session(t *testing.T, r *Router, local, remote netip.Addr, o bgptest.Open) *bgptest.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := routertest.Connect(ctx, t, local, netip.AddrPortFrom(remote, 179), o)
	err := WaitFor(ctx, func(ctx context.Context) (bool, error) {
		n, err := r.Neighbor(ctx, local)
		return n.State == "Established", err
	})
	if err != nil {
		t.Fatalf("neighbor %s not Established at the router: %v", local, err)
	}
	return s
}
