// Package bmc reads servers' power state from their BMCs. Service is the policy layer
// every caller goes through: one serialized connection per BMC, a deadline on every
// call, a global concurrency limit, coalescing of concurrent asks for one host, a short
// cache, and a circuit breaker that backs off a BMC that keeps failing so it cannot
// stall the others. The protocol itself (Redfish, IPMI through bmclib) is behind the
// Driver interface.
package bmc

import (
	"errors"
	"strings"
)

// PowerState is a normalized power state.
type PowerState string

// Power states. Unknown is never a guess for on or off: callers treat it as an error.
const (
	PowerOn            PowerState = "on"
	PowerOff           PowerState = "off"
	PowerTransitioning PowerState = "transitioning"
	PowerUnknown       PowerState = "unknown"
)

// Errors wrapped by what Service returns.
var (
	// ErrUnreachable: the BMC did not answer (connection, TLS, timeout).
	ErrUnreachable = errors.New("BMC unreachable")
	// ErrAuth: the BMC refused the credentials.
	ErrAuth = errors.New("BMC refused the credentials")
	// ErrBackoff: the BMC failed repeatedly and is not asked again until its backoff ends.
	ErrBackoff = errors.New("BMC backed off after repeated failures")
	// ErrUnknownState: the BMC answered, but not with a power state that means on or
	// off (a transitional state, an error status, a system it cannot choose or that
	// reports no PowerState). Not a reachability failure.
	ErrUnknownState = errors.New("power state unknown")
	// ErrAccessDenied: the BMC accepted the login but refuses this account what the
	// read needs (a Redfish session refused right after its login, twice; IPMI
	// completion code 0xD4, insufficient privilege). Not a refused login: it does
	// not count against the failed-login budget. Errors wrapping it also wrap
	// ErrUnknownState (the BMC answered; the power state stays unknown).
	ErrAccessDenied = errors.New("the BMC refuses this account the read (privilege)")
	// ErrNoBMC: the host has no BMC in the inventory.
	ErrNoBMC = errors.New("host has no BMC")
	// ErrBusy: every BMC call slot stayed taken; the BMC was not asked, and this does
	// not count against it.
	ErrBusy = errors.New("too many BMC calls in flight")
	// ErrNoTerm: the call came outside a leadership term (between terms, or while the
	// process stops); the BMC was not asked, and this does not count against it.
	ErrNoTerm = errors.New("no BMC call outside a leadership term (this replica does not lead, or it is stopping)")
)

// Normalize maps what drivers return to a PowerState: ipmitool's "Chassis Power is on",
// Redfish's On/Off/PoweringOn/PoweringOff/Paused, and plain on/off in any case.
func Normalize(raw string) PowerState {
	s := strings.ToLower(strings.TrimSpace(raw))
	s = strings.TrimPrefix(s, "chassis power is ")
	switch s {
	case "on", "poweron", "power on":
		return PowerOn
	case "off", "poweroff", "power off", "soft off", "softoff":
		return PowerOff
	case "poweringon", "poweringoff", "powering on", "powering off", "resetting":
		return PowerTransitioning
	}
	return PowerUnknown
}
