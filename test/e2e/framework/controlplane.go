package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ControlPlane is an etcd + kube-apiserver pair on 127.0.0.1 run by
// hack/lab/control-plane.sh. Kubeconfig authenticates as a system:masters admin.
type ControlPlane struct {
	Dir        string
	Kubeconfig string
	RESTConfig *rest.Config
	Client     kubernetes.Interface

	script string

	mu sync.Mutex
	// restarts are the periods from the start of each RestartAPIServer to one second
	// after the restarted API server was ready.
	restarts [][2]time.Time
}

// restarting reports whether t lies in a restart of the API server: a starting API
// server answers 401 or 403 until its authenticators and RBAC caches are filled, so a
// "forbidden" logged then says nothing about a missing permission.
func (cp *ControlPlane) restarting(t time.Time) bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, r := range cp.restarts {
		if !t.Before(r[0]) && !t.After(r[1]) {
			return true
		}
	}
	return false
}

// StartControlPlane runs `hack/lab/control-plane.sh up dir` and returns once /readyz is
// OK. It never builds Kubernetes: missing etcd or kube binaries are an error saying
// what to install or run. The control plane is stopped when the test binary exits,
// even if Stop is not called.
func StartControlPlane(ctx context.Context, dir string) (*ControlPlane, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("control plane dir: %w", err)
	}
	cp := &ControlPlane{
		Dir:        dir,
		Kubeconfig: filepath.Join(dir, "admin.kubeconfig"),
		script:     filepath.Join(root, "hack", "lab", "control-plane.sh"),
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// On failure, down also cleans up after an up that was killed by ctx.
	fail := func(err error) (*ControlPlane, error) {
		if stopErr := cp.Stop(); stopErr != nil {
			err = fmt.Errorf("%w (and %w)", err, stopErr)
		}
		return nil, err
	}
	if err := cp.run(ctx, "up", "LAB_NO_BUILD=1", "LAB_OWNER_PID="+strconv.Itoa(os.Getpid())); err != nil {
		return fail(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		return fail(fmt.Errorf("control plane client config from %s: %w", cp.Kubeconfig, err))
	}
	cfg.QPS, cfg.Burst = 100, 200
	cp.RESTConfig = cfg
	if cp.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return fail(fmt.Errorf("control plane client: %w", err))
	}
	// The project's CRDs, as an operator applies them before the CCM.
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fail(err)
	}
	if err := InstallCRDs(ctx, dyn, nil, filepath.Join(root, "packaging", "kubernetes", "crds.yaml")); err != nil {
		return fail(err)
	}
	return cp, nil
}

// Stop runs `hack/lab/control-plane.sh down`: it stops etcd and kube-apiserver and
// removes their data. It is idempotent.
func (cp *ControlPlane) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return cp.run(ctx, "down")
}

// run runs the script with a subcommand and extra environment; the error carries the
// script's stderr (which holds the log tail when startup fails).
func (cp *ControlPlane) run(ctx context.Context, sub string, env ...string) error {
	cmd := exec.CommandContext(ctx, "bash", cp.script, sub, cp.Dir)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s %s: %w\n%s", cp.script, sub, cp.Dir, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
