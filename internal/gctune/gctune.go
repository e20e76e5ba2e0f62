// Package gctune sets this binary's garbage-collector default and adapts it to what
// the process is doing.
//
// Go's default (GOGC=100) lets the heap grow to twice the live data before a
// collection. The CCM's live data is mostly its informer caches, which are large and
// stable, so that growth is most of its memory: with 5000 Nodes and 10,000 Services
// about 60 MB live became over 200 MiB resident. GOGC=50 bounds the heap at one and
// a half times the live data through bursts, for a small CPU cost (collections of a
// mostly unchanging heap are cheap), and Tune lowers it further while the process is
// idle, returning the free heap to the OS as it does. An operator's GOGC or
// GOMEMLIMIT always wins (and turns both off).
package gctune

import (
	"os"
	"runtime/debug"
)

// DefaultGCPercent is the GOGC this binary runs with unless GOGC is set.
const DefaultGCPercent = 50

// Apply sets DefaultGCPercent unless the environment sets GOGC or GOMEMLIMIT, and
// returns the GC percent in effect.
func Apply() int {
	return apply(os.LookupEnv)
}

// Operator reports whether the environment sets GOGC or GOMEMLIMIT: the operator
// tunes the collector, and this package changes nothing (Tune is not started).
func Operator() bool {
	return operator(os.LookupEnv)
}

func operator(lookup func(string) (string, bool)) bool {
	_, gogc := lookup("GOGC")
	_, limit := lookup("GOMEMLIMIT")
	return gogc || limit
}

func apply(lookup func(string) (string, bool)) int {
	if operator(lookup) {
		current := debug.SetGCPercent(100)
		debug.SetGCPercent(current)
		return current
	}
	debug.SetGCPercent(DefaultGCPercent)
	return DefaultGCPercent
}
