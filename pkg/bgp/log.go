package bgp

import (
	"slices"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"k8s.io/klog/v2"
)

// klogAdapter routes GoBGP's logs into a klog.Logger: errors as errors,
// warnings at V(0), info at V(2), debug at V(5). Field names are GoBGP's ("Topic",
// "Key" = peer address, "State", ...), sorted for stable output.
type klogAdapter struct {
	l klog.Logger
	// connErrs, when set, receives GoBGP's "failed to connect" (a debug message) for
	// the peers it is watching, so a session that never comes up can say why at the
	// default log level (see diagnose.go).
	connErrs *connErrors
}

var _ gobgplog.Logger = klogAdapter{}

func fieldsKV(f gobgplog.Fields) []any {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	kv := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		kv = append(kv, k, f[k])
	}
	return kv
}

func (a klogAdapter) Panic(msg string, f gobgplog.Fields) {
	a.l.Error(nil, msg, fieldsKV(f)...)
	panic(msg)
}

func (a klogAdapter) Fatal(msg string, f gobgplog.Fields) {
	// GoBGP calls Fatal for unrecoverable internal states; exiting the whole CCM
	// from a library is not ours to decide, so log loudly and panic like Panic.
	a.l.Error(nil, "fatal: "+msg, fieldsKV(f)...)
	panic(msg)
}

func (a klogAdapter) Error(msg string, f gobgplog.Fields) { a.l.Error(nil, msg, fieldsKV(f)...) }
func (a klogAdapter) Warn(msg string, f gobgplog.Fields)  { a.l.Info(msg, fieldsKV(f)...) }
func (a klogAdapter) Info(msg string, f gobgplog.Fields)  { a.l.V(2).Info(msg, fieldsKV(f)...) }
func (a klogAdapter) Debug(msg string, f gobgplog.Fields) {
	if msg == "failed to connect" && a.connErrs != nil {
		a.connErrs.record(f["Key"], f["Error"])
	}
	if v := a.l.V(5); v.Enabled() {
		v.Info(msg, fieldsKV(f)...)
	}
}

// SetLevel is ignored: verbosity is klog's -v.
func (a klogAdapter) SetLevel(gobgplog.LogLevel) {}

// GetLevel reports what klog's verbosity lets through, so GoBGP skips building
// debug messages nobody sees.
func (a klogAdapter) GetLevel() gobgplog.LogLevel {
	switch {
	case a.l.V(5).Enabled(), a.connErrs != nil && a.connErrs.watching():
		return gobgplog.DebugLevel
	case a.l.V(2).Enabled():
		return gobgplog.InfoLevel
	default:
		return gobgplog.WarnLevel
	}
}
