package frr

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExampleParses: docs/configuration.md's frr.conf (Example) is valid for FRR 8.4's vtysh.
func TestExampleParses(t *testing.T) {
	if _, err := exec.LookPath("vtysh"); err != nil {
		t.Skip("vtysh not installed (hack/deps.sh installs frr)")
	}
	ex, err := Example()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "frr.conf")
	if err := os.WriteFile(f, []byte(ex), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("vtysh", "--dryrun", "--inputfile", f).CombinedOutput(); err != nil {
		t.Fatalf("vtysh --dryrun: %v\n%s\n%s", err, out, ex)
	}
}

// TestDocsShowExample: docs/configuration.md (Router configuration) shows Example
// verbatim, so what it tells operators is what the tests run (the same template).
func TestDocsShowExample(t *testing.T) {
	ex, err := Example()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```\n"+ex+"```\n") {
		t.Errorf("docs/configuration.md does not show frr.Example() verbatim in a ``` block; paste this:\n%s", ex)
	}
}
