package ipmi_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/ipmi"
)

// TestRefuseAndGUIDs: a lab answers Get System GUID with the bytes a test chose, and
// its ToolDir ipmitool shows a refused command as a BMC's completion code 0xD4 looks
// through ipmitool, after a real login (a wrong password still fails at the login),
// while other commands reach the BMC.
func TestRefuseAndGUIDs(t *testing.T) {
	const guid = "014d4e4f-c0b5-5280-4a10-00374c4c4544"
	lab := startLab(t, 2, ipmi.Options{SystemGUIDs: []string{guid}, Refuse: []ipmi.Refusal{{NetFn: 0x06, Cmd: 0x37, Code: 0xd4}}})
	b := lab.BMCs()[0]
	if b.SystemGUID() != guid {
		t.Fatalf("SystemGUID = %s, want %s", b.SystemGUID(), guid)
	}
	if out, code := ipmitool(t, b, "raw", "0x06", "0x37"); code != 0 || strings.Join(strings.Fields(out), "") != strings.ReplaceAll(guid, "-", "") {
		t.Fatalf("the real ipmitool: Get System GUID = %q (exit %d), want %s", out, code, guid)
	}
	if lab.BMCs()[1].SystemGUID() == guid {
		t.Error("the second BMC got the first one's GUID")
	}
	shim := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
		defer cancel()
		out, err := exec.CommandContext(ctx, filepath.Join(lab.ToolDir(), "ipmitool"), args...).CombinedOutput()
		return string(out), err
	}
	out, err := shim(append(b.IPMIToolArgs(), "raw", "0x06", "0x37")...)
	if err == nil || !strings.Contains(out, "rsp=0xd4): Insufficient privilege level") {
		t.Fatalf("refused command: %q, %v; want ipmitool's 0xD4 error", out, err)
	}
	if out, err := shim(append(b.IPMIToolArgs(), "chassis", "power", "status")...); err != nil || !strings.Contains(out, "Chassis Power is") {
		t.Fatalf("other commands: %q, %v", out, err)
	}
	wrong := b.IPMIToolArgs()
	wrong[len(wrong)-1] = "wrong-pw"
	if out, err := shim(append(append([]string{"-N", "1", "-R", "1"}, wrong...), "raw", "0x06", "0x37")...); err == nil || strings.Contains(out, "rsp=0xd4") {
		t.Fatalf("wrong password: %q, %v; want the login's failure, not the refusal", out, err)
	}
}
