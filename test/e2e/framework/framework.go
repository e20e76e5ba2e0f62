// Package framework runs the baremetal CCM end to end against a throwaway control plane
// (etcd + kube-apiserver on 127.0.0.1, see hack/lab/control-plane.sh): it builds the
// CCM binary, starts it as a separate process, and plays the kubelet by creating Nodes.
//
// Everything it starts listens on 127.0.0.1 only and is stopped by the PID it recorded;
// processes die with the test binary even when it is killed.
package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// shared is the state of RunMain; it is written once before the tests run.
var shared struct {
	cp     *ControlPlane
	ccmBin string
	tmp    string
	// ccmKubeconfig authenticates as the ServiceAccount bound by the packaged RBAC.
	ccmKubeconfig string
}

// RunMain is for TestMain: it builds the CCM binary once, starts one control plane
// shared by the package's tests, runs them, stops everything and returns the exit code:
//
//	func TestMain(m *testing.M) { os.Exit(framework.RunMain(m)) }
//
// On SIGINT or SIGTERM it stops the control plane and removes its files before exiting.
func RunMain(m *testing.M) int {
	sweepStale()
	tmp, err := os.MkdirTemp("", tmpPrefix)
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	var (
		mu      sync.Mutex // guards cp and cleaned against the signal handler
		cp      *ControlPlane
		cleaned bool
	)
	cleanup := func() {
		mu.Lock()
		defer mu.Unlock()
		if cleaned {
			return
		}
		cleaned = true
		if cp != nil {
			if err := cp.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			}
		}
		os.RemoveAll(tmp)
	}
	defer cleanup()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		fmt.Fprintf(os.Stderr, "e2e: %v: stopping the control plane\n", <-sig)
		cleanup()
		os.Exit(1)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	shared.tmp = tmp
	start := time.Now()
	bin, err := BuildBinary(ctx, "./cmd/baremetal-cloud-controller-manager")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	built := time.Since(start)
	start = time.Now()
	started, err := StartControlPlane(ctx, filepath.Join(tmp, "control-plane"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	mu.Lock()
	cp = started
	mu.Unlock()
	ccmKubeconfig := filepath.Join(tmp, "ccm.kubeconfig")
	if err := ApplyPackagedRBAC(ctx, started, ccmKubeconfig); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	shared.cp, shared.ccmBin, shared.ccmKubeconfig = started, bin, ccmKubeconfig
	fmt.Printf("e2e: CCM built in %s, control plane up in %s (%s)\n",
		built.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond), started.RESTConfig.Host)
	return m.Run()
}

// Shared returns the control plane RunMain started. It panics without RunMain.
func Shared() *ControlPlane {
	if shared.cp == nil {
		panic("framework.Shared: call framework.RunMain from TestMain")
	}
	return shared.cp
}

// CCMKubeconfig returns the kubeconfig StartCCM gives the CCM: the ServiceAccount bound
// only by packaging/kubernetes/rbac.yaml. It panics without RunMain.
func CCMKubeconfig() string {
	if shared.ccmKubeconfig == "" {
		panic("framework.CCMKubeconfig: call framework.RunMain from TestMain")
	}
	return shared.ccmKubeconfig
}

// CCMBinary returns the path of the CCM binary RunMain built. It panics without RunMain.
func CCMBinary() string {
	if shared.ccmBin == "" {
		panic("framework.CCMBinary: call framework.RunMain from TestMain")
	}
	return shared.ccmBin
}

const tmpPrefix = "baremetal-ccm-e2e-"

// sweepStale removes the temp dirs of earlier runs that were killed (a timeout panic
// skips RunMain's cleanup): their owner is gone and their control plane is stopped
// (no PID files left; the control plane's watcher stops it within a second).
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tmpPrefix+"*"))
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(string(data))
		if err != nil || processAlive(pid) {
			continue
		}
		if pids, _ := filepath.Glob(filepath.Join(d, "control-plane", "*.pid")); len(pids) == 0 {
			os.RemoveAll(d)
		}
	}
}

// ModuleRoot returns the directory of the go.mod enclosing the working directory (a
// test's working directory is its package directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod in %s or any parent directory", dir)
		}
	}
}

// BuildBinary runs `go build` on pkg (a path relative to the module root, such as
// "./cmd/baremetal-cloud-controller-manager") into RunMain's temp dir, which RunMain
// removes at the end, and returns the binary's path. It builds as `make build` and the
// packages do (CGO_ENABLED=0, -trimpath, -ldflags "-s -w"), so the tests and the
// benchmarks run what is shipped.
func BuildBinary(ctx context.Context, pkg string) (string, error) {
	if shared.tmp == "" {
		return "", errors.New("framework.BuildBinary: call framework.RunMain from TestMain")
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(shared.tmp, "bin-")
	if err != nil {
		return "", fmt.Errorf("building %s: %w", pkg, err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s (in %s): %w\n%s", pkg, root, err, out)
	}
	return bin, nil
}
