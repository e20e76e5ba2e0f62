package frr

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/childproc"
)

// TestRoutesFromSpeakers checks the helpers against what FRR really prints, with
// BIRD in a speaker namespace as two BGP speakers (ADD-PATH send, graceful
// restart): paths with next hops and communities, the import policy, ECMP into the
// kernel, the route-install events, and the stale flag when the speakers die.
func TestRoutesFromSpeakers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and veth pairs")
	}
	if _, err := exec.LookPath("bird"); err != nil {
		t.Skip("bird (Debian bird2) plays the speakers here: " + err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var b [4]byte
	_, _ = rand.Read(b[:])
	spk := "bccm-frrspk-" + hex.EncodeToString(b[:])
	if _, err := run(ctx, "ip", "netns", "add", spk); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = run(context.Background(), "ip", "netns", "del", spk) })
	r := Start(t, Options{
		SpeakerNetns: spk,
		Speakers:     []Speaker{{ASN: 65000, Password: "pw1"}, {ASN: 65010}},
		Accept:       []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:100::/48")},
	})
	// One BIRD per speaker: BIRD 2.0 runs one session per neighbor address.
	dir := t.TempDir()
	common := `protocol device {}
protocol static st4 { ipv4; route 198.51.100.10/32 blackhole; route 198.51.100.20/32 blackhole; route 203.0.113.1/32 blackhole; }
protocol static st6 { ipv6; route 2001:db8:100::10/128 blackhole; }
template bgp speaker { strict bind on; connect delay time 1; connect retry time 1; error wait time 1, 2; graceful restart on; graceful restart time 3; }
`
	confs := []string{
		fmt.Sprintf(`router id %[1]s;
protocol bgp s1 from speaker { local %[1]s as 65000; neighbor %[2]s as %[3]d; password "pw1";
  ipv4 { import none; add paths tx; export filter { if net = 198.51.100.10/32 then { bgp_community.add((65000,100)); bgp_large_community.add((65000,1,2)); } accept; }; }; }
protocol bgp s1v6 from speaker { local %[4]s as 65000; neighbor %[5]s as %[3]d; password "pw1"; ipv6 { import none; export all; }; }
`, r.SpeakerV4(0), r.RouterV4, r.ASN, r.SpeakerV6(0), r.RouterV6),
		fmt.Sprintf(`router id %[1]s;
protocol bgp s2 from speaker { local %[1]s as 65010; neighbor %[2]s as %[3]d; ipv4 { import none; add paths tx; export where net = 198.51.100.10/32; }; }
`, r.SpeakerV4(1), r.RouterV4, r.ASN),
	}
	var birds []*exec.Cmd
	var birdsDone []chan struct{}
	for i, c := range confs {
		conf := filepath.Join(dir, fmt.Sprintf("bird%d.conf", i))
		logLine := fmt.Sprintf("log %q all;\n", filepath.Join(dir, fmt.Sprintf("bird%d.log", i)))
		if err := os.WriteFile(conf, []byte(logLine+common+c), 0o600); err != nil {
			t.Fatal(err)
		}
		bird := exec.Command("ip", "netns", "exec", spk, "bird", "-f", "-c", conf, "-s", filepath.Join(dir, fmt.Sprintf("bird%d.ctl", i)))
		bird.Stdout, bird.Stderr = os.Stderr, os.Stderr
		if err := childproc.Start(bird); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = bird.Wait(); close(done) }()
		t.Cleanup(func() { _ = bird.Process.Kill(); <-done })
		birds, birdsDone = append(birds, bird), append(birdsDone, done)
	}
	since := time.Now()

	wctx, wcancel := context.WithTimeout(ctx, 40*time.Second)
	defer wcancel()
	err := WaitFor(wctx, func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		for _, a := range []netip.Addr{r.SpeakerV4(0), r.SpeakerV4(1), r.SpeakerV6(0)} {
			n, err := r.Neighbor(ctx, a)
			if err != nil || n.State != "Established" {
				return false, err
			}
		}
		n, err := r.CountRoutes(ctx)
		return n == 4, err
	})
	if err != nil {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, _ := r.Vtysh(c, "show bgp summary")
		bl0, _ := os.ReadFile(filepath.Join(dir, "bird0.log"))
		bl1, _ := os.ReadFile(filepath.Join(dir, "bird1.log"))
		t.Fatalf("sessions/paths: %v\n%s\nBIRD logs:\n%s%s", err, out, bl0, bl1)
	}
	n, err := r.Neighbor(ctx, r.SpeakerV4(0))
	if err != nil || !n.Password || !n.AddPathRx["ipv4Unicast"] || n.AcceptedPrefixes["ipv4Unicast"] != 2 || n.GRRemoteMode == "" || n.UptimeSince.IsZero() {
		t.Errorf("neighbor %+v %v", n, err)
	}
	p10 := netip.MustParsePrefix("198.51.100.10/32")
	rs, err := r.RoutesFor(ctx, p10)
	if err != nil || len(rs) != 2 {
		t.Fatalf("paths of %s: %+v %v", p10, rs, err)
	}
	slices.SortFunc(rs, func(a, b Route) int { return a.Peer.Compare(b.Peer) })
	if rs[0].Peer != r.SpeakerV4(0) || rs[0].NextHops[0] != r.SpeakerV4(0) || rs[0].Communities[0] != "65000:100" || rs[0].LargeCommunities[0] != "65000:1:2" || rs[0].ASPath != "65000" ||
		rs[1].Peer != r.SpeakerV4(1) || rs[1].NextHops[0] != r.SpeakerV4(1) || rs[1].ASPath != "65010" || rs[0].Best == rs[1].Best || !(rs[0].Multipath || rs[1].Multipath) || rs[0].Stale {
		t.Errorf("paths of %s: %+v", p10, rs)
	}
	if rs, err := r.RoutesFor(ctx, netip.MustParsePrefix("203.0.113.1/32")); err != nil || rs != nil {
		t.Errorf("a prefix outside the accepted ones: %+v %v", rs, err)
	}
	if rs, err := r.RoutesFor(ctx, netip.MustParsePrefix("2001:db8:100::10/128")); err != nil || len(rs) != 1 || rs[0].NextHops[0] != r.SpeakerV6(0) {
		t.Errorf("IPv6 path: %+v %v", rs, err)
	}
	err = WaitFor(ctx, func(ctx context.Context) (bool, error) {
		out, err := r.KernelRoutes(ctx, false)
		return strings.Contains(out, "198.51.100.10") && strings.Count(out, "nexthop via") == 2, err
	})
	if err != nil {
		out, _ := r.KernelRoutes(ctx, false)
		t.Errorf("ECMP in the kernel: %v\n%s", err, out)
	}
	evs, _ := r.LogEvents(since)
	installed := false
	for _, e := range evs {
		if e.Kind == EventRouteInstall && e.Prefix == p10 && len(e.NextHops) == 2 {
			installed = true
		}
	}
	if !installed {
		t.Errorf("no route-install of %s with two next hops in %+v", p10, evs)
	}

	// The speakers die (no NOTIFICATION): FRR, a graceful-restart helper, keeps
	// their paths as stale until the restart time (3s) passes, then removes them.
	killed := time.Now()
	for i, b := range birds {
		_ = b.Process.Signal(syscall.SIGKILL)
		<-birdsDone[i]
	}
	err = WaitFor(ctx, func(ctx context.Context) (bool, error) {
		rs, err := r.RoutesFor(ctx, p10)
		return len(rs) == 2 && rs[0].Stale && rs[1].Stale, err
	})
	if err != nil {
		t.Errorf("stale paths: %v", err)
	}
	err = WaitFor(ctx, func(ctx context.Context) (bool, error) {
		n, err := r.CountRoutes(ctx)
		return n == 0, err
	})
	if err != nil {
		t.Fatalf("paths not removed: %v", err)
	}
	var deleted time.Time
	evs, _ = r.LogEvents(killed)
	for _, e := range evs {
		if e.Kind == EventRouteDelete && e.Prefix == p10 {
			deleted = e.Time
		}
	}
	if deleted.IsZero() {
		t.Errorf("no route-delete of %s in %+v", p10, evs)
	}
	t.Logf("stale paths removed %v after the speakers died (restart time 3s)", deleted.Sub(killed).Round(time.Millisecond))
}
