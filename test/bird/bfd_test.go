package bird

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseBFDSessions(t *testing.T) {
	out := `BIRD 2.0.12 ready.
bfd1:
IP address                Interface  State      Since         Interval  Timeout
10.255.7.1                eth0       Up         15:31:54.353    0.300    0.900
fd00:255:7::1             eth0       Down       2026-11-25 15:31:51    1.000    0.000
`
	ss, err := parseBFDSessions(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 {
		t.Fatalf("%+v", ss)
	}
	if s := ss[0]; s.Addr != netip.MustParseAddr("10.255.7.1") || s.State != "Up" || s.Since != "15:31:54.353" || s.Interval != 300*time.Millisecond || s.Timeout != 900*time.Millisecond {
		t.Errorf("%+v", s)
	}
	if s := ss[1]; s.State != "Down" || s.Since != "2026-11-25 15:31:51" || s.Interval != time.Second {
		t.Errorf("%+v", s)
	}
}

func TestParseLogEvents(t *testing.T) {
	log := `2026-11-25 15:31:46.407492 <TRACE> b1: Starting
2026-11-25 15:31:46.407492 <TRACE> b1: State changed to up
2026-11-25 15:31:46.673031 <TRACE> bfd1: Session to 10.255.7.1 changed state from Down to Up
2026-11-25 15:31:51.158709 <TRACE> s1.ipv4 > added [best] 198.51.100.10/32 0L 2G unicast
2026-11-25 15:31:51.159964 <TRACE> bfd1: Session to fd00:255:7::1 changed state from Up to Down
2026-11-25 15:31:51.160044 <TRACE> s1: BFD session down
2026-11-25 15:31:51.160044 <TRACE> s1: State changed to stop
2026-11-25 16:07:18.147757 <TRACE> s1.ipv6 > removed [sole] 2001:db8::1/128 0L 2G unicast
2026-11-25 16:07:18.147758 <TRACE> k4.ipv4 < removed 198.51.100.10/32 0L 2G unicast
2026-11-25 16:07:18.654912 <INFO> Shutting down
`
	var got []string
	for _, e := range parseLog(log, time.Time{}) {
		got = append(got, fmt.Sprintf("%s %s %s.%s %s %s>%s %s %s", e.Time.Format("05.000000"), e.Kind, e.Protocol, e.Channel, e.Peer, e.From, e.To, e.Prefix, e.Detail))
	}
	want := []string{
		"46.407492 protocol-state b1. invalid IP >up invalid Prefix ",
		"46.673031 bfd-state bfd1. 10.255.7.1 Down>Up invalid Prefix ",
		"51.158709 route-added s1.ipv4 invalid IP > 198.51.100.10/32 [best]",
		"51.159964 bfd-state bfd1. fd00:255:7::1 Up>Down invalid Prefix ",
		"51.160044 bgp-bfd-down s1. invalid IP > invalid Prefix ",
		"51.160044 protocol-state s1. invalid IP >stop invalid Prefix ",
		"18.147757 route-removed s1.ipv6 invalid IP > 2001:db8::1/128 [sole]",
		"18.147758 route-removed k4.ipv4 invalid IP > 198.51.100.10/32 ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	since, _ := time.ParseInLocation(logTimeLayout, "2026-11-25 16:00:00.000000", time.Local)
	if evs := parseLog(log, since); len(evs) != 2 {
		t.Errorf("since: %+v", evs)
	}
}

func TestBFDConfig(t *testing.T) {
	r := &Router{Index: 7, RouterV4: netip.MustParseAddr("10.255.7.254"), RouterV6: netip.MustParseAddr("fd00:255:7::fe"),
		opts: Options{Speakers: []Speaker{{}, {}}, BFD: &BFD{MinTx: 100 * time.Millisecond, Multiplier: 5, Passive: true}, EventLog: true}}
	want := `protocol bfd bfd1 {
  interface "*" { min rx interval 300000 us; min tx interval 100000 us; idle tx interval 1000000 us; multiplier 5; passive on; };
  neighbor 10.255.7.1 local 10.255.7.254;
  neighbor fd00:255:7::1 local fd00:255:7::fe;
  neighbor 10.255.7.2 local 10.255.7.254;
  neighbor fd00:255:7::2 local fd00:255:7::fe;
}
`
	if got := r.config(); !strings.Contains(got, want) {
		t.Errorf("got:\n%s\nwant it to contain:\n%s", got, want)
	}
	r.opts.BFD.BGP = true
	if got := r.config(); strings.Contains(got, "  neighbor 10.255.7.1 local") {
		t.Errorf("BGP-requested sessions with static neighbors:\n%s", got)
	}
	if c := r.config(); strings.Count(c, "bfd on;") != 4 || !strings.Contains(c, `timeformat log "%F %T.%6f";`) {
		t.Errorf("config:\n%s", c)
	}
	r.opts.BFD, r.opts.EventLog = nil, false
	if c := r.config(); strings.Contains(c, "bfd") || strings.Contains(c, "timeformat") || strings.Contains(c, "debug") {
		t.Errorf("config without BFD and EventLog:\n%s", c)
	}
}

// TestStartBFD: BIRD accepts the BFD configuration in both modes and lists the
// sessions, waiting for the speakers; the event log has microsecond timestamps.
func TestStartBFD(t *testing.T) {
	for _, bgp := range []bool{false, true} {
		t.Run(fmt.Sprintf("bgp=%v", bgp), func(t *testing.T) {
			start := time.Now()
			r := Start(t, Options{Speakers: []Speaker{{}, {}}, BFD: &BFD{BGP: bgp}, EventLog: true})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var ss []BFDSession
			err := WaitFor(ctx, func(ctx context.Context) (bool, error) {
				var err error
				ss, err = r.BFDSessions(ctx)
				return len(ss) == 4, err
			})
			if err != nil {
				t.Fatalf("sessions %+v: %v\n%s", ss, err, r.Log())
			}
			for _, s := range ss {
				if s.State != "Down" || s.Interface != birdIfName {
					t.Errorf("%+v", s)
				}
			}
			if _, err := r.BFDSession(ctx, r.SpeakerV6(1)); err != nil {
				t.Error(err)
			}
			evs, err := r.LogEvents(start.Add(-time.Second))
			if err != nil {
				t.Fatal(err)
			}
			up := false
			for _, e := range evs {
				if e.Kind == EventProtocolState && e.Protocol == "bfd1" && e.To == "up" && e.Time.Sub(start) < time.Minute {
					up = true
				}
			}
			if !up {
				t.Errorf("no bfd1 up event in %+v\n%s", evs, r.Log())
			}
		})
	}
}
