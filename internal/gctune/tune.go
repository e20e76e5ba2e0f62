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

// IdleGCPercent is the GC percent of the idle mode (before idleHeadroomMin).
const IdleGCPercent = 10

const (
	// idleHeadroomMin is the least heap growth the idle mode allows between two
	// collections: a small process keeps DefaultGCPercent's cheaper pace.
	idleHeadroomMin = 4 << 20
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
// IdleGCPercent, at least idleHeadroomMin of growth, and the free heap returned to
// the OS on entry. An idle CCM holds its informer caches and little else, so what it
// allocates between collections is what it holds above its live data: the idle mode
// trades a few more collections of a mostly unchanging heap (each a few tens of
// milliseconds of CPU) for a quarter of its memory. It ends when the last QuietWindow
// allocated as much as the live heap (twice the entry's threshold, so a steady rate
// near it does not flip the mode), or at once when one Interval did (at least
// busyAllocMin). The free heap is returned on an entry only after a burst since the
// last return (releaseBurst), so a workload that turns busy and quiet every few
// intervals does not force a collection each time.
type tuner struct {
	allocs   []uint64 // the cumulative allocation at the last samples, oldest first
	idle     bool
	percent  int    // in effect
	released uint64 // the cumulative allocation at the last release
}

func newTuner() *tuner { return &tuner{percent: DefaultGCPercent} }

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
	case !t.idle && n == quietSamples && t.allocs[n-1]-t.allocs[0] < s.live/2 && idlePercent(s.live) < DefaultGCPercent:
		// The percent stays for the idle period (releasedAt makes the one change):
		// the live heap moves by a few percent from one collection to the next.
		t.idle, t.percent = true, idlePercent(s.live)
		release = s.free >= releaseMin && s.allocs-t.released >= max(2*s.live, releaseBurst)
	}
	return t.percent, release
}

// releasedAt records a release and returns the idle percent for the live heap its
// collection measured (the entry's sample may still count a burst's garbage).
func (t *tuner) releasedAt(s heapStats) int {
	t.released = s.allocs
	if t.idle {
		t.percent = idlePercent(s.live)
	}
	return t.percent
}

// idlePercent is the idle mode's GC percent for a live heap: IdleGCPercent, or more
// to allow idleHeadroomMin, never more than DefaultGCPercent.
func idlePercent(live uint64) int {
	if live == 0 {
		return DefaultGCPercent
	}
	p := max(IdleGCPercent, int((idleHeadroomMin*100+live-1)/live))
	return min(p, DefaultGCPercent)
}

// Tune switches the collector between its busy and idle modes (see tuner) every
// Interval until ctx is done. Reading the runtime's metrics is cheap; the percent is
// set only when it changes, and debug.FreeOSMemory (one collection and a scavenge)
// runs once per entry into the idle mode. Go's scavenger alone keeps up to a tenth
// more than the heap's goal resident: after 10,000 Services were assigned that was
// some 30 MiB the process no longer needed.
func Tune(ctx context.Context) {
	tune(ctx, Interval, readHeapStats, debug.SetGCPercent, freeOSMemory)
}

func tune(ctx context.Context, interval time.Duration, read func() heapStats, setPercent func(int) int, free func()) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	t := newTuner()
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
