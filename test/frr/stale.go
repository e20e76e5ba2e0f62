package frr

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/baremetal-ccm/baremetal-ccm/internal/procsignal"
)

// A test binary that dies without running its cleanups (go test -timeout panic,
// SIGKILL) leaves its namespace, veth and directory behind; the daemons die with
// it (Pdeathsig). Every Router records what it created in stateDir, with the
// owner's PID and start time and the daemons' PIDs and start times; Start removes
// what dead owners left. Only resources this package created and recorded are
// ever touched.
var stateDir = filepath.Join(os.TempDir(), "bccm-frr-state")

// record is one Router's ownership record.
type record struct {
	PID       int           `json:"pid"`
	Start     string        `json:"start"`
	Namespace string        `json:"namespace"`
	Veth      string        `json:"veth"`
	VethNetns string        `json:"vethNetns,omitempty"`
	Dir       string        `json:"dir"`
	Daemons   []daemonEntry `json:"daemons,omitempty"`
}

type daemonEntry struct {
	Name  string `json:"name"`
	PID   int    `json:"pid"`
	Start string `json:"start"`
}

// record writes r's ownership record (again, after a daemon started).
func (r *Router) record() error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	pid := os.Getpid()
	rec := record{PID: pid, Start: procsignal.StartTime(pid), Namespace: r.Namespace, Veth: r.HostInterface, VethNetns: r.opts.SpeakerNetns, Dir: r.dir}
	r.mu.Lock()
	for _, d := range r.daemons {
		rec.Daemons = append(rec.Daemons, daemonEntry{d.name, d.cmd.Process.Pid, d.proc.StartTime()})
	}
	r.mu.Unlock()
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := filepath.Join(stateDir, "."+r.Namespace)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(stateDir, r.Namespace))
}

func (r *Router) unrecord() { _ = os.Remove(filepath.Join(stateDir, r.Namespace)) }

// sweepStale removes what test processes that no longer run recorded: daemons
// still running (same PID and start time), FRR's per-process directories under
// /var/tmp/frr, veths, namespaces and directories.
func sweepStale(ctx context.Context) {
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		file := filepath.Join(stateDir, e.Name())
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		var rec record
		if json.Unmarshal(b, &rec) != nil || !strings.HasPrefix(rec.Namespace, "bccm-frr-") || rec.Namespace != e.Name() {
			continue
		}
		if st := procsignal.StartTime(rec.PID); st != "" && st == rec.Start {
			continue // owner alive
		}
		for _, d := range rec.Daemons {
			if d.PID > 0 && d.Start != "" && procsignal.StartTime(d.PID) == d.Start {
				_ = syscall.Kill(d.PID, syscall.SIGKILL)
			}
			_ = os.RemoveAll(fmt.Sprintf("/var/tmp/frr/%s.%d", d.Name, d.PID))
		}
		if strings.HasPrefix(rec.Veth, "bfrr") {
			if rec.VethNetns != "" {
				_, _ = run(ctx, "ip", "-n", rec.VethNetns, "link", "del", rec.Veth)
			} else {
				_, _ = run(ctx, "ip", "link", "del", rec.Veth)
			}
		}
		_, _ = run(ctx, "ip", "netns", "del", rec.Namespace)
		if strings.HasPrefix(filepath.Base(rec.Dir), "bccm-frr-") {
			_ = os.RemoveAll(rec.Dir)
		}
		_ = os.Remove(file)
	}
}
