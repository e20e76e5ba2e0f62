package framework

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// ApplyAgentRBAC creates the objects of packaging/kubernetes/rbac-agent.yaml (the
// worker agents' ServiceAccount, ClusterRole and binding, as an operator applies
// them). Objects that exist already are left as they are, so several tests may call it.
func ApplyAgentRBAC(ctx context.Context, cp *ControlPlane) error {
	return ApplyPackagingFile(ctx, cp, "rbac-agent.yaml")
}

// ctl is the baremetal-ccmctl binary, built on first use.
var ctl struct {
	once sync.Once
	path string
	err  error
}

// CtlBinary returns the path of the baremetal-ccmctl binary, built once per test
// binary (see BuildBinary).
func CtlBinary(ctx context.Context) (string, error) {
	ctl.once.Do(func() { ctl.path, ctl.err = BuildBinary(ctx, "./cmd/baremetal-ccmctl") })
	return ctl.path, ctl.err
}

// AgentKubeconfig writes node's agent kubeconfig as an operator would, with
// `baremetal-ccmctl agent kubeconfig` and the control plane's client CA: a client
// certificate for system:baremetal-ccm-agent:<node> in group
// system:baremetal-ccm-agents, verifying the API server with its serving CA. With h it
// reaches the API server through h's proxy (for a process in h), else directly. It
// returns the path, in the test's temp dir.
func AgentKubeconfig(t testing.TB, cp *ControlPlane, h *Host, node string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := CtlBinary(ctx)
	if err != nil {
		t.Fatalf("AgentKubeconfig: %v", err)
	}
	dir := t.TempDir()
	bundle := filepath.Join(dir, "apiserver-ca.crt")
	if err := writeServingCA(filepath.Join(cp.Dir, "certs", "apiserver.crt"), bundle); err != nil {
		t.Fatalf("AgentKubeconfig: %v", err)
	}
	out := filepath.Join(dir, "agent-"+node+".kubeconfig")
	args := []string{"agent", "kubeconfig", "--node=" + node,
		"--ca-cert=" + filepath.Join(cp.Dir, "certs", "client-ca.crt"),
		"--ca-key=" + filepath.Join(cp.Dir, "certs", "client-ca.key"),
		"--ca-bundle=" + bundle, "--validity=6h", "--out=" + out}
	if h != nil {
		args = append(args, "--server=https://"+h.proxyAddr, "--tls-server-name="+h.serverName)
	} else {
		args = append(args, "--server="+cp.RESTConfig.Host)
	}
	if b, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("AgentKubeconfig: baremetal-ccmctl %v: %v\n%s", args, err, b)
	}
	return out
}

// writeServingCA copies the CA certificates of the API server's self-signed chain
// (kube-apiserver writes its certificate followed by the CA's) from chain to path.
func writeServingCA(chain, path string) error {
	data, err := os.ReadFile(chain)
	if err != nil {
		return fmt.Errorf("API server certificate: %w", err)
	}
	var cas []byte
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return fmt.Errorf("API server certificate %s: %w", chain, err)
		}
		if cert.IsCA {
			cas = append(cas, pem.EncodeToMemory(block)...)
		}
	}
	if len(cas) == 0 {
		return fmt.Errorf("no CA certificate in %s", chain)
	}
	return os.WriteFile(path, cas, 0o644)
}
