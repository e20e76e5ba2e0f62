package bgp

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
)

// converge is the generous deadline for BGP convergence in tests: waiting, not timing.
const converge = 60 * time.Second

type running struct {
	*Speaker
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // Run's result, set before done is closed
}

// stop cancels Run and waits for it to return.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	<-r.done
	if r.err != nil {
		t.Errorf("Run returned %v", r.err)
	}
}

// peerV4 is a static IPv4 peer from speaker i to the router, with short timers.
func peerV4(r *bird.Router, i int) config.BGPPeer {
	return config.BGPPeer{Address: r.RouterV4.String(), ASN: r.ASN, SourceAddress: r.SpeakerV4(i).String(),
		HoldTime: &metav1.Duration{Duration: 9 * time.Second}, ConnectRetry: &metav1.Duration{Duration: time.Second}}
}

func peerV6(r *bird.Router, i int) config.BGPPeer {
	p := peerV4(r, i)
	p.Address, p.SourceAddress = r.RouterV6.String(), r.SpeakerV6(i).String()
	return p
}

// runSpeaker starts speaker i (0-based) of r (nil: cfg.RouterID is set) with cfg's
// peers and announcements made before Run; it is stopped at cleanup if the test
// did not stop it.
func runSpeaker(t *testing.T, r *bird.Router, i int, cfg Config, before func(*Speaker)) *running {
	t.Helper()
	if cfg.LocalASN == 0 {
		cfg.LocalASN = 65000
	}
	if r != nil {
		cfg.RouterID = r.SpeakerV4(i)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rs := &running{Speaker: s, cancel: cancel, done: make(chan struct{})}
	go func() { rs.err = s.Run(ctx); close(rs.done) }()
	t.Cleanup(func() {
		cancel()
		<-rs.done
	})
	return rs
}

func waitCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	t.Cleanup(cancel)
	return ctx
}

func waitEstablished(t *testing.T, r *bird.Router, protocols ...string) {
	t.Helper()
	err := bird.WaitFor(waitCtx(t), func(ctx context.Context) (bool, error) {
		for _, p := range protocols {
			st, err := r.ProtocolState(ctx, p)
			if err != nil || !st.Established() {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		ps, _ := r.Protocols(context.Background())
		t.Fatalf("sessions %v not established: %v; protocols: %+v\nbird.log:\n%s", protocols, err, ps, r.Log())
	}
}

// waitRoutes waits until BIRD's paths for prefix satisfy ok and returns them.
func waitRoutes(t *testing.T, r *bird.Router, prefix netip.Prefix, what string, ok func([]bird.Route) bool) []bird.Route {
	t.Helper()
	var last []bird.Route
	err := bird.WaitFor(waitCtx(t), func(ctx context.Context) (bool, error) {
		rs, err := r.RoutesFor(ctx, prefix)
		last = rs
		return err == nil && ok(rs), err
	})
	if err != nil {
		t.Fatalf("%s: %s: %v; last paths: %+v\nbird.log:\n%s", prefix, what, err, last, r.Log())
	}
	return last
}

func nextHops(rs []bird.Route) []netip.Addr {
	var out []netip.Addr
	for _, r := range rs {
		out = append(out, r.BGPNextHop[0])
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func hasNextHops(want ...netip.Addr) func([]bird.Route) bool {
	slices.SortFunc(want, netip.Addr.Compare)
	return func(rs []bird.Route) bool { return slices.Equal(nextHops(rs), want) }
}

func gone(rs []bird.Route) bool { return len(rs) == 0 }

var (
	lb4  = netip.MustParsePrefix("198.51.100.10/32")
	lb4b = netip.MustParsePrefix("198.51.100.11/32")
	lb6  = netip.MustParsePrefix("2001:db8:100::10/128")
)

// TestBIRDAnnounceWithdraw: one speaker, one IPv4 session carrying IPv4 and IPv6
// (MP-BGP); state announced before Run; communities; withdrawal by Announce and by
// cancelling Run.
func TestBIRDAnnounceWithdraw(t *testing.T) {
	r := bird.Start(t, bird.Options{})
	sp := runSpeaker(t, r, 0, Config{
		Peers:            []config.BGPPeer{peerV4(r, 0)},
		Communities:      []string{"65000:100"},
		LargeCommunities: []string{"65000:1:2"},
	}, func(s *Speaker) {
		s.Announce("lb", []Path{
			{Prefix: lb4, Communities: []string{"no-export"}},
			{Prefix: lb4b},
			{Prefix: lb6, LargeCommunities: []string{"65000:3:4"}},
		})
	})
	waitEstablished(t, r, r.Protocol(0, false))

	rs := waitRoutes(t, r, lb4, "announced with next hop self", hasNextHops(r.SpeakerV4(0)))
	if got := rs[0].Communities; !slices.Equal(got, []string{"65000:100", "65535:65281"}) {
		t.Errorf("communities = %v, want the speaker's and no-export", got)
	}
	if got := rs[0].LargeCommunities; !slices.Equal(got, []string{"65000:1:2"}) {
		t.Errorf("large communities = %v", got)
	}
	if rs[0].ASPath != "65000" || rs[0].Protocol != r.Protocol(0, false) {
		t.Errorf("path = %+v", rs[0])
	}
	// IPv6 over the IPv4 session: next hop is the speaker's IPv6 address on the
	// interface of the session (GoBGP alone would send ::ffff:<v4>, which BIRD refuses).
	rs6 := waitRoutes(t, r, lb6, "IPv6 over IPv4 session with IPv6 next hop", hasNextHops(r.SpeakerV6(0)))
	if got := rs6[0].LargeCommunities; !slices.Equal(got, []string{"65000:1:2", "65000:3:4"}) {
		t.Errorf("IPv6 large communities = %v", got)
	}
	waitRoutes(t, r, lb4b, "announced", hasNextHops(r.SpeakerV4(0)))
	ctx := waitCtx(t)
	if k, err := r.KernelRoutes(ctx, true); err != nil || !strings.Contains(k, "2001:db8:100::10 via "+r.SpeakerV6(0).String()) {
		t.Errorf("IPv6 kernel route in the router namespace: %q %v", k, err)
	}

	ps := sp.Peers()
	if len(ps) != 1 || ps[0].State != "established" || ps[0].UpSince.IsZero() || ps[0].Address != r.RouterV4 || ps[0].PrefixesSent != 3 {
		t.Errorf("Peers() = %+v", ps)
	}

	// Announce without lb4b: only it is withdrawn.
	sp.Announce("lb", []Path{{Prefix: lb4, Communities: []string{"no-export"}}, {Prefix: lb6, LargeCommunities: []string{"65000:3:4"}}})
	waitRoutes(t, r, lb4b, "withdrawn", gone)
	if rs, err := r.RoutesFor(ctx, lb4); err != nil || len(rs) != 1 {
		t.Errorf("untouched path changed: %+v %v", rs, err)
	}

	// Shutdown: every route is gone from BIRD, the session closed with a Cease.
	sp.stop(t)
	waitRoutes(t, r, lb4, "withdrawn at shutdown", gone)
	waitRoutes(t, r, lb6, "withdrawn at shutdown", gone)
	if !strings.Contains(r.Log(), "Administrative shutdown") {
		t.Errorf("BIRD did not get a Cease (administrative shutdown):\n%s", r.Log())
	}
	if got := sp.Peers(); len(got) != 1 || got[0].State != "stopped" {
		t.Errorf("Peers() after Run = %+v", got)
	}
	if err := sp.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
		t.Errorf("second Run = %v, want ErrAlreadyRunning", err)
	}
}

// TestBIRDTwoSpeakersECMP: two speakers (two CCM replicas) announce the same
// prefix; BIRD keeps both paths and installs a multipath route; one stops, the
// route stays via the other.
func TestBIRDTwoSpeakersECMP(t *testing.T) {
	if raceEnabled {
		// Every StartBgp writes package-level variables of GoBGP's table package
		// (SelectionOptions, UseMultiplePaths) that other servers' goroutines read:
		// one BgpServer per process is what GoBGP supports race-free. The e2e suite
		// runs two speakers as two processes.
		t.Skip("two GoBGP servers in one process race on GoBGP's package globals; run without -race")
	}
	r := bird.Start(t, bird.Options{Speakers: []bird.Speaker{{}, {}}})
	var sps []*running
	for i := range 2 {
		sps = append(sps, runSpeaker(t, r, i, Config{Peers: []config.BGPPeer{peerV4(r, i), peerV6(r, i)}}, nil))
	}
	for _, sp := range sps {
		sp.Announce("lb", []Path{{Prefix: lb4}, {Prefix: lb6}})
	}
	waitEstablished(t, r, r.Protocol(0, false), r.Protocol(1, false), r.Protocol(0, true), r.Protocol(1, true))
	waitRoutes(t, r, lb4, "paths from both speakers", hasNextHops(r.SpeakerV4(0), r.SpeakerV4(1)))
	waitRoutes(t, r, lb6, "paths from both speakers", hasNextHops(r.SpeakerV6(0), r.SpeakerV6(1)))
	err := bird.WaitFor(waitCtx(t), func(ctx context.Context) (bool, error) {
		k, err := r.KernelRoutes(ctx, false)
		return strings.Contains(k, "nexthop via "+r.SpeakerV4(0).String()) && strings.Contains(k, "nexthop via "+r.SpeakerV4(1).String()), err
	})
	if err != nil {
		k, _ := r.KernelRoutes(context.Background(), false)
		t.Fatalf("no multipath kernel route: %v\n%s", err, k)
	}
	sps[0].stop(t)
	waitRoutes(t, r, lb4, "only the remaining speaker", hasNextHops(r.SpeakerV4(1)))
	waitRoutes(t, r, lb6, "only the remaining speaker", hasNextHops(r.SpeakerV6(1)))
}

// TestBIRDNodesMode: one path per node next hop (ADD-PATH), IPv4 and IPv6, the
// third-party next hops arrive unchanged; next hops follow the desired state.
func TestBIRDNodesMode(t *testing.T) {
	r := bird.Start(t, bird.Options{})
	sp := runSpeaker(t, r, 0, Config{Peers: []config.BGPPeer{peerV4(r, 0)}}, nil)
	n0, n1, n2 := r.NodeAddr(0, false), r.NodeAddr(1, false), r.NodeAddr(2, false)
	n60, n61 := r.NodeAddr(0, true), r.NodeAddr(1, true)
	sp.Announce("lb", []Path{{Prefix: lb4, NextHops: []netip.Addr{n0, n1}}, {Prefix: lb6, NextHops: []netip.Addr{n60, n61}}})
	waitEstablished(t, r, r.Protocol(0, false))
	waitRoutes(t, r, lb4, "both node paths", hasNextHops(n0, n1))
	waitRoutes(t, r, lb6, "both node paths", hasNextHops(n60, n61))
	err := bird.WaitFor(waitCtx(t), func(ctx context.Context) (bool, error) {
		k, err := r.KernelRoutes(ctx, true)
		return strings.Contains(k, "nexthop via "+n60.String()) && strings.Contains(k, "nexthop via "+n61.String()), err
	})
	if err != nil {
		t.Fatalf("no IPv6 multipath kernel route: %v", err)
	}
	// Endpoints move: n0 leaves, n2 joins.
	sp.Announce("lb", []Path{{Prefix: lb4, NextHops: []netip.Addr{n1, n2}}, {Prefix: lb6, NextHops: []netip.Addr{n61}}})
	waitRoutes(t, r, lb4, "next hops follow", hasNextHops(n1, n2))
	waitRoutes(t, r, lb6, "next hops follow", hasNextHops(n61))
	// A second source with the same prefix and next hop: removing it from one
	// source keeps the path.
	sp.Announce("podcidr", []Path{{Prefix: lb4, NextHops: []netip.Addr{n1}}})
	sp.Announce("lb", nil)
	waitRoutes(t, r, lb4, "kept by the other source", hasNextHops(n1))
	waitRoutes(t, r, lb6, "withdrawn", gone)
}

// TestBIRDSetPeers: dynamic peers are added, replaced and removed; IPv4 paths
// reach BIRD over an IPv6 session with an IPv4 next hop.
func TestBIRDSetPeers(t *testing.T) {
	r := bird.Start(t, bird.Options{})
	sp := runSpeaker(t, r, 0, Config{}, nil)
	sp.Announce("lb", []Path{{Prefix: lb4}, {Prefix: lb6}})
	if err := sp.SetPeers([]config.BGPPeer{peerV4(r, 0)}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, r, r.Protocol(0, false))
	waitRoutes(t, r, lb4, "via the dynamic peer", hasNextHops(r.SpeakerV4(0)))
	if ps := sp.Peers(); len(ps) != 1 || !ps[0].Dynamic {
		t.Errorf("Peers() = %+v", ps)
	}

	// Replace the IPv4 session by an IPv6 one.
	if err := sp.SetPeers([]config.BGPPeer{peerV6(r, 0)}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, r, r.Protocol(0, true))
	waitRoutes(t, r, lb4, "over the IPv6 session only, IPv4 next hop", func(rs []bird.Route) bool {
		return len(rs) == 1 && rs[0].Protocol == r.Protocol(0, true) && rs[0].BGPNextHop[0] == r.SpeakerV4(0)
	})
	waitRoutes(t, r, lb6, "over the IPv6 session only", func(rs []bird.Route) bool {
		return len(rs) == 1 && rs[0].Protocol == r.Protocol(0, true) && rs[0].BGPNextHop[0] == r.SpeakerV6(0)
	})
	if st, err := r.ProtocolState(waitCtx(t), r.Protocol(0, false)); err != nil || st.Established() {
		t.Errorf("removed peer's session = %+v, %v", st, err)
	}

	// An invalid peer is reported and skipped, the valid rest applied.
	bad := peerV4(r, 0)
	bad.ASN = 0
	err := sp.SetPeers([]config.BGPPeer{peerV6(r, 0), bad})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("SetPeers with an invalid peer = %v, want ErrInvalidConfig", err)
	}

	if err := sp.SetPeers(nil); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r, lb4, "gone with the last peer", gone)
	if ps := sp.Peers(); len(ps) != 0 {
		t.Errorf("Peers() = %+v", ps)
	}
}

// TestBIRDPassword: a TCP MD5 session with the password read from passwordFile.
func TestBIRDPassword(t *testing.T) {
	const pw = "s3cret-md5"
	r := bird.Start(t, bird.Options{Speakers: []bird.Speaker{{Password: pw}}})
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := peerV4(r, 0)
	p.PasswordFile = file
	sp := runSpeaker(t, r, 0, Config{Peers: []config.BGPPeer{p}}, nil)
	sp.Announce("lb", []Path{{Prefix: lb4}})
	waitEstablished(t, r, r.Protocol(0, false))
	waitRoutes(t, r, lb4, "over the MD5 session", hasNextHops(r.SpeakerV4(0)))

	p.PasswordFile = filepath.Join(t.TempDir(), "missing")
	if _, err := New(Config{LocalASN: 65000, RouterID: r.SpeakerV4(0), Peers: []config.BGPPeer{p}}); !errors.Is(err, ErrPassword) || strings.Contains(err.Error(), pw) {
		t.Errorf("New with a missing password file = %v, want ErrPassword", err)
	}
}

// TestBIRDPasswordRotation: the router and the password file change to a new
// password; RefreshPasswords applies it without a restart and the session comes back.
func TestBIRDPasswordRotation(t *testing.T) {
	r := bird.Start(t, bird.Options{Speakers: []bird.Speaker{{Password: "old-md5"}}})
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("old-md5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := peerV4(r, 0)
	p.PasswordFile = file
	sp := runSpeaker(t, r, 0, Config{Peers: []config.BGPPeer{p}}, nil)
	sp.Announce("lb", []Path{{Prefix: lb4}})
	waitEstablished(t, r, r.Protocol(0, false))
	if err := sp.RefreshPasswords(); err != nil {
		t.Fatalf("RefreshPasswords with nothing changed: %v", err)
	}

	if err := r.SetPassword(waitCtx(t), 0, "new-md5"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("new-md5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sp.RefreshPasswords(); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, r, r.Protocol(0, false))
	waitRoutes(t, r, lb4, "over the session with the new password", hasNextHops(r.SpeakerV4(0)))

	// An emptied file is an error and keeps the session as it is.
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sp.RefreshPasswords(); !errors.Is(err, ErrPassword) {
		t.Errorf("RefreshPasswords with an empty file = %v, want ErrPassword", err)
	}
	waitEstablished(t, r, r.Protocol(0, false))
}

// TestBIRDGracefulRestart: graceful restart negotiated; a shutdown still withdraws
// at once (Cease).
func TestBIRDGracefulRestart(t *testing.T) {
	r := bird.Start(t, bird.Options{GracefulRestart: true})
	p := peerV4(r, 0)
	p.GracefulRestart = &metav1.Duration{Duration: 120 * time.Second}
	sp := runSpeaker(t, r, 0, Config{Peers: []config.BGPPeer{p}}, nil)
	sp.Announce("lb", []Path{{Prefix: lb4}})
	waitEstablished(t, r, r.Protocol(0, false))
	waitRoutes(t, r, lb4, "announced", hasNextHops(r.SpeakerV4(0)))
	out, err := r.Birdc(waitCtx(t), "show", "protocols", "all", r.Protocol(0, false))
	if err != nil || !strings.Contains(out, "Graceful restart") {
		t.Errorf("graceful restart not negotiated: %v\n%s", err, out)
	}
	// One path sent: GoBGP's End-of-RIB markers are not counted.
	if ps := sp.Peers(); len(ps) != 1 || ps[0].PrefixesSent != 1 {
		t.Errorf("Peers() = %+v, want 1 prefix sent", ps)
	}
	sp.stop(t)
	waitRoutes(t, r, lb4, "withdrawn at shutdown despite graceful restart", gone)
}

func TestNewErrors(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no asn":        {RouterID: netip.MustParseAddr("10.0.0.1")},
		"v6 router id":  {LocalASN: 1, RouterID: netip.MustParseAddr("fd00::1")},
		"bad community": {LocalASN: 1, RouterID: netip.MustParseAddr("10.0.0.1"), Communities: []string{"1:70000"}},
		"bad peer":      {LocalASN: 1, RouterID: netip.MustParseAddr("10.0.0.1"), Peers: []config.BGPPeer{{Address: "x", ASN: 1}}},
		"dup peer":      {LocalASN: 1, RouterID: netip.MustParseAddr("10.0.0.1"), Peers: []config.BGPPeer{{Address: "10.0.0.2", ASN: 1}, {Address: "10.0.0.2", ASN: 2}}},
		"v6 next hop":   {LocalASN: 1, RouterID: netip.MustParseAddr("10.0.0.1"), IPv6NextHop: netip.MustParseAddr("10.0.0.3")},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestBIRDSelfV6WithoutSourceAddress: the session's local address is learned when
// it comes up; IPv6 self paths on the IPv4 session then get the interface's IPv6
// address (sent after the policy update by a soft reset), and an explicit
// IPv6NextHop overrides it.
func TestBIRDSelfV6WithoutSourceAddress(t *testing.T) {
	r := bird.Start(t, bird.Options{})
	p := peerV4(r, 0)
	p.SourceAddress = ""
	sp := runSpeaker(t, r, 0, Config{Peers: []config.BGPPeer{p}}, func(s *Speaker) {
		s.Announce("lb", []Path{{Prefix: lb6}, {Prefix: lb4}})
	})
	waitEstablished(t, r, r.Protocol(0, false))
	waitRoutes(t, r, lb6, "IPv6 next hop from the session's interface", hasNextHops(r.SpeakerV6(0)))
	waitRoutes(t, r, lb4, "IPv4 next hop self", hasNextHops(r.SpeakerV4(0)))
	sp.stop(t)
	waitRoutes(t, r, lb6, "withdrawn", gone)

	node := r.NodeAddr(7, true)
	runSpeaker(t, r, 0, Config{Peers: []config.BGPPeer{p}, IPv6NextHop: node}, func(s *Speaker) {
		s.Announce("lb", []Path{{Prefix: lb6}})
	})
	waitRoutes(t, r, lb6, "configured IPv6NextHop", hasNextHops(node))
}

// TestBIRDImportFilter: BIRD configured as docs/configuration.md's example (an import filter
// accepting only the pools) takes the pool's prefix and refuses the other.
func TestBIRDImportFilter(t *testing.T) {
	r := bird.Start(t, bird.Options{Accept: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:100::/48")}})
	outside := netip.MustParsePrefix("203.0.113.5/32")
	sp := runSpeaker(t, r, 0, Config{Peers: []config.BGPPeer{peerV4(r, 0)}}, nil)
	sp.Announce("lb", []Path{{Prefix: lb4}, {Prefix: outside}, {Prefix: lb6}})
	waitRoutes(t, r, lb4, "accepted (in a pool)", hasNextHops(r.SpeakerV4(0)))
	waitRoutes(t, r, lb6, "accepted (in a pool)", hasNextHops(r.SpeakerV6(0)))
	if rs, err := r.RoutesFor(waitCtx(t), outside); err != nil || len(rs) != 0 {
		t.Errorf("%s (in no pool) imported: %+v %v", outside, rs, err)
	}
}

// TestPrefixesAnnouncedFollowsChanges: baremetal_ccm_bgp_prefixes_announced is the
// relay's count of what the router holds, updated before each UPDATE is written:
// once BIRD shows a change, the metric already shows it too.
func TestPrefixesAnnouncedFollowsChanges(t *testing.T) {
	r := bird.Start(t, bird.Options{})
	sp := runSpeaker(t, r, 0, Config{Peers: []config.BGPPeer{peerV4(r, 0)}}, nil)
	waitEstablished(t, r, r.Protocol(0, false))
	peer := r.RouterV4.String()
	gauge := func(fam string) float64 {
		v, err := testutil.GetGaugeMetricValue(prefixesAnnounced.WithLabelValues(peer, fam))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	extra := netip.MustParsePrefix("198.51.100.11/32")
	for _, step := range []struct {
		paths  []Path
		v4, v6 float64
	}{
		{[]Path{{Prefix: lb4}, {Prefix: lb6}}, 1, 1},
		{[]Path{{Prefix: lb4}, {Prefix: extra}, {Prefix: lb6}}, 2, 1},
		{nil, 0, 0},
	} {
		sp.Announce("lb", step.paths)
		waitRoutes(t, r, extra, "extra as announced", func(rs []bird.Route) bool { return (len(rs) == 1) == (step.v4 == 2) })
		waitRoutes(t, r, lb4, "lb4 as announced", func(rs []bird.Route) bool { return (len(rs) == 1) == (step.v4 > 0) })
		waitRoutes(t, r, lb6, "lb6 as announced", func(rs []bird.Route) bool { return (len(rs) == 1) == (step.v6 > 0) })
		if v4, v6 := gauge("ipv4"), gauge("ipv6"); v4 != step.v4 || v6 != step.v6 {
			t.Errorf("after BIRD has %v: prefixes_announced ipv4 %v ipv6 %v, want %v %v", step.paths, v4, v6, step.v4, step.v6)
		}
	}
}

// TestBIRDPeerScopes: paths limited to some peers (Path.Peers) reach those routers
// only, carry no scope tag there, and move when their peer set changes; a path for
// a peer the speaker does not have goes nowhere.
func TestBIRDPeerScopes(t *testing.T) {
	r := bird.Start(t, bird.Options{})
	r2 := bird.Start(t, bird.Options{})
	sp := runSpeaker(t, r, 0, Config{Peers: []config.BGPPeer{peerV4(r, 0), peerV4(r2, 0)}}, nil)
	nowhere := netip.MustParsePrefix("198.51.100.12/32")
	sp.Announce("lb", []Path{
		{Prefix: lb4, Peers: []netip.Addr{r.RouterV4}},
		{Prefix: lb4b},
		{Prefix: lb6, Peers: []netip.Addr{r2.RouterV4}, LargeCommunities: []string{"65000:1:2"}},
		{Prefix: nowhere, Peers: []netip.Addr{netip.MustParseAddr("192.0.2.99")}},
	})
	waitEstablished(t, r, r.Protocol(0, false))
	waitEstablished(t, r2, r2.Protocol(0, false))
	waitRoutes(t, r, lb4b, "the unscoped path", hasNextHops(r.SpeakerV4(0)))
	waitRoutes(t, r2, lb4b, "the unscoped path", hasNextHops(r2.SpeakerV4(0)))
	waitRoutes(t, r, lb4, "the path scoped to r", hasNextHops(r.SpeakerV4(0)))
	rs := waitRoutes(t, r2, lb6, "the path scoped to r2", func(rs []bird.Route) bool { return len(rs) == 1 })
	if !slices.Equal(rs[0].LargeCommunities, []string{"(65000, 1, 2)"}) && !slices.Equal(rs[0].LargeCommunities, []string{"65000:1:2"}) {
		t.Errorf("r2's path for %s carries large communities %v, want only its own (no scope tag)", lb6, rs[0].LargeCommunities)
	}
	for _, c := range []struct {
		r *bird.Router
		p netip.Prefix
	}{{r2, lb4}, {r, lb6}, {r, nowhere}, {r2, nowhere}} {
		if got, err := c.r.RoutesFor(waitCtx(t), c.p); err != nil || len(got) != 0 {
			t.Errorf("%s holds %s outside its scope: %+v, %v", c.r.RouterV4, c.p, got, err)
		}
	}
	all, err := r.Routes(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range all {
		for _, lc := range rt.LargeCommunities {
			if strings.Contains(lc, "4294967295") {
				t.Errorf("%s reached r with the scope tag %s", rt.Prefix, lc)
			}
		}
	}
	// lb4 moves from r to r2.
	sp.Announce("lb", []Path{{Prefix: lb4, Peers: []netip.Addr{r2.RouterV4}}, {Prefix: lb4b}})
	waitRoutes(t, r2, lb4, "moved to r2", hasNextHops(r2.SpeakerV4(0)))
	waitRoutes(t, r, lb4, "withdrawn from r", gone)
	waitRoutes(t, r2, lb6, "withdrawn", gone)
	waitRoutes(t, r, lb4b, "kept", hasNextHops(r.SpeakerV4(0)))
}
