package redfish

import (
	"net/http"
	"testing"
)

// TestLoginShapes: a login may answer without X-Auth-Token or without Location; the
// session exists either way, is named by the body's @odata.id, and ends with a DELETE
// (with Basic auth when the client got no token).
func TestLoginShapes(t *testing.T) {
	for _, tc := range []struct {
		name            string
		opts            Options
		wantTok, wantLo bool
	}{
		{"both", Options{}, true, true},
		{"no token", Options{LoginOmitsToken: true}, false, true},
		{"no Location", Options{LoginOmitsLocation: true}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBMC(t, tc.opts)
			c := client(t, b)
			resp, data := do(t, c, b, http.MethodPost, sessionsPath, loginBody(b, b.Password()))
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("login: %d %s", resp.StatusCode, data)
			}
			tok, loc := resp.Header.Get("X-Auth-Token"), resp.Header.Get("Location")
			if (tok != "") != tc.wantTok || (loc != "") != tc.wantLo {
				t.Fatalf("X-Auth-Token %q, Location %q; want present %v, %v", tok, loc, tc.wantTok, tc.wantLo)
			}
			id, _ := decode(t, data)["@odata.id"].(string)
			if id != sessionsPath+"/1" || (loc != "" && loc != id) {
				t.Fatalf("body @odata.id %q, Location %q; want both %s/1", id, loc, sessionsPath)
			}
			if b.ActiveSessions() != 1 {
				t.Fatalf("active sessions %d, want 1", b.ActiveSessions())
			}
			if err := b.CheckSessions(); err == nil {
				t.Fatal("CheckSessions: nil with a session open")
			}
			auth := basic(b.Username(), b.Password())
			if tok != "" {
				auth = token(tok)
			}
			if resp, _ := do(t, c, b, http.MethodDelete, id, nil, auth); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("DELETE %s: %d", id, resp.StatusCode)
			}
			if err := b.CheckSessions(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRootLinks: the service root can link resources on another host, verbatim.
func TestRootLinks(t *testing.T) {
	const other = "@127.0.0.2:1/redfish/v1/SessionService/Sessions"
	b := startBMC(t, Options{RootLinks: map[string]string{"Links.Sessions": other, "Systems": "//127.0.0.2:1/redfish/v1/Systems"}})
	c := client(t, b)
	_, data := do(t, c, b, http.MethodGet, rootPath+"/", nil)
	root := decode(t, data)
	links, _ := root["Links"].(map[string]any)
	if got := odataID(links, "Sessions"); got != other {
		t.Errorf("Links.Sessions = %q, want %q", got, other)
	}
	if got := odataID(root, "Systems"); got != "//127.0.0.2:1/redfish/v1/Systems" {
		t.Errorf("Systems = %q", got)
	}
	if got := odataID(root, "SessionService"); got != sessionService {
		t.Errorf("SessionService = %q, want unchanged", got)
	}
}

// TestRejectSessionTokens: the next n requests with a valid token answer 401 while
// the session stays; Basic auth is not affected; n < 0 rejects until turned off.
func TestRejectSessionTokens(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	tok, _ := login(t, c, b)
	b.SetRejectSessionTokens(1)
	if resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok)); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("first request after SetRejectSessionTokens(1): %d, want 401", resp.StatusCode)
	}
	if resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok)); resp.StatusCode != http.StatusOK {
		t.Fatalf("second request: %d, want 200", resp.StatusCode)
	}
	b.SetRejectSessionTokens(-1)
	for range 3 {
		if resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok)); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("with SetRejectSessionTokens(-1): %d, want 401", resp.StatusCode)
		}
	}
	if got := powerState(t, c, b); got != PowerOn {
		t.Fatalf("Basic auth while tokens are rejected: %s", got)
	}
	if b.ActiveSessions() != 1 {
		t.Fatalf("the session is gone: %d active", b.ActiveSessions())
	}
	b.SetRejectSessionTokens(0)
}
