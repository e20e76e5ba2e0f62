package framework

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// Host is a network namespace standing for another machine: its own interfaces and
// kernel routing tables. A veth pair joins it to the root namespace (HostAddr inside,
// RootAddr outside, a /30 of 10.254.0.0/16); the kube-apiserver, which listens on the
// root namespace's loopback, is reached from inside through a TCP proxy the test runs
// on RootAddr. Everything is removed when the test ends: the proxy, the namespace and
// the veth pair (only those this Host created).
type Host struct {
	// Name of the network namespace.
	Name string
	// HostAddr is the namespace's end of the veth pair; RootAddr the root's.
	HostAddr, RootAddr netip.Addr
	// Kubeconfig is the CCM's kubeconfig (the packaged RBAC's ServiceAccount) pointing
	// at the proxy.
	Kubeconfig string

	proxyAddr, serverName string
}

// NewHost creates the namespace. It skips the test when not running as root.
func NewHost(t testing.TB, cp *ControlPlane) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace and a veth pair")
	}
	var h *Host
	for attempt := 0; attempt < 20 && h == nil; attempt++ {
		var b [3]byte
		_, _ = rand.Read(b[:])
		idx := int(b[0])%250 + 1
		sub := int(b[1]) % 64 * 4
		name := "bccm-host-" + hex.EncodeToString(b[:])
		if err := run("ip", "netns", "add", name); err != nil {
			continue
		}
		h = &Host{Name: name,
			RootAddr: netip.AddrFrom4([4]byte{10, 254, byte(idx), byte(sub + 1)}),
			HostAddr: netip.AddrFrom4([4]byte{10, 254, byte(idx), byte(sub + 2)}),
		}
		root := "bh" + hex.EncodeToString(b[:]) // <= 15 characters
		t.Cleanup(func() {
			_ = run("ip", "link", "del", root)
			_ = run("ip", "netns", "del", name)
		})
		if err := run("ip", "link", "add", root, "type", "veth", "peer", "name", "uplink", "netns", name); err != nil {
			t.Fatalf("NewHost: %v", err)
		}
		for _, args := range [][]string{
			{"ip", "addr", "add", h.RootAddr.String() + "/30", "dev", root},
			{"ip", "link", "set", root, "up"},
			{"ip", "-n", name, "addr", "add", h.HostAddr.String() + "/30", "dev", "uplink"},
			{"ip", "-n", name, "link", "set", "uplink", "up"},
			{"ip", "-n", name, "link", "set", "lo", "up"},
		} {
			if err := run(args...); err != nil {
				// the subnet is taken by another Host: try another
				if strings.Contains(err.Error(), "File exists") {
					h = nil
					break
				}
				t.Fatalf("NewHost: %v", err)
			}
		}
	}
	if h == nil {
		t.Fatal("NewHost: no free namespace name and subnet after 20 attempts")
	}
	h.startProxy(t, cp)
	return h
}

// Exec runs a command inside the namespace (ip netns exec) and returns its output.
func (h *Host) Exec(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Name}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip netns exec %s %s: %w: %s", h.Name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// startProxy forwards RootAddr:<port> to the API server and writes Kubeconfig: the
// CCM's kubeconfig with that server and the API server's own name for TLS
// verification.
func (h *Host) startProxy(t testing.TB, cp *ControlPlane) {
	t.Helper()
	api, err := url.Parse(cp.RESTConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(h.RootAddr.String(), "0"))
	if err != nil {
		t.Fatalf("NewHost: proxy: %v", err)
	}
	serveTCPProxy(t, ln, api.Host)

	h.proxyAddr, h.serverName = ln.Addr().String(), api.Hostname()
	h.Kubeconfig = h.KubeconfigFor(t, CCMKubeconfig())
}

// KubeconfigFor writes a copy of the kubeconfig at src whose clusters are reached
// through h's proxy (the API server's own name kept for TLS verification), for a
// process running in h, and returns its path (in the test's temp dir).
func (h *Host) KubeconfigFor(t testing.TB, src string) string {
	t.Helper()
	return kubeconfigVia(t, src, h.proxyAddr, h.serverName, h.Name)
}

// kubeconfigVia writes a copy of the kubeconfig at src whose clusters are reached at
// proxyAddr, with serverName for TLS verification, into the test's temp dir (its name
// ends in -suffix), and returns its path.
func kubeconfigVia(t testing.TB, src, proxyAddr, serverName, suffix string) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + proxyAddr
		cl.TLSServerName = serverName
	}
	path := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".kubeconfig")+"-"+suffix+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return errors.New(strings.TrimSpace(fmt.Sprintf("%s: %v: %s", strings.Join(args, " "), err, out)))
	}
	return nil
}

// Agent is a `baremetal-cloud-controller-manager agent` process in a Host.
type Agent = Process

// StartAgentIn starts the CCM binary's agent mode in h's namespace, with h's
// kubeconfig and the given CloudConfig and node name.
func StartAgentIn(t testing.TB, h *Host, cloudConfigPath, nodeName string, extraArgs ...string) *Agent {
	t.Helper()
	return StartAgentInEnv(t, h, nil, cloudConfigPath, nodeName, extraArgs...)
}

// StartAgentInEnv is StartAgentIn with env added to the agent's environment.
func StartAgentInEnv(t testing.TB, h *Host, env []string, cloudConfigPath, nodeName string, extraArgs ...string) *Agent {
	t.Helper()
	args := append([]string{CCMBinary(), "agent",
		"--kubeconfig=" + h.Kubeconfig, "--cloud-config=" + cloudConfigPath, "--node-name=" + nodeName, "--v=4"}, extraArgs...)
	return StartIn(t, h, "agent", env, args...)
}

// StartIn starts argv in h's namespace (ip netns exec, which execs argv: the PID is
// argv's) with env added to the test's environment; see Process.
func StartIn(t testing.TB, h *Host, name string, env []string, argv ...string) *Process {
	t.Helper()
	p, err := startProcess(t, name, env, append([]string{"ip", "netns", "exec", h.Name}, argv...), 80)
	if err != nil {
		t.Fatalf("StartIn %s: %v", name, err)
	}
	t.Logf("%s pid %d started in %s, log %s", name, p.PID(), h.Name, p.log)
	return p
}
