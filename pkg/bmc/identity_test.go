package bmc

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
)

// TestReadPowerIdentity: through the real bmclib and gofish drivers against the
// emulator, an "off" answer carries the ComputerSystem's UUID (read on a short session
// of its own, logged out, then reused), an "on" answer costs nothing extra, and the
// Service hands the UUID on in its Reading.
func TestReadPowerIdentity(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const uuid = "4c4c4544-0037-4a10-8052-b5c04f4e4d01"
	b := startRedfish(t, redfish.Options{SystemUUID: "4C4C4544-0037-4A10-8052-B5C04F4E4D01"})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	read := func() (string, string, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return s.ReadPower(cctx, tgt)
	}

	raw, got, err := read()
	if err != nil || Normalize(raw) != PowerOn || got != "" {
		t.Fatalf("on: %q, %q, %v; want on without an identity read", raw, got, err)
	}
	wantSessions(t, b, "on", 1, 1, 0)

	b.SetPowerState(redfish.PowerOff)
	raw, got, err = read()
	if err != nil || Normalize(raw) != PowerOff || got != uuid {
		t.Fatalf("off: %q, %q, %v; want off from %s", raw, got, err, uuid)
	}
	wantSessions(t, b, "off: the identity session is logged out", 1, 2, 1)
	if _, got, _ = read(); got != uuid {
		t.Fatalf("second off read: %q", got)
	}
	wantSessions(t, b, "the identity is reused", 1, 2, 1)

	svc := NewService(s, Config{CallTimeout: 10 * time.Second, MaxConcurrent: 2, FailureThreshold: 3, BackoffBase: time.Second, BackoffMax: time.Second}, nil)
	r, err := svc.PowerState(ctx, tgt)
	if err != nil || r.State != PowerOff || r.SystemUUID != uuid {
		t.Fatalf("Service reading = %+v, %v", r, err)
	}
}

// TestReadPowerIdentityUnreadable: an off answer whose identity cannot be read is not
// an "off" anyone may act on.
func TestReadPowerIdentityUnreadable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b := startRedfish(t, redfish.Options{})
	tgt := redfishTarget(t, b, b.Password())
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	b.SetPowerState(redfish.PowerOff)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.PowerState(cctx, tgt); err != nil { // the kept session exists
		t.Fatal(err)
	}
	b.SetSessionExhausted(true) // no further login: the identity session cannot open
	_, _, err := s.ReadPower(cctx, tgt)
	if !errors.Is(err, ErrUnknownState) {
		t.Fatalf("ReadPower = %v, want ErrUnknownState", err)
	}
}
