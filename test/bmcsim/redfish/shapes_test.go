package redfish

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// memberIDs returns the @odata.id of every member of a collection body, and
// fails the test if Members@odata.count disagrees.
func memberIDs(t *testing.T, data []byte) []string {
	t.Helper()
	m := decode(t, data)
	members, _ := m["Members"].([]any)
	var ids []string
	for _, x := range members {
		id, _ := x.(map[string]any)["@odata.id"].(string)
		ids = append(ids, id)
	}
	if n, _ := m["Members@odata.count"].(float64); int(n) != len(ids) {
		t.Fatalf("Members@odata.count %v for %d members: %s", m["Members@odata.count"], len(ids), data)
	}
	return ids
}

// linkIDs returns the @odata.id of every link in m["Links"][key].
func linkIDs(m map[string]any, key string) []string {
	l, _ := m["Links"].(map[string]any)
	arr, _ := l[key].([]any)
	var ids []string
	for _, x := range arr {
		id, _ := x.(map[string]any)["@odata.id"].(string)
		ids = append(ids, id)
	}
	return ids
}

// getJSON GETs path with Basic auth, requires 200 and decodes the body.
func getJSON(t *testing.T, c *http.Client, b *BMC, path string) map[string]any {
	t.Helper()
	resp, data := do(t, c, b, http.MethodGet, path, nil, basic(b.Username(), b.Password()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, data)
	}
	return decode(t, data)
}

// loginBody is a session login request with the given password.
func loginBody(b *BMC, pass string) map[string]string {
	return map[string]string{"UserName": b.Username(), "Password": pass}
}

func TestSeveralSystems(t *testing.T) {
	specs := []SystemSpec{
		{ID: "529QB9450R6", Name: "Bladed System", UUID: "00000001-0000-4000-8000-000000000000"},
		{ID: "529QB9451R6", Name: "Bladed System", UUID: "00000002-0000-4000-8000-000000000000", InitialPowerState: PowerOff},
		{ID: "Partition2", UUID: "00000003-0000-4000-8000-000000000000", OmitPowerState: true},
	}
	b := startBMC(t, Options{Systems: specs})
	c := client(t, b)

	resp, data := do(t, c, b, http.MethodGet, systemsPath, nil, basic(b.Username(), b.Password()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET Systems: %d %s", resp.StatusCode, data)
	}
	var want []string
	for _, s := range specs {
		want = append(want, systemsPath+"/"+s.ID)
	}
	if got := memberIDs(t, data); !slices.Equal(got, want) {
		t.Fatalf("Systems members %v, want %v", got, want)
	}
	if b.SystemPath() != want[0] {
		t.Errorf("SystemPath() = %q, want the first system %q", b.SystemPath(), want[0])
	}

	for _, tc := range []struct {
		id, name, uuid string
		power          PowerState // "": no PowerState property
	}{
		{"529QB9450R6", "Bladed System", specs[0].UUID, PowerOn},
		{"529QB9451R6", "Bladed System", specs[1].UUID, PowerOff},
		{"Partition2", "System", specs[2].UUID, ""},
	} {
		t.Run(tc.id, func(t *testing.T) {
			sys := getJSON(t, c, b, systemsPath+"/"+tc.id)
			if sys["@odata.id"] != systemsPath+"/"+tc.id || sys["Id"] != tc.id || sys["Name"] != tc.name || sys["UUID"] != tc.uuid {
				t.Errorf("identity: %v", sys)
			}
			ps, has := sys["PowerState"]
			if tc.power == "" && has {
				t.Errorf("PowerState %v present, want none", ps)
			}
			if tc.power != "" && ps != string(tc.power) {
				t.Errorf("PowerState %v, want %s", ps, tc.power)
			}
			act, _ := sys["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)
			if act["target"] != systemsPath+"/"+tc.id+"/Actions/ComputerSystem.Reset" {
				t.Errorf("reset target %v", act["target"])
			}
		})
	}
	if sn0, sn1 := getJSON(t, c, b, want[0])["SerialNumber"], getJSON(t, c, b, want[1])["SerialNumber"]; sn0 == sn1 {
		t.Errorf("two systems share SerialNumber %v", sn0)
	}

	// The Manager and the Chassis link every system.
	if got := linkIDs(getJSON(t, c, b, managersPath+"/"+DefaultManagerID), "ManagerForServers"); !slices.Equal(got, want) {
		t.Errorf("ManagerForServers %v", got)
	}
	if got := linkIDs(getJSON(t, c, b, chassisPath+"/"+DefaultChassisID), "ComputerSystems"); !slices.Equal(got, want) {
		t.Errorf("Chassis ComputerSystems %v", got)
	}

	// A Reset acts on the system of its URL only.
	resp, data = do(t, c, b, http.MethodPost, want[1]+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "On"}, basic(b.Username(), b.Password()))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset %s: %d %s", want[1], resp.StatusCode, data)
	}
	if s := getJSON(t, c, b, want[1])["PowerState"]; s != "On" || b.SystemPowerState(specs[1].ID) != PowerOn {
		t.Errorf("after On: GET %v, SystemPowerState %s", s, b.SystemPowerState(specs[1].ID))
	}
	resp, data = do(t, c, b, http.MethodPost, want[2]+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, basic(b.Username(), b.Password()))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset %s: %d %s", want[2], resp.StatusCode, data)
	}
	if _, has := getJSON(t, c, b, want[2])["PowerState"]; has || b.SystemPowerState(specs[2].ID) != PowerOff {
		t.Errorf("system without PowerState: shown %v, SystemPowerState %s", has, b.SystemPowerState(specs[2].ID))
	}
	if b.PowerState() != PowerOn || !slices.Equal(b.Resets(), []ResetType{ResetOn, ResetForceOff}) ||
		!slices.Equal(b.SystemResets(specs[1].ID), []ResetType{ResetOn}) || len(b.SystemResets(specs[0].ID)) != 0 {
		t.Errorf("first system %s, Resets %v, per system %v %v", b.PowerState(), b.Resets(), b.SystemResets(specs[0].ID), b.SystemResets(specs[1].ID))
	}

	// SetPowerState and PowerState concern the first system; the per-system
	// ones, theirs.
	b.SetPowerState(PowerOff)
	b.SetSystemPowerState(specs[1].ID, PoweringOff)
	for id, ws := range map[string]PowerState{specs[0].ID: PowerOff, specs[1].ID: PoweringOff, specs[2].ID: PowerOff} {
		if got := b.SystemPowerState(id); got != ws {
			t.Errorf("SystemPowerState(%s) = %s, want %s", id, got, ws)
		}
	}
	if b.PowerState() != PowerOff || getJSON(t, c, b, want[0])["PowerState"] != "Off" {
		t.Errorf("first system after SetPowerState(Off): %s", b.PowerState())
	}

	for _, p := range []string{systemsPath + "/1", systemsPath + "/Nope/Actions/ComputerSystem.Reset", want[0] + "/OperatingSystem"} {
		if resp, _ := do(t, c, b, http.MethodGet, p, nil, basic(b.Username(), b.Password())); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
}

func TestSeveralSystemsETagsAreIndependent(t *testing.T) {
	b := startBMC(t, Options{StrictETag: true, Systems: []SystemSpec{{ID: "A"}, {ID: "B"}}})
	c := client(t, b)
	auth := basic(b.Username(), b.Password())
	resp, _ := do(t, c, b, http.MethodGet, systemsPath+"/A", nil, auth)
	etagA := resp.Header.Get("ETag")
	resp, _ = do(t, c, b, http.MethodGet, systemsPath+"/B", nil, auth)
	if etagA == "" || etagA == resp.Header.Get("ETag") {
		t.Fatalf("ETags %q and %q", etagA, resp.Header.Get("ETag"))
	}
	// Changing B leaves A's ETag valid.
	b.SetSystemPowerState("B", PowerOff)
	resp, data := do(t, c, b, http.MethodPost, systemsPath+"/A/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, auth, header("If-Match", etagA))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset A with its ETag: %d %s", resp.StatusCode, data)
	}
}

func TestSystemsPanics(t *testing.T) {
	for name, o := range map[string]Options{
		"empty ID":             {Systems: []SystemSpec{{ID: "A"}, {}}},
		"duplicate ID":         {Systems: []SystemSpec{{ID: "A"}, {ID: "A"}}},
		"slash in ID":          {Systems: []SystemSpec{{ID: "A/B"}}},
		"bad power state":      {Systems: []SystemSpec{{ID: "A", InitialPowerState: PoweringOff}}},
		"Systems and SystemID": {SystemID: "1", Systems: []SystemSpec{{ID: "A"}}},
		"Systems and power":    {InitialPowerState: PowerOff, Systems: []SystemSpec{{ID: "A"}}},
		"no way to log in":     {NoSessionService: true, DisableBasicAuth: true},
		"negative lockout":     {LockoutAfter: -1},
		"negative duration":    {LockoutAfter: 3, LockoutDuration: -time.Second},
		"negative login delay": {LoginDelay: -time.Second},
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
	b := NewBMC(Options{})
	for name, f := range map[string]func(){
		"SystemPowerState":    func() { b.SystemPowerState("nope") },
		"SetSystemPowerState": func() { b.SetSystemPowerState("nope", PowerOff) },
		"SystemResets":        func() { b.SystemResets("nope") },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic for an unknown system")
				}
			}()
			f()
		})
	}
}

func TestModernSchema(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		modern bool
	}{
		{"default", Options{}, false},
		{"modern", Options{ModernSchema: true}, true},
		{"modern, several systems", Options{ModernSchema: true, Systems: []SystemSpec{{ID: "A"}, {ID: "B", InitialPowerState: PowerOff}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBMC(t, tc.opts)
			c := client(t, b)
			for _, sp := range b.systems {
				path := sp.path()
				sys := getJSON(t, c, b, path)
				if !tc.modern {
					for _, k := range []string{"OperatingSystem", "BootProgress", "PowerMode", "Composition"} {
						if v, has := sys[k]; has {
							t.Errorf("%s: %s = %v without ModernSchema", path, k, v)
						}
					}
					if sys["@odata.type"] != "#ComputerSystem.v1_20_0.ComputerSystem" {
						t.Errorf("@odata.type %v", sys["@odata.type"])
					}
					if resp, _ := do(t, c, b, http.MethodGet, path+"/OperatingSystem", nil, basic(b.Username(), b.Password())); resp.StatusCode != http.StatusNotFound {
						t.Errorf("OperatingSystem: %d, want 404", resp.StatusCode)
					}
					continue
				}
				if sys["@odata.type"] != "#ComputerSystem.v1_22_0.ComputerSystem" {
					t.Errorf("@odata.type %v", sys["@odata.type"])
				}
				osPath := odataID(sys, "OperatingSystem")
				if osPath != path+"/OperatingSystem" {
					t.Errorf("OperatingSystem %#v, want an object linking %s/OperatingSystem", sys["OperatingSystem"], path)
				}
				for _, k := range []string{"BootProgress", "Composition"} {
					if _, ok := sys[k].(map[string]any); !ok {
						t.Errorf("%s = %#v, want an object", k, sys[k])
					}
				}
				if _, ok := sys["PowerMode"].(string); !ok {
					t.Errorf("PowerMode = %#v, want a string", sys["PowerMode"])
				}
				wantProgress := "None"
				if b.SystemPowerState(sp.id) == PowerOn {
					wantProgress = "OSRunning"
				}
				if got := sys["BootProgress"].(map[string]any)["LastState"]; got != wantProgress {
					t.Errorf("BootProgress.LastState %v, want %s", got, wantProgress)
				}
				if os := getJSON(t, c, b, osPath); os["@odata.id"] != osPath || !strings.HasPrefix(os["@odata.type"].(string), "#OperatingSystem.") {
					t.Errorf("OperatingSystem resource: %v", os)
				}
			}
		})
	}
}

func TestNoSessionService(t *testing.T) {
	b := startBMC(t, Options{NoSessionService: true})
	c := client(t, b)

	resp, data := do(t, c, b, http.MethodGet, rootPath+"/", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("ServiceRoot: %d %s", resp.StatusCode, data)
	}
	root := decode(t, data)
	if _, has := root["SessionService"]; has {
		t.Errorf("ServiceRoot has SessionService: %s", data)
	}
	links, _ := root["Links"].(map[string]any)
	if _, has := links["Sessions"]; has || odataID(links, "ManagerProvidingService") == "" {
		t.Errorf("ServiceRoot Links: %v", links)
	}

	auth := basic(b.Username(), b.Password())
	for _, tc := range []struct {
		method, path string
		body         any
		opts         []reqOpt
		status       int
	}{
		{http.MethodPost, sessionsPath, loginBody(b, b.Password()), nil, http.StatusNotFound},
		{http.MethodPost, sessionsPath + "/", loginBody(b, b.Password()), nil, http.StatusNotFound},
		{http.MethodPost, sessionsPath, loginBody(b, b.Password()), []reqOpt{auth}, http.StatusNotFound},
		{http.MethodGet, sessionService, nil, []reqOpt{auth}, http.StatusNotFound},
		{http.MethodGet, sessionsPath, nil, []reqOpt{auth}, http.StatusNotFound},
		{http.MethodGet, sessionsPath + "/1", nil, []reqOpt{auth}, http.StatusNotFound},
		{http.MethodDelete, sessionsPath + "/1", nil, []reqOpt{auth}, http.StatusNotFound},
		{http.MethodGet, sessionService, nil, nil, http.StatusUnauthorized}, // like any path without credentials
		{http.MethodGet, b.SystemPath(), nil, []reqOpt{auth}, http.StatusOK},
		{http.MethodGet, b.SystemPath(), nil, []reqOpt{token("0123")}, http.StatusUnauthorized},
	} {
		resp, data := do(t, c, b, tc.method, tc.path, tc.body, tc.opts...)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, resp.StatusCode, data, tc.status)
		}
		if resp.StatusCode == http.StatusNotFound && !strings.HasSuffix(errorCode(t, data), ".ResourceNotFound") {
			t.Errorf("%s %s: %s", tc.method, tc.path, data)
		}
		if resp.Header.Get("X-Auth-Token") != "" {
			t.Errorf("%s %s returned a token", tc.method, tc.path)
		}
	}
	if b.SessionsCreated() != 0 || b.ActiveSessions() != 0 {
		t.Fatalf("sessions created %d active %d", b.SessionsCreated(), b.ActiveSessions())
	}
}

func TestLockout(t *testing.T) {
	const after, dur = 3, 5 * time.Minute
	type step struct {
		login bool // session login, else a Basic GET of the system
		right bool // the right password
		want  int  // status
	}
	wrongBasic := step{false, false, http.StatusUnauthorized}
	wrongLogin := step{true, false, http.StatusUnauthorized}
	for _, tc := range []struct {
		name      string
		opts      Options
		steps     []step
		advance   time.Duration // between consecutive failures
		locked    bool
		failures  int
		unlocksAt time.Duration // after the last failure; 0: not checked
	}{
		{"basic and login failures add up", Options{LockoutAfter: after, LockoutDuration: dur},
			[]step{wrongBasic, wrongLogin, wrongBasic}, 0, true, 3, dur},
		{"under the limit", Options{LockoutAfter: after, LockoutDuration: dur},
			[]step{wrongLogin, wrongLogin}, 0, false, 2, 0},
		{"failures too far apart", Options{LockoutAfter: after, LockoutDuration: dur},
			[]step{wrongLogin, wrongLogin, wrongLogin, wrongBasic}, dur, false, 4, 0},
		{"success does not clear", Options{LockoutAfter: after, LockoutDuration: dur},
			[]step{wrongLogin, {true, true, http.StatusCreated}, wrongBasic, {false, true, http.StatusOK}, wrongBasic}, 0, true, 3, dur},
		{"default duration", Options{LockoutAfter: 1},
			[]step{wrongBasic}, 0, true, 1, DefaultLockoutDuration},
		{"never", Options{},
			[]step{wrongBasic, wrongBasic, wrongLogin, wrongLogin, wrongLogin}, 0, false, 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			b := startBMCWithClock(t, tc.opts, clk)
			c := client(t, b)
			attempt := func(s step) int {
				t.Helper()
				pass := "wrong"
				if s.right {
					pass = b.Password()
				}
				if s.login {
					resp, _ := do(t, c, b, http.MethodPost, sessionsPath, loginBody(b, pass))
					logoutAtEnd(t, c, b, resp)
					return resp.StatusCode
				}
				resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, basic(b.Username(), pass))
				return resp.StatusCode
			}
			tok, _ := login(t, c, b) // a session opened before any failure
			// Before the logouts at the end: the lockout is over, so they are taken.
			defer clk.Advance(time.Hour)
			for i, s := range tc.steps {
				if i > 0 && !s.right {
					clk.Advance(tc.advance)
				}
				if got := attempt(s); got != s.want {
					t.Fatalf("step %d %+v: %d, want %d", i, s, got, s.want)
				}
			}
			if b.LockedOut() != tc.locked || b.FailedLogins() != tc.failures {
				t.Fatalf("LockedOut %v FailedLogins %d, want %v %d", b.LockedOut(), b.FailedLogins(), tc.locked, tc.failures)
			}
			if !tc.locked {
				if got := attempt(step{true, true, 0}); got != http.StatusCreated {
					t.Fatalf("right login: %d", got)
				}
				return
			}

			// Locked out: every authentication is refused, uncounted; the
			// public resources still answer.
			refused := []struct {
				name string
				do   func() (*http.Response, []byte)
			}{
				{"right Basic", func() (*http.Response, []byte) {
					return do(t, c, b, http.MethodGet, b.SystemPath(), nil, basic(b.Username(), b.Password()))
				}},
				{"right login", func() (*http.Response, []byte) {
					return do(t, c, b, http.MethodPost, sessionsPath, loginBody(b, b.Password()))
				}},
				{"wrong login", func() (*http.Response, []byte) {
					return do(t, c, b, http.MethodPost, sessionsPath, loginBody(b, "wrong"))
				}},
				{"valid token", func() (*http.Response, []byte) {
					return do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok))
				}},
			}
			check := func(when string) {
				t.Helper()
				for _, r := range refused {
					resp, data := r.do()
					if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("X-Auth-Token") != "" {
						t.Fatalf("%s, %s: %d %s", when, r.name, resp.StatusCode, data)
					}
				}
				if resp, _ := do(t, c, b, http.MethodGet, rootPath, nil); resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: ServiceRoot %d", when, resp.StatusCode)
				}
				if !b.LockedOut() || b.FailedLogins() != tc.failures {
					t.Fatalf("%s: LockedOut %v FailedLogins %d", when, b.LockedOut(), b.FailedLogins())
				}
			}
			check("at once")
			clk.Advance(tc.unlocksAt - time.Second)
			check("just before the end")
			clk.Advance(time.Second)
			if b.LockedOut() {
				t.Fatal("still locked out after the duration")
			}
			if got := attempt(step{false, true, 0}); got != http.StatusOK {
				t.Fatalf("right Basic after the lockout: %d", got)
			}
			if resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, token(tok)); resp.StatusCode != http.StatusOK {
				t.Fatalf("session after the lockout: %d", resp.StatusCode)
			}
			// The count restarted: one more failure locks only if one is the limit.
			if got := attempt(wrongBasic); got != http.StatusUnauthorized || b.LockedOut() != (tc.opts.LockoutAfter == 1) {
				t.Fatalf("failure after the lockout: %d, locked %v", got, b.LockedOut())
			}
		})
	}
}

func TestLoginDelay(t *testing.T) {
	t.Run("answers late", func(t *testing.T) {
		const d = 30 * time.Millisecond
		b := startBMC(t, Options{LoginDelay: d})
		c := client(t, b)
		start := time.Now()
		login(t, c, b)
		if el := time.Since(start); el < d {
			t.Fatalf("login answered after %v, before the %v delay", el, d)
		}
		// A refused login is not delayed past the client's patience.
		ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
		defer cancel()
		resp, _, err := doCtx(ctx, c, b.URL()+sessionsPath, http.MethodPost, loginBody(b, "wrong"))
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong login: %v %v", resp, err)
		}
	})

	t.Run("session exists during the wait; Close ends it", func(t *testing.T) {
		b := startBMC(t, Options{LoginDelay: time.Hour})
		c := client(t, b)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
			defer cancel()
			_, _, err := doCtx(ctx, c, b.URL()+sessionsPath, http.MethodPost, loginBody(b, b.Password()))
			done <- err
		}()
		waitFor(t, func() bool { return b.SessionsCreated() == 1 })
		if b.ActiveSessions() != 1 {
			t.Fatalf("active sessions %d during the wait", b.ActiveSessions())
		}
		// Other requests are not delayed.
		if got := powerState(t, c, b); got != PowerOn {
			t.Fatalf("power %s", got)
		}
		b.Close()
		if err := <-done; err == nil {
			t.Fatal("the delayed login was answered")
		}
		b.ExpireSessions() // the client never learned of its session: only a BMC reset ends it
	})

	t.Run("client gives up", func(t *testing.T) {
		b := startBMC(t, Options{LoginDelay: time.Hour})
		c := client(t, b)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, _, err := doCtx(ctx, c, b.URL()+sessionsPath, http.MethodPost, loginBody(b, b.Password()))
			done <- err
		}()
		waitFor(t, func() bool { return b.SessionsCreated() == 1 })
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want canceled", err)
		}
		if b.ActiveSessions() != 1 {
			t.Fatalf("the abandoned login's session is gone: %d active", b.ActiveSessions())
		}
		if err := b.CheckSessions(); err == nil {
			t.Error("CheckSessions does not report the abandoned login's session")
		}
		b.ExpireSessions() // the client never learned of its session: only a BMC reset ends it
	})
}

func TestRequestLogCoversShapes(t *testing.T) {
	b := startBMC(t, Options{NoSessionService: true, ModernSchema: true, Systems: []SystemSpec{{ID: "A"}, {ID: "B"}}})
	c := client(t, b)
	auth := basic(b.Username(), b.Password())
	do(t, c, b, http.MethodPost, sessionsPath, loginBody(b, b.Password()))
	do(t, c, b, http.MethodGet, systemsPath+"/B/OperatingSystem/", nil, auth)
	do(t, c, b, http.MethodPost, systemsPath+"/B/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, auth)
	want := []Request{
		{http.MethodPost, sessionsPath, "none"},
		{http.MethodGet, systemsPath + "/B/OperatingSystem/", "basic"},
		{http.MethodPost, systemsPath + "/B/Actions/ComputerSystem.Reset", "basic"},
	}
	if got := b.RequestLog(); !slices.Equal(got, want) {
		t.Fatalf("RequestLog %+v, want %+v", got, want)
	}
	if n := b.RequestCount(http.MethodGet, systemsPath+"/B/OperatingSystem"); n != 1 {
		t.Fatalf("RequestCount %d", n)
	}
}

// TestSessionTimeoutInSchemaRange: DMTF's Redfish Service Validator found
// SessionService.SessionTimeout 0 (the schema's range is 30 to 86400 seconds).
func TestSessionTimeoutInSchemaRange(t *testing.T) {
	for d, want := range map[time.Duration]int{0: 86400, time.Second: 30, 30 * time.Minute: 1800, 48 * time.Hour: 86400} {
		if got := advertisedSessionTimeout(d); got != want {
			t.Errorf("SessionTimeout %v advertised as %d, want %d", d, got, want)
		}
	}
}
