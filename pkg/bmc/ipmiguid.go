package bmc

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
			return "", fmt.Errorf("%w: ipmitool %s: no answer: %w", ErrUnreachable, strings.Join(args, " "), ctx.Err())
		}
		msg := oneLine(stderr.String() + " " + stdout.String())
		return stdout.String(), classify(fmt.Errorf("ipmitool %s: %s (%w)", strings.Join(args, " "), msg, err))
	}
	return stdout.String(), nil
}

// ipmiPowerStatus reads the chassis power state with one ipmitool run (one RMCP+
// login): "Chassis Power is on".
func ipmiPowerStatus(ctx context.Context, t Target, creds Credentials) (string, error) {
	out, err := ipmitool(ctx, t, creds, "chassis", "power", "status")
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
func ipmiSystemGUID(ctx context.Context, t Target, creds Credentials) (string, error) {
	out, err := ipmitool(ctx, t, creds, "raw", "0x06", "0x37")
	if err != nil {
		if strings.Contains(err.Error(), "Invalid command") || strings.Contains(err.Error(), "rsp=0xc1") {
			return "", nil // optional command, not implemented: no evidence either way
		}
		return "", err
	}
	return parseRawGUID(out)
}

// parseRawGUID turns ipmitool's raw output (" 2c c4 db 75 ... a0 d5") into a UUID
// string; all zeros or all ones (no GUID set) is "".
func parseRawGUID(out string) (string, error) {
	b, err := hex.DecodeString(strings.Join(strings.Fields(out), ""))
	if err != nil || len(b) != 16 {
		return "", fmt.Errorf("%w: Get System GUID answered %q, not 16 bytes", ErrUnknownState, oneLine(out))
	}
	if bytes.Equal(b, make([]byte, 16)) || bytes.Equal(b, bytes.Repeat([]byte{0xff}, 16)) {
		return "", nil
	}
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], nil
}

// oneLine joins the lines of a tool's output, so it fits one log line or event.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
