package bmc

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
)

// These tests drive the CCM's Redfish driver (Sessions) against the emulator in the
// shapes real services have: blade enclosures whose systems share one Name, current
// schema versions, systems without PowerState, services without a SessionService.

const (
	blade1UUID = "8d4c1e2a-0000-4000-8000-000000000001"
	blade2UUID = "8d4c1e2a-0000-4000-8000-000000000002"
	blade3UUID = "8d4c1e2a-0000-4000-8000-000000000003"
)

func bladed(t *testing.T, modern bool) *redfish.BMC {
	t.Helper()
	return startRedfish(t, redfish.Options{ModernSchema: modern, Systems: []redfish.SystemSpec{
		{ID: "Blade1", Name: "Bladed System", UUID: blade1UUID, InitialPowerState: redfish.PowerOn},
		{ID: "Blade2", Name: "Bladed System", UUID: blade2UUID, InitialPowerState: redfish.PowerOff},
		{ID: "Blade3", Name: "Bladed System", UUID: blade3UUID, InitialPowerState: redfish.PowerOn},
	}})
}

// readSystemsAnswer reads power once, with Basic auth, from a plain-HTTP Redfish
// service whose Systems collection answers systems, and returns the read's error.
func readSystemsAnswer(ctx context.Context, t *testing.T, systems string) error {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redfish/v1/":
			_, _ = io.WriteString(w, `{"Systems":{"@odata.id":"/redfish/v1/Systems"}}`)
		case "/redfish/v1/Systems":
			_, _ = io.WriteString(w, systems)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	tgt := plainTarget(t, srv.URL, "pw")
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, time.Second)
	_, _, err := readOnce(ctx, t, s, tgt)
	return err
}

// plainTarget is host h1 on the plain-HTTP Redfish service at rawURL (an
// httptest.Server), as user admin with password.
func plainTarget(t *testing.T, rawURL, password string) Target {
	t.Helper()
	u, _ := url.Parse(rawURL)
	port, _ := strconv.Atoi(u.Port())
	return Target{Host: "h1", Protocol: "redfish", Address: "http://" + u.Hostname(), Port: int32(port),
		CredentialsFile: writeCreds(t, "admin", password, 0o600)}
}

func readOnce(ctx context.Context, t *testing.T, s *Sessions, tgt Target) (string, string, error) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return s.ReadPower(cctx, tgt)
}

// TestRedfishSystemChoice: on a service with several systems of one Name the host's
// system is chosen by Id, by path, or by the host's systemUUID (in either SMBIOS byte
// order); without either, or with one that matches nothing, the error says the BMC
// answered and names the systems found and what to set, and nothing is read as a
// power state.
func TestRedfishSystemChoice(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, modern := range []bool{false, true} {
		b := bladed(t, modern)
		s := NewSessions(nil, time.Minute)
		defer s.Close(ctx, 5*time.Second)
		base := redfishTarget(t, b, b.Password())
		for _, tc := range []struct {
			name       string
			system     string
			uuid       string
			wantPower  PowerState
			wantUUID   string
			wantErrHas []string
		}{
			{name: "by Id", system: "Blade2", wantPower: PowerOff, wantUUID: blade2UUID},
			{name: "by path", system: "/redfish/v1/Systems/Blade3", wantPower: PowerOn, wantUUID: blade3UUID},
			{name: "by systemUUID", uuid: blade2UUID, wantPower: PowerOff, wantUUID: blade2UUID},
			{name: "by systemUUID in SMBIOS byte order", uuid: "2a1e4c8d-0000-0040-8000-000000000001", wantPower: PowerOn, wantUUID: blade1UUID},
			{name: "no choice", wantErrHas: []string{"the BMC answered", "3 systems", "Blade1", "Blade2", "Blade3", blade2UUID, "set bmc.system"}},
			{name: "unknown UUID", uuid: "8d4c1e2a-0000-4000-8000-000000000009", wantErrHas: []string{"0 have the host's systemUUID", "Blade3"}},
			{name: "unknown Id", system: "Blade9", wantErrHas: []string{"has no ComputerSystem /redfish/v1/Systems/Blade9", "Blade1", "set bmc.system"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tgt := base
				tgt.System, tgt.SystemUUID = tc.system, tc.uuid
				raw, uuid, err := readOnce(ctx, t, s, tgt)
				if tc.wantErrHas != nil {
					if !errors.Is(err, ErrUnknownState) {
						t.Fatalf("err = %v (raw %q), want ErrUnknownState", err, raw)
					}
					for _, want := range tc.wantErrHas {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("error %q lacks %q", err, want)
						}
					}
					if strings.Contains(err.Error(), "\n") {
						t.Errorf("error is not one line: %q", err)
					}
					return
				}
				if err != nil || Normalize(raw) != tc.wantPower || uuid != tc.wantUUID {
					t.Fatalf("read = %q, %q, %v; want %s from %s", raw, uuid, err, tc.wantPower, tc.wantUUID)
				}
			})
		}
		// The chosen blade follows its own power.
		b.SetSystemPowerState("Blade3", redfish.PowerOff)
		tgt := base
		tgt.System = "Blade3"
		if raw, _, err := readOnce(ctx, t, s, tgt); err != nil || Normalize(raw) != PowerOff {
			t.Fatalf("Blade3 after power-off: %q, %v", raw, err)
		}
	}
}

// TestRedfishCurrentSchema: a system in a current schema version (object-valued
// OperatingSystem, BootProgress, Composition) reads like any other.
func TestRedfishCurrentSchema(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{ModernSchema: true, SystemUUID: blade1UUID})
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	tgt := redfishTarget(t, b, b.Password())
	for _, want := range []PowerState{PowerOn, PowerOff} {
		if want == PowerOff {
			b.SetPowerState(redfish.PowerOff)
		}
		raw, uuid, err := readOnce(ctx, t, s, tgt)
		if err != nil || Normalize(raw) != want || uuid != blade1UUID {
			t.Fatalf("read = %q, %q, %v; want %s", raw, uuid, err, want)
		}
	}
}

// TestRedfishNoPowerState: a system that reports no PowerState is an unknown state
// (the BMC answered), never on or off.
func TestRedfishNoPowerState(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{Systems: []redfish.SystemSpec{{ID: "1", Name: "Partition", UUID: blade1UUID, OmitPowerState: true}}})
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	raw, _, err := readOnce(ctx, t, s, redfishTarget(t, b, b.Password()))
	if !errors.Is(err, ErrUnknownState) || !strings.Contains(err.Error(), "reports no PowerState") {
		t.Fatalf("read = %q, %v; want ErrUnknownState saying the system reports no PowerState", raw, err)
	}
	if errors.Is(err, ErrUnreachable) {
		t.Errorf("%v is also ErrUnreachable: the BMC answered", err)
	}
}

// TestRedfishNoSessionService: a service without a SessionService is read with HTTP
// Basic auth: no session is created, and a wrong password is ErrAuth.
func TestRedfishNoSessionService(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{NoSessionService: true, SystemUUID: blade1UUID})
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	raw, uuid, err := readOnce(ctx, t, s, redfishTarget(t, b, b.Password()))
	if err != nil || Normalize(raw) != PowerOn || uuid != blade1UUID {
		t.Fatalf("read = %q, %q, %v", raw, uuid, err)
	}
	b.SetPowerState(redfish.PowerOff)
	raw, uuid, err = readOnce(ctx, t, s, redfishTarget(t, b, b.Password()))
	if err != nil || Normalize(raw) != PowerOff || uuid != blade1UUID {
		t.Fatalf("read after power-off = %q, %q, %v", raw, uuid, err)
	}
	if b.SessionsCreated() != 0 {
		t.Errorf("%d sessions created on a service without a SessionService", b.SessionsCreated())
	}
	basic := 0
	for _, r := range b.RequestLog() {
		if r.Auth == "basic" {
			basic++
		}
	}
	if basic == 0 {
		t.Error("no request carried Basic auth")
	}
	wrong := redfishTarget(t, b, "wrong")
	wrong.Host = "h2"
	if _, _, err := readOnce(ctx, t, s, wrong); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong password: %v, want ErrAuth", err)
	}
}

// TestRedfishErrorsAreOneLine: every category of failure is told by its sentinel and
// the HTTP status (errors.As *HTTPError), and its message is one line that says what
// answered.
func TestRedfishErrorsAreOneLine(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	tgt := redfishTarget(t, b, "wrong")
	_, _, err := readOnce(ctx, t, s, tgt)
	var he *HTTPError
	if !errors.Is(err, ErrAuth) || !errors.As(err, &he) || he.Status != http.StatusUnauthorized || strings.Contains(err.Error(), "\n") {
		t.Errorf("wrong password: %q", err)
	}
	if !strings.Contains(err.Error(), "POST /redfish/v1/SessionService/Sessions: 401 Unauthorized") {
		t.Errorf("wrong password does not say what answered: %q", err)
	}

	b.SetFailStatus(http.StatusInternalServerError)
	good := redfishTarget(t, b, b.Password())
	good.Host = "h2"
	_, _, err = readOnce(ctx, t, s, good)
	if !errors.Is(err, ErrUnknownState) || errors.Is(err, ErrUnreachable) || !errors.As(err, &he) || he.Status != 500 || strings.Contains(err.Error(), "\n") {
		t.Errorf("500: %q, want ErrUnknownState (answered) with the status", err)
	}
	b.SetFailStatus(0)

	b.Close()
	good.Host = "h3"
	_, _, err = readOnce(ctx, t, s, good)
	if !errors.Is(err, ErrUnreachable) || strings.Contains(err.Error(), "\n") {
		t.Errorf("closed BMC: %q, want ErrUnreachable", err)
	}
}

// TestFailedLoginBudget: against a BMC that locks a client out after three failed
// logins (as iDRAC does), wrong credentials are tried at most twice however often the
// CCM reads, so the BMC never locks the CCM out; fixed credentials are used at once.
// The same with Basic auth, where every request is a login.
func TestFailedLoginBudget(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, noSessions := range []bool{false, true} {
		b := startRedfish(t, redfish.Options{LockoutAfter: 3, NoSessionService: noSessions})
		s := NewSessions(nil, time.Minute)
		defer s.Close(ctx, 5*time.Second)
		tgt := redfishTarget(t, b, "wrong-1")
		for i := range 10 {
			if i == 5 {
				tgt = redfishTarget(t, b, "wrong-2") // another wrong password: one more try
			}
			_, _, err := readOnce(ctx, t, s, tgt)
			if !errors.Is(err, ErrAuth) {
				t.Fatalf("read %d with a wrong password: %v, want ErrAuth", i, err)
			}
			if i > 0 && i != 5 && !errors.Is(err, ErrLoginBudget) {
				t.Errorf("read %d tried refused credentials again: %v", i, err)
			}
		}
		if n := b.FailedLogins(); n != 2 || b.LockedOut() {
			t.Fatalf("basic=%v: the BMC saw %d failed logins (locked out: %v), want 2 and no lockout", noSessions, n, b.LockedOut())
		}
		// The budget of 2 refusals is spent: even changed credentials wait for the
		// window (a third refusal would lock the CCM out for ten minutes).
		if _, _, err := readOnce(ctx, t, s, redfishTarget(t, b, b.Password())); !errors.Is(err, ErrLoginBudget) {
			t.Fatalf("basic=%v: a third login within the window: %v, want ErrLoginBudget", noSessions, err)
		}
		s2 := NewSessions(nil, time.Minute) // a fresh budget (as after the window)
		defer s2.Close(ctx, 5*time.Second)
		raw, _, err := readOnce(ctx, t, s2, redfishTarget(t, b, b.Password()))
		if err != nil || Normalize(raw) != PowerOn {
			t.Fatalf("basic=%v: right password after two failures: %q, %v", noSessions, raw, err)
		}
	}
}

// TestRedfishLateLogin: a login that answers late, within the call's deadline, leaves
// a session whose later reads each get their own call's full deadline.
func TestRedfishLateLogin(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{LoginDelay: 800 * time.Millisecond})
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	tgt := redfishTarget(t, b, b.Password())
	if _, err := readWith(ctx, t, s, tgt, 2*time.Second); err != nil {
		t.Fatalf("first read, with a late login: %v", err)
	}
	b.SetLatency(300 * time.Millisecond) // later reads are slowish but well within 1 s
	for i := range 3 {
		if raw, err := readWith(ctx, t, s, tgt, time.Second); err != nil || Normalize(raw) != PowerOn {
			t.Fatalf("read %d on the kept session: %q, %v", i, raw, err)
		}
	}
	wantSessions(t, b, "one late login serves every read", 1, 1, 0)
}
