package bird

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExampleParses: the README's bird.conf (Example) is valid for BIRD 2.
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

// TestREADMEShowsExample: the project README shows Example verbatim, so what it
// tells operators is what the tests run (the same template).
func TestREADMEShowsExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```\n"+Example()+"```\n") {
		t.Errorf("README.md does not show bird.Example() verbatim in a ``` block; paste this:\n%s", Example())
	}
}
