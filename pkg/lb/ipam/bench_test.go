package ipam

import (
	"fmt"
	"math/rand"
	"runtime"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// fill assigns n single-stack Services and returns their keys.
func fill(b *testing.B, a *Allocator, n int, fam []v1.IPFamily) []string {
	b.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns/svc-%d", i)
		if _, err := a.Assign(keys[i], Request{Namespace: "ns", Families: fam, Ports: tcp(80)}, nil); err != nil {
			b.Fatal(err)
		}
	}
	return keys
}

// churn releases a random Service and assigns a new one per iteration: one
// allocation plus one free per op, at constant occupancy.
func churn(b *testing.B, pools []config.AddressPool, n int, fam []v1.IPFamily) {
	a, err := New(pools)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	keys := fill(b, a, n, fam)
	runtime.GC()
	runtime.ReadMemStats(&after)
	heapPerSvc := float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
	rng := rand.New(rand.NewSource(1))
	newKeys := make([]string, 1<<12)
	for i := range newKeys {
		newKeys[i] = fmt.Sprintf("ns/new-%d", i)
	}
	req := Request{Namespace: "ns", Families: fam, Ports: tcp(80)}
	b.ReportAllocs()
	defer b.ReportMetric(heapPerSvc, "heapB/svc") // after reportCPU's ResetTimer
	defer reportCPU(b)()
	for i := 0; i < b.N; i++ {
		j := rng.Intn(len(keys))
		a.Release(keys[j])
		k := newKeys[i&(len(newKeys)-1)]
		a.Release(k) // no-op unless the key wrapped around
		if _, err := a.Assign(k, req, nil); err != nil {
			b.Fatal(err)
		}
		keys[j] = k
	}
}

// BenchmarkAssignRelease90PercentFull: a /16 with 90% (58,982) of its addresses
// in use; each op is one Release and one Assign (auto-assignment).
func BenchmarkAssignRelease90PercentFull(b *testing.B) {
	churn(b, []config.AddressPool{mkPool("p", "10.0.0.0/16")}, 65536*9/10, v4)
}

// BenchmarkAssignRelease60kIPv6Slash64: 60,000 Services in a /64.
func BenchmarkAssignRelease60kIPv6Slash64(b *testing.B) {
	churn(b, []config.AddressPool{mkPool("p", "2001:db8::/64")}, 60000, v6)
}

// BenchmarkAssignReleaseDualStack: 30,000 dual-stack Services in one /16 + /64 pool.
func BenchmarkAssignReleaseDualStack(b *testing.B) {
	churn(b, []config.AddressPool{mkPool("p", "10.0.0.0/16", "2001:db8::/64")}, 30000, v46)
}

// BenchmarkAssignIdempotent90PercentFull: re-assigning a Service that already
// holds its IP (what every resync does).
func BenchmarkAssignIdempotent90PercentFull(b *testing.B) {
	a, err := New([]config.AddressPool{mkPool("p", "10.0.0.0/16")})
	if err != nil {
		b.Fatal(err)
	}
	keys := fill(b, a, 65536*9/10, v4)
	req := Request{Namespace: "ns", Families: v4, Ports: tcp(80)}
	b.ReportAllocs()
	defer reportCPU(b)()
	for i := 0; i < b.N; i++ {
		if _, err := a.Assign(keys[i%len(keys)], req, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPrime60k: priming a fresh Allocator with 60,000 Services' IPs, per
// Service.
func BenchmarkPrime60k(b *testing.B) {
	pools := []config.AddressPool{mkPool("p", "10.0.0.0/16")}
	src, err := New(pools)
	if err != nil {
		b.Fatal(err)
	}
	keys := fill(b, src, 60000, v4)
	cur := make([]Assignment, len(keys))
	for i, k := range keys {
		cur[i], _ = src.Assigned(k)
	}
	req := Request{Namespace: "ns", Families: v4, Ports: tcp(80)}
	b.ReportAllocs()
	b.ResetTimer()
	var a *Allocator
	for i := 0; i < b.N; i++ {
		j := i % len(keys)
		if j == 0 {
			b.StopTimer()
			a, _ = New(pools)
			b.StartTimer()
		}
		if err := a.Prime(keys[j], req, cur[j].IPs); err != nil {
			b.Fatal(err)
		}
	}
}

// reportCPU resets the timer and returns a func that reports the process's CPU
// time (user+system, GC included) per op as "cpu-ns/op": on a shared machine the
// wall-clock ns/op also counts time spent waiting for a core.
func reportCPU(b *testing.B) func() {
	cpu := func() int64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0
		}
		return ru.Utime.Nano() + ru.Stime.Nano()
	}
	b.ResetTimer()
	start := cpu()
	return func() {
		b.StopTimer()
		b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkBaselineMapChurn is the floor for comparison: one insert and one delete
// of random keys in a Go map of 59,000 string keys, the same memory pattern as
// BenchmarkAssignRelease90PercentFull without any IPAM.
func BenchmarkBaselineMapChurn(b *testing.B) {
	m := map[string]*svcAlloc{}
	keys := make([]string, 65536*9/10)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns/svc-%d", i)
		m[keys[i]] = &svcAlloc{}
	}
	newKeys := make([]string, 1<<12)
	for i := range newKeys {
		newKeys[i] = fmt.Sprintf("ns/new-%d", i)
	}
	rng := rand.New(rand.NewSource(1))
	b.ReportAllocs()
	defer reportCPU(b)()
	for i := 0; i < b.N; i++ {
		j := rng.Intn(len(keys))
		delete(m, keys[j])
		k := newKeys[i&(len(newKeys)-1)]
		delete(m, k)
		m[k] = &svcAlloc{}
		keys[j] = k
	}
}
