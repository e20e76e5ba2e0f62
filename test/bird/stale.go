package bird

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/baremetal-ccm/baremetal-ccm/internal/procsignal"
)

// A test binary that dies without running its cleanups (go test -timeout panic,
// SIGKILL) leaves its namespace and veth behind; BIRD itself dies with it
// (Pdeathsig). Every Router records what it created in stateDir, with the owner's
// PID and start time; Start removes what dead owners left. Only resources this
// package created and recorded are ever touched.
var stateDir = filepath.Join(os.TempDir(), "bccm-bird-state")

// record writes the ownership record of r (namespace, veth, dir).
func (r *Router) record() error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	pid := os.Getpid()
	rec := fmt.Sprintf("%d %s %s %s %s\n", pid, procsignal.StartTime(pid), r.Namespace, r.HostInterface, r.dir)
	return os.WriteFile(filepath.Join(stateDir, r.Namespace), []byte(rec), 0o600)
}

func (r *Router) unrecord() { _ = os.Remove(filepath.Join(stateDir, r.Namespace)) }

// sweepStale removes the namespaces, veths and directories recorded by test
// processes that no longer run.
func sweepStale(ctx context.Context) {
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		file := filepath.Join(stateDir, e.Name())
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) != 5 || !strings.HasPrefix(f[2], "bccm-") || !strings.HasPrefix(f[3], "bccm") {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || (procsignal.StartTime(pid) != "" && procsignal.StartTime(pid) == f[1]) {
			continue // owner alive
		}
		_, _ = run(ctx, "ip", "link", "del", f[3])
		_, _ = run(ctx, "ip", "netns", "del", f[2])
		if strings.HasPrefix(filepath.Base(f[4]), "bccm-bird-") {
			_ = os.RemoveAll(f[4])
		}
		_ = os.Remove(file)
	}
}
