package bird

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseRoutes(t *testing.T) {
	out := `BIRD 2.0.12 ready.
Table master4:
10.0.0.1/32          unicast [s1 00:49:10.123] * (100) [AS65000i]
	via 10.255.1.1 on eth0
	Type: BGP univ
	BGP.origin: IGP
	BGP.as_path: 65000
	BGP.next_hop: 10.255.1.1
	BGP.local_pref: 100
	BGP.community: (65000,100) (65535,65281)
	BGP.large_community: (65000, 1, 2)
                     unicast [s2 00:49:11.456] (100) [AS65000i]
	via 10.255.1.2 on eth0
	Type: BGP univ
	BGP.next_hop: 10.255.1.2

Table master6:
fd00::1/128          unicast [s1v6 00:49:10.123] * (100) [AS65000i]
	via fd00:255:1::1 on eth0
	BGP.next_hop: fd00:255:1::1 fe80::1
`
	rs, err := parseRoutes(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("got %d routes: %+v", len(rs), rs)
	}
	r0 := rs[0]
	if r0.Prefix != netip.MustParsePrefix("10.0.0.1/32") || r0.Protocol != "s1" || !r0.Primary || r0.NextHops[0] != netip.MustParseAddr("10.255.1.1") ||
		len(r0.Communities) != 2 || r0.Communities[1] != "65535:65281" || r0.LargeCommunities[0] != "65000:1:2" || *r0.LocalPref != 100 || r0.ASPath != "65000" {
		t.Errorf("route 0 = %+v", r0)
	}
	if r1 := rs[1]; r1.Prefix != r0.Prefix || r1.Protocol != "s2" || r1.Primary || r1.BGPNextHop[0] != netip.MustParseAddr("10.255.1.2") {
		t.Errorf("route 1 = %+v", r1)
	}
	if r2 := rs[2]; r2.Prefix != netip.MustParsePrefix("fd00::1/128") || r2.Protocol != "s1v6" || len(r2.BGPNextHop) != 2 {
		t.Errorf("route 2 = %+v", r2)
	}
}

func TestStart(t *testing.T) {
	r := Start(t, Options{Speakers: []Speaker{{}, {ASN: 65010, Password: "pw"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := r.Protocols(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]ProtocolStatus{}
	for _, p := range ps {
		names[p.Name] = p
	}
	for _, n := range []string{"s1", "s1v6", "s2", "s2v6"} {
		p, ok := names[n]
		if !ok || p.Proto != "BGP" || p.State != "start" {
			t.Errorf("protocol %s = %+v (all: %+v)", n, p, ps)
		}
	}
	rs, err := r.Routes(ctx)
	if err != nil || len(rs) != 0 {
		t.Errorf("routes = %+v, %v", rs, err)
	}
	if n, err := r.CountRoutes(ctx); err != nil || n != 0 {
		t.Errorf("count = %d, %v", n, err)
	}
	t.Logf("ns %s idx %d: %+v", r.Namespace, r.Index, ps)
}

// TestParallelRoutersDistinct: routers started concurrently get distinct
// namespaces, veths and subnets.
func TestParallelRoutersDistinct(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and veth pairs")
	}
	const n = 4
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		r   *Router
		err error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			r, err := start(ctx, Options{RouterASN: 65001, Speakers: []Speaker{{ASN: 65000}}, HoldTime: 9})
			results <- result{r, err}
		}()
	}
	seen := map[string]bool{}
	for range n {
		res := <-results
		if res.r != nil {
			t.Cleanup(res.r.cleanup)
		}
		if res.err != nil {
			t.Error(res.err)
			continue
		}
		for _, k := range []string{res.r.Namespace, res.r.HostInterface, fmt.Sprint(res.r.Index)} {
			if seen[k] {
				t.Errorf("%s used twice", k)
			}
			seen[k] = true
		}
	}
}

// TestSweepStale: what a dead test process recorded is removed by the next Start.
func TestSweepStale(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and veth pairs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	ns, veth := "bccm-deadbeef", "bccm250h"
	if _, err := run(ctx, "ip", "netns", "add", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = run(context.Background(), "ip", "netns", "del", ns) })
	if _, err := run(ctx, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	rec := fmt.Sprintf("%d 1 %s %s %s\n", dead.Process.Pid, ns, veth, dir)
	if err := os.WriteFile(filepath.Join(stateDir, ns), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	Start(t, Options{})
	if out, _ := run(ctx, "ip", "netns", "list"); strings.Contains(out, ns) {
		t.Errorf("stale namespace %s not removed: %s", ns, out)
	}
	if _, err := run(ctx, "ip", "link", "show", veth); err == nil {
		t.Errorf("stale veth %s not removed", veth)
	}
	if _, err := os.Stat(filepath.Join(stateDir, ns)); !os.IsNotExist(err) {
		t.Errorf("stale record not removed: %v", err)
	}
}
