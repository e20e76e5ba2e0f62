package bmc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
)

// Regression tests of issue 26 (BMC client hardening). Each failed before its fix.
// Every emulator here comes from startRedfish (redfish.StartForTest), which also
// asserts at the end that every session the test created was ended.

func oneLineErr(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
}

// TestLoginWithoutTokenEndsItsSession: a login answered with Location but no
// X-Auth-Token is an unknown state, and the session it created is deleted (with Basic
// auth) before the call returns: repeated reads leave no session behind.
func TestLoginWithoutTokenEndsItsSession(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{LoginOmitsToken: true})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	for i := range 3 {
		_, _, err := readOnce(ctx, t, s, tgt)
		if !errors.Is(err, ErrUnknownState) || errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "X-Auth-Token") {
			t.Fatalf("read %d: %v, want ErrUnknownState naming the missing X-Auth-Token", i, err)
		}
		oneLineErr(t, err)
		if n := b.ActiveSessions(); n != 0 {
			t.Fatalf("read %d: %d sessions left open on the BMC (created %d, deleted %d)", i, n, b.SessionsCreated(), b.SessionsDeleted())
		}
	}
}

// TestLoginWithoutLocationIsLoggedOut: a login answered with a token but no Location
// is logged out at idle through the session's @odata.id from the body.
func TestLoginWithoutLocationIsLoggedOut(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{LoginOmitsLocation: true})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	for range 2 {
		if raw, _, err := readOnce(ctx, t, s, tgt); err != nil || Normalize(raw) != PowerOn {
			t.Fatalf("read: %q, %v", raw, err)
		}
		s.CloseIdle(ctx, 0, 5*time.Second) // an idle logout after every read
		if n := b.ActiveSessions(); n != 0 {
			t.Fatalf("after the idle logout: %d sessions open (created %d, deleted %d)", n, b.SessionsCreated(), b.SessionsDeleted())
		}
	}
}

// TestLinksStayOnTheBMC: a link in the BMC's JSON that points to another host (a
// userinfo trick, a network-path reference, an absolute URL) is refused with a
// one-line error; nothing, least of all the login with the password, reaches the
// other host.
func TestLinksStayOnTheBMC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ca, err := redfish.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	other := startRedfish(t, redfish.Options{CA: ca})
	elsewhere := strings.TrimPrefix(other.URL(), "https://")
	for _, tc := range []struct{ name, link, value string }{
		{"userinfo", "Links.Sessions", "@" + elsewhere + "/redfish/v1/SessionService/Sessions"},
		{"network path", "Links.Sessions", "//" + elsewhere + "/redfish/v1/SessionService/Sessions"},
		{"absolute URL", "Links.Sessions", other.URL() + "/redfish/v1/SessionService/Sessions"},
		{"plain http", "Links.Sessions", "http://127.0.0.1:1/redfish/v1/SessionService/Sessions"},
		{"systems elsewhere", "Systems", other.URL() + "/redfish/v1/Systems"},
		{"relative path", "Systems", "Systems"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startRedfish(t, redfish.Options{CA: ca, RootLinks: map[string]string{tc.link: tc.value}})
			tgt := redfishTarget(t, b, b.Password())
			s := NewSessions(nil, time.Minute)
			defer s.Close(ctx, 5*time.Second)
			other.ResetRequests()
			_, _, err := readOnce(ctx, t, s, tgt)
			if !errors.Is(err, ErrUnknownState) || !strings.Contains(err.Error(), "not on the BMC") {
				t.Fatalf("read = %v, want ErrUnknownState saying the link is not on the BMC", err)
			}
			oneLineErr(t, err)
			if got := other.RequestLog(); len(got) != 0 {
				t.Fatalf("requests reached the other host: %+v", got)
			}
		})
	}
}

// TestUnauthorizedRightAfterLogin: a 401 on the first GET after a successful login is
// not "credentials refused": the read logs in once more and succeeds; when the BMC
// keeps refusing fresh sessions the error is ErrAccessDenied, no refused login is
// counted, and every session is ended.
func TestUnauthorizedRightAfterLogin(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)

	b.SetRejectSessionTokens(1)
	if raw, _, err := readOnce(ctx, t, s, tgt); err != nil || Normalize(raw) != PowerOn {
		t.Fatalf("one 401 right after the login: %q, %v; want on after one more login", raw, err)
	}
	if n := b.SessionsCreated(); n != 2 {
		t.Errorf("%d logins, want 2", n)
	}

	s.CloseIdle(ctx, 0, 5*time.Second)
	b.SetRejectSessionTokens(-1)
	for i := range 3 { // never ErrLoginBudget: no login was refused
		_, _, err := readOnce(ctx, t, s, tgt)
		if !errors.Is(err, ErrAccessDenied) || errors.Is(err, ErrAuth) || errors.Is(err, ErrLoginBudget) {
			t.Fatalf("read %d with fresh sessions refused: %v, want ErrAccessDenied (not ErrAuth)", i, err)
		}
		oneLineErr(t, err)
	}
	b.SetRejectSessionTokens(0)
	if n := b.ActiveSessions(); n > 1 {
		t.Errorf("%d sessions open, want at most the one kept", n)
	}
}

// TestTimeoutNamesRequestAndLimit: a BMC that does not answer within the call's
// deadline gives an error naming the request under way and the limit.
func TestTimeoutNamesRequestAndLimit(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	svc := NewService(s, Config{CallTimeout: 300 * time.Millisecond, MaxConcurrent: 2, FailureThreshold: 3, BackoffBase: time.Second, BackoffMax: time.Second}, nil)
	if _, err := svc.PowerState(ctx, tgt); err != nil { // logged in
		t.Fatal(err)
	}
	b.SetHang(true)
	_, err := svc.Probe(ctx, tgt)
	b.SetHang(false)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "GET "+b.SystemPath()) || !strings.Contains(err.Error(), "300ms") {
		t.Fatalf("hung BMC: %v; want ErrUnreachable naming GET %s and 300ms", err, b.SystemPath())
	}
	oneLineErr(t, err)
}

// TestOversizedAnswer: an answer cut at the size limit says so, not "unexpected end
// of JSON input".
func TestOversizedAnswer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	err := readSystemsAnswer(ctx, t, `{"Members":[{"@odata.id":"/redfish/v1/Systems/1"}],"Oem":"`+strings.Repeat("x", maxBody)+`"}`)
	if !errors.Is(err, ErrUnknownState) || !strings.Contains(err.Error(), "larger than 4 MiB") || strings.Contains(err.Error(), "unexpected end") {
		t.Fatalf("oversized answer: %v, want ErrUnknownState saying it is larger than 4 MiB", err)
	}
}

// unknownDriver answers every call with ErrUnknownState and records when (by the
// Service's fake clock) each call came.
type unknownDriver struct {
	clock *clocktesting.FakePassiveClock
	calls []time.Time
}

func (d *unknownDriver) PowerState(context.Context, Target) (string, error) {
	d.calls = append(d.calls, d.clock.Now())
	return "", fmt.Errorf("%w: the BMC answered; it has 4 systems and the host names none", ErrUnknownState)
}

// TestUnknownIsBackedOff: a host whose every reading is unknown costs at most one
// read per backoff interval (BackoffBase after the first unknown, doubling up to
// BackoffMax), measured on a fake clock while the host is asked every 5 s for 3
// minutes (a NotReady Node); the answers in between are ErrBackoff wrapping the last
// unknown, so they stay "unknown", never "off". A Probe (readiness change) still asks.
func TestUnknownIsBackedOff(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakePassiveClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	drv := &unknownDriver{clock: clk}
	cfg := testConfig() // BackoffBase 10 s, BackoffMax 1 min
	s := NewService(drv, cfg, clk)
	tgt := target("multi")
	for range 37 { // 0 s .. 180 s
		_, err := s.PowerState(ctx, tgt)
		if !errors.Is(err, ErrUnknownState) {
			t.Fatalf("every answer must stay unknown: %v", err)
		}
		clk.SetTime(clk.Now().Add(5 * time.Second))
	}
	// 0, 10, 30, 70, 130 s: gaps 10, 20, 40, 60 (capped).
	if len(drv.calls) > 5 {
		t.Errorf("%d BMC reads in 3 minutes of unknown answers, want at most 5", len(drv.calls))
	}
	want := cfg.BackoffBase
	for i := 1; i < len(drv.calls); i++ {
		if gap := drv.calls[i].Sub(drv.calls[i-1]); gap < want {
			t.Errorf("read %d came %s after the previous one, within its backoff %s", i, gap, want)
		}
		want = min(2*want, cfg.BackoffMax)
	}
	n := len(drv.calls)
	if _, err := s.Probe(ctx, tgt); !errors.Is(err, ErrUnknownState) || len(drv.calls) != n+1 {
		t.Errorf("Probe during the backoff: %v after %d reads, want a read", err, len(drv.calls)-n)
	}
}

// TestUnknownIsBackedOffOnTheBMC: the same against the emulator: a service with
// several systems and a host that names none was read (collection and every member)
// at every ask; now at most once per backoff interval.
func TestUnknownIsBackedOffOnTheBMC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := bladed(t, false)
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	clk := clocktesting.NewFakePassiveClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	svc := NewService(s, testConfig(), clk)
	for range 37 {
		if _, err := svc.PowerState(ctx, tgt); !errors.Is(err, ErrUnknownState) {
			t.Fatalf("read: %v, want unknown", err)
		}
		clk.SetTime(clk.Now().Add(5 * time.Second))
	}
	gets := b.RequestCount(http.MethodGet, "/redfish/v1/Systems")
	if gets > 5 {
		t.Errorf("the Systems collection was read %d times in 3 minutes, want at most 5 (one per backoff interval)", gets)
	}
	t.Logf("Systems collection reads in 3 minutes of 5 s asks: %d", gets)
}

// TestCacheFollowsTheBMCAddress: a reading is the BMC's, not the host name's: after
// the host's BMC address changes, the next ask reads the new BMC.
func TestCacheFollowsTheBMCAddress(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	drv := newFakeDriver()
	s := NewService(drv, testConfig(), nil)
	old := Target{Host: "h1", Protocol: "redfish", Address: "https://10.0.0.1"}
	drv.answers["h1"] = "On"
	if r, err := s.PowerState(ctx, old); err != nil || r.State != PowerOn {
		t.Fatal(r, err)
	}
	moved := old
	moved.Address = "https://10.0.0.2"
	drv.answers["h1"] = "Off"
	if r, err := s.PowerState(ctx, moved); err != nil || r.Cached || r.State != PowerOff {
		t.Fatalf("after the address change: %+v, %v; want a fresh read (off)", r, err)
	}
}

// TestLateAbandonMarksNothing: a caller that gives up just as its call ends marks the
// call abandoned after it released the BMC; a later call holding the shared BMC (another
// blade's) must not look busy (Service would fail it at once as "has not returned").
func TestLateAbandonMarksNothing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	cctx, cancel := context.WithCancel(ctx)
	s.afterCall = func() {
		cancel()      // the caller gives up right as the call ends ...
		<-cctx.Done() // ... and sees its context end before the answer
	}
	_, _, _ = s.ReadPower(cctx, tgt)
	s.afterCall = nil
	c := s.connFor(tgt)
	c.lock <- struct{}{} // another host's call on the same BMC, under way
	busy := s.Busy(tgt)
	<-c.lock
	if busy {
		t.Fatal("a call abandoned after it ended marks the BMC busy for the next one")
	}
}
