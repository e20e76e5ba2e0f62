package gctune

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"k8s.io/klog/v2"
)

// Interval is how often Tune samples the heap.
const Interval = 5 * time.Second

// QuietWindow is how long the process must allocate little before Tune switches to
// the idle mode.
const QuietWindow = 3 * Interval

// Idle is how far the idle mode lowers the heap's growth between collections.
type Idle struct {
	// Percent is the GC percent, raised to allow HeadroomMin (a small process keeps
	// DefaultGCPercent's cheaper pace).
	Percent int
	// HeadroomMin is the least heap growth between two collections.
	HeadroomMin uint64
}

// The idle modes of the two roles. The CCM's memory is what its targets bound (one
// or a few replicas, the largest heaps); an agent runs on every host, where its CPU
// counts a thousand times, and a slow burst of Service updates (the leader assigning
// 10,000 addresses over minutes) allocates little enough per 15 s to count as idle:
// it collects a fifth as often.
var (
	CCMIdle   = Idle{Percent: 5, HeadroomMin: 2 << 20}
	AgentIdle = Idle{Percent: 25, HeadroomMin: 8 << 20}
)

const (
	// busyAllocMin is the least allocation in one Interval that ends the idle mode.
	busyAllocMin = 32 << 20
	// releaseMin is the least free heap worth a forced collection to give back on
	// entering the idle mode.
	releaseMin = 4 << 20
	// releaseBurst is the least allocation since the last release that makes the
	// next entry into the idle mode release again (and at least twice the live heap).
	releaseBurst = 64 << 20
)

// heapStats are the runtime's numbers the tuner decides on.
type heapStats struct {
	allocs uint64 // bytes allocated since the process started
	free   uint64 // heap pages free and still held from the OS
	live   uint64 // heap bytes live at the last collection
}

// tuner decides the collector's mode from a sample of the heap every Interval.
//
// Busy (the start, and any burst): DefaultGCPercent, the heap grows to one and a half
// times the live data between collections, which keeps a burst's collections few.
// Idle (the process allocated under half its live heap over the last QuietWindow):
// Idle.Percent, at least Idle.HeadroomMin of growth, and the free heap returned to
// the OS on entry. An idle CCM holds its informer caches and little else, so what it
// allocates between collections is what it holds above its live data: the idle mode
// trades a few more collections of a mostly unchanging heap (each a few tens of
// milliseconds of CPU) for a quarter of its memory; the idle CCM's periodic passes
// list from shared snapshots of its caches (internal/cachelist) so that there are
// few: 4 in the benchmark's idle minute at 10,000 Services. It ends when the last QuietWindow
// allocated as much as the live heap (twice the entry's threshold, so a steady rate
// near it does not flip the mode), or at once when one Interval did (at least
// busyAllocMin). The free heap is returned on an entry only after a burst since the
// last return (releaseBurst), so a workload that turns busy and quiet every few
// intervals does not force a collection each time.
type tuner struct {
	mode     Idle
	allocs   []uint64 // the cumulative allocation at the last samples, oldest first
	idle     bool
	percent  int    // in effect
	released uint64 // the cumulative allocation at the last release
}

func newTuner(mode Idle) *tuner { return &tuner{mode: mode, percent: DefaultGCPercent} }

// quietSamples is how many samples span QuietWindow.
const quietSamples = int(QuietWindow/Interval) + 1

// next takes one sample and returns the GC percent to run with and whether to return
// the free heap to the OS now.
func (t *tuner) next(s heapStats) (percent int, release bool) {
	t.allocs = append(t.allocs, s.allocs)
	if len(t.allocs) > quietSamples {
		t.allocs = append(t.allocs[:0], t.allocs[1:]...)
	}
	n := len(t.allocs)
	switch {
	case t.idle && (n >= 2 && t.allocs[n-1]-t.allocs[n-2] >= max(s.live, busyAllocMin) ||
		n == quietSamples && t.allocs[n-1]-t.allocs[0] >= max(s.live, busyAllocMin)):
		t.idle, t.percent = false, DefaultGCPercent
	case !t.idle && n == quietSamples && t.allocs[n-1]-t.allocs[0] < s.live/2 && t.mode.percent(s.live) < DefaultGCPercent:
		// The percent stays for the idle period (releasedAt makes the one change):
		// the live heap moves by a few percent from one collection to the next.
		t.idle, t.percent = true, t.mode.percent(s.live)
		release = s.free >= releaseMin && s.allocs-t.released >= max(2*s.live, releaseBurst)
	}
	return t.percent, release
}

// releasedAt records a release and returns the idle percent for the live heap its
// collection measured (the entry's sample may still count a burst's garbage).
func (t *tuner) releasedAt(s heapStats) int {
	t.released = s.allocs
	if t.idle {
		t.percent = t.mode.percent(s.live)
	}
	return t.percent
}

// percent is the idle mode's GC percent for a live heap: Percent, or more to allow
// HeadroomMin, never more than DefaultGCPercent.
func (i Idle) percent(live uint64) int {
	if live == 0 {
		return DefaultGCPercent
	}
	p := max(i.Percent, int((i.HeadroomMin*100+live-1)/live))
	return min(p, DefaultGCPercent)
}

// Tune switches the collector between its busy and idle modes (see tuner) every
// Interval until ctx is done. Reading the runtime's metrics is cheap; the percent is
// set only when it changes, and debug.FreeOSMemory (one collection and a scavenge)
// runs once per entry into the idle mode. Go's scavenger alone keeps up to a tenth
// more than the heap's goal resident: after 10,000 Services were assigned that was
// some 30 MiB the process no longer needed.
func Tune(ctx context.Context, mode Idle) {
	tune(ctx, mode, Interval, readHeapStats, debug.SetGCPercent, freeOSMemory)
}

func tune(ctx context.Context, mode Idle, interval time.Duration, read func() heapStats, setPercent func(int) int, free func()) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	t := newTuner(mode)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s := read()
		before := t.percent
		percent, release := t.next(s)
		if percent != before {
			setPercent(percent)
			logger.V(1).Info("Garbage collector mode changed", "idle", t.idle, "gcPercent", percent, "liveBytes", s.live, "freeBytes", s.free)
		}
		if release {
			free()
			after := read()
			logger.V(1).Info("Returned free heap memory to the OS", "freeBytesBefore", s.free, "freeBytesAfter", after.free, "liveBytes", after.live)
			if p := t.releasedAt(after); p != percent {
				setPercent(p)
			}
		}
	}
}

// freeOSMemory is debug.FreeOSMemory (a variable for the tests' sake).
var freeOSMemory = debug.FreeOSMemory

var heapMetrics = []string{"/gc/heap/allocs:bytes", "/memory/classes/heap/free:bytes", "/gc/heap/live:bytes"}

func readHeapStats() heapStats {
	samples := make([]metrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	v := func(i int) uint64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return samples[i].Value.Uint64()
	}
	return heapStats{allocs: v(0), free: v(1), live: v(2)}
}
