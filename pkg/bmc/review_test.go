package bmc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
)

// Regression tests from a review of the Redfish/IPMI session driver: each reproduces
// one defect, and failed before its fix.

// TestReviewLateLoginLeaksSession: a login the BMC completes (the session exists) but
// answers after the caller's deadline is abandoned: the token never reaches Sessions,
// so the session is never logged out, neither by CloseIdle nor by Close, and every
// further read with the same deadline creates one more, until the BMC's session limit.
func TestReviewLateLoginLeaksSession(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{LoginDelay: 700 * time.Millisecond})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)

	if _, err := readWith(ctx, t, s, tgt, 300*time.Millisecond); err == nil {
		t.Fatal("no error with a login slower than the deadline")
	}
	for range 2 { // the late login's session is kept and reused, never a second one
		time.Sleep(500 * time.Millisecond)
		_, _ = readWith(ctx, t, s, tgt, 300*time.Millisecond)
	}
	if n := b.SessionsCreated(); n != 1 {
		t.Errorf("%d sessions created, want 1 (the late login's, kept)", n)
	}
	time.Sleep(time.Second) // every delayed login has completed on the BMC
	s.CloseIdle(ctx, 0, 5*time.Second)
	s.Close(ctx, 5*time.Second)
	if n := b.ActiveSessions(); n != 0 {
		t.Errorf("after CloseIdle and Close: %d sessions still open on the BMC (created %d, deleted %d), want 0",
			n, b.SessionsCreated(), b.SessionsDeleted())
	}
}

// TestReviewSlowRefusalNotCounted: a BMC that refuses a login but answers after the
// caller's deadline has counted the failure; Sessions has not, so it tries the refused
// credentials again on every read: a third (and more) refused login within the
// window, the lockout the budget exists to prevent.
func TestReviewSlowRefusalNotCounted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var refused atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/redfish/v1/" && r.Method == http.MethodGet:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"Systems":{"@odata.id":"/redfish/v1/Systems"},"SessionService":{"@odata.id":"/redfish/v1/SessionService"},"Links":{"Sessions":{"@odata.id":"/redfish/v1/SessionService/Sessions"}}}`)
		case r.URL.Path == "/redfish/v1/SessionService/Sessions" && r.Method == http.MethodPost:
			refused.Add(1)                     // the BMC counts the failure as it checks the password ...
			time.Sleep(500 * time.Millisecond) // ... and answers late (busy BMC)
			w.WriteHeader(http.StatusUnauthorized)
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer srv.Close()
	tgt := plainTarget(t, srv.URL, "wrong")
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, time.Second)
	for range 5 {
		_, _ = readWith(ctx, t, s, tgt, 200*time.Millisecond)
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(600 * time.Millisecond)
	if n := refused.Load(); n > DefaultMaxFailedLogins {
		t.Errorf("the BMC refused %d logins within the window, budget %d", n, DefaultMaxFailedLogins)
	}
}

// bladeTargets returns one Target per blade of b, each its own inventory host (as a
// blade enclosure is inventoried), all on the one BMC with the same credentials file.
func bladeTargets(t *testing.T, b *redfish.BMC, pass string, ids []string) []Target {
	tgt := redfishTarget(t, b, pass)
	var out []Target
	for i, id := range ids {
		x := tgt
		x.Host, x.System = fmt.Sprintf("blade-%d", i+1), id
		out = append(out, x)
	}
	return out
}

// TestReviewLoginBudgetIsPerHostNotPerBMC: the budget is kept per inventory host
// (conn by Target.Host), so hosts that share one BMC (a blade enclosure, the "Which
// system" case) each spend a full budget: three blades with a wrong password lock the
// CCM out of a BMC that locks after three failures.
func TestReviewLoginBudgetIsPerHostNotPerBMC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{LockoutAfter: 3, Systems: []redfish.SystemSpec{
		{ID: "Blade1"}, {ID: "Blade2"}, {ID: "Blade3"},
	}})
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	for _, tgt := range bladeTargets(t, b, "wrong", []string{"Blade1", "Blade2", "Blade3"}) {
		_, _, _ = readOnce(ctx, t, s, tgt)
	}
	if n := b.FailedLogins(); n > DefaultMaxFailedLogins || b.LockedOut() {
		t.Errorf("the BMC saw %d failed logins (locked out: %v); budget %d per BMC", n, b.LockedOut(), DefaultMaxFailedLogins)
	}
}

// TestReviewOneSessionPerBMC: docs/configuration.md "Sessions" promises one session per BMC; hosts
// sharing a BMC each keep their own, so an enclosure with more blades than the BMC's
// session limit (4 here, as many BMCs) has blades that can never be read (503).
func TestReviewOneSessionPerBMC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ids := []string{"B1", "B2", "B3", "B4", "B5", "B6"}
	var specs []redfish.SystemSpec
	for _, id := range ids {
		specs = append(specs, redfish.SystemSpec{ID: id})
	}
	b := startRedfish(t, redfish.Options{Systems: specs})
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	for _, tgt := range bladeTargets(t, b, b.Password(), ids) {
		if _, _, err := readOnce(ctx, t, s, tgt); err != nil {
			t.Errorf("%s: %v", tgt.Host, err)
		}
	}
	if n := b.ActiveSessions(); n > 1 {
		t.Errorf("%d sessions open on one BMC, want 1", n)
	}
}

// TestReviewCloseRacesAnInFlightCall: a call under way when Close runs (a slow BMC,
// the call's deadline longer than Close's timeout) completes its login after Close
// gave up waiting for it; the session stays open on the BMC although Close returned
// and every later call is refused.
func TestReviewCloseRacesAnInFlightCall(t *testing.T) {
	if n := sessionsLeftAfter(t, nil, func(ctx context.Context, s *Sessions) { s.Close(ctx, 300*time.Millisecond) }); n != 0 {
		t.Errorf("after Close and the in-flight call: %d sessions open on the BMC, want 0", n)
	}
}

// sessionsLeftAfter runs begin (unless nil), then a read on a slow BMC (400 ms), and
// stop while the read is under way; it returns the sessions open on the BMC once the
// read has ended.
func sessionsLeftAfter(t *testing.T, begin, stop func(context.Context, *Sessions)) int {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	b.SetLatency(400 * time.Millisecond)
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	if begin != nil {
		begin(ctx, s)
	}
	done := make(chan error, 1)
	go func() {
		_, err := readWith(ctx, t, s, tgt, 10*time.Second)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	stop(ctx, s)
	<-done
	time.Sleep(100 * time.Millisecond)
	return b.ActiveSessions()
}

// TestReviewReplacedSessionLogoutLost: when settings or credentials change, the old
// session's logout error is ignored (Sessions.logout sets client = nil whatever the
// DELETE got): a BMC that does not take the DELETE at that moment (busy: 503, or no
// answer within the caller's deadline) keeps the session and Sessions forgets it, so
// it is never logged out; CloseIdle's tryLogout would have kept it for another try.
func TestReviewReplacedSessionLogoutLost(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	tgt.InsecureSkipVerify = true // changed settings: the session is replaced
	b.SetFailStatus(http.StatusServiceUnavailable)
	if _, err := readWith(ctx, t, s, tgt, 5*time.Second); err == nil {
		t.Fatal("busy BMC: no error")
	}
	b.SetFailStatus(0)
	s.CloseIdle(ctx, 0, 5*time.Second)
	s.Close(ctx, 5*time.Second)
	if n := b.ActiveSessions(); n != 0 {
		t.Errorf("the replaced session was never logged out: %d open on the BMC (created %d, deleted %d)", n, b.SessionsCreated(), b.SessionsDeleted())
	}
}

// TestReviewExpiredSessionKeptForAnHour: CloseIdle on a healthy session the BMC has
// already expired gets 401 to its DELETE; tryLogout keeps the session "for another
// try" and CloseIdle re-sends the DELETE every idle/2 for maxKeep (an hour), counting
// it in OpenSessions. (The unhealthy-session path drops a session the BMC refuses.)
func TestReviewExpiredSessionKeptForAnHour(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	b.ExpireSessions()
	s.CloseIdle(ctx, 0, 5*time.Second)
	s.CloseIdle(ctx, 0, 5*time.Second)
	if n := s.OpenSessions(); n != 0 {
		t.Errorf("OpenSessions = %d after the BMC refused the logout of an expired session, want 0", n)
	}
	if n := b.RequestCount(http.MethodDelete, "/redfish/v1/SessionService/Sessions/1"); n > 1 {
		t.Errorf("%d DELETEs of a session the BMC no longer knows, want at most 1", n)
	}
}

// TestReviewRedirectDowngrade: the HTTP client follows redirects (no CheckRedirect),
// including https -> http and to another host; a 307 on the login POST re-sends the
// JSON body with the password in clear text to wherever the BMC points, although
// plain HTTP needs an explicit opt-in.
func TestReviewRedirectDowngrade(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var mu sync.Mutex
	var leaked []string
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		leaked = append(leaked, r.Method+" "+r.URL.Path+" "+string(body)+" token="+r.Header.Get("X-Auth-Token"))
		mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer plain.Close()
	bmc := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/redfish/v1/" && r.Method == http.MethodGet:
			_, _ = io.WriteString(w, `{"Systems":{"@odata.id":"/redfish/v1/Systems"},"Links":{"Sessions":{"@odata.id":"/redfish/v1/SessionService/Sessions"}}}`)
		default:
			http.Redirect(w, r, plain.URL+r.URL.Path, http.StatusTemporaryRedirect)
		}
	}))
	defer bmc.Close()
	u, _ := url.Parse(bmc.URL)
	port, _ := strconv.Atoi(u.Port())
	tgt := Target{Host: "h1", Protocol: "redfish", Address: "https://" + u.Hostname(), Port: int32(port),
		InsecureSkipVerify: true, CredentialsFile: writeCreds(t, "admin", "s3cret-pw", 0o600)}
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, time.Second)
	_, _ = readWith(ctx, t, s, tgt, 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	for _, l := range leaked {
		if strings.Contains(l, "s3cret-pw") {
			t.Errorf("the password went over plain HTTP to another server after a redirect: %s", l)
		}
	}
}

// TestReviewIPMIWrongPasswordIsUnreachable: an IPMI BMC that refuses the password
// (RAKP) answered; it is reported unreachable (ipmitool's words without -v are the
// same as for no answer), and — no budget on the IPMI path at all — the refused
// password is tried again on every read, though docs/operations.md (What a BMC error means) says refused credentials are
// not retried until they change or the window passes.
func TestReviewIPMIWrongPasswordIsUnreachable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lab := startIPMI(ctx, t, 1)
	b := lab.BMCs()[0]
	bad := writeCreds(t, "admin", "wrong-pw", 0o600)
	tgt := Target{Host: "ipmi-0", Protocol: "ipmi", Address: b.Host(), Port: int32(b.Port()), CredentialsFile: bad}
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, time.Second)
	var errs []error
	for range 2 {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := s.PowerState(cctx, tgt)
		cancel()
		errs = append(errs, err)
	}
	if !errors.Is(errs[0], ErrAuth) || errors.Is(errs[0], ErrUnreachable) {
		t.Errorf("wrong IPMI password: %v, want ErrAuth (the BMC answered)", errs[0])
	}
	if !errors.Is(errs[1], ErrLoginBudget) {
		t.Errorf("second read with the refused IPMI password: %v, want ErrLoginBudget (not retried)", errs[1])
	}
}

// TestReviewManySystemsSequential: choosing by systemUUID GETs every member of the
// Systems collection one after another within one call's deadline, and keeps nothing
// of a choice that ran out of time; an enclosure with many blades on a BMC of
// ordinary latency is then never read, and is reported unreachable although it
// answered every request.
func TestReviewManySystemsSequential(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var specs []redfish.SystemSpec
	last := ""
	for i := range 16 {
		last = fmt.Sprintf("8d4c1e2a-0000-4000-8000-0000000001%02d", i)
		specs = append(specs, redfish.SystemSpec{ID: fmt.Sprintf("Blade%d", i+1), UUID: last})
	}
	b := startRedfish(t, redfish.Options{Systems: specs})
	tgt := redfishTarget(t, b, b.Password())
	tgt.SystemUUID = last
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	b.SetLatency(100 * time.Millisecond) // 16 systems + login + collection: 19 requests, 1.9 s; the call has 1.5 s
	for i := range 3 {
		_, _, err := func() (string, string, error) {
			cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			return s.ReadPower(cctx, tgt)
		}()
		if err != nil {
			t.Errorf("read %d of a BMC that answers every request in 100 ms: %v", i, err)
		}
	}
}

// TestReviewBadLinkIsUnreachable: a link the BMC answered with that is not a valid URI
// path makes http.NewRequest fail, which do() reports as ErrUnreachable: a BMC that
// answered is called unreachable.
func TestReviewBadLinkIsUnreachable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	err := readSystemsAnswer(ctx, t, `{"Members":[{"@odata.id":"/redfish/v1/Systems/%zz"}]}`)
	if errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrUnknownState) {
		t.Errorf("a BMC that answered with a malformed link: %v, want ErrUnknownState only", err)
	}
}
