package gctune

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestShouldRelease(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name             string
		s                heapStats
		allocated, burst uint64
		want             bool
	}{
		{"quiet after a burst", heapStats{free: 40 * mib, live: 80 * mib}, 2 * mib, 1000 * mib, true},
		{"still allocating", heapStats{free: 40 * mib, live: 80 * mib}, 60 * mib, 1000 * mib, false},
		{"allocating a little under what is free", heapStats{free: 40 * mib, live: 80 * mib}, 20 * mib, 1000 * mib, false},
		{"too little free", heapStats{free: 15 * mib, live: 20 * mib}, 0, 1000 * mib, false},
		{"free small against the live heap", heapStats{free: 20 * mib, live: 100 * mib}, 0, 1000 * mib, false},
		{"exactly a quarter", heapStats{free: 25 * mib, live: 100 * mib}, 6 * mib, 1000 * mib, true},
		{"no burst since the last release (its own collection freed this)", heapStats{free: 30 * mib, live: 60 * mib}, 1 * mib, 100 * mib, false},
		{"a burst of twice the live heap", heapStats{free: 30 * mib, live: 60 * mib}, 1 * mib, 120 * mib, true},
		{"a small process: at least releaseBurstMin", heapStats{free: 20 * mib, live: 20 * mib}, 1 * mib, 50 * mib, false},
	} {
		if got := shouldRelease(c.s, c.allocated, c.burst); got != c.want {
			t.Errorf("%s: shouldRelease(%+v, %d, %d) = %v, want %v", c.name, c.s, c.allocated, c.burst, got, c.want)
		}
	}
}

// TestReleaseLoop: the loop releases only when the numbers say so, once per look.
func TestReleaseLoop(t *testing.T) {
	const mib = 1 << 20
	stats := []heapStats{
		{allocs: 0, free: 40 * mib, live: 80 * mib},         // first read
		{allocs: 200 * mib, free: 40 * mib, live: 80 * mib}, // burst: 200 MiB allocated
		{allocs: 201 * mib, free: 40 * mib, live: 80 * mib}, // quiet: release
		{allocs: 201 * mib, free: 0, live: 80 * mib},        // after the release
		{allocs: 202 * mib, free: 1 * mib, live: 80 * mib},  // nothing to give back
		{allocs: 230 * mib, free: 30 * mib, live: 80 * mib}, // its own collection freed some: no burst
		{allocs: 231 * mib, free: 30 * mib, live: 80 * mib},
	}
	var reads, released atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		release(ctx, time.Millisecond, func() heapStats {
			i := int(reads.Add(1)) - 1
			if i >= len(stats)-1 {
				cancel()
				return stats[len(stats)-1]
			}
			return stats[i]
		}, func() { released.Add(1) })
	}()
	<-done
	if n := released.Load(); n != 1 {
		t.Errorf("released %d times, want 1", n)
	}
}

// TestReleaseReturnsMemory: with the runtime's real numbers, freed memory is given
// back to the OS.
func TestReleaseReturnsMemory(t *testing.T) {
	keep := make([][]byte, 0, 80)
	for range 80 { // a burst: more than releaseBurstMin
		keep = append(keep, make([]byte, 1<<20))
	}
	runtime.KeepAlive(keep)
	keep = nil
	runtime.GC()
	before := readHeapStats()
	if !shouldRelease(before, 0, before.allocs) {
		t.Skipf("the runtime holds only %d free bytes (live %d): nothing to test", before.free, before.live)
	}
	var calls atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		release(ctx, 10*time.Millisecond, readHeapStats, func() {
			calls.Add(1)
			freeOSMemory()
			cancel()
		})
	}()
	<-done
	after := readHeapStats()
	if calls.Load() != 1 || after.free >= before.free/2 {
		t.Errorf("free heap %d bytes before, %d after %d releases: want it returned", before.free, after.free, calls.Load())
	}
}
