package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// defaultAgentServingAddress is where agent mode serves /metrics, /healthz and /readyz
// unless --serving-address says otherwise: loopback, plain HTTP, as kube-proxy serves
// its metrics (127.0.0.1:10249). 10268 is used by no Kubernetes component.
const defaultAgentServingAddress = "127.0.0.1:10268"

// agentServer serves agent mode's endpoints over plain HTTP:
//   - /metrics: the process's metrics (BGP sessions and paths, BFD sessions, routes,
//     Go runtime and process), in the Prometheus text format;
//   - /healthz: 200 while the process serves;
//   - /readyz: 200 once ready says so (the informers synced and everything applied:
//     BGP sessions up with this host's paths at the routers), else 503 with the reason;
//   - /debug/pprof/: Go's profiler, only with --profiling (off by default: a profile
//     costs CPU, and the command line shows file paths).
//
// It carries no secret and changes nothing, so it has no authentication: keep it on
// loopback, or on an address only the metrics scrapers reach.
type agentServer struct {
	ln    net.Listener
	ready func(context.Context) (bool, string)
	// profiling serves /debug/pprof/ too.
	profiling bool
}

// listenAgent binds addr at startup, so a taken or invalid address fails the process
// with its cause rather than later. An empty addr serves nothing (nil, nil).
func listenAgent(addr string, ready func(context.Context) (bool, string)) (*agentServer, error) {
	if addr == "" {
		return nil, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("--serving-address=%s: %w (want HOST:PORT such as %s, or empty to serve nothing)", addr, err, defaultAgentServingAddress)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--serving-address=%s: %w (another process serves there? choose another port, or empty to serve nothing)", addr, err)
	}
	return &agentServer{ln: ln, ready: ready}, nil
}

// Addr is the bound address (the port chosen when addr asked for port 0).
func (s *agentServer) Addr() net.Addr { return s.ln.Addr() }

func (s *agentServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if ok, why := s.ready(ctx); !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	if s.profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Serve serves until ctx is done, then closes the listener (requests in flight get
// a second to finish).
func (s *agentServer) Serve(ctx context.Context) {
	logger := klog.FromContext(ctx)
	srv := &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("Serving /metrics, /healthz and /readyz", "address", s.ln.Addr().String())
	if err := srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error(err, "Serving /metrics, /healthz and /readyz stopped", "address", s.ln.Addr().String())
	}
}
