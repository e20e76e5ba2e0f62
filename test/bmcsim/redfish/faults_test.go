package redfish

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestLatency(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)

	const d = 30 * time.Millisecond
	b.SetLatency(d)
	start := time.Now()
	if resp, _ := do(t, c, b, http.MethodGet, rootPath+"/", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if el := time.Since(start); el < d {
		t.Fatalf("answered after %v, before the %v latency", el, d)
	}

	// A latency longer than the client's patience: the client gives up and
	// the handler returns (Close would otherwise wait for it).
	b.SetLatency(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := doCtx(ctx, c, b.URL()+rootPath+"/", http.MethodGet, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}

	b.SetLatency(0)
	if resp, _ := do(t, c, b, http.MethodGet, rootPath+"/", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d after SetLatency(0)", resp.StatusCode)
	}
}

func TestHang(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	b.SetHang(true)

	// The client's context ends the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := doCtx(ctx, c, b.URL()+b.SystemPath(), http.MethodGet, nil, basic(b.Username(), b.Password())); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}

	// A request held by the hang completes once the hang ends.
	type result struct {
		status int
		err    error
	}
	got := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
		defer cancel()
		resp, _, err := doCtx(ctx, c, b.URL()+b.SystemPath(), http.MethodGet, nil, basic(b.Username(), b.Password()))
		if err != nil {
			got <- result{err: err}
			return
		}
		got <- result{status: resp.StatusCode}
	}()
	waitFor(t, func() bool { return b.RequestCount(http.MethodGet, b.SystemPath()) == 2 })
	select {
	case r := <-got:
		t.Fatalf("answered while hanging: %+v", r)
	default:
	}
	b.SetHang(false)
	if r := <-got; r.err != nil || r.status != http.StatusOK {
		t.Fatalf("after SetHang(false): %+v", r)
	}
}

func TestHangEndsOnClose(t *testing.T) {
	b := NewBMC(Options{})
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	c := b.Client()
	defer c.CloseIdleConnections()
	b.SetHang(true)
	errc := make(chan error, 1)
	go func() {
		_, _, err := doCtx(context.Background(), c, b.URL()+rootPath+"/", http.MethodGet, nil)
		errc <- err
	}()
	waitFor(t, func() bool { return b.RequestCount(http.MethodGet, rootPath) == 1 })

	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(hangLimit):
		t.Fatal("Close hung on a hanging request")
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("the hung request got an answer")
		}
	case <-time.After(hangLimit):
		t.Fatal("the hung request never ended")
	}
}

func TestFailStatus(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	auth := basic(b.Username(), b.Password())
	for _, tc := range []struct {
		status int
		code   string
	}{
		{http.StatusInternalServerError, ".InternalError"},
		{http.StatusUnauthorized, ".NoValidSession"},
		{http.StatusServiceUnavailable, ".ServiceTemporarilyUnavailable"},
		{http.StatusBadGateway, ".GeneralError"},
	} {
		b.SetFailStatus(tc.status)
		for _, path := range []string{"/redfish", rootPath + "/", b.SystemPath()} {
			resp, data := do(t, c, b, http.MethodGet, path, nil, auth)
			if resp.StatusCode != tc.status || !strings.HasSuffix(errorCode(t, data), tc.code) {
				t.Errorf("%d on %s: got %d %s", tc.status, path, resp.StatusCode, data)
			}
			if tc.status == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
		}
		resp, _ := do(t, c, b, http.MethodPost, sessionsPath, map[string]string{"UserName": b.Username(), "Password": b.Password()})
		logoutAtEnd(t, c, b, resp)
		if resp.StatusCode != tc.status {
			t.Errorf("login under %d: %d", tc.status, resp.StatusCode)
		}
		resetSystem(t, c, b, ResetForceOff)
	}
	if b.SessionsCreated() != 0 || b.PowerState() != PowerOn {
		t.Fatalf("requests failed by injection had effects: sessions %d power %s", b.SessionsCreated(), b.PowerState())
	}
	b.SetFailStatus(0)
	if got := powerState(t, c, b); got != PowerOn {
		t.Fatalf("after SetFailStatus(0): %s", got)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("SetFailStatus(42) did not panic")
			}
		}()
		b.SetFailStatus(42)
	}()
}

func TestMalformed(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	b.SetMalformed(true)
	for _, path := range []string{"/redfish", rootPath + "/", systemsPath, b.SystemPath(), "/redfish/v1/Nope"} {
		resp, data := do(t, c, b, http.MethodGet, path, nil, basic(b.Username(), b.Password()))
		if json.Valid(data) || len(data) == 0 {
			t.Errorf("GET %s: %d, body is valid JSON: %s", path, resp.StatusCode, data)
		}
	}
	// A login still happens: the headers are intact, the body is not.
	resp, data := do(t, c, b, http.MethodPost, sessionsPath, map[string]string{"UserName": b.Username(), "Password": b.Password()})
	logoutAtEnd(t, c, b, resp)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Auth-Token") == "" || json.Valid(data) {
		t.Fatalf("login: %d %v %s", resp.StatusCode, resp.Header, data)
	}
	if b.ActiveSessions() != 1 {
		t.Fatalf("active %d", b.ActiveSessions())
	}
	b.SetMalformed(false)
	if got := powerState(t, c, b); got != PowerOn {
		t.Fatalf("after SetMalformed(false): %s", got)
	}
}

func TestSessionExhausted(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	b.SetSessionExhausted(true)
	resp, data := do(t, c, b, http.MethodPost, sessionsPath, map[string]string{"UserName": b.Username(), "Password": b.Password()})
	logoutAtEnd(t, c, b, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.HasSuffix(errorCode(t, data), ".SessionLimitExceeded") {
		t.Fatalf("login while exhausted: %d %s", resp.StatusCode, data)
	}
	if b.ActiveSessions() != 0 || b.SessionsCreated() != 0 {
		t.Fatal("a session was created while exhausted")
	}
	b.SetSessionExhausted(false)
	login(t, c, b)
}

// waitFor polls cond until it holds; the deadline is a hang detector.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
