package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// hangLimit bounds every wait in these tests: it only detects a hang, it
// never measures speed.
const hangLimit = 20 * time.Second

// startBMC starts a BMC and closes it when the test ends.
// Every session a test creates must have ended when it ends (checkSessions).
func startBMC(t *testing.T, opts Options) *BMC {
	t.Helper()
	return StartForTest(t, opts)
}

// startBMCWithClock is startBMC with a fake clock.
func startBMCWithClock(t *testing.T, opts Options, c *fakeClock) *BMC {
	t.Helper()
	b := NewBMC(opts)
	b.now = c.Now
	if err := b.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(b.Close)
	t.Cleanup(func() {
		if err := b.CheckSessions(); err != nil {
			t.Errorf("session leak: %v", err)
		}
	})
	return b
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// client returns a verifying client for b, its idle connections closed at
// the end of the test.
func client(t *testing.T, b *BMC) *http.Client {
	t.Helper()
	c := b.Client()
	t.Cleanup(c.CloseIdleConnections)
	return c
}

type reqOpt func(*http.Request)

func basic(user, pass string) reqOpt {
	return func(r *http.Request) { r.SetBasicAuth(user, pass) }
}

func token(tok string) reqOpt {
	return func(r *http.Request) { r.Header.Set("X-Auth-Token", tok) }
}

func header(k, v string) reqOpt {
	return func(r *http.Request) { r.Header.Set(k, v) }
}

// do sends one request (bounded by hangLimit) and returns the response with
// its body read.
func do(t *testing.T, c *http.Client, b *BMC, method, path string, body any, opts ...reqOpt) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	resp, data, err := doCtx(ctx, c, b.URL()+path, method, body, opts...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp, data
}

func doCtx(ctx context.Context, c *http.Client, url, method string, body any, opts ...reqOpt) (*http.Response, []byte, error) {
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(v)
	default:
		j, err := json.Marshal(v)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, nil, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, o := range opts {
		o(req)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, data, err
}

// decode unmarshals a JSON object, failing the test on invalid JSON.
func decode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("invalid JSON %q: %v", data, err)
	}
	return m
}

// odataID returns m[key]["@odata.id"].
func odataID(m map[string]any, key string) string {
	l, _ := m[key].(map[string]any)
	s, _ := l["@odata.id"].(string)
	return s
}

// errorCode returns the Redfish error code of an error body.
func errorCode(t *testing.T, data []byte) string {
	t.Helper()
	e, _ := decode(t, data)["error"].(map[string]any)
	code, _ := e["code"].(string)
	if code == "" {
		t.Fatalf("not a Redfish error body: %s", data)
	}
	return code
}

// login creates a session and returns its token and Location.
func login(t *testing.T, c *http.Client, b *BMC) (tok, loc string) {
	t.Helper()
	resp, data := do(t, c, b, http.MethodPost, sessionsPath, map[string]string{"UserName": b.Username(), "Password": b.Password()})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("login: %d %s", resp.StatusCode, data)
	}
	tok, loc = resp.Header.Get("X-Auth-Token"), resp.Header.Get("Location")
	if tok == "" || loc == "" {
		t.Fatalf("login: no X-Auth-Token or Location: %v", resp.Header)
	}
	logoutAtEnd(t, c, b, resp)
	return tok, loc
}

// logoutAtEnd deletes the session a login answer created when the test ends
// (before the session check of startBMC), as a well-behaved client does: with
// its token, else with Basic auth. A session already ended is fine.
func logoutAtEnd(t *testing.T, c *http.Client, b *BMC, resp *http.Response) {
	t.Helper()
	if resp.StatusCode != http.StatusCreated {
		return
	}
	tok, loc := resp.Header.Get("X-Auth-Token"), resp.Header.Get("Location")
	if loc == "" {
		return
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
		defer cancel()
		r, _, err := doCtx(ctx, c, b.URL()+loc, http.MethodDelete, nil, token(tok))
		if err == nil && r.StatusCode == http.StatusUnauthorized {
			_, _, _ = doCtx(ctx, c, b.URL()+loc, http.MethodDelete, nil, basic(b.Username(), b.Password()))
		}
	})
}

// powerState GETs the ComputerSystem with Basic auth and returns PowerState.
func powerState(t *testing.T, c *http.Client, b *BMC) PowerState {
	t.Helper()
	resp, data := do(t, c, b, http.MethodGet, b.SystemPath(), nil, basic(b.Username(), b.Password()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET system: %d %s", resp.StatusCode, data)
	}
	s, _ := decode(t, data)["PowerState"].(string)
	return PowerState(s)
}

// resetSystem POSTs ComputerSystem.Reset with Basic auth.
func resetSystem(t *testing.T, c *http.Client, b *BMC, rt ResetType, opts ...reqOpt) (*http.Response, []byte) {
	t.Helper()
	opts = append([]reqOpt{basic(b.Username(), b.Password())}, opts...)
	return do(t, c, b, http.MethodPost, b.SystemPath()+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": string(rt)}, opts...)
}
