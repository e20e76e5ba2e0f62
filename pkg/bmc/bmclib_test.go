package bmc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stmcginnis/gofish/common"
	"k8s.io/klog/v2/ktesting"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
)

// These tests drive the real bmclib gofish driver against the project's Redfish
// emulator over TLS on 127.0.0.1.

func startRedfish(t *testing.T, opts redfish.Options) *redfish.BMC {
	t.Helper()
	return redfish.StartForTest(t, opts) // asserts that every session ended

}

func writeCreds(t *testing.T, user, pass string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "creds")
	if err := os.WriteFile(p, fmt.Appendf(nil, "username: %s\npassword: %s\n", user, pass), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func redfishTarget(t *testing.T, b *redfish.BMC, pass string) Target {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, b.CAPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(b.Port())
	return Target{Host: "h1", Protocol: "redfish", Address: "https://" + b.Host(), Port: int32(port),
		CredentialsFile: writeCreds(t, b.Username(), pass, 0o600), CAFile: ca}
}

func TestBMCLibRedfish(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewService(BMCLib{}, Config{CallTimeout: 10 * time.Second, MaxConcurrent: 4, FailureThreshold: 3, BackoffBase: time.Second, BackoffMax: time.Second}, nil)

	r, err := s.PowerState(ctx, tgt)
	if err != nil || r.State != PowerOn {
		t.Fatalf("PowerState = %+v, %v", r, err)
	}
	b.SetPowerState(redfish.PowerOff) // the host loses power
	for range 4 {
		if r, err = s.PowerState(ctx, tgt); err != nil || r.State != PowerOff {
			t.Fatalf("after power loss: %+v, %v", r, err)
		}
	}
	// One session per call, every one closed: nothing leaks.
	if b.ActiveSessions() != 0 || b.SessionsCreated() != 5 || b.SessionsDeleted() != 5 {
		t.Errorf("sessions: active %d, created %d, deleted %d; want 0, 5, 5", b.ActiveSessions(), b.SessionsCreated(), b.SessionsDeleted())
	}
}

func TestBMCLibRedfishFailures(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	call := func(tgt Target, timeout time.Duration) error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := BMCLib{}.PowerState(cctx, tgt)
		return err
	}
	t.Run("wrong password is ErrAuth", func(t *testing.T) {
		b := startRedfish(t, redfish.Options{Username: "admin", Password: "correct-horse-7"})
		err := call(redfishTarget(t, b, "wrong-hunter2"), 10*time.Second)
		if !errors.Is(err, ErrAuth) {
			t.Fatalf("err = %v, want ErrAuth", err)
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), b.Password()) {
			t.Errorf("error leaks a password: %v", err)
		}
	})
	t.Run("unknown CA is refused", func(t *testing.T) {
		b := startRedfish(t, redfish.Options{})
		other := startRedfish(t, redfish.Options{})
		tgt := redfishTarget(t, b, b.Password())
		tgt.CAFile = redfishTarget(t, other, other.Password()).CAFile
		if err := call(tgt, 10*time.Second); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("err = %v, want ErrUnreachable (TLS)", err)
		}
		tgt.InsecureSkipVerify = true // the explicit per-host opt-in
		if err := call(tgt, 10*time.Second); err != nil {
			t.Fatalf("insecureSkipVerify: %v", err)
		}
	})
	t.Run("hung BMC returns at the deadline", func(t *testing.T) {
		b := startRedfish(t, redfish.Options{})
		tgt := redfishTarget(t, b, b.Password())
		b.SetHang(true)
		defer b.SetHang(false)
		err := call(tgt, 500*time.Millisecond)
		if !errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ErrUnreachable at the deadline", err)
		}
	})
	t.Run("HTTP 500 and session exhaustion are errors", func(t *testing.T) {
		b := startRedfish(t, redfish.Options{})
		tgt := redfishTarget(t, b, b.Password())
		b.SetFailStatus(500)
		if err := call(tgt, 10*time.Second); err == nil {
			t.Fatal("500: no error")
		}
		b.SetFailStatus(0)
		b.SetSessionExhausted(true)
		if err := call(tgt, 10*time.Second); err == nil || !strings.Contains(err.Error(), "503") {
			t.Fatalf("exhausted: %v", err)
		}
	})
}

func TestReadCredentials(t *testing.T) {
	p := writeCreds(t, "admin", "s3cr3t-value", 0o600)
	c, err := ReadCredentials(p)
	if err != nil || c.Username != "admin" || c.Password != "s3cr3t-value" {
		t.Fatalf("ReadCredentials = %+v, %v", c, err)
	}
	open := writeCreds(t, "admin", "s3cr3t-value", 0o644)
	if _, err := ReadCredentials(open); !errors.Is(err, ErrCredentials) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	_ = os.WriteFile(bad, []byte("user: admin\npasswd: s3cr3t-value\n"), 0o600)
	_, err = ReadCredentials(bad)
	if !errors.Is(err, ErrCredentials) || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("malformed: %v (must not quote the content)", err)
	}
	if _, err := ReadCredentials(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrCredentials) {
		t.Fatalf("missing: %v", err)
	}
}

func TestRedfishEndpoint(t *testing.T) {
	for _, tc := range []struct {
		addr       string
		port       int32
		host, want string
	}{
		{"10.1.0.5", 0, "10.1.0.5", "443"},
		{"https://10.1.0.5", 0, "10.1.0.5", "443"},
		{"https://bmc.example:8443", 0, "bmc.example", "8443"},
		{"https://bmc.example:8443", 9443, "bmc.example", "9443"},
		{"http://10.1.0.5", 0, "http://10.1.0.5", "80"},
		{"[fd00::5]:8443", 0, "fd00::5", "8443"},
	} {
		h, p, err := redfishEndpoint(tc.addr, tc.port)
		if err != nil || h != tc.host || p != tc.want {
			t.Errorf("redfishEndpoint(%q, %d) = %q, %q, %v; want %q, %q", tc.addr, tc.port, h, p, err, tc.host, tc.want)
		}
	}
}

// TestClassify: refusals are told from the HTTP status gofish reports (or ipmitool's
// RAKP wording), never from digits that happen to be in an address.
func TestClassify(t *testing.T) {
	deadline := common.ConstructError(0, []byte(`Get "https://127.0.0.1:40127/redfish/v1/": context deadline exceeded`))
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"timeout on a port containing 401", fmt.Errorf("2 errors occurred: %w", deadline), ErrUnreachable},
		{"host named bmc-r401", errors.New(`dial tcp: lookup bmc-r401: no such host`), ErrUnreachable},
		{"redfish 401", fmt.Errorf("provider: gofish: %w", common.ConstructError(401, []byte(`{"error":{"code":"Base.1.0.NoValidSession"}}`))), ErrAuth},
		{"redfish 403", common.ConstructError(403, nil), ErrAuth},
		{"redfish 500", common.ConstructError(500, []byte("oops 401")), ErrUnreachable},
		{"redfish 401 on a collection member", fmt.Errorf("provider: gofish: %w", &common.CollectionError{Failures: map[string]error{"/redfish/v1/Systems": common.ConstructError(401, nil)}}), ErrAuth},
		{"redfish 404 on a collection member", &common.CollectionError{Failures: map[string]error{"/redfish/v1/Systems/1": common.ConstructError(404, []byte("401"))}}, ErrUnreachable},
		{"context deadline", context.DeadlineExceeded, ErrUnreachable},
		{"ipmitool wrong password", errors.New("Error: Unable to establish IPMI v2 / RMCP+ session\nRAKP 2 HMAC is invalid"), ErrAuth},
		{"ipmitool wrong user", errors.New("RAKP 2 message indicates an error : unauthorized name"), ErrAuth},
		{"ipmitool unreachable", errors.New("Error: Unable to establish IPMI v2 / RMCP+ session"), ErrUnreachable},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := classify(c.err); !errors.Is(got, c.want) {
				t.Errorf("classify(%q) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}
