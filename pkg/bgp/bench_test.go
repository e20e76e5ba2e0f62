package bgp

import (
	"context"
	"net/netip"
	"runtime"
	"strconv"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
)

// waitCount polls BIRD's route count until it equals n (10ms granularity).
func waitCount(b *testing.B, r *bird.Router, n int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	for {
		got, err := r.CountRoutes(ctx)
		if err == nil && got == n {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("BIRD has %d routes (%v), want %d", got, err, n)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// BenchmarkBIRDAnnounce1000 announces 1000 /32s at once and measures the time
// until all are in BIRD's table (announce-ms), then withdraws them all and
// measures until BIRD's table is empty (withdraw-ms). announce-call-ms is the
// time Announce itself takes (the diff and the GoBGP API calls).
func BenchmarkBIRDAnnounce1000(b *testing.B) {
	r := bird.Start(b, bird.Options{})
	s, err := New(Config{LocalASN: 65000, RouterID: r.SpeakerV4(0), Peers: []config.BGPPeer{{
		Address: r.RouterV4.String(), ASN: r.ASN, SourceAddress: r.SpeakerV4(0).String(),
	}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	wctx, wcancel := context.WithTimeout(context.Background(), converge)
	defer wcancel()
	if err := bird.WaitFor(wctx, func(ctx context.Context) (bool, error) {
		st, err := r.ProtocolState(ctx, r.Protocol(0, false))
		return err == nil && st.Established(), err
	}); err != nil {
		b.Fatal(err)
	}
	paths := make([]Path, 1000)
	for i := range paths {
		paths[i] = Path{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32)}
	}
	var ann, wd, call time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		s.Announce("lb", paths)
		call += time.Since(start)
		waitCount(b, r, len(paths))
		ann += time.Since(start)
		start = time.Now()
		s.Announce("lb", nil)
		waitCount(b, r, 0)
		wd += time.Since(start)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(ann), "announce-ms")
	b.ReportMetric(ms(call), "announce-call-ms")
	b.ReportMetric(ms(wd), "withdraw-ms")
}

// BenchmarkPlan1000 is the cost of diffing 1000 desired paths against an applied
// state that differs in one path (no network).
func BenchmarkPlan1000(b *testing.B) {
	paths, r := appliedRIB(1000)
	paths = paths[1:]
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		want, _ := normalize(paths, nil, nil, &scopeTable{})
		r.set("lb", want)
		if cs := r.plan(); len(cs) != 1 {
			b.Fatal(len(cs))
		}
	}
}

// BenchmarkRIB10k is the speaker's cost per agent pass with 10,000 paths applied:
// a full pass that changes nothing (normalize, set, plan: every ResyncInterval) and
// an incremental one that changes one prefix (update, plan: each Service change).
func BenchmarkRIB10k(b *testing.B) {
	paths, r := appliedRIB(10000)
	b.Run("full-unchanged", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			want, _ := normalize(paths, nil, nil, &scopeTable{})
			r.set("lb", want)
			if cs := r.plan(); len(cs) != 0 {
				b.Fatal(len(cs))
			}
		}
	})
	b.Run("update-one", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			p := paths[i%len(paths)]
			p.Communities = []string{"65000:" + strconv.Itoa(i%2+2)}
			want, _ := normalize([]Path{p}, nil, nil, &scopeTable{})
			r.update("lb", []netip.Prefix{p.Prefix}, want)
			for _, c := range r.plan() {
				r.commit(c)
			}
		}
	})
}

// appliedRIB is a RIB with n /32 paths of source "lb" applied, and those paths.
func appliedRIB(n int) ([]Path, *rib) {
	paths := make([]Path, n)
	for i := range paths {
		paths[i] = Path{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32), Communities: []string{"65000:1"}}
	}
	r := newRIB()
	want, _ := normalize(paths, nil, nil, &scopeTable{})
	r.set("lb", want)
	apply(r)
	return paths, r
}

// BenchmarkServerHeap is the heap a started GoBGP server holds before any path or
// peer: with only the unicast families its tables cost little (with every family,
// as GoBGP defaults to, about 9.5 MB more).
func BenchmarkServerHeap(b *testing.B) {
	var before, after runtime.MemStats
	for range b.N {
		runtime.GC()
		runtime.ReadMemStats(&before)
		srv, _, err := startServer(context.Background(), klog.Background(), Config{LocalASN: 65000, RouterID: netip.MustParseAddr("10.0.0.1")})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB")
		srv.Stop()
	}
}
