package bgp

import (
	"context"
	"log/slog"
	"slices"

	"k8s.io/klog/v2"
)

// newSlogLogger routes GoBGP's slog records into a klog.Logger: errors as errors,
// warnings at V(0), info at V(2), debug at V(5). Attribute keys are GoBGP's
// ("Topic", "Key" = peer, "State", ...), in the order GoBGP gives them.
func newSlogLogger(l klog.Logger) *slog.Logger {
	return slog.New(slogHandler{l: l})
}

type slogHandler struct {
	l      klog.Logger
	attrs  []any
	prefix string // group prefix for attribute keys
}

var _ slog.Handler = slogHandler{}

// verbosity is the klog level a slog level is logged at (-1: as an error).
func verbosity(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return -1
	case l >= slog.LevelWarn:
		return 0
	case l >= slog.LevelInfo:
		return 2
	default:
		return 5
	}
}

func (h slogHandler) Enabled(_ context.Context, l slog.Level) bool {
	v := verbosity(l)
	return v <= 0 || h.l.V(v).Enabled()
}

func (h slogHandler) Handle(_ context.Context, r slog.Record) error {
	kv := slices.Clone(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		kv = append(kv, h.prefix+a.Key, a.Value.Resolve().Any())
		return true
	})
	switch v := verbosity(r.Level); {
	case v < 0:
		h.l.Error(nil, r.Message, kv...)
	default:
		h.l.V(v).Info(r.Message, kv...)
	}
	return nil
}

func (h slogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := h
	n.attrs = slices.Clone(h.attrs)
	for _, a := range as {
		n.attrs = append(n.attrs, h.prefix+a.Key, a.Value.Resolve().Any())
	}
	return n
}

func (h slogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := h
	n.prefix = h.prefix + name + "."
	return n
}
