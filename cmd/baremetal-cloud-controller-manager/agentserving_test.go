package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestAgentServerProfiling: with --profiling, Go's profiler answers.
func TestAgentServerProfiling(t *testing.T) {
	srv, err := listenAgent("127.0.0.1:0", func(context.Context) (bool, string) { return true, "" })
	if err != nil {
		t.Fatal(err)
	}
	srv.profiling = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Serve(ctx)
	resp, err := http.Get("http://" + srv.Addr().String() + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "heap profile:") {
		t.Errorf("/debug/pprof/heap: %d %.300q, want a heap profile", resp.StatusCode, b)
	}
}

func TestAgentServerEndpoints(t *testing.T) {
	var ready atomic.Bool
	srv, err := listenAgent("127.0.0.1:0", func(context.Context) (bool, string) {
		if !ready.Load() {
			return false, "BGP sessions not ready: 192.0.2.1 Active"
		}
		return true, ""
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { srv.Serve(ctx); close(served) }()
	base := "http://" + srv.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := get("/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "192.0.2.1 Active") {
		t.Errorf("/readyz while not ready: %d %q, want 503 with the reason", code, body)
	}
	ready.Store(true)
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz once ready: %d %q", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "\ngo_goroutines ") || !strings.Contains(body, "\nprocess_resident_memory_bytes ") {
		t.Errorf("/metrics: %d, want the process's metrics in:\n%.2000s", code, body)
	}
	if code, _ := get("/nothing"); code != http.StatusNotFound {
		t.Errorf("/nothing: %d, want 404", code)
	}
	if code, _ := get("/debug/pprof/cmdline"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/cmdline without --profiling: %d, want 404", code)
	}

	cancel()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context was done")
	}
	if c, err := net.Dial("tcp", srv.Addr().String()); err == nil {
		c.Close()
		t.Error("the listener is still open after Serve returned")
	}
}

func TestListenAgentErrors(t *testing.T) {
	if s, err := listenAgent("", nil); s != nil || err != nil {
		t.Errorf("empty address: %v, %v; want nothing served and no error", s, err)
	}
	if _, err := listenAgent("10268", nil); err == nil || !strings.Contains(err.Error(), "--serving-address=10268") || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Errorf("a port alone: %v, want an error naming the flag and HOST:PORT", err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if _, err := listenAgent(taken.Addr().String(), nil); err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), "another port") {
		t.Errorf("a taken port: %v, want the cause and what to do", err)
	}
}

// TestCtlName: the binary is baremetal-ccmctl under that name (the image's link) or
// the kubectl plugin's, and the CCM otherwise.
func TestCtlName(t *testing.T) {
	for argv0, want := range map[string]bool{
		"/usr/bin/baremetal-ccmctl": true, "baremetal-ccmctl": true, "/usr/local/bin/kubectl-baremetal": true,
		"/usr/bin/baremetal-cloud-controller-manager": false, "baremetal-ccmctl.old": false, "": false,
	} {
		if got := ctlName(argv0); got != want {
			t.Errorf("ctlName(%q) = %v, want %v", argv0, got, want)
		}
	}
}
