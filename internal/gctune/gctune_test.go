package gctune

import (
	"runtime/debug"
	"testing"
)

func TestApply(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)

	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	if got := apply(env(nil)); got != DefaultGCPercent {
		t.Errorf("no GOGC: percent %d, want %d", got, DefaultGCPercent)
	}
	if now := debug.SetGCPercent(DefaultGCPercent); now != DefaultGCPercent {
		t.Errorf("runtime GC percent %d after apply, want %d", now, DefaultGCPercent)
	}

	debug.SetGCPercent(200) // as if GOGC=200 had been read at startup
	if got := apply(env(map[string]string{"GOGC": "200"})); got != 200 {
		t.Errorf("GOGC set: apply reports %d, want the operator's 200", got)
	}
	if now := debug.SetGCPercent(200); now != 200 {
		t.Errorf("GOGC set: runtime percent changed to %d", now)
	}
	debug.SetGCPercent(100)
	if got := apply(env(map[string]string{"GOMEMLIMIT": "1GiB"})); got != 100 {
		t.Errorf("GOMEMLIMIT set: apply changed the percent to %d", got)
	}
}

func TestOperator(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	if operator(env(nil)) {
		t.Error("no GOGC, no GOMEMLIMIT: operator() = true")
	}
	if !operator(env(map[string]string{"GOGC": "100"})) || !operator(env(map[string]string{"GOMEMLIMIT": "1GiB"})) {
		t.Error("GOGC or GOMEMLIMIT set: operator() = false")
	}
}
