package bmc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/ipmi"
)

// TestBMCLibIPMI drives bmclib's ipmitool driver (the real ipmitool binary) against
// real ipmi_sim BMCs on 127.0.0.1.
func TestBMCLibIPMI(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lab := startIPMI(ctx, t, 2)
	b := lab.BMCs()[0]
	creds := writeCreds(t, "admin", "ipmi-pw-42", 0o600)
	tgt := Target{Host: "ipmi-0", Protocol: "ipmi", Address: b.Host(), Port: int32(b.Port()), CredentialsFile: creds}
	s := NewService(BMCLib{}, Config{CallTimeout: 15 * time.Second, MaxConcurrent: 4, FailureThreshold: 5, BackoffBase: time.Second, BackoffMax: time.Second}, nil)

	r, err := s.PowerState(ctx, tgt)
	if err != nil || r.State != PowerOn {
		t.Fatalf("PowerState = %+v, %v", r, err)
	}
	if err := b.SetPower(false); err != nil { // the host loses power
		t.Fatal(err)
	}
	raw, err := BMCLib{}.PowerState(ctx, tgt)
	if err != nil || Normalize(raw) != PowerOff {
		t.Fatalf("after power loss: %q (%s), %v", raw, Normalize(raw), err)
	}

	// A wrong password fails without touching the chassis; ipmitool reports it like an
	// unreachable BMC ("Unable to establish IPMI v2 / RMCP+ session"), so it is an
	// error either way, never a state.
	bad := writeCreds(t, "admin", "wrong-pw", 0o600)
	wrong := tgt
	wrong.CredentialsFile = bad
	if _, err := (BMCLib{}).PowerState(ctx, wrong); !errors.Is(err, ErrUnreachable) && !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong password: %v", err)
	}

	// A dead BMC is an error by the deadline.
	dead := lab.BMCs()[1]
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	deadTgt := Target{Host: "ipmi-1", Protocol: "ipmi", Address: dead.Host(), Port: int32(dead.Port()), CredentialsFile: creds}
	if _, err := (BMCLib{}).PowerState(dctx, deadTgt); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("dead BMC: %v", err)
	}
}

// TestReadPowerIdentityIPMI: an "off" answer from a real ipmi_sim BMC carries the
// system GUID it reports (Get System GUID through the real ipmitool, password in the
// environment); an "on" answer reads none.
func TestReadPowerIdentityIPMI(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lab := startIPMI(ctx, t, 1)
	b := lab.BMCs()[0]
	creds := writeCreds(t, "admin", "ipmi-pw-42", 0o600)
	tgt := Target{Host: "ipmi-0", Protocol: "ipmi", Address: b.Host(), Port: int32(b.Port()), CredentialsFile: creds}
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	raw, uuid, err := s.ReadPower(cctx, tgt)
	if err != nil || Normalize(raw) != PowerOn || uuid != "" {
		t.Fatalf("on: %q, %q, %v", raw, uuid, err)
	}
	if err := b.SetPower(false); err != nil {
		t.Fatal(err)
	}
	raw, uuid, err = s.ReadPower(cctx, tgt)
	if err != nil || Normalize(raw) != PowerOff || uuid != b.SystemGUID() {
		t.Fatalf("off: %q, %q, %v; want off from %s", raw, uuid, err, b.SystemGUID())
	}

	// A wrong password cannot read the GUID: an error, never a GUID.
	bad := writeCreds(t, "admin", "wrong-pw", 0o600)
	wrong := tgt
	wrong.CredentialsFile = bad
	if g, err := ipmiSystemGUID(cctx, ipmitool, wrong, Credentials{Username: "admin", Password: "wrong-pw"}); err == nil || g != "" {
		t.Fatalf("wrong password: %q, %v", g, err)
	}
}

func TestParseRawGUID(t *testing.T) {
	for in, want := range map[string]string{
		" 2c c4 db 75 0f af 48 c2 f0 e6 d3 72 c7 fd a0 d5\n": "2cc4db75-0faf-48c2-f0e6-d372c7fda0d5",
		" 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n": "",
		" ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff\n": "",
	} {
		if got, err := parseRawGUID(in); err != nil || got != want {
			t.Errorf("parseRawGUID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := parseRawGUID(" 2c c4\n"); !errors.Is(err, ErrUnknownState) {
		t.Errorf("short answer: %v", err)
	}
}

// TestIPMIErrorsAreOneLine: through the CCM's driver, an IPMI read is one ipmitool run
// with the password in its environment, and its failures are one-line errors of a
// category: a wrong password (ipmitool reports it like a silent BMC) and a dead BMC.
func TestIPMIErrorsAreOneLine(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lab := startIPMI(ctx, t, 2)
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	b := lab.BMCs()[0]
	bad := writeCreds(t, "admin", "wrong-pw", 0o600)
	tgt := Target{Host: "ipmi-0", Protocol: "ipmi", Address: b.Host(), Port: int32(b.Port()), CredentialsFile: bad}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := s.PowerState(cctx, tgt)
	if !errors.Is(err, ErrUnreachable) && !errors.Is(err, ErrAuth) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "wrong-pw") {
		t.Errorf("wrong password: %q", err)
	}
	dead := lab.BMCs()[1]
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
	defer dcancel()
	good := writeCreds(t, "admin", "ipmi-pw-42", 0o600)
	_, err = s.PowerState(dctx, Target{Host: "ipmi-1", Protocol: "ipmi", Address: dead.Host(), Port: int32(dead.Port()), CredentialsFile: good})
	if !errors.Is(err, ErrUnreachable) || strings.Contains(err.Error(), "\n") {
		t.Errorf("dead BMC: %q", err)
	}
}

// startIPMI starts n real ipmi_sim BMCs (admin / ipmi-pw-42) for the test.
func startIPMI(ctx context.Context, t *testing.T, n int) *ipmi.Lab {
	t.Helper()
	lab, err := ipmi.Start(ctx, t.TempDir(), n, ipmi.Options{Username: "admin", Password: "ipmi-pw-42"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Stop)
	return lab
}
