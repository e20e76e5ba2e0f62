package redfish

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentClients runs clients that log in, read and reset, and log
// out, while another goroutine flips faults and power; run it with -race.
func TestConcurrentClients(t *testing.T) {
	const workers, rounds = 8, 25
	b := startBMC(t, Options{MaxSessions: workers, TransitionDelay: time.Millisecond})
	c := client(t, b)
	var logins atomic.Int64

	stop := make(chan struct{})
	var flipper sync.WaitGroup
	flipper.Add(1)
	go func() {
		defer flipper.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				b.SetLatency(0)
				b.SetMalformed(false)
				return
			default:
			}
			b.SetLatency(time.Duration(i%2) * time.Millisecond)
			b.SetMalformed(i%5 == 0)
			b.SetPowerState([]PowerState{PowerOn, PowerOff}[i%2])
			_ = b.PowerState()
			_ = b.Requests()
			_ = b.ActiveSessions()
			time.Sleep(time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				for range rounds {
					ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
					resp, _, err := doCtx(ctx, c, b.URL()+sessionsPath, http.MethodPost,
						map[string]string{"UserName": b.Username(), "Password": b.Password()})
					if err != nil {
						cancel()
						return err
					}
					if resp.StatusCode != http.StatusCreated {
						cancel()
						return fmt.Errorf("worker %d: login %d", w, resp.StatusCode)
					}
					logins.Add(1)
					tok, loc := resp.Header.Get("X-Auth-Token"), resp.Header.Get("Location")
					for _, rq := range []struct {
						method, path string
						body         any
					}{
						{http.MethodGet, b.SystemPath(), nil},
						{http.MethodPost, b.SystemPath() + "/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "PushPowerButton"}},
						{http.MethodGet, sessionsPath, nil},
						{http.MethodDelete, loc, nil},
					} {
						resp, _, err := doCtx(ctx, c, b.URL()+rq.path, rq.method, rq.body, token(tok))
						if err != nil {
							cancel()
							return err
						}
						if resp.StatusCode >= 300 {
							cancel()
							return fmt.Errorf("worker %d: %s %s: %d", w, rq.method, rq.path, resp.StatusCode)
						}
					}
					cancel()
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(stop)
	flipper.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if b.ActiveSessions() != 0 || int64(b.SessionsCreated()) != logins.Load() || int64(b.SessionsDeleted()) != logins.Load() {
		t.Fatalf("active %d created %d deleted %d logins %d", b.ActiveSessions(), b.SessionsCreated(), b.SessionsDeleted(), logins.Load())
	}
	if n := b.RequestCount(http.MethodPost, sessionsPath); n != workers*rounds {
		t.Fatalf("login requests %d", n)
	}
}

// TestCloseLeavesNoGoroutine starts a BMC, drives it through normal, delayed
// and hung requests, closes it, and checks that the goroutine count returns
// to where it was (the deadline only detects a leak that never resolves).
func TestCloseLeavesNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()

	b := NewBMC(Options{TransitionDelay: time.Hour})
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	c := b.Client()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	for _, rq := range []struct{ method, path string }{
		{http.MethodGet, "/redfish/v1/"},
		{http.MethodGet, b.SystemPath()},
		{http.MethodPost, b.SystemPath() + "/Actions/ComputerSystem.Reset"},
	} {
		if _, _, err := doCtx(ctx, c, b.URL()+rq.path, rq.method, map[string]string{"ResetType": "ForceOff"}, basic(b.Username(), b.Password())); err != nil {
			t.Fatal(err)
		}
	}
	// A request the client abandons during a long latency.
	b.SetLatency(time.Hour)
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, _, _ = doCtx(short, c, b.URL()+"/redfish/v1/", http.MethodGet, nil)
	cancelShort()
	b.SetLatency(0)
	// A request still hanging when the BMC closes.
	b.SetHang(true)
	hung := make(chan error, 1)
	go func() {
		_, _, err := doCtx(ctx, c, b.URL()+"/redfish/v1/", http.MethodGet, nil)
		hung <- err
	}()
	waitFor(t, func() bool { return b.RequestCount(http.MethodGet, "/redfish/v1") == 3 })

	b.Close()
	if err := <-hung; err == nil {
		t.Fatal("hung request answered")
	}
	c.CloseIdleConnections()

	deadline := time.Now().Add(hangLimit)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after Close\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}
