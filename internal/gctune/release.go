package gctune

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"k8s.io/klog/v2"
)

// ReleaseInterval is how often Release looks at the heap.
const ReleaseInterval = 15 * time.Second

// releaseMin is the least free heap worth a forced collection to give back.
const releaseMin = 16 << 20

// heapStats are the runtime's numbers Release decides on.
type heapStats struct {
	allocs uint64 // bytes allocated since the process started
	free   uint64 // heap pages free and still held from the OS
	live   uint64 // heap bytes live at the last collection
}

// shouldRelease reports whether returning the heap's free memory to the OS is worth
// a forced collection: at least releaseMin free and a quarter of the live heap; the
// process quiet (the last interval allocated under a quarter of what is free: one
// that keeps allocating would fault the pages straight back in); and a burst behind
// it since the last release (burst bytes allocated, at least twice the live heap
// and releaseBurstMin), so a quiet process is not collected again after each of its
// own collections.
func shouldRelease(s heapStats, allocated, burst uint64) bool {
	return s.free >= releaseMin && s.free >= s.live/4 && allocated < s.free/4 &&
		burst >= releaseBurstMin && burst >= 2*s.live
}

// releaseBurstMin is the least allocation since the last release that counts as a
// burst.
const releaseBurstMin = 64 << 20

// Release returns the heap's free memory to the OS once the process has gone quiet
// after a burst, until ctx is done. Go's own scavenger keeps up to a tenth more than
// the heap's goal (with GOGC=50, one and a half times the live data) resident for
// good; after 10,000 Services were assigned that was some 30 MiB the process no
// longer needed. Every ReleaseInterval it reads the runtime's metrics (cheap) and,
// when shouldRelease, calls debug.FreeOSMemory (one collection and a scavenge; at
// most once per burst).
func Release(ctx context.Context) {
	release(ctx, ReleaseInterval, readHeapStats, freeOSMemory)
}

func release(ctx context.Context, interval time.Duration, read func() heapStats, free func()) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last := read()
	var released uint64 // allocs at the last release
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s := read()
		if shouldRelease(s, s.allocs-last.allocs, s.allocs-released) {
			free()
			after := read()
			logger.V(4).Info("Returned free heap memory to the OS", "freeBefore", s.free, "freeAfter", after.free, "live", after.live)
			s, released = after, after.allocs
		}
		last = s
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
