package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

const mib = 1 << 20

func TestIdlePercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, DefaultGCPercent},
		{2 * mib, DefaultGCPercent}, // 2 MiB of headroom is 100%
		{4 * mib, DefaultGCPercent}, // exactly 50%
		{8 * mib, 25},
		{16 * mib, 13}, // 12.5%, rounded up
		{60 * mib, CCMIdle.Percent},
		{500 * mib, CCMIdle.Percent},
	} {
		if got := CCMIdle.percent(c.live); got != c.want {
			t.Errorf("CCMIdle.percent(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
	// The agent's mode collects a fifth as often.
	for _, c := range []struct {
		live uint64
		want int
	}{
		{16 * mib, DefaultGCPercent},
		{20 * mib, 40},
		{60 * mib, AgentIdle.Percent},
	} {
		if got := AgentIdle.percent(c.live); got != c.want {
			t.Errorf("AgentIdle.percent(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
}

// TestTunerModes walks the tuner through a start, a burst, the quiet after it, the
// small allocations of an idle minute and the next burst.
func TestTunerModes(t *testing.T) {
	live := uint64(100 * mib)
	steps := []struct {
		name        string
		alloc, free uint64 // allocated since the last sample; free heap
		percent     int
		release     bool
	}{
		{"start", 0, 10 * mib, DefaultGCPercent, false},
		{"burst", 500 * mib, 40 * mib, DefaultGCPercent, false},
		{"burst", 400 * mib, 40 * mib, DefaultGCPercent, false},
		{"quiet 5 s (the window still holds the burst)", 5 * mib, 40 * mib, DefaultGCPercent, false},
		{"quiet 10 s", 5 * mib, 40 * mib, DefaultGCPercent, false},
		{"quiet 15 s: idle, free returned", 5 * mib, 40 * mib, CCMIdle.Percent, true},
		{"idle", 5 * mib, 4 * mib, CCMIdle.Percent, false},
		{"idle: a full resync's 25 MB stays idle", 25 * mib, 5 * mib, CCMIdle.Percent, false},
		{"idle: no second release", 1 * mib, 20 * mib, CCMIdle.Percent, false},
		{"a burst of twice the live heap ends it", 200 * mib, 5 * mib, DefaultGCPercent, false},
		{"quiet again, 5 s", 1 * mib, 30 * mib, DefaultGCPercent, false},
		{"10 s", 1 * mib, 30 * mib, DefaultGCPercent, false},
		{"15 s: the window is quiet, a burst since the release", 1 * mib, 30 * mib, CCMIdle.Percent, true},
		{"idle", 1 * mib, 30 * mib, CCMIdle.Percent, false},
		{"a smaller burst, as large as the live heap, ends it", 100 * mib, 5 * mib, DefaultGCPercent, false},
		{"quiet 5 s", 1 * mib, 30 * mib, DefaultGCPercent, false},
		{"10 s", 1 * mib, 30 * mib, DefaultGCPercent, false},
		{"15 s: idle again, no release (no burst of twice the live heap since the last)", 1 * mib, 30 * mib, CCMIdle.Percent, false},
	}
	tu := newTuner(CCMIdle)
	var allocs uint64
	for i, s := range steps {
		allocs += s.alloc
		percent, release := tu.next(heapStats{allocs: allocs, free: s.free, live: live})
		if percent != s.percent || release != s.release {
			t.Errorf("step %d (%s): percent %d, release %v; want %d, %v", i, s.name, percent, release, s.percent, s.release)
		}
		if release { // as Tune does
			tu.releasedAt(heapStats{allocs: allocs, live: live})
		}
	}
}

// TestTunerSteadyLoadLeavesIdle: a steady rate that never allocates the live heap in
// one interval, but twice the entry's threshold over the window, ends the idle mode
// (it would otherwise collect the whole heap every few MB).
func TestTunerSteadyLoadLeavesIdle(t *testing.T) {
	live := uint64(60 * mib)
	tu := newTuner(CCMIdle)
	var allocs uint64
	step := func(alloc uint64) int {
		allocs += alloc
		p, _ := tu.next(heapStats{allocs: allocs, free: 20 * mib, live: live})
		return p
	}
	step(0)
	step(500 * mib)
	for range quietSamples - 1 {
		step(2 * mib)
	}
	if !tu.idle {
		t.Fatal("quiet after a burst: not idle")
	}
	// 20 MB per 5 s: a third of the live heap per interval, 60 MB per window.
	for i := range quietSamples {
		if p := step(20 * mib); i == quietSamples-1 && (p != DefaultGCPercent || tu.idle) {
			t.Errorf("20 MB per interval for %d intervals: percent %d, idle %v; want %d, busy", i+1, p, tu.idle, DefaultGCPercent)
		}
	}
	// Just under the exit's rate (under the live heap per window) stays idle.
	tu = newTuner(CCMIdle)
	allocs = 0
	step(0)
	step(500 * mib)
	for range quietSamples - 1 {
		step(2 * mib)
	}
	for range 3 * quietSamples {
		if p := step(19 * mib); p == DefaultGCPercent {
			t.Fatal("19 MB per interval (57 MB per window, under the live 60 MB) left the idle mode")
		}
	}
}

// TestTunerSmallProcess: a process whose live heap is small never leaves the busy
// mode (the idle mode would allow as much growth), and an idle entry with little free
// heap changes the percent without a forced collection.
func TestTunerSmallProcess(t *testing.T) {
	tu := newTuner(CCMIdle)
	for i := range 10 {
		if p, r := tu.next(heapStats{allocs: uint64(i) * mib, free: 20 * mib, live: 6 * mib}); p != DefaultGCPercent || r {
			t.Fatalf("sample %d: percent %d, release %v; want %d, false", i, p, r, DefaultGCPercent)
		}
	}
	tu = newTuner(CCMIdle)
	for i := range quietSamples {
		p, r := tu.next(heapStats{allocs: uint64(i) * mib, free: 2 * mib, live: 100 * mib})
		want := DefaultGCPercent
		if i == quietSamples-1 {
			want = CCMIdle.Percent
		}
		if p != want || r {
			t.Errorf("sample %d: percent %d, release %v; want %d, false", i, p, r, want)
		}
	}
}

// TestTuneLoop: the loop sets the percent only when it changes and releases once per
// idle entry.
func TestTuneLoop(t *testing.T) {
	stats := []heapStats{
		{allocs: 0, free: 40 * mib, live: 80 * mib},
		{allocs: 500 * mib, free: 40 * mib, live: 80 * mib}, // a burst
		{allocs: 501 * mib, free: 40 * mib, live: 80 * mib},
		{allocs: 502 * mib, free: 40 * mib, live: 80 * mib},
		{allocs: 503 * mib, free: 40 * mib, live: 80 * mib}, // idle: set 5, release
		{allocs: 503 * mib, free: 0, live: 30 * mib},        // read after the release: the burst's garbage is gone, set 7
		{allocs: 504 * mib, free: 1 * mib, live: 30 * mib},
		{allocs: 505 * mib, free: 1 * mib, live: 30 * mib},
		{allocs: 700 * mib, free: 1 * mib, live: 30 * mib}, // busy: set 50
		{allocs: 700 * mib, free: 1 * mib, live: 30 * mib},
	}
	var reads, released atomic.Int32
	var set []int
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tune(ctx, CCMIdle, time.Millisecond, func() heapStats {
			i := int(reads.Add(1)) - 1
			if i >= len(stats)-1 {
				cancel()
				return stats[len(stats)-1]
			}
			return stats[i]
		}, func(p int) int { set = append(set, p); return 0 }, func() { released.Add(1) })
	}()
	<-done
	if n := released.Load(); n != 1 {
		t.Errorf("released %d times, want 1", n)
	}
	if want := []int{CCMIdle.Percent, 7, DefaultGCPercent}; !slices.Equal(set, want) {
		t.Errorf("percents set %v, want %v", set, want)
	}
}

// TestTuneReturnsMemory: with the runtime's real numbers, a process with a large live
// heap that goes quiet after a burst switches to the idle percent, and whatever free
// heap it still holds then is given back to the OS.
func TestTuneReturnsMemory(t *testing.T) {
	orig := debug.SetGCPercent(DefaultGCPercent)
	defer debug.SetGCPercent(orig)
	live := make([][]byte, 0, 100)
	for range 100 { // 100 MiB live: the idle mode's own percent applies
		live = append(live, make([]byte, mib))
	}
	garbage := make([][]byte, 0, 160)
	for range 160 { // with the live heap, a burst of twice it: the entry releases
		garbage = append(garbage, make([]byte, mib))
	}
	runtime.KeepAlive(garbage)
	garbage = nil
	runtime.GC()
	var released atomic.Bool
	var freeBefore, freeAfter atomic.Uint64
	var percent atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	read := func() heapStats {
		s := readHeapStats()
		if !released.Load() {
			freeBefore.Store(s.free)
		}
		return s
	}
	go func() {
		defer close(done)
		tune(ctx, CCMIdle, 20*time.Millisecond, read, func(p int) int {
			percent.Store(int32(p))
			if p == CCMIdle.Percent {
				defer cancel() // after the release, when there is one
			}
			return debug.SetGCPercent(p)
		}, func() {
			released.Store(true)
			freeOSMemory()
			freeAfter.Store(readHeapStats().free)
		})
	}()
	<-done
	runtime.KeepAlive(live)
	if p := int(percent.Load()); p != CCMIdle.Percent {
		t.Fatalf("percent set %d, want the idle mode's %d", p, CCMIdle.Percent)
	}
	if now := debug.SetGCPercent(DefaultGCPercent); now != CCMIdle.Percent {
		t.Errorf("runtime GC percent %d, want %d", now, CCMIdle.Percent)
	}
	if released.Load() && freeAfter.Load() >= freeBefore.Load()/2 {
		t.Errorf("free heap %d bytes before the release, %d after: want it returned", freeBefore.Load(), freeAfter.Load())
	}
	t.Logf("released %v (free %d bytes before, %d after)", released.Load(), freeBefore.Load(), freeAfter.Load())
}
