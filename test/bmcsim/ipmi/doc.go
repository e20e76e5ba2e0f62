// Package ipmi runs real IPMI BMC simulators (ipmi_sim from the Debian
// package openipmi) for tests of code that drives BMCs over IPMI v2.0 / RMCP+
// ("ipmitool -I lanplus", bmclib's ipmitool provider).
//
// Start launches n ipmi_sim processes, one simulated BMC each, on 127.0.0.1
// and distinct free UDP ports. Each BMC's chassis power lives in a plain file
// that the BMC reads and writes through an embedded chassis-control script,
// so a test sees what IPMI did (Power, Calls) and can change the host behind
// the BMC's back (SetPower).
//
// Layout under the directory given to Start:
//
//	chassis.sh, bmc.emu          the embedded assets (chassis.sh executable)
//	bmc<i>/lan.conf              ipmi_sim configuration (port, user, guid)
//	bmc<i>/state/                ipmi_sim's persistent state (-s)
//	bmc<i>/chassis/power         "1" or "0": the host's power
//	bmc<i>/chassis/boot          next boot device ("none", "pxe", ...)
//	bmc<i>/chassis/calls.log     one line per chassis call ipmi_sim made
//	bmc<i>/sim.log               ipmi_sim's stdout and stderr, every run
//
// Guarantees:
//   - Everything listens on 127.0.0.1 only.
//   - When Start returns without error, every BMC has answered a real
//     "ipmitool -I lanplus -C 3 ... chassis power status" with the configured
//     credentials, and its UDP port is bound by the ipmi_sim process the Lab
//     started (checked through /proc, so a port taken by a stranger between
//     the probe for a free port and ipmi_sim's bind is detected and another
//     port is tried).
//   - The Lab signals only the PIDs it started, and reaps every one of them.
//     Stop leaves none of them running; so do Kill (for one BMC) and a failed
//     Start or Restart (for what they started).
//   - Every ipmi_sim gets SIGKILL if the test binary dies (Linux
//     PR_SET_PDEATHSIG). Processes are forked from one dedicated OS thread
//     that never exits, because the kernel sends that signal when the forking
//     thread exits, not the process (https://go.dev/issue/27505): a goroutine
//     elsewhere in the test binary that exits while locked to its thread
//     cannot take the BMCs down with it.
//
// Options.SystemGUIDs sets the bytes each BMC answers Get System GUID with (any
// byte order). Options.Refuse makes commands fail with a completion code (0xD4,
// insufficient privilege, as for an account below the command's privilege):
// ipmi_sim has no per-command privilege settings, so Lab.ToolDir holds an
// ipmitool that logs in like the real one and then prints the real one's words for
// that code; put it first in PATH.
//
// ipmi_sim quirks this package works around or exposes:
//   - ipmitool's default cipher suite (17) is refused: use "-C 3", as
//     BMC.IPMIToolArgs does.
//   - A user name of 16 bytes or a password of 20 bytes is accepted in
//     lan.conf but every RMCP+ login then fails; Start refuses them.
//   - ipmitool gives the same message and exit status 1 for a wrong password
//     and for a BMC that does not answer ("Error: Unable to establish IPMI v2
//     / RMCP+ session"); only with -v do they differ ("RAKP 2 HMAC is
//     invalid" / "RAKP 2 message indicates an error : unauthorized name"
//     versus "Get Auth Capabilities error").
package ipmi
