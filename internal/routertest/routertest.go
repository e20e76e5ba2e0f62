// Package routertest is the scaffolding that the tests of the lab routers
// (test/frr and test/bird) share: the OPEN their raw BGP speaker sends, its
// session to a router, NOTIFICATIONs sent and received on it, waiting for what
// the router logs or reports, and the checks of PauseBGP.
//
// Guarantees:
//   - Every wait is bounded by the caller's context.
//   - A helper that takes a testing.TB fails the test (Fatal) when it cannot do
//     what it says, and closes what it opened at the test's cleanup.
package routertest

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/bgptest"
)

// SpeakerASN is the lab routers' default AS number of a speaker.
const SpeakerASN = 65000

// SpeakerOpen returns the OPEN of a raw speaker with BGP identifier id: AS
// SpeakerASN, hold time 90 s, IPv4 and IPv6 unicast and 4-octet AS numbers. With
// nBit it also has the graceful-restart capability (restart time 120 s, IPv4
// unicast without the F bit) with the N bit (RFC 8538), so that the router takes
// a Cease/Hard Reset as one.
func SpeakerOpen(id netip.Addr, nBit bool) bgptest.Open {
	o := bgptest.Open{ASN: SpeakerASN, RouterID: id, HoldTime: 90, FourOctetAS: true,
		Families: []bgptest.Family{bgptest.IPv4Unicast, bgptest.IPv6Unicast}}
	if nBit {
		o.GracefulRestart = &bgptest.GracefulRestart{Time: 120, Notification: true,
			Families: []bgptest.GRFamily{{Family: bgptest.IPv4Unicast}}}
	}
	return o
}

// Attempt bounds each of Connect's attempts to establish a session.
const Attempt = 3 * time.Second

// Connect connects a raw speaker from local to the router at remote with o
// (bgptest.Connect, attempts of Attempt each until ctx ends: a router refuses a
// neighbor for a moment after each session), fails t if no attempt succeeds, and
// closes the session at t's cleanup. The session sends no KEEPALIVEs.
func Connect(ctx context.Context, t testing.TB, local netip.Addr, remote netip.AddrPort, o bgptest.Open) *bgptest.Session {
	t.Helper()
	s, _, err := bgptest.Connect(ctx, local, remote.String(), o, Attempt)
	if err != nil {
		t.Fatalf("BGP session from %s to %s: %v", local, remote, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Notify sends the NOTIFICATION msg on s and waits until the router closes the
// connection, which tells that it has read the message; it fails t if sending
// fails or ctx ends first.
func Notify(ctx context.Context, t testing.TB, s *bgptest.Session, msg []byte) {
	t.Helper()
	if err := s.Send(msg); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitClosed(ctx); err != nil {
		t.Fatalf("the router did not close the connection after the NOTIFICATION: %v", err)
	}
}

// ExpectNotification waits for the router's NOTIFICATION on s and fails t
// unless it has the code, subcode and data given.
func ExpectNotification(ctx context.Context, t testing.TB, s *bgptest.Session, code, subcode uint8, data []byte) {
	t.Helper()
	n, err := s.WaitNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Code != code || n.Subcode != subcode || !bytes.Equal(n.Data, data) {
		t.Errorf("on the wire: NOTIFICATION %d/%d data % x, want %d/%d data % x", n.Code, n.Subcode, n.Data, code, subcode, data)
	}
}
