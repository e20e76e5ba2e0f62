package redfish

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestServiceRoot(t *testing.T) {
	b := startBMC(t, Options{ServiceUUID: "8d4c1e2a-0000-4000-8000-000000000001", RedfishVersion: "1.15.1"})
	c := client(t, b)

	resp, data := do(t, c, b, http.MethodGet, "/redfish", nil)
	if resp.StatusCode != http.StatusOK || decode(t, data)["v1"] != "/redfish/v1/" {
		t.Fatalf("GET /redfish: %d %s", resp.StatusCode, data)
	}

	for _, path := range []string{"/redfish/v1/", "/redfish/v1"} {
		resp, data := do(t, c, b, http.MethodGet, path, nil) // no credentials: the root is public
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, data)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("Content-Type %q", ct)
		}
		if v := resp.Header.Get("OData-Version"); v != "4.0" {
			t.Errorf("OData-Version %q", v)
		}
		root := decode(t, data)
		for key, want := range map[string]string{
			"Systems":        "/redfish/v1/Systems",
			"SessionService": "/redfish/v1/SessionService",
			"Managers":       "/redfish/v1/Managers",
			"Chassis":        "/redfish/v1/Chassis",
		} {
			if got := odataID(root, key); got != want {
				t.Errorf("%s = %q, want %q", key, got, want)
			}
		}
		if got := odataID(root["Links"].(map[string]any), "Sessions"); got != sessionsPath {
			t.Errorf("Links.Sessions = %q", got)
		}
		if root["UUID"] != "8d4c1e2a-0000-4000-8000-000000000001" || root["RedfishVersion"] != "1.15.1" {
			t.Errorf("UUID/RedfishVersion: %v %v", root["UUID"], root["RedfishVersion"])
		}
	}
	if n := b.RequestCount(http.MethodGet, "/redfish/v1/"); n != 2 {
		t.Errorf("RequestCount(GET /redfish/v1/) = %d, want 2 (both spellings)", n)
	}
}

func TestResourcesAndCollections(t *testing.T) {
	b := startBMC(t, Options{SystemID: "System.Embedded.1", ManagerID: "iDRAC.Embedded.1", ChassisID: "System.Embedded.1",
		SystemUUID: "4c4c4544-0000-4000-8000-000000000002", Manufacturer: "Dell Inc."})
	c := client(t, b)
	auth := basic(b.Username(), b.Password())

	for coll, member := range map[string]string{
		"/redfish/v1/Systems":  "/redfish/v1/Systems/System.Embedded.1",
		"/redfish/v1/Managers": "/redfish/v1/Managers/iDRAC.Embedded.1",
		"/redfish/v1/Chassis":  "/redfish/v1/Chassis/System.Embedded.1",
	} {
		resp, data := do(t, c, b, http.MethodGet, coll, nil, auth)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", coll, resp.StatusCode, data)
		}
		m := decode(t, data)
		members, _ := m["Members"].([]any)
		if len(members) != 1 || members[0].(map[string]any)["@odata.id"] != member || m["Members@odata.count"] != float64(1) {
			t.Fatalf("%s members: %s", coll, data)
		}
		resp, data = do(t, c, b, http.MethodGet, member+"/", nil, auth)
		if resp.StatusCode != http.StatusOK || decode(t, data)["@odata.id"] != member {
			t.Fatalf("GET %s: %d %s", member, resp.StatusCode, data)
		}
	}

	resp, data := do(t, c, b, http.MethodGet, b.SystemPath(), nil, auth)
	sys := decode(t, data)
	if sys["UUID"] != "4c4c4544-0000-4000-8000-000000000002" || sys["PowerState"] != "On" || sys["Manufacturer"] != "Dell Inc." {
		t.Errorf("system: %s", data)
	}
	if resp.Header.Get("ETag") == "" {
		t.Error("system has no ETag")
	}
	act := sys["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)
	if act["target"] != b.SystemPath()+"/Actions/ComputerSystem.Reset" {
		t.Errorf("reset target %v", act["target"])
	}
	var allowed []string
	for _, v := range act["ResetType@Redfish.AllowableValues"].([]any) {
		allowed = append(allowed, v.(string))
	}
	for _, rt := range AllResetTypes {
		if !slices.Contains(allowed, string(rt)) {
			t.Errorf("AllowableValues %v lacks %s", allowed, rt)
		}
	}

	resp, data = do(t, c, b, http.MethodHead, b.SystemPath(), nil, auth)
	if resp.StatusCode != http.StatusOK || len(data) != 0 || resp.Header.Get("ETag") == "" {
		t.Errorf("HEAD system: %d %v %q", resp.StatusCode, resp.Header, data)
	}
	resp, data = do(t, c, b, http.MethodGet, "/redfish/v1/Nope", nil, auth)
	if resp.StatusCode != http.StatusNotFound || !strings.HasSuffix(errorCode(t, data), ".ResourceNotFound") {
		t.Errorf("unknown resource: %d %s", resp.StatusCode, data)
	}
	resp, data = do(t, c, b, http.MethodPatch, b.SystemPath(), map[string]any{}, auth)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") == "" {
		t.Errorf("PATCH system: %d %v %s", resp.StatusCode, resp.Header, data)
	}
	resp, data = do(t, c, b, http.MethodGet, b.SystemPath()+"/Actions/ComputerSystem.Reset", nil, auth)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET reset action: %d %s", resp.StatusCode, data)
	}
}

func TestLoginLogout(t *testing.T) {
	b := startBMC(t, Options{Username: "root", Password: "calvin"})
	c := client(t, b)

	resp, data := do(t, c, b, http.MethodPost, sessionsPath, map[string]string{"UserName": "root", "Password": "calvin"})
	logoutAtEnd(t, c, b, resp)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("login: %d %s", resp.StatusCode, data)
	}
	tok, loc := resp.Header.Get("X-Auth-Token"), resp.Header.Get("Location")
	if tok == "" || !strings.HasPrefix(loc, sessionsPath+"/") {
		t.Fatalf("login headers: %v", resp.Header)
	}
	s := decode(t, data)
	if s["@odata.id"] != loc || s["UserName"] != "root" || s["Password"] != nil {
		t.Errorf("session body: %s", data)
	}
	if b.ActiveSessions() != 1 || b.SessionsCreated() != 1 {
		t.Fatalf("after login: active %d created %d", b.ActiveSessions(), b.SessionsCreated())
	}

	// The token authenticates.
	if resp, data := do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok)); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET system with token: %d %s", resp.StatusCode, data)
	}
	resp, data = do(t, c, b, http.MethodGet, sessionsPath, nil, token(tok))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(data), loc) {
		t.Fatalf("session list: %d %s", resp.StatusCode, data)
	}
	if resp, data := do(t, c, b, http.MethodGet, loc, nil, token(tok)); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET own session: %d %s", resp.StatusCode, data)
	}
	if resp, data := do(t, c, b, http.MethodGet, sessionService, nil, token(tok)); resp.StatusCode != http.StatusOK ||
		odataID(decode(t, data), "Sessions") != sessionsPath {
		t.Fatalf("GET SessionService: %d %s", resp.StatusCode, data)
	}

	// Logout.
	if resp, data := do(t, c, b, http.MethodDelete, loc, nil, token(tok)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE session: %d %s", resp.StatusCode, data)
	}
	if b.ActiveSessions() != 0 || b.SessionsDeleted() != 1 {
		t.Fatalf("after logout: active %d deleted %d", b.ActiveSessions(), b.SessionsDeleted())
	}
	resp, data = do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok))
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasSuffix(errorCode(t, data), ".NoValidSession") {
		t.Fatalf("GET with deleted token: %d %s", resp.StatusCode, data)
	}
	if resp, data := do(t, c, b, http.MethodDelete, loc, nil, basic("root", "calvin")); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("DELETE deleted session: %d %s", resp.StatusCode, data)
	}
}

func TestLoginRefused(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	for _, tc := range []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"bad password", map[string]string{"UserName": b.Username(), "Password": "wrong"}, http.StatusUnauthorized, ".ResourceAtUriUnauthorized"},
		{"bad user", map[string]string{"UserName": "nobody", "Password": b.Password()}, http.StatusUnauthorized, ".ResourceAtUriUnauthorized"},
		{"no password", map[string]string{"UserName": b.Username()}, http.StatusBadRequest, ".PropertyMissing"},
		{"not JSON", "{", http.StatusBadRequest, ".MalformedJSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, data := do(t, c, b, http.MethodPost, sessionsPath, tc.body)
			logoutAtEnd(t, c, b, resp)
			if resp.StatusCode != tc.status || !strings.HasSuffix(errorCode(t, data), tc.code) {
				t.Fatalf("got %d %s, want %d %s", resp.StatusCode, data, tc.status, tc.code)
			}
			if resp.Header.Get("X-Auth-Token") != "" {
				t.Fatal("refused login returned a token")
			}
		})
	}
	if b.ActiveSessions() != 0 || b.SessionsCreated() != 0 || b.LoginFailures() != 2 {
		t.Fatalf("active %d created %d failures %d", b.ActiveSessions(), b.SessionsCreated(), b.LoginFailures())
	}
}

func TestSessionLimit(t *testing.T) {
	b := startBMC(t, Options{MaxSessions: 2})
	c := client(t, b)
	_, loc1 := login(t, c, b)
	login(t, c, b)

	resp, data := do(t, c, b, http.MethodPost, sessionsPath, map[string]string{"UserName": b.Username(), "Password": b.Password()})
	logoutAtEnd(t, c, b, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.HasSuffix(errorCode(t, data), ".SessionLimitExceeded") {
		t.Fatalf("login over the limit: %d %s", resp.StatusCode, data)
	}
	if b.ActiveSessions() != 2 || b.SessionsCreated() != 2 {
		t.Fatalf("active %d created %d", b.ActiveSessions(), b.SessionsCreated())
	}
	// Bad credentials are refused as such even when the BMC is full.
	if resp, _ := do(t, c, b, http.MethodPost, sessionsPath, map[string]string{"UserName": "x", "Password": "y"}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad login when full: %d", resp.StatusCode)
	}
	// Basic auth still works when sessions are exhausted.
	if got := powerState(t, c, b); got != PowerOn {
		t.Fatalf("power %s", got)
	}
	// Freeing one lets the next login in.
	if resp, _ := do(t, c, b, http.MethodDelete, loc1, nil, basic(b.Username(), b.Password())); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	login(t, c, b)
	if b.ActiveSessions() != 2 || b.SessionsCreated() != 3 {
		t.Fatalf("active %d created %d", b.ActiveSessions(), b.SessionsCreated())
	}
}

func TestSessionLimitOptions(t *testing.T) {
	t.Run("unlimited", func(t *testing.T) {
		b := startBMC(t, Options{MaxSessions: -1})
		c := client(t, b)
		for range 20 {
			login(t, c, b)
		}
		if b.ActiveSessions() != 20 {
			t.Fatalf("active %d", b.ActiveSessions())
		}
	})
	t.Run("custom status", func(t *testing.T) {
		b := startBMC(t, Options{MaxSessions: 1, SessionLimitStatus: http.StatusBadRequest})
		c := client(t, b)
		login(t, c, b)
		resp, data := do(t, c, b, http.MethodPost, sessionsPath, map[string]string{"UserName": b.Username(), "Password": b.Password()})
		logoutAtEnd(t, c, b, resp)
		if resp.StatusCode != http.StatusBadRequest || !strings.HasSuffix(errorCode(t, data), ".SessionLimitExceeded") {
			t.Fatalf("%d %s", resp.StatusCode, data)
		}
	})
	t.Run("default is 4", func(t *testing.T) {
		b := startBMC(t, Options{})
		c := client(t, b)
		for range DefaultMaxSessions {
			login(t, c, b)
		}
		if resp, _ := do(t, c, b, http.MethodPost, sessionsPath, map[string]string{"UserName": b.Username(), "Password": b.Password()}); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("5th login: %d", resp.StatusCode)
		}
	})
}

func TestSessionExpiry(t *testing.T) {
	clk := newFakeClock()
	b := startBMCWithClock(t, Options{SessionTimeout: time.Minute, MaxSessions: 1}, clk)
	c := client(t, b)
	tok, _ := login(t, c, b)

	clk.Advance(50 * time.Second)
	if resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok)); resp.StatusCode != http.StatusOK {
		t.Fatalf("within timeout: %d", resp.StatusCode)
	}
	clk.Advance(50 * time.Second) // 50s since last use: still alive
	if resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok)); resp.StatusCode != http.StatusOK {
		t.Fatalf("use renews the session: %d", resp.StatusCode)
	}
	clk.Advance(61 * time.Second)
	if b.ActiveSessions() != 0 {
		t.Fatalf("idle session still active")
	}
	if resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok)); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("expired token: %d", resp.StatusCode)
	}
	login(t, c, b) // the expired session no longer counts against the limit
}

func TestExpireSessionsAndManagerReset(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	tok, _ := login(t, c, b)
	b.ExpireSessions()
	if resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok)); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("after ExpireSessions: %d", resp.StatusCode)
	}

	tok, _ = login(t, c, b)
	resp, data := do(t, c, b, http.MethodPost, "/redfish/v1/Managers/BMC/Actions/Manager.Reset", map[string]string{"ResetType": "GracefulRestart"}, token(tok))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("Manager.Reset: %d %s", resp.StatusCode, data)
	}
	if b.ActiveSessions() != 0 || b.PowerState() != PowerOn {
		t.Fatalf("after BMC reset: sessions %d power %s", b.ActiveSessions(), b.PowerState())
	}
}

func TestBasicAuth(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	if got := powerState(t, c, b); got != PowerOn {
		t.Fatalf("power %s", got)
	}
	if b.SessionsCreated() != 0 {
		t.Fatal("Basic auth created a session")
	}
	for name, opts := range map[string][]reqOpt{
		"no credentials": nil,
		"bad password":   {basic(b.Username(), "nope")},
		"bad user":       {basic("nobody", b.Password())},
		"bad token":      {token("0123")},
		"bad scheme":     {header("Authorization", "Bearer "+b.Password())},
	} {
		resp, data := do(t, c, b, http.MethodGet, b.SystemPath(), nil, opts...)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasSuffix(errorCode(t, data), ".NoValidSession") ||
			!strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("%s: %d %v %s", name, resp.StatusCode, resp.Header, data)
		}
	}
	log := b.RequestLog()
	if log[0].Auth != "basic" {
		t.Errorf("RequestLog[0].Auth = %q", log[0].Auth)
	}
}

func TestEveryProtectedResourceNeedsAuth(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	tok, loc := login(t, c, b)
	for _, rq := range []struct{ method, path string }{
		{http.MethodGet, sessionService},
		{http.MethodGet, sessionsPath},
		{http.MethodGet, loc},
		{http.MethodDelete, loc},
		{http.MethodGet, systemsPath},
		{http.MethodGet, b.SystemPath()},
		{http.MethodPost, b.SystemPath() + "/Actions/ComputerSystem.Reset"},
		{http.MethodGet, managersPath},
		{http.MethodGet, managersPath + "/BMC"},
		{http.MethodPost, managersPath + "/BMC/Actions/Manager.Reset"},
		{http.MethodGet, chassisPath},
		{http.MethodGet, chassisPath + "/1"},
		{http.MethodGet, "/redfish/v1/Nope"},
	} {
		resp, _ := do(t, c, b, rq.method, rq.path, map[string]string{"ResetType": "ForceOff"})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without credentials: %d", rq.method, rq.path, resp.StatusCode)
		}
	}
	if b.PowerState() != PowerOn || b.ActiveSessions() != 1 || len(b.Resets()) != 0 {
		t.Fatalf("an unauthenticated request had an effect: power %s sessions %d", b.PowerState(), b.ActiveSessions())
	}
	if resp, _ := do(t, c, b, http.MethodGet, loc, nil, token(tok)); resp.StatusCode != http.StatusOK {
		t.Fatalf("session: %d", resp.StatusCode)
	}
}

func TestDisableBasicAuth(t *testing.T) {
	b := startBMC(t, Options{DisableBasicAuth: true})
	c := client(t, b)
	if resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, basic(b.Username(), b.Password())); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("Basic auth accepted: %d", resp.StatusCode)
	}
	tok, _ := login(t, c, b)
	if resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok)); resp.StatusCode != http.StatusOK {
		t.Fatalf("token refused: %d", resp.StatusCode)
	}
}

func TestRequestCounters(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	tok, loc := login(t, c, b)
	do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok))
	do(t, c, b, http.MethodGet, b.SystemPath()+"/", nil, token(tok))
	do(t, c, b, http.MethodDelete, loc, nil, token(tok))

	want := map[string]int{
		"POST " + sessionsPath:  1,
		"GET " + b.SystemPath(): 2,
		"DELETE " + loc:         1,
	}
	got := b.Requests()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Requests()[%q] = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	log := b.RequestLog()
	if len(log) != 4 || log[0].Auth != "none" || log[1].Auth != "session" || log[2].Path != b.SystemPath()+"/" {
		t.Errorf("RequestLog: %+v", log)
	}
	b.ResetRequests()
	if len(b.Requests()) != 0 || len(b.RequestLog()) != 0 {
		t.Error("ResetRequests did not clear")
	}
}

func TestStartErrors(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:0", "example.com:0", "nonsense"} {
		b := NewBMC(Options{Addr: addr, PlainHTTP: true})
		if err := b.Start(); err == nil {
			b.Close()
			t.Errorf("Start(%q) succeeded", addr)
		}
	}
	b := NewBMC(Options{Addr: "localhost:0", PlainHTTP: true})
	if err := b.Start(); err != nil {
		t.Fatalf("Start(localhost:0): %v", err)
	}
	if !strings.HasPrefix(b.URL(), "http://127.0.0.1:") || b.Host() != "127.0.0.1" || b.Port() == "" {
		t.Errorf("URL %q host %q port %q", b.URL(), b.Host(), b.Port())
	}
	if err := b.Start(); err == nil {
		t.Error("second Start succeeded")
	}
	b.Close()
	b.Close() // idempotent
	if err := b.Start(); err == nil {
		t.Error("Start after Close succeeded")
	}
	NewBMC(Options{}).Close() // Close without Start
}

func TestNewBMCPanicsOnBadOptions(t *testing.T) {
	for name, o := range map[string]Options{
		"power state":  {InitialPowerState: PoweringOn},
		"reset type":   {AllowedResetTypes: []ResetType{"Explode"}},
		"limit status": {SessionLimitStatus: 42},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			NewBMC(o)
		})
	}
}
