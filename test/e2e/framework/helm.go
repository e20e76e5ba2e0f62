package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Helm is a Helm binary of hack/build-helm.sh, run with its own cache, configuration
// and data directories (nothing in $HOME).
type Helm struct {
	Version string // v4.3.1
	Path    string
	home    string
}

// Helms returns the Helms hack/build-helm.sh builds, newest major first (Helm 4, then
// 3). It never builds one: a missing Helm fails the test, saying what to run.
func Helms(t testing.TB) []*Helm {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "hack", "build-helm.sh"))
	cmd.Env = append(os.Environ(), "HELM_NO_BUILD=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/build-helm.sh: %v: %s(run make deps)", err, stderr.String())
	}
	var hs []*Helm
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		v, p, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("hack/build-helm.sh printed %q", line)
		}
		hs = append(hs, &Helm{Version: v, Path: p, home: t.TempDir()})
	}
	return hs
}

// Run runs helm with args against the control plane's admin kubeconfig and returns
// its combined output; the error carries it.
func (h *Helm) Run(ctx context.Context, cp *ControlPlane, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	args = append([]string{"--kubeconfig", cp.Kubeconfig}, args...)
	cmd := exec.CommandContext(ctx, h.Path, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_DATA_HOME="+filepath.Join(h.home, "data"),
	)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
