package bmc

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
)

// These tests drive Sessions (the CCM's driver) through the real bmclib gofish driver
// against the Redfish emulator, and count the emulator's sessions.

func sessionCounts(b *redfish.BMC) [3]int {
	return [3]int{b.ActiveSessions(), b.SessionsCreated(), b.SessionsDeleted()}
}

func wantSessions(t *testing.T, b *redfish.BMC, what string, active, created, deleted int) {
	t.Helper()
	if got := sessionCounts(b); got != [3]int{active, created, deleted} {
		t.Errorf("%s: sessions active/created/deleted = %v, want [%d %d %d]", what, got, active, created, deleted)
	}
}

func readWith(ctx context.Context, t *testing.T, s *Sessions, tgt Target, timeout time.Duration) (string, error) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return s.PowerState(cctx, tgt)
}

// TestSessionsReuse: one login serves every read, also from concurrent callers; Close
// logs out.
func TestSessionsReuse(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			raw, err := readWith(ctx, t, s, tgt, 10*time.Second)
			if err == nil && Normalize(raw) != PowerOn {
				err = errors.New("not on: " + raw)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	b.SetPowerState(redfish.PowerOff)
	if raw, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil || Normalize(raw) != PowerOff {
		t.Fatalf("after power loss: %q, %v", raw, err)
	}
	wantSessions(t, b, "9 reads", 1, 1, 0)
	if n := s.OpenSessions(); n != 1 {
		t.Errorf("OpenSessions = %d, want 1", n)
	}
	s.Close(ctx, 5*time.Second)
	wantSessions(t, b, "after Close", 0, 1, 1)
	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); !errors.Is(err, ErrNoTerm) {
		t.Errorf("read after Close = %v, want ErrNoTerm", err)
	}
}

// TestSessionsRelogin: a session the BMC dropped (reboot, expiry) is replaced within
// the same call; changed credentials replace the session too.
func TestSessionsRelogin(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)

	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	b.ExpireSessions()
	if raw, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil || Normalize(raw) != PowerOn {
		t.Fatalf("read after the BMC dropped the session = %q, %v; want on", raw, err)
	}
	if b.SessionsCreated() != 2 || b.ActiveSessions() != 1 {
		t.Errorf("after expiry: created %d, active %d; want 2, 1", b.SessionsCreated(), b.ActiveSessions())
	}

	tgt.CredentialsFile = writeCreds(t, b.Username(), b.Password(), 0o600) // same values, rewritten
	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if b.SessionsCreated() != 2 {
		t.Errorf("unchanged credentials in a new file: %d logins, want still 2", b.SessionsCreated())
	}
	tgt.InsecureSkipVerify = true // changed settings: a new session, the old one logged out
	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if b.SessionsCreated() != 3 || b.ActiveSessions() != 1 {
		t.Errorf("after a settings change: created %d, active %d; want 3, 1", b.SessionsCreated(), b.ActiveSessions())
	}
}

// TestSessionsHungBMC: a BMC that hangs mid-call keeps the one session it had (no new
// login while the abandoned call is stuck), and that session is logged out once the
// BMC answers again; while it still fails, the session is kept for that logout.
func TestSessionsHungBMC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)

	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	b.SetHang(true)
	for range 3 {
		if _, err := readWith(ctx, t, s, tgt, 300*time.Millisecond); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("hung BMC: err = %v, want ErrUnreachable", err)
		}
	}
	b.SetHang(false) // the held request answers; the next call waits for it, then reuses the session
	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil {
		t.Fatalf("after the hang: %v", err)
	}
	wantSessions(t, b, "after a hang", 1, 1, 0)

	// A failing BMC: its session is kept (a logout now would be lost) ...
	b.SetFailStatus(500)
	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); err == nil {
		t.Fatal("500: no error")
	}
	s.CloseIdle(ctx, 0, 5*time.Second)
	if n := s.OpenSessions(); n != 1 {
		t.Errorf("OpenSessions while the BMC fails = %d, want 1 (kept for its logout)", n)
	}
	// ... and logged out once it answers again.
	b.SetFailStatus(0)
	s.CloseIdle(ctx, 0, 5*time.Second)
	wantSessions(t, b, "after the BMC recovered", 0, 1, 1)
	if n := s.OpenSessions(); n != 0 {
		t.Errorf("OpenSessions = %d, want 0", n)
	}
}

// TestSessionsIdle: CloseIdle logs out only sessions idle for longer than idle.
func TestSessionsIdle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	s.CloseIdle(ctx, time.Hour, 5*time.Second)
	wantSessions(t, b, "recently used", 1, 1, 0)
	s.CloseIdle(ctx, 0, 5*time.Second)
	wantSessions(t, b, "idle", 0, 1, 1)
}

// TestSessionsFromSecret: credentials from a Kubernetes Secret (keys username and
// password); a Secret the BMC refuses is read again on the next call (rotation), and
// no error carries a password.
func TestSessionsFromSecret(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{Username: "admin", Password: "correct-horse-7"})
	tgt := redfishTarget(t, b, b.Password())
	tgt.CredentialsFile, tgt.SecretNamespace, tgt.SecretName = "", "bmc", "rack-1"
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "bmc", Name: "rack-1"},
		Data: map[string][]byte{"username": []byte("admin"), "password": []byte("wrong-hunter2")}}
	client := fake.NewClientset(secret)
	src := NewSecrets(client, time.Hour, nil)
	s := NewSessions(src, time.Minute)
	defer s.Close(ctx, 5*time.Second)

	_, err := readWith(ctx, t, s, tgt, 10*time.Second)
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong password in the Secret: err = %v, want ErrAuth", err)
	}
	if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "correct-horse") {
		t.Errorf("error leaks a password: %v", err)
	}
	secret.Data["password"] = []byte("correct-horse-7")
	if _, err := client.CoreV1().Secrets("bmc").Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if raw, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil || Normalize(raw) != PowerOn {
		t.Fatalf("after fixing the Secret: %q, %v (the refused Secret must not stay cached)", raw, err)
	}

	for name, data := range map[string]map[string][]byte{
		"missing":         nil,
		"no password key": {"username": []byte("admin")},
	} {
		t2 := tgt
		t2.Host, t2.SecretName = name, strings.ReplaceAll(name, " ", "-")
		if data != nil {
			if _, err := client.CoreV1().Secrets("bmc").Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "bmc", Name: t2.SecretName}, Data: data}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := readWith(ctx, t, s, t2, 10*time.Second); !errors.Is(err, ErrCredentials) {
			t.Errorf("%s: err = %v, want ErrCredentials", name, err)
		}
	}
	if _, err := (BMCLib{}).PowerState(ctx, tgt); !errors.Is(err, ErrCredentials) {
		t.Errorf("a Secret without a client: err = %v, want ErrCredentials", err)
	}
}

// TestSessionsCloseWaitsForAnAbandonedCall: Close logs out a session whose call was
// abandoned on a hung BMC once that call ends, instead of skipping it.
func TestSessionsCloseWaitsForAnAbandonedCall(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	b.SetHang(true)
	if _, err := readWith(ctx, t, s, tgt, 300*time.Millisecond); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("hung BMC: err = %v, want ErrUnreachable", err)
	}
	b.SetHang(false)
	s.Close(ctx, 5*time.Second)
	wantSessions(t, b, "after Close", 0, 1, 1)
}

// TestSessionsServeEveryTerm (issue 25): Run served one leadership term, and its end
// closed the driver for good, so from the second term every read failed with "the BMC
// driver is shut down". Each term's end logs out its sessions (also one whose read was
// under way) and refuses reads until the next term; the next term reads again; Close
// ends them all for good.
func TestSessionsServeEveryTerm(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	for term := 1; term <= 3; term++ {
		termCtx, end := context.WithCancel(ctx)
		ran := s.BeginTerm(termCtx, 5*time.Second)
		if _, err := readWith(ctx, t, s, tgt, 10*time.Second); err != nil {
			t.Fatalf("term %d: read: %v", term, err)
		}
		if n := b.ActiveSessions(); n != 1 {
			t.Errorf("term %d: %d sessions open, want 1", term, n)
		}
		end()
		<-ran
		if n := b.ActiveSessions(); n != 0 {
			t.Errorf("term %d: %d sessions open after the term, want 0", term, n)
		}
		if _, err := readWith(ctx, t, s, tgt, 10*time.Second); !errors.Is(err, ErrNoTerm) {
			t.Errorf("term %d: read between terms = %v, want ErrNoTerm", term, err)
		}
	}
	s.Close(ctx, 5*time.Second)
	<-s.BeginTerm(ctx, 5*time.Second) // after Close: ended at once
	if _, err := readWith(ctx, t, s, tgt, 10*time.Second); !errors.Is(err, ErrNoTerm) {
		t.Errorf("read after Close = %v, want ErrNoTerm", err)
	}
	if n := b.SessionsCreated(); n != 3 {
		t.Errorf("%d sessions created, want one per term", n)
	}
}

// TestTermEndRacesAnInFlightCall: a call under way when its term ends (a slow BMC, the
// call's deadline longer than the term's logout timeout) logs its session out itself
// when it completes: no term leaves a session behind.
func TestTermEndRacesAnInFlightCall(t *testing.T) {
	var (
		end   context.CancelFunc
		ended <-chan struct{}
	)
	begin := func(ctx context.Context, s *Sessions) {
		var term context.Context
		term, end = context.WithCancel(ctx)
		ended = s.BeginTerm(term, 300*time.Millisecond)
	}
	stop := func(context.Context, *Sessions) {
		end()
		<-ended
	}
	if n := sessionsLeftAfter(t, begin, stop); n != 0 {
		t.Errorf("after the term and its in-flight call: %d sessions open on the BMC, want 0", n)
	}
}
