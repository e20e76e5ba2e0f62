package bmc

import (
	"context"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
)

// TestReadPowerIdentity: through the CCM's Redfish driver against the emulator, every
// reading carries the ComputerSystem's UUID from the same GET that reads its power
// (no session of its own, no extra request), and the Service hands it on in its
// Reading.
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
	if err != nil || Normalize(raw) != PowerOn || got != uuid {
		t.Fatalf("on: %q, %q, %v; want on from %s", raw, got, err, uuid)
	}
	b.SetPowerState(redfish.PowerOff)
	raw, got, err = read()
	if err != nil || Normalize(raw) != PowerOff || got != uuid {
		t.Fatalf("off: %q, %q, %v; want off from %s", raw, got, err, uuid)
	}
	wantSessions(t, b, "one session for both reads", 1, 1, 0)

	svc := NewService(s, Config{CallTimeout: 10 * time.Second, MaxConcurrent: 2, FailureThreshold: 3, BackoffBase: time.Second, BackoffMax: time.Second}, nil)
	r, err := svc.PowerState(ctx, tgt)
	if err != nil || r.State != PowerOff || r.SystemUUID != uuid {
		t.Fatalf("Service reading = %+v, %v", r, err)
	}
}
