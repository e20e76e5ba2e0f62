package redfish

import "testing"

// StartForTest starts a BMC for t and, when t ends, fails t unless every
// session created on the BMC has ended (CheckSessions), then closes the BMC.
// The check runs after t's deferred calls and after every cleanup t registers
// later (a client's Close, typically), so it sees what the client left
// behind. Use it for every emulator a test starts: sessions opened equal
// sessions closed is then asserted in all of them.
func StartForTest(t testing.TB, opts Options) *BMC {
	t.Helper()
	b := NewBMC(opts)
	if err := b.Start(); err != nil {
		t.Fatalf("starting the Redfish emulator: %v", err)
	}
	t.Cleanup(b.Close)
	t.Cleanup(func() {
		if err := b.CheckSessions(); err != nil {
			t.Errorf("session leak: %v", err)
		}
	})
	return b
}
