package bird

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseRouteSince(t *testing.T) {
	out := `BIRD 2.0.12 ready.
Table master4:
198.18.0.1/32        unicast [s1 2026-11-28 09:10:11.123] * (100) [AS65000i]
	via 10.255.1.1 on eth0
198.18.0.2/32        unicast [s1 2026-11-28 09:10:12.004] * (100) [AS65000i]
	via 10.255.1.1 on eth0

Table master6:
fd00:1::/64          unicast [s1v6 2026-11-28 23:59:59.999] * (100) [AS65000i]
	via fd00:255:1::1 on eth0
`
	got, err := parseRouteSince(out, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Prefix]time.Time{
		netip.MustParsePrefix("198.18.0.1/32"): time.Date(2026, 11, 28, 9, 10, 11, 123e6, time.UTC),
		netip.MustParsePrefix("198.18.0.2/32"): time.Date(2026, 11, 28, 9, 10, 12, 4e6, time.UTC),
		netip.MustParsePrefix("fd00:1::/64"):   time.Date(2026, 11, 28, 23, 59, 59, 999e6, time.UTC),
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for p, w := range want {
		if !got[p].Equal(w) {
			t.Errorf("%s: %v, want %v", p, got[p], w)
		}
	}

	// Without RouteTimes BIRD prints only the time of day: an error that says so.
	_, err = parseRouteSince("198.18.0.1/32        unicast [s1 09:10:11.123] * (100) [AS65000i]\n", time.UTC)
	if err == nil || !strings.Contains(err.Error(), "RouteTimes") {
		t.Errorf("time of day only: err %v, want one that names RouteTimes", err)
	}
}

func TestRouteTimesConfig(t *testing.T) {
	r := &Router{RouterV4: netip.MustParseAddr("10.255.1.2"), ASN: 65001, dir: t.TempDir(), opts: Options{RouteTimes: true, HoldTime: 9}}
	if c := r.config(); !strings.Contains(c, `timeformat route "%F %T.%3f";`) {
		t.Errorf("config with RouteTimes:\n%s", c)
	}
	r.opts.RouteTimes = false
	if c := r.config(); strings.Contains(c, "timeformat route") {
		t.Errorf("config without RouteTimes:\n%s", c)
	}
}
