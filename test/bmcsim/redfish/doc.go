// Package redfish emulates a Redfish BMC (DMTF DSP0266) managing one server
// (or several ComputerSystems, Options.Systems), for tests of code that drives BMCs through bmclib's "gofish" provider
// (github.com/stmcginnis/gofish) or any other Redfish client.
//
// A BMC serves, on a loopback address only, over TLS with a certificate from
// a generated CA (or plain HTTP):
//
//	GET    /redfish                                        version document (no auth)
//	GET    /redfish/v1/                                    ServiceRoot (no auth)
//	GET    /redfish/v1/SessionService
//	POST   /redfish/v1/SessionService/Sessions             login (no auth): 201, X-Auth-Token, Location
//	GET    /redfish/v1/SessionService/Sessions
//	GET    /redfish/v1/SessionService/Sessions/{id}
//	DELETE /redfish/v1/SessionService/Sessions/{id}        logout
//	GET    /redfish/v1/Systems, /redfish/v1/Systems/{id}   ComputerSystem with PowerState and an ETag
//	POST   /redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset
//	GET    /redfish/v1/Systems/{id}/OperatingSystem         with Options.ModernSchema only
//	GET    /redfish/v1/Managers, /redfish/v1/Managers/{id}
//	POST   /redfish/v1/Managers/{id}/Actions/Manager.Reset  ends every session (a BMC reboot)
//	GET    /redfish/v1/Chassis, /redfish/v1/Chassis/{id}
//
// Every GET also answers HEAD, and a trailing slash is optional everywhere.
// Any other path answers 404 (401 first without credentials: bmclib's
// "openbmc" driver probes GET / and must not mistake the emulator for an
// OpenBMC). Every resource but the three public ones needs HTTP
// Basic credentials or a session's X-Auth-Token, and answers 401 with a
// Redfish error body and WWW-Authenticate otherwise. Errors are Redfish error
// bodies citing the DMTF Base registry.
//
// Guarantees:
//   - ComputerSystem.Reset really changes the power state that later GETs
//     and PowerState report, through PoweringOn/PoweringOff for
//     Options.TransitionDelay per step when it is set. The state machine is
//     evaluated against the clock: it uses no timers or goroutines.
//   - Logins beyond Options.MaxSessions are refused with
//     Options.SessionLimitStatus (503, like iDRAC) and a SessionLimitExceeded
//     body; ActiveSessions, SessionsCreated and SessionsDeleted let a test
//     prove that a client never leaks sessions.
//   - Shapes of real services, each off by default: several systems behind
//     one BMC, possibly sharing a Name, each with its own power state and
//     Reset, one possibly without PowerState (Options.Systems, as DMTF's
//     bladed mockup); fields of ComputerSystem v1_22 that older clients
//     mis-decode (Options.ModernSchema: OperatingSystem, BootProgress and
//     Composition objects, PowerMode); a service without SessionService,
//     Basic auth only (Options.NoSessionService); a client IP locked out
//     after Options.LockoutAfter bad credentials, as iDRAC does, for
//     Options.LockoutDuration by the BMC's clock; a login whose answer comes
//     Options.LoginDelay after its session was created; a login answered
//     without X-Auth-Token or without Location (Options.LoginOmitsToken,
//     LoginOmitsLocation; DSP0266 requires both, the body's @odata.id still
//     names the session); ServiceRoot links to other hosts
//     (Options.RootLinks); UUIDs in any written form (SystemSpec.UUID is
//     served verbatim: upper case, without hyphens, in SMBIOS byte order).
//   - Every session ends by a DELETE, SessionTimeout, or a BMC reset
//     (ExpireSessions, Manager.Reset); CheckSessions says whether all did,
//     and StartForTest asserts it at the end of every test that uses it.
//   - Fault switches (SetLatency, SetHang, SetFailStatus, SetMalformed,
//     SetSessionExhausted, SetRejectSessionTokens: 401 for valid tokens, as
//     right after a login on a BMC whose session table lags) can be flipped at any time from any goroutine.
//   - Close closes the listener and every connection, ends hung and delayed
//     requests, and returns only once the server goroutine and every handler
//     have returned and every connection is closed: the BMC leaves no
//     goroutine behind.
package redfish
