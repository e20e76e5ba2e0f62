package bmc

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// ipmitool runs one ipmitool command against t's BMC over the interface and cipher
// suite real BMCs and ipmi_sim accept (lanplus, suite 3), within ctx's deadline, with
// the password in the environment (-E), never on the command line where other users
// could read it. Its error is one line: ErrAuth when ipmitool's words say the BMC
// refused the user or password, ErrUnreachable otherwise (ipmitool prints the same
// for both unless verbose).
func ipmitool(ctx context.Context, t Target, creds Credentials, args ...string) (string, error) {
	limit := noAnswerWithin(ctx)
	port := "623"
	if t.Port != 0 {
		port = strconv.Itoa(int(t.Port))
	}
	argv := append([]string{"-v", "-I", "lanplus", "-C", "3", "-H", t.Address, "-p", port, "-U", creds.Username, "-E"}, args...)
	cmd := exec.CommandContext(ctx, "ipmitool", argv...)
	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+creds.Password)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("%w: ipmitool is not installed (Debian: apt-get install ipmitool)", ErrUnreachable)
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("%w: ipmitool %s: %s: %w", ErrUnreachable, strings.Join(args, " "), limit, ctx.Err())
		}
		msg := oneLine(stderr.String() + " " + stdout.String())
		if ipmiPrivilegeRE.MatchString(msg) {
			// The session was opened (the credentials were accepted), but the
			// account may not run this command: completion code 0xD4.
			return stdout.String(), fmt.Errorf("%w (%w): ipmitool %s: %s (%w)", ErrAccessDenied, ErrUnknownState, strings.Join(args, " "), msg, err)
		}
		return stdout.String(), classify(fmt.Errorf("ipmitool %s: %s (%w)", strings.Join(args, " "), msg, err))
	}
	return stdout.String(), nil
}

// ipmiPrivilegeRE matches ipmitool's words for completion code 0xD4 (insufficient
// privilege level), for a command or for the session's privilege level.
var ipmiPrivilegeRE = regexp.MustCompile(`(?i)(rsp=0xd4\b|insufficient privilege)`)

// ipmiRunner runs one ipmitool command (ipmitool; a fake in tests).
type ipmiRunner func(ctx context.Context, t Target, creds Credentials, args ...string) (string, error)

// ipmiPowerStatus reads the chassis power state with one ipmitool run (one RMCP+
// login): "Chassis Power is on".
func ipmiPowerStatus(ctx context.Context, run ipmiRunner, t Target, creds Credentials) (string, error) {
	out, err := run(ctx, t, creds, "chassis", "power", "status")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// ipmiSystemGUID reads the managed system's GUID with IPMI's Get System GUID command
// (NetFn App 0x06, command 0x37) through the ipmitool binary, over the same interface
// and cipher suite as bmclib's ipmitool driver (lanplus, suite 3), within ctx's
// deadline. The password goes in the environment (-E), never on the command line where
// other users could read it. The 16 bytes are returned in the order the BMC sent them,
// formatted as a UUID; SameSystemUUID compares them in every byte order BMCs use. A BMC
// that answers "invalid command" (the command is optional) reports "".
func ipmiSystemGUID(ctx context.Context, run ipmiRunner, t Target, creds Credentials) (string, error) {
	out, err := run(ctx, t, creds, "raw", "0x06", "0x37")
	if err != nil {
		// Only the answer to this very command counts: with -v, ipmitool also
		// prints "Invalid command" for the optional commands it probes at login
		// (Get VSO Capabilities) on any BMC, whatever happened next.
		if guidNotImplementedRE.MatchString(err.Error()) {
			return "", nil // optional command, not implemented: no evidence either way
		}
		return "", err
	}
	return parseRawGUID(out)
}

// guidNotImplementedRE matches ipmitool's words for Get System GUID answered with
// completion code 0xC1 (invalid command).
var guidNotImplementedRE = regexp.MustCompile(`(?i)cmd=0x37 rsp=0xc1\b`)

// parseRawGUID turns ipmitool's raw output (" 2c c4 db 75 ... a0 d5") into a UUID
// string; a placeholder (inventory.IsPlaceholderUUID, in any byte order: no GUID
// set) is "".
func parseRawGUID(out string) (string, error) {
	b, err := hex.DecodeString(strings.Join(strings.Fields(out), ""))
	if err != nil || len(b) != 16 {
		return "", fmt.Errorf("%w: Get System GUID answered %q, not 16 bytes", ErrUnknownState, oneLine(out))
	}
	h := hex.EncodeToString(b)
	return canonicalUUID(h), nil
}

// oneLine joins the lines of a tool's output, so it fits one log line or event.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
