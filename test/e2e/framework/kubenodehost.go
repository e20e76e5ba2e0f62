package framework

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// containerdConfig is the configuration of a KubeNode's containerd (v2.x): every path
// under dir (nothing under /var/lib/containerd, /run/containerd, /etc or /opt; the
// shims' socket directory must be at most 42 characters long), the CRI plugin with
// Debian's runc and CNI plugins and the e2e pause image as the sandbox.
func containerdConfig(dir, runc, cniBin string) string {
	return fmt.Sprintf(`version = 4
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs",
  "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[plugins]
  [plugins."io.containerd.server.v1.grpc"]
    address = %[3]q
  [plugins."io.containerd.server.v1.ttrpc"]
    address = %[4]q
  [plugins."io.containerd.internal.v1.opt"]
    path = %[5]q
  [plugins."io.containerd.shim.v1.manager"]
    socket_dir = %[11]q
  [plugins."io.containerd.image-verifier.v1.bindir"]
    bin_dir = %[6]q
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = %[7]q
  [plugins."io.containerd.cri.v1.runtime"]
    enable_selinux = false
    # Some VMs withhold CAP_SYS_RESOURCE from root: no process may lower its
    # oom_score_adj there, and runc fails every sandbox that asks for -998. Clamping to
    # containerd's own value changes nothing else.
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    cdi_spec_dirs = []
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = %[8]q
          Root = %[12]q
          SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = [%[9]q]
      conf_dir = %[10]q
  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"),
		filepath.Join(dir, "run", "containerd.sock"), filepath.Join(dir, "run", "containerd.sock.ttrpc"),
		filepath.Join(dir, "containerd", "opt"), filepath.Join(dir, "containerd", "image-verifier"),
		pauseImageRef, runc, cniBin, filepath.Join(dir, "cni", "net.d"), filepath.Join(dir, "s"), filepath.Join(dir, "runc"))
}

// kubeletConfig is a KubeNode's KubeletConfiguration: cgroupfs under a cgroup root of
// its own, static pods from dir/manifests (checked every second), the API on the
// node's address, clients verified with the control plane's client CA and authorized
// by the API server (webhook), eviction thresholds low enough that a busy shared
// machine evicts nothing.
func kubeletConfig(dir, cgroupRoot, clientCA string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# kubelet >= 1.35 refuses cgroup v1 hosts unless told otherwise
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
containerRuntimeEndpoint: unix://%[2]s
imageServiceEndpoint: unix://%[2]s
staticPodPath: %[3]s
fileCheckFrequency: 1s
podLogsDir: %[4]s
volumePluginDir: %[5]s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[6]s}
authorization: {mode: Webhook}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
resolvConf: /etc/resolv.conf
failSwapOn: false
protectKernelDefaults: false
serializeImagePulls: true
evictionHard: {memory.available: 1Mi, nodefs.available: 1%%, imagefs.available: 1%%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, cgroupRoot, filepath.Join(dir, "run", "containerd.sock"), filepath.Join(dir, "manifests"),
		filepath.Join(dir, "pod-logs"), filepath.Join(dir, "kubelet", "volume-plugins"), clientCA)
}

const cgroupFS = "/sys/fs/cgroup"

// cgroupV2 reports whether the host has the unified hierarchy only.
func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers"))
	return err == nil
}

// cgroupDirs returns root's directory in every hierarchy.
func cgroupDirs(root string) []string {
	if cgroupV2() {
		return []string{filepath.Join(cgroupFS, root)}
	}
	ents, _ := os.ReadDir(cgroupFS)
	var out []string
	for _, e := range ents {
		// the hierarchies are directories; cpu,cpuacct-style names are symlinks to them
		if e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
			out = append(out, filepath.Join(cgroupFS, e.Name(), root))
		}
	}
	return out
}

// makeCgroups creates the cgroup root in every hierarchy (the kubelet wants it to
// exist; a v1 cpuset needs its cpus and mems before it can hold tasks).
func makeCgroups(root string) error {
	for _, d := range cgroupDirs(root) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", d, err)
		}
		if filepath.Base(filepath.Dir(d)) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
				if err == nil {
					err = os.WriteFile(filepath.Join(d, f), v, 0o644)
				}
				if err != nil {
					return fmt.Errorf("cgroup %s: %w", d, err)
				}
			}
		}
	}
	return nil
}

// cgroupPIDs returns the processes in root's cgroups (containers and anything else the
// node's runtime put there).
func cgroupPIDs(root string) []int {
	seen := map[int]bool{}
	for _, d := range cgroupDirs(root) {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.Name() != "cgroup.procs" {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	return out
}

// removeCgroups removes root's cgroups, deepest first (they must be empty).
func removeCgroups(root string) error {
	var errs []error
	for _, d := range cgroupDirs(root) {
		var dirs []string
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
		for _, p := range dirs {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountNSPIDs returns the processes whose mount namespace is mntNS (a
// /proc/<pid>/ns/mnt link text), except skip.
func mountNSPIDs(mntNS string, skip int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == skip {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && l == mntNS {
			out = append(out, pid)
		}
	}
	return out
}

// killNodeProcesses stops what a node's processes left running: first the processes
// in its cgroups (containers), then those in its mount namespace (containerd's shims,
// anything the kubelet or containerd started), except the holder. TERM, then KILL
// after 10 s. These are all descendants of processes the test started, found by the
// namespace and cgroups it created.
func killNodeProcesses(t testing.TB, mntNS, cgroupRoot string, holder int) {
	for _, list := range []func() []int{
		func() []int { return cgroupPIDs(cgroupRoot) },
		func() []int { return mountNSPIDs(mntNS, holder) },
	} {
		pids := list()
		if len(pids) == 0 {
			continue
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(pids) > 0 && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			pids = list()
		}
		for _, pid := range pids {
			if t != nil {
				t.Logf("pid %d still runs 10 s after SIGTERM; killing it", pid)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(pids) > 0 {
			time.Sleep(time.Second)
		}
	}
}

// sweepKubeNodes removes what KubeNodes of killed test runs left (their owner is gone):
// the processes in their mount namespaces and cgroups, the cgroups, the network
// namespace, the directory.
func sweepKubeNodes(t testing.TB) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), kubeNodePrefix+"*"))
	for _, d := range dirs {
		read := func(name string) string {
			b, _ := os.ReadFile(filepath.Join(d, name))
			return strings.TrimSpace(string(b))
		}
		owner, err := strconv.Atoi(read("owner.pid"))
		if err != nil || processAlive(owner) {
			continue
		}
		t.Logf("removing the leftovers of a killed run's node %s", d)
		// The cgroup root is derived from the directory's name, never read: a damaged
		// file must not name someone else's cgroups. Likewise the mount namespace
		// must be another than the host's.
		cg := "/" + filepath.Base(d)
		self, _ := os.Readlink("/proc/self/ns/mnt")
		init, _ := os.Readlink("/proc/1/ns/mnt")
		if mnt := read("mntns"); strings.HasPrefix(mnt, "mnt:[") && mnt != self && mnt != init {
			killNodeProcesses(t, mnt, cg, 0)
		}
		if err := removeCgroups(cg); err != nil {
			t.Log(err)
		}
		if ns := read("netns"); strings.HasPrefix(ns, "bccm-host-") {
			_ = run("ip", "netns", "del", ns)
		}
		_ = os.RemoveAll(d)
	}
}
