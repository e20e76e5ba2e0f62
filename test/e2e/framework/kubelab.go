package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// KubeLab is a control plane of its own for tests with real kubelets (see KubeNode): etcd
// and kube-apiserver (hack/lab/control-plane.sh) with the packaged RBAC applied, so the
// Nodes, pods and leases of those tests never mix with the shared control plane's. It
// also knows where the binaries those tests run are: kubelet, kube-controller-manager,
// kube-scheduler (hack/build-kube.sh), containerd (same script), runc and the CNI
// plugins (Debian's runc and containernetworking-plugins).
type KubeLab struct {
	CP *ControlPlane
	// KubeBin holds kubelet, kube-controller-manager and kube-scheduler;
	// ContainerdBin containerd, containerd-shim-runc-v2 and ctr.
	KubeBin, ContainerdBin string
	// Runc and CNIBin are Debian's runc and CNI plugins.
	Runc, CNIBin string
	// Pause is the pod sandbox image (framework/pause), imported into every node.
	Pause Image
	// Ctl is the baremetal-ccmctl binary.
	Ctl string
}

// Binary locations, as hack/build-kube.sh and hack/deps.sh put them.
const (
	defaultKubeVersion       = "1.37.2"
	defaultContainerdVersion = "v2.3.7"
	debianRunc               = "/usr/sbin/runc"
	debianCNIBin             = "/usr/lib/cni"
)

// KubeLabOptions change what NewKubeLabWith sets up.
type KubeLabOptions struct {
	// NoRBAC leaves out the packaged RBAC, for a test that installs it itself (the
	// Helm chart holds it).
	NoRBAC bool
}

// NewKubeLab starts the control plane and checks the binaries. It skips the test when
// not running as root on Linux (namespaces, cgroups, mounts) and fails it, saying what
// to run, when a binary is missing. Everything is stopped when the test ends.
func NewKubeLab(t *testing.T) *KubeLab {
	t.Helper()
	return NewKubeLabWith(t, KubeLabOptions{})
}

// NewKubeLabWith is NewKubeLab with options.
func NewKubeLabWith(t *testing.T, o KubeLabOptions) *KubeLab {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux: runs kubelets and containerd in network and mount namespaces of their own, with cgroups")
	}
	cache, err := cacheDir()
	if err != nil {
		t.Fatal(err)
	}
	l := &KubeLab{
		KubeBin:       envOr("KUBE_BIN", filepath.Join(cache, "kube", "v"+envOr("KUBE_VERSION", defaultKubeVersion))),
		ContainerdBin: envOr("CONTAINERD_BIN", filepath.Join(cache, "containerd", envOr("CONTAINERD_VERSION", defaultContainerdVersion), "bin")),
		Runc:          debianRunc,
		CNIBin:        debianCNIBin,
	}
	for _, f := range []string{
		filepath.Join(l.KubeBin, "kubelet"), filepath.Join(l.KubeBin, "kube-controller-manager"), filepath.Join(l.KubeBin, "kube-scheduler"),
		filepath.Join(l.ContainerdBin, "containerd"), filepath.Join(l.ContainerdBin, "containerd-shim-runc-v2"), filepath.Join(l.ContainerdBin, "ctr"),
	} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v: run make deps (hack/build-kube.sh builds the kubelet, kube-scheduler and containerd; first time ~10 min)", err)
		}
	}
	for _, f := range []string{l.Runc, filepath.Join(l.CNIBin, "bridge"), filepath.Join(l.CNIBin, "host-local"), filepath.Join(l.CNIBin, "loopback")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v: run make deps (installs Debian's runc and containernetworking-plugins)", err)
		}
	}
	for _, tool := range []string{"nsenter", "unshare", "mount", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (util-linux, iproute2): %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if l.Pause, err = pauseImage(ctx); err != nil {
		t.Fatal(err)
	}
	if l.Ctl, err = CtlBinary(ctx); err != nil {
		t.Fatal(err)
	}
	cp, err := StartControlPlane(ctx, filepath.Join(t.TempDir(), "control-plane"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	l.CP = cp
	if o.NoRBAC {
		return l
	}
	if err := ApplyPackagingFile(ctx, cp, "rbac.yaml"); err != nil {
		t.Fatal(err)
	}
	return l
}

// StartControllerManager runs kube-controller-manager against the lab's control plane
// with only the named controllers (for example deployment, replicaset,
// node-lifecycle-controller), and the API server's CA as the cluster's root CA (what
// pods find in their ServiceAccount volume).
func (l *KubeLab) StartControllerManager(t testing.TB, controllers string) *Process {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "root-ca.crt")
	if err := writeServingCA(filepath.Join(l.CP.Dir, "certs", "apiserver.crt"), ca); err != nil {
		t.Fatal(err)
	}
	p, err := startProcess(t, "kube-controller-manager", nil, []string{
		filepath.Join(l.KubeBin, "kube-controller-manager"), "--kubeconfig=" + l.CP.Kubeconfig,
		"--controllers=" + controllers, "--leader-elect=false", "--secure-port=0",
		"--root-ca-file=" + ca, "--node-monitor-period=2s", "--v=2",
	}, 60)
	if err != nil {
		t.Fatalf("kube-controller-manager: %v", err)
	}
	t.Logf("kube-controller-manager pid %d (%s), log %s", p.PID(), controllers, p.LogPath())
	return p
}

// StartScheduler runs kube-scheduler against the lab's control plane, serving on a free
// port of 127.0.0.1.
func (l *KubeLab) StartScheduler(t testing.TB) *Process {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	kc := l.CP.Kubeconfig
	p, err := startProcess(t, "kube-scheduler", nil, []string{
		filepath.Join(l.KubeBin, "kube-scheduler"), "--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port), "--v=2",
	}, 60)
	if err != nil {
		t.Fatalf("kube-scheduler: %v", err)
	}
	t.Logf("kube-scheduler pid %d, log %s", p.PID(), p.LogPath())
	return p
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// run1 runs a command with a deadline and returns its combined output.
func run1(ctx context.Context, timeout time.Duration, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%v: %w: %s", argv, err, out)
	}
	return string(out), nil
}
