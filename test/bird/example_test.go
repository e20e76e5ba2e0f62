package bird

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExampleParses: docs/configuration.md's bird.conf (Example) is valid for BIRD 2.
func TestExampleParses(t *testing.T) {
	if _, err := exec.LookPath("bird"); err != nil {
		t.Skip("bird not installed (hack/deps.sh installs bird2)")
	}
	f := filepath.Join(t.TempDir(), "bird.conf")
	if err := os.WriteFile(f, []byte(Example()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bird", "-p", "-c", f).CombinedOutput(); err != nil {
		t.Fatalf("bird -p: %v\n%s\n%s", err, out, Example())
	}
}

// TestDocsShowExample: docs/configuration.md (Router configuration) shows Example
// verbatim, so what it tells operators is what the tests run (the same template).
func TestDocsShowExample(t *testing.T) {
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```\n"+Example()+"```\n") {
		t.Errorf("docs/configuration.md does not show bird.Example() verbatim in a ``` block; paste this:\n%s", Example())
	}
}
