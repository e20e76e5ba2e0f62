package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeNode is a real Kubernetes node: a kubelet (--cloud-provider=external) and
// containerd with Debian's runc, in a Host's network namespace and a mount namespace of
// their own. Inside, the API server is https://127.0.0.1:6443 (a proxy to the lab's),
// as on a kubeadm control-plane node, and the node's address is the Host's HostAddr,
// which the root namespace (the test) reaches over the veth pair.
//
// Nothing is configured outside what the node creates: its state lives in a directory
// of its own (containerd's root and state, runc's, the kubelet's root, logs, static pod
// manifests); in its mount namespace a tmpfs hides /var/log (the kubelet hard-codes
// /var/log/containers) and /run/containerd, and read-only files stand in for the
// global sysctls the kubelet would otherwise rewrite; its pods' cgroups are under a
// cgroup root of its own. When the test ends the static pods are
// removed through the kubelet, then every process in the node's mount namespace or
// cgroups is stopped and the directory, cgroups and namespaces removed; what a killed
// test binary left behind is removed by the next NewKubeNode.
type KubeNode struct {
	*Host
	// Name is the Node's name; IP its --node-ip.
	Name string
	IP   netip.Addr
	// Dir holds the node's state; EtcDir stands for the node's /etc (host files that
	// pods mount: kubeconfigs, the CCM's configuration).
	Dir, EtcDir string
	// ManifestDir is the kubelet's staticPodPath.
	ManifestDir string
	// APIServer is the API server's URL as processes on the node reach it.
	APIServer string
	// KubeletStarted is when StartKubelet started the kubelet.
	KubeletStarted time.Time

	lab        *KubeLab
	t          testing.TB
	holder     *Process
	mntNS      string
	cgroupRoot string
	containerd *Process
	kubelet    *Process
	// kubeletArgs is the kubelet's command line (writeKubeletConfig).
	kubeletArgs []string
	kubeletAPI  *http.Client
}

// KubeNodeOptions configure a KubeNode.
type KubeNodeOptions struct {
	// Name of the Node (kubelet --hostname-override); a DNS label.
	Name string
	// Images are archives imported into containerd before the kubelet starts (the
	// pause image always is).
	Images []Image
	// RegisterWithTaints are kubelet --register-with-taints, as kubeadm sets
	// node-role.kubernetes.io/control-plane:NoSchedule on control-plane nodes.
	RegisterWithTaints []string
}

const kubeNodePrefix = "bccm-kubenode-"

// NewKubeNode prepares the node and starts containerd with the images imported; the
// kubelet starts with StartKubelet, so a test can place static pod manifests first.
func (l *KubeLab) NewKubeNode(t testing.TB, o KubeNodeOptions) *KubeNode {
	t.Helper()
	sweepKubeNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := NewHost(t, l.CP)
	dir, err := os.MkdirTemp("", kubeNodePrefix)
	if err != nil {
		t.Fatal(err)
	}
	n := &KubeNode{
		Host: h, Name: o.Name, IP: h.HostAddr, Dir: dir, EtcDir: filepath.Join(dir, "etc"),
		ManifestDir: filepath.Join(dir, "manifests"), APIServer: "https://127.0.0.1:6443",
		lab: l, t: t, cgroupRoot: "/" + filepath.Base(dir),
	}
	// Registered first, so it runs last: after the processes' own cleanups.
	t.Cleanup(n.teardown)
	if len(n.path("s")) > 42 {
		t.Fatalf("NewKubeNode: %s is too long for containerd's shim sockets (42 characters at most): set TMPDIR to a shorter directory", n.path("s"))
	}
	for _, d := range []string{n.EtcDir, n.ManifestDir, n.path("run"), n.path("cni", "net.d"), n.path("kubelet")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.record("owner.pid", strconv.Itoa(os.Getpid()))
	n.record("netns", h.Name)

	api, err := url.Parse(l.CP.RESTConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := listenInNetns(h.Name, "127.0.0.1:6443")
	if err != nil {
		t.Fatalf("NewKubeNode: the API server proxy: %v", err)
	}
	serveTCPProxy(t, ln, api.Host)

	n.startHolder(ctx)
	n.mountNamespace(ctx)
	if err := makeCgroups(n.cgroupRoot); err != nil {
		t.Fatalf("NewKubeNode: %v", err)
	}
	n.startContainerd(ctx)
	for _, img := range append([]Image{l.Pause}, o.Images...) {
		if err := n.ImportImage(ctx, img); err != nil {
			t.Fatal(err)
		}
	}
	n.writeKubeletConfig(o)
	return n
}

func (n *KubeNode) path(elem ...string) string {
	return filepath.Join(append([]string{n.Dir}, elem...)...)
}

// record writes what the sweep of a killed run needs to find the node's leftovers.
func (n *KubeNode) record(name, value string) {
	if err := os.WriteFile(n.path(name), []byte(value), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// startHolder starts the process that owns the node's mount namespace (a slave copy of
// the root's: host mounts propagate in, the node's mounts never out) inside the Host's
// network namespace. Not `ip netns exec`: it remounts /sys, which hides the cgroup
// hierarchies from the kubelet.
func (n *KubeNode) startHolder(ctx context.Context) {
	t := n.t
	p, err := startProcess(t, "holder-"+n.Name, nil, []string{
		"unshare", "--mount", "--propagation", "slave", "--",
		"nsenter", "--net=/run/netns/" + n.Host.Name, "--", "sleep", "infinity",
	}, 10)
	if err != nil {
		t.Fatalf("NewKubeNode: %v", err)
	}
	n.holder = p
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	err = WaitFor(ctx, 10*time.Second, "the mount namespace holder", func(context.Context) (bool, error) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.PID()))
		mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p.PID()))
		if strings.TrimSpace(string(comm)) != "sleep" || mnt == "" || mnt == self {
			return false, nil
		}
		n.mntNS = mnt
		return true, nil
	})
	if err != nil {
		t.Fatalf("NewKubeNode: %v", err)
	}
	n.record("mntns", n.mntNS)
}

// nsenter returns argv run inside the node's network and mount namespaces.
func (n *KubeNode) nsenter(argv ...string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(n.holder.PID()), "-m", "-n", "--wd=" + n.Dir, "--"}, argv...)
}

// Exec runs a command inside the node's namespaces and returns its output.
func (n *KubeNode) Exec(ctx context.Context, argv ...string) (string, error) {
	return run1(ctx, time.Minute, n.nsenter(argv...)...)
}

// kernelTunables are the sysctls the kubelet sets at start (setupKernelTunables in
// pkg/kubelet/cm) unless they already have these values.
var kernelTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// mountNamespace prepares the node's mount namespace.
func (n *KubeNode) mountNamespace(ctx context.Context) {
	t := n.t
	// The kubelet links container logs in /var/log/containers, a path it hard-codes:
	// a tmpfs over /var/log keeps them in the node. /run/containerd, where a host's
	// own containerd would have its sockets, is hidden too when it exists (the node's
	// containerd keeps everything in the node's directory).
	hide := []string{"/var/log"}
	if _, err := os.Stat("/run/containerd"); err == nil {
		hide = append(hide, "/run/containerd")
	}
	for _, d := range hide {
		if _, err := n.Exec(ctx, "mount", "-t", "tmpfs", "-o", "mode=0755,size=64m", n.Host.Name, d); err != nil {
			t.Fatalf("NewKubeNode: %v", err)
		}
	}
	if err := os.MkdirAll(n.path("sysctl"), 0o755); err != nil {
		t.Fatal(err)
	}
	for key, want := range kernelTunables {
		have, err := os.ReadFile("/proc/sys/" + key)
		if err != nil || strings.TrimSpace(string(have)) == want {
			continue
		}
		shim := n.path("sysctl", strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(shim, []byte(want+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
		for _, argv := range [][]string{{"mount", "--bind", shim, "/proc/sys/" + key}, {"mount", "-o", "remount,bind,ro", "/proc/sys/" + key}} {
			if _, err := n.Exec(ctx, argv...); err != nil {
				t.Fatalf("NewKubeNode: hiding sysctl %s: %v", key, err)
			}
		}
	}
}

func (n *KubeNode) startContainerd(ctx context.Context) {
	t := n.t
	cfg := n.path("containerd.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(n.Dir, n.lab.Runc, n.lab.CNIBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The shim is found on PATH.
	env := []string{"PATH=" + n.lab.ContainerdBin + ":/usr/sbin:/usr/bin:/sbin:/bin"}
	p, err := startProcess(t, "containerd-"+n.Name, env, n.nsenter(filepath.Join(n.lab.ContainerdBin, "containerd"), "--config", cfg), 40)
	if err != nil {
		t.Fatalf("NewKubeNode: %v", err)
	}
	n.containerd = p
	err = WaitFor(ctx, 30*time.Second, "containerd", func(ctx context.Context) (bool, error) {
		select {
		case <-p.Done():
			return false, fmt.Errorf("containerd exited: %v\n%s", p.ExitErr(), tail(p.Log(), 20))
		default:
		}
		if _, err := os.Stat(n.path("run", "containerd.sock")); err != nil {
			return false, nil
		}
		_, err := n.ctr(ctx, "version")
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("NewKubeNode: %v", err)
	}
}

// ctr runs containerd's client against the node's containerd, in the CRI namespace.
func (n *KubeNode) ctr(ctx context.Context, args ...string) (string, error) {
	return run1(ctx, 2*time.Minute, append([]string{filepath.Join(n.lab.ContainerdBin, "ctr"), "--address", n.path("run", "containerd.sock"), "-n", "k8s.io"}, args...)...)
}

// ImportImage imports an image archive into the node's containerd, as an operator
// loads an image without a registry (ctr images import).
func (n *KubeNode) ImportImage(ctx context.Context, img Image) error {
	start := time.Now()
	if _, err := n.ctr(ctx, "images", "import", img.Path); err != nil {
		return fmt.Errorf("importing %s into %s: %w", img.Ref, n.Name, err)
	}
	out, err := n.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return err
	}
	if !strings.Contains("\n"+out, "\n"+img.Ref+"\n") {
		return fmt.Errorf("%s: %s imported but not listed:\n%s", n.Name, img.Ref, out)
	}
	n.t.Logf("%s: imported %s (%s) in %s", n.Name, img.Ref, img.Digest, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// ContainerPID returns the PID of a running container's process; id is the pod
// status's containerID ("containerd://<id>").
func (n *KubeNode) ContainerPID(ctx context.Context, id string) (int, error) {
	id = strings.TrimPrefix(id, "containerd://")
	out, err := n.ctr(ctx, "tasks", "ls")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no running task %s on %s:\n%s", id, n.Name, out)
}

// writeKubeletConfig writes the kubelet's configuration and its kubeconfig: a client
// certificate for system:node:<name> in system:nodes, as TLS bootstrapping would
// give it, so the Node authorizer applies.
func (n *KubeNode) writeKubeletConfig(o KubeNodeOptions) {
	t := n.t
	if err := WriteClientKubeconfig(n.lab.CP, n.path("kubelet.kubeconfig"), n.APIServer, "system:node:"+n.Name, "system:nodes"); err != nil {
		t.Fatal(err)
	}
	cfg := kubeletConfig(n.Dir, n.cgroupRoot, filepath.Join(n.lab.CP.Dir, "certs", "client-ca.crt"))
	if err := os.WriteFile(n.path("kubelet.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{
		filepath.Join(n.lab.KubeBin, "kubelet"), "--config=" + n.path("kubelet.yaml"),
		"--kubeconfig=" + n.path("kubelet.kubeconfig"), "--root-dir=" + n.path("kubelet"),
		"--cert-dir=" + n.path("kubelet", "pki"), "--hostname-override=" + n.Name,
		"--node-ip=" + n.IP.String(), "--cloud-provider=external", "--v=2",
	}
	if len(o.RegisterWithTaints) > 0 {
		args = append(args, "--register-with-taints="+strings.Join(o.RegisterWithTaints, ","))
	}
	n.kubeletArgs = args
}

// StartKubelet starts the kubelet. It registers the Node at once (NotReady, with the
// uninitialized taint, until the CCM initializes it and a CNI is configured).
func (n *KubeNode) StartKubelet() {
	t := n.t
	n.KubeletStarted = time.Now()
	p, err := startProcess(t, "kubelet-"+n.Name, nil, n.nsenter(n.kubeletArgs...), 60)
	if err != nil {
		t.Fatalf("StartKubelet: %v", err)
	}
	n.kubelet = p
	t.Logf("%s: kubelet pid %d, log %s", n.Name, p.PID(), p.LogPath())
	// Runs first (registered last): static pods are stopped the normal way, by the
	// kubelet, before it stops.
	t.Cleanup(n.stopStaticPods)
}

// Kubelet is the kubelet process (nil before StartKubelet).
func (n *KubeNode) Kubelet() *Process { return n.kubelet }

// WriteStaticPod places a static pod manifest atomically (the kubelet never sees half
// a file; files starting with a dot are ignored by it).
func (n *KubeNode) WriteStaticPod(name string, data []byte) error {
	tmp := filepath.Join(n.ManifestDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(n.ManifestDir, name))
}

// EnableCNI gives containerd a bridge network (inside the node's namespace only):
// the kubelet then reports the Node Ready.
func (n *KubeNode) EnableCNI(subnet netip.Prefix) error {
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "bccm-e2e",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
  }]
}
`, subnet.String(), n.path("cni", "ipam"))
	// Written in place, in one write, as CNI installers do: containerd reloads its CNI
	// configuration on a write event and ignores a file renamed into the directory.
	return os.WriteFile(n.path("cni", "net.d", "10-bccm-e2e.conflist"), []byte(conf), 0o644)
}

// KubeletGet fetches path (for example /metrics/probes) from the kubelet's API on
// IP:10250, authenticated with a system:masters client certificate, verifying the
// kubelet's self-signed serving certificate by pinning it.
func (n *KubeNode) KubeletGet(ctx context.Context, path string) (string, error) {
	if n.kubeletAPI == nil {
		c, err := n.newKubeletClient()
		if err != nil {
			return "", err
		}
		n.kubeletAPI = c
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(n.IP.String(), "10250")+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := n.kubeletAPI.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("kubelet %s GET %s: HTTP %d: %s", n.Name, path, resp.StatusCode, tail(string(body), 5))
	}
	return string(body), nil
}

func (n *KubeNode) newKubeletClient() (*http.Client, error) {
	cert, err := ClientTLSCert(n.lab.CP, "baremetal-ccm-e2e", "system:masters")
	if err != nil {
		return nil, err
	}
	servingPEM, err := os.ReadFile(n.path("kubelet", "pki", "kubelet.crt"))
	if err != nil {
		return nil, fmt.Errorf("the kubelet's serving certificate: %w", err)
	}
	block, _ := pem.Decode(servingPEM)
	if block == nil {
		return nil, errors.New("the kubelet's serving certificate: no PEM data")
	}
	pinned := block.Bytes
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert},
		// A self-signed certificate whose names depend on the host: pin it instead.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || string(raw[0]) != string(pinned) {
				return errors.New("the kubelet's serving certificate is not the one in its cert dir")
			}
			return nil
		},
	}}}, nil
}

// stopStaticPods removes the static pod manifests and waits (at most 45 s) until the
// kubelet has stopped their containers.
func (n *KubeNode) stopStaticPods() {
	ents, _ := os.ReadDir(n.ManifestDir)
	if len(ents) == 0 {
		return
	}
	for _, e := range ents {
		_ = os.Remove(filepath.Join(n.ManifestDir, e.Name()))
	}
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) && len(cgroupPIDs(n.cgroupRoot)) > 0 {
		time.Sleep(500 * time.Millisecond)
	}
}

// teardown stops what the node's processes left (containers, containerd's shims), by
// their namespace and cgroups, and removes the node's cgroups and directory.
func (n *KubeNode) teardown() {
	if n.mntNS != "" {
		killNodeProcesses(n.t, n.mntNS, n.cgroupRoot, n.holderPID())
	}
	if n.holder != nil {
		n.holder.Stop()
	}
	if err := removeCgroups(n.cgroupRoot); err != nil {
		n.t.Errorf("%s: %v", n.Name, err)
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		n.t.Errorf("%s: %v", n.Name, err)
	}
}

func (n *KubeNode) holderPID() int {
	if n.holder == nil {
		return 0
	}
	return n.holder.PID()
}

// MirrorPod returns the mirror pod of a static pod (named <name>-<node>), or nil when
// there is none yet.
func (n *KubeNode) MirrorPod(ctx context.Context, namespace, name string) (*v1.Pod, error) {
	p, err := n.lab.CP.Client.CoreV1().Pods(namespace).Get(ctx, name+"-"+n.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Start runs argv inside the node's network and mount namespaces, as a service of the
// host would run (see Process).
func (n *KubeNode) Start(t testing.TB, name string, env []string, argv ...string) *Process {
	t.Helper()
	p, err := startProcess(t, name, env, n.nsenter(argv...), 80)
	if err != nil {
		t.Fatalf("%s: starting %s: %v", n.Name, name, err)
	}
	t.Logf("%s: %s pid %d, log %s", n.Name, name, p.PID(), p.LogPath())
	return p
}

// ContainerLog returns the log the kubelet keeps of a container of the pod with this
// UID (for a static pod, its mirror pod's kubernetes.io/config.mirror annotation).
func (n *KubeNode) ContainerLog(namespace, pod, uid, container string) (string, error) {
	files, err := filepath.Glob(filepath.Join(n.Dir, "pod-logs", namespace+"_"+pod+"_"+uid, container, "*.log"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("%s: no log of %s/%s container %s (uid %s)", n.Name, namespace, pod, container, uid)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		b.Write(data)
	}
	return b.String(), nil
}

// Wrapper writes an executable script that runs binary (looked up in PATH) with its
// arguments inside the node's network and mount namespaces, for helpers that take a
// program's path (an ipmi_sim BMC on the node's loopback), and returns its path.
func (n *KubeNode) Wrapper(name, binary string) (string, error) {
	abs, err := exec.LookPath(binary)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(n.path("bin"), 0o755); err != nil {
		return "", err
	}
	p := n.path("bin", name)
	script := fmt.Sprintf("#!/bin/sh\nexec nsenter -t %d -m -n -- %s \"$@\"\n", n.holder.PID(), abs)
	return p, os.WriteFile(p, []byte(script), 0o755)
}

// SetSystemUUID makes the kubelet report uuid as the machine's SMBIOS UUID (its Node's
// status.nodeInfo.systemUUID), as distinct machines do, by replacing
// /sys/class/dmi/id/product_uuid in the node's mount namespace. On a host without that
// file (some VMs) the kubelet reports none, which is left as it is. Call it before
// StartKubelet.
func (n *KubeNode) SetSystemUUID(ctx context.Context, uuid string) error {
	const dmi = "/sys/class/dmi/id/product_uuid"
	if _, err := os.Stat(dmi); err != nil {
		n.t.Logf("%s: %s: %v; the kubelet reports no system UUID", n.Name, dmi, err)
		return nil
	}
	f := n.path("product_uuid")
	if err := os.WriteFile(f, []byte(uuid+"\n"), 0o444); err != nil {
		return err
	}
	if _, err := n.Exec(ctx, "mount", "--bind", f, dmi); err != nil {
		return err
	}
	_, err := n.Exec(ctx, "mount", "-o", "remount,bind,ro", dmi)
	return err
}
