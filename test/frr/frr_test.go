package frr

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/procsignal"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (run with -update to accept):\n%s", name, path, got)
	}
}

func testRouter(opts Options) *Router {
	if err := setDefaults(&opts); err != nil {
		panic(err)
	}
	return &Router{Namespace: "bccm-frr-0a0b0c0d", Index: 7, ASN: opts.RouterASN, opts: opts, dir: "/tmp/bccm-frr-123",
		RouterV4: netip.MustParseAddr("10.255.7.254"), RouterV6: netip.MustParseAddr("fd00:255:7::fe")}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"Defaults", Options{}},
		{"Full", Options{
			RouterASN:        64512,
			Speakers:         []Speaker{{ASN: 65000, Password: "s3cret"}, {ASN: 65010}},
			HoldTime:         30,
			Accept:           []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("2001:db8:100::/48")},
			GracefulRestart:  GRRestart,
			StalePathTime:    60,
			NoGRNotification: true,
			NoHardAdminReset: true,
			BFD:              &BFD{TransmitInterval: 100 * time.Millisecond, ReceiveInterval: 200 * time.Millisecond, DetectMultiplier: 5, Passive: true},
		}},
		{"GRDisabledBFDDefaults", Options{GracefulRestart: GRDisabled, BFD: &BFD{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := testRouter(tc.opts).renderConfig()
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "TestConfig"+tc.name, conf)
		})
	}
}

func TestOptionsRejected(t *testing.T) {
	for _, o := range []Options{
		{Speakers: []Speaker{{Password: "a b"}}},
		{GracefulRestart: "sometimes"},
		{BFD: &BFD{TransmitInterval: 5 * time.Millisecond}},
		{BFD: &BFD{ReceiveInterval: 1500 * time.Microsecond}},
		{BFD: &BFD{DetectMultiplier: 1}},
	} {
		if err := setDefaults(&o); err == nil {
			t.Errorf("accepted %+v", o)
		}
	}
}

// TestREADMEShowsTemplate: the README shows frr.conf.tmpl verbatim.
func TestREADMEShowsTemplate(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```\n"+configTemplate+"```\n") {
		t.Error("README.md does not show frr.conf.tmpl verbatim in a ``` block; copy the template into it")
	}
}

func TestParsePrefixJSON(t *testing.T) {
	out := `{
  "prefix":"198.51.100.10/32",
  "paths":[
    {"aspath":{"string":"65000"},"valid":true,"bestpath":{"overall":true,"selectionReason":"First path received"},
     "community":{"string":"65000:100","list":["65000:100"]},"largeCommunity":{"string":"65000:1:2","list":["65000:1:2"]},
     "addpathRxId":2,"nexthops":[{"ip":"10.255.7.1","afi":"ipv4","used":true}],"peer":{"peerId":"10.255.7.1","routerId":"10.255.7.1","type":"external"}},
    {"aspath":{"string":"65010"},"valid":true,"multipath":true,"stale":true,"locPrf":100,
     "nexthops":[{"ip":"10.255.7.2","afi":"ipv4"}],"peer":{"peerId":"10.255.7.2"}}
  ]
}`
	rs, err := parsePrefixJSON([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%+v", rs)
	}
	r0, r1 := rs[0], rs[1]
	if r0.Prefix != netip.MustParsePrefix("198.51.100.10/32") || !r0.Best || r0.Stale || r0.PathID != 2 || r0.Peer != netip.MustParseAddr("10.255.7.1") ||
		r0.NextHops[0] != netip.MustParseAddr("10.255.7.1") || r0.Communities[0] != "65000:100" || r0.LargeCommunities[0] != "65000:1:2" || r0.ASPath != "65000" {
		t.Errorf("path 0 = %+v", r0)
	}
	if r1.Best || !r1.Multipath || !r1.Stale || *r1.LocalPref != 100 || r1.Peer != netip.MustParseAddr("10.255.7.2") {
		t.Errorf("path 1 = %+v", r1)
	}
	if rs, err := parsePrefixJSON([]byte("{\n}\n")); err != nil || rs != nil {
		t.Errorf("empty: %+v %v", rs, err)
	}
}

func TestParseNeighborJSON(t *testing.T) {
	out := `{"10.255.7.1":{"remoteAs":65000,"localAs":65001,"bgpState":"Established","peerGroup":"SPEAKERS-V4","authenticationEnabled":1,
	"updateSource":"10.255.7.254","connectionsEstablished":2,"connectionsDropped":1,"lastResetDueTo":"BFD down received","bgpTimerUpEstablishedEpoch":1795620750,
	"gracefulRestartInfo":{"localGrMode":"Helper*","remoteGrMode":"Restart","rBit":true,"nBit":true},
	"neighborCapabilities":{"addPath":{"ipv4Unicast":{"txReceived":true,"rxAdvertised":true}}},
	"addressFamilyInfo":{"ipv4Unicast":{"acceptedPrefixCounter":3,"routeMapForIncomingAdvertisements":"SPEAKERS-IN-V4","routeMapForOutgoingAdvertisements":"SPEAKERS-OUT"}},
	"peerBfdInfo":{"type":"single hop","detectMultiplier":3,"rxMinInterval":300,"txMinInterval":300,"status":"Up","lastUpdate":"0:00:00:12"}}}`
	n, err := parseNeighborJSON([]byte(out), netip.MustParseAddr("10.255.7.1"))
	if err != nil {
		t.Fatal(err)
	}
	if n.RemoteAS != 65000 || n.State != "Established" || !n.Password || n.PeerGroup != "SPEAKERS-V4" || n.UptimeSince.Unix() != 1795620750 ||
		!n.GRNBit || n.GRRemoteMode != "Restart" || !n.AddPathRx["ipv4Unicast"] || n.AcceptedPrefixes["ipv4Unicast"] != 3 ||
		n.InPolicy["ipv4Unicast"] != "SPEAKERS-IN-V4" || n.BFD == nil || n.BFD.Status != "Up" || n.BFD.RxMinInterval != 300*time.Millisecond {
		t.Errorf("%+v %+v", n, n.BFD)
	}
	if _, err := parseNeighborJSON([]byte(`{"bgpNoSuchNeighbor":true}`), netip.MustParseAddr("10.255.7.9")); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing neighbor: %v", err)
	}
}

func TestParseBFDPeersJSON(t *testing.T) {
	out := `[{"multihop":false,"peer":"10.255.7.1","local":"10.255.7.254","vrf":"default","interface":"eth0","id":3524504840,"remote-id":3314596256,
	"passive-mode":false,"status":"up","uptime":12,"diagnostic":"ok","remote-diagnostic":"ok","receive-interval":300,"transmit-interval":300,
	"echo-receive-interval":50,"echo-transmit-interval":0,"detect-multiplier":3,"remote-receive-interval":1000,"remote-transmit-interval":300,
	"remote-echo-receive-interval":0,"remote-detect-multiplier":3,"rtt-min":0,"rtt-avg":0,"rtt-max":0},
	{"peer":"fd00:255:7::1","local":"fd00:255:7::fe","status":"down","downtime":5,"diagnostic":"neighbor signaled session down","remote-diagnostic":"administratively down"}]`
	ps, err := parseBFDPeersJSON([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("%+v", ps)
	}
	p := ps[0]
	if p.Peer != netip.MustParseAddr("10.255.7.1") || p.Local != netip.MustParseAddr("10.255.7.254") || p.Interface != "eth0" || p.Status != "up" ||
		p.Uptime != 12*time.Second || p.RemoteID != 3314596256 || p.RemoteReceive != time.Second || p.TransmitInterval != 300*time.Millisecond {
		t.Errorf("%+v", p)
	}
	if q := ps[1]; q.Status != "down" || q.RemoteDiagnostic != "administratively down" || q.Downtime != 5*time.Second {
		t.Errorf("%+v", q)
	}
}

func TestParseStatisticsCount(t *testing.T) {
	out := `{"ipv4Unicast":[{"instance":"VRF default","totalAdvertisements":3,"totalPrefixes":2,"prefixLength":[{"32":2}]}]}`
	if n, err := parseStatisticsCount([]byte(out)); err != nil || n != 3 {
		t.Errorf("%d %v", n, err)
	}
	if n, err := parseStatisticsCount([]byte(`{"ipv6Unicast":[]}`)); err != nil || n != 0 {
		t.Errorf("%d %v", n, err)
	}
}

func TestParseLog(t *testing.T) {
	log := `2026/11/25 15:30:46.602724 BFD: [PSB4R-8T1TJ] session-new: mhop:no peer:10.255.7.1 local:10.255.7.254 vrf:default ifname:eth0
2026/11/25 15:31:46.673259 BFD: [J1C6V-VMRW5] state-change: [mhop:no peer:10.255.7.1 local:10.255.7.254 vrf:default ifname:eth0] init -> up
2026/11/25 15:32:46.756035 BGP: [V15FP-4CPVK] Tx route add VRF 0 198.51.100.10/32 metric 0 tag 0 count 2 nhg 0
2026/11/25 15:32:46.756036 BGP: [JQXM8-V0CKB]   nhop [1]: 10.255.7.1 if 0 VRF 0 wt 0   
2026/11/25 15:32:46.756037 BGP: [JQXM8-V0CKB]   nhop [2]: 10.255.7.2 if 0 VRF 0 wt 0   
2026/11/25 15:32:46.756038 BGP: [JMVGR-VQ1M1] bgp_zebra_announce: 198.51.100.10/32: announcing to zebra (recursion NOT set)
2026/11/25 15:32:56.411534 BGP: [ZQHFG-DQGX1] 10.255.7.1 went from Established to Clearing
2026/11/25 15:32:56.471577 BGP: [G7K80-KF0HM] Tx route delete VRF 0 198.51.100.10/32
2026/11/25 15:32:57.116101 BFD: [SEY1D-NT8EQ] state-change: [mhop:no peer:fd00:255:7::1 local:fd00:255:7::fe vrf:default ifname:eth0] up -> down reason:control-expired
2026/11/25 15:32:58.000000 ZEBRA: [NNACN-54BDA][EC 4043309110] Disabling MPLS support (no kernel support)
garbage line
`
	ts := func(s string) time.Time {
		v, err := time.ParseInLocation(logTimeLayout, s, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	evs, err := parseLog(log, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s %s %s %s>%s %s %s %v", e.Time.Format("15:04:05.000000"), e.Kind, e.Peer, e.From, e.To, e.Reason, e.Prefix, e.NextHops))
	}
	want := []string{
		"15:31:46.673259 bfd-state 10.255.7.1 init>up  invalid Prefix []",
		"15:32:46.756035 route-install invalid IP >  198.51.100.10/32 [10.255.7.1 10.255.7.2]",
		"15:32:56.411534 bgp-state 10.255.7.1 Established>Clearing  invalid Prefix []",
		"15:32:56.471577 route-delete invalid IP >  198.51.100.10/32 []",
		"15:32:57.116101 bfd-state fd00:255:7::1 up>down control-expired invalid Prefix []",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	evs, _ = parseLog(log, ts("2026/11/25 15:32:56.471577"))
	if len(evs) != 2 || evs[0].Kind != EventRouteDelete {
		t.Errorf("since: %+v", evs)
	}
}

// TestStart starts FRR with two speakers and BFD, and checks what an operator
// would look at: neighbors as configured, BFD sessions waiting for the speakers.
func TestStart(t *testing.T) {
	r := Start(t, Options{Speakers: []Speaker{{Password: "pw1"}, {ASN: 65010}}, BFD: &BFD{ReceiveInterval: 500 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, s := range r.opts.Speakers {
		for _, addr := range []netip.Addr{r.SpeakerV4(i), r.SpeakerV6(i)} {
			n, err := r.Neighbor(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			group := "SPEAKERS-V4"
			if addr.Is6() {
				group = "SPEAKERS-V6"
			}
			if n.RemoteAS != s.ASN || n.LocalAS != r.ASN || n.Password != (s.Password != "") || n.PeerGroup != group || n.State == "Established" ||
				n.InPolicy["ipv4Unicast"] != "SPEAKERS-IN-V4" || n.OutPolicy["ipv6Unicast"] != "SPEAKERS-OUT" || n.InPolicy["ipv6Unicast"] != "SPEAKERS-IN-V6" ||
				n.BFD == nil || n.BFD.Status != "Down" || !strings.HasPrefix(n.GRLocalMode, "Helper") {
				b, _ := json.Marshal(n)
				t.Errorf("neighbor %s: %s", addr, b)
			}
		}
	}
	if _, err := r.Neighbor(ctx, r.SpeakerV4(5)); !errors.Is(err, ErrNotFound) {
		t.Errorf("unconfigured neighbor: %v", err)
	}
	var peers []BFDPeer
	err := WaitFor(ctx, func(ctx context.Context) (bool, error) {
		var err error
		peers, err = r.BFDPeers(ctx)
		return len(peers) == 4, err
	})
	if err != nil {
		t.Fatalf("BFD peers %+v: %v", peers, err)
	}
	// The profile's intervals apply; FRR 8.4's bgpd registers the sessions without a
	// local address until the BGP session is established.
	for _, p := range peers {
		if p.Status != "down" || p.ReceiveInterval != 500*time.Millisecond || p.TransmitInterval != 300*time.Millisecond || p.DetectMultiplier != 3 {
			t.Errorf("BFD peer %+v", p)
		}
	}
	if out, err := r.KernelRoutes(ctx, false); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("kernel routes %q %v", out, err)
	}
	if n, err := r.CountRoutes(ctx); err != nil || n != 0 {
		t.Errorf("count %d %v", n, err)
	}
	if rs, err := r.RoutesFor(ctx, netip.MustParsePrefix("198.51.100.1/32")); err != nil || rs != nil {
		t.Errorf("routes %+v %v", rs, err)
	}
	t.Logf("ns %s idx %d dir %s", r.Namespace, r.Index, r.Dir())
}

// TestDaemonsDieWithTheirParent: the daemons run as user frr, yet keep the
// Pdeathsig childproc sets (they change no credentials).
func TestDaemonsDieWithTheirParent(t *testing.T) {
	if os.Getenv("FRR_HELPER_PROCESS") != "" {
		r, err := start(context.Background(), func() Options { o := Options{}; _ = setDefaults(&o); return o }())
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		pids := []string{}
		for _, d := range r.daemons {
			pids = append(pids, fmt.Sprint(d.cmd.Process.Pid))
		}
		fmt.Println("PIDS", strings.Join(pids, " "), r.Namespace)
		time.Sleep(time.Hour)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDaemonsDieWithTheirParent$")
	cmd.Env = append(os.Environ(), "FRR_HELPER_PROCESS=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var line string
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(line, "\n") && time.Now().Before(deadline) {
		n, err := out.Read(buf)
		line += string(buf[:n])
		if err != nil {
			break
		}
	}
	f := strings.Fields(line)
	if len(f) != 5 || f[0] != "PIDS" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper said %q", line)
	}
	_ = cmd.Process.Kill() // the test binary "crashes"
	_ = cmd.Wait()
	// Its leftovers (namespace, veth, dir) are the next Start's to sweep.
	t.Cleanup(func() { sweepStale(context.Background()) })
	for _, p := range f[1:4] {
		var pid int
		fmt.Sscan(p, &pid)
		for i := 0; procsignal.Running(pid); i++ {
			if i > 200 {
				t.Fatalf("daemon %d outlived its parent", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	sweepStale(context.Background())
	if _, err := os.Stat(filepath.Join(stateDir, f[4])); err == nil {
		t.Errorf("stale record of %s not swept", f[4])
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), f[4]) {
		t.Errorf("namespace %s not swept", f[4])
	}
}

// TestParallelRoutersDistinct: routers started concurrently get distinct
// namespaces, veths and subnets.
func TestParallelRoutersDistinct(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and veth pairs")
	}
	const n = 3
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	type result struct {
		r   *Router
		err error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			o := Options{}
			_ = setDefaults(&o)
			r, err := start(ctx, o)
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
