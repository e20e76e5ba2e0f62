//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

func TestMain(m *testing.M) { os.Exit(framework.RunMain(m)) }

// TestHarnessSmoke proves the harness: a CCM started against the shared control plane
// initializes a Node registered the way kubelet --cloud-provider=external does.
func TestHarnessSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := framework.Shared()
	dir := t.TempDir()
	inventory := filepath.Join(dir, "inventory.yaml")
	writeFile(t, inventory, `apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
hosts:
- name: node-a
  systemUUID: 4c4c4544-0042-3510-8052-b4c04f4e4d32
  addresses: [{type: InternalIP, address: 10.0.0.11}]
  instanceType: r650
  zone: rack1
  region: dc1
`)
	cloudConfig := filepath.Join(dir, "cloud-config.yaml")
	writeFile(t, cloudConfig, fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: %s, pollInterval: 1s}
  deletionGuard: {acknowledgeFile: %s}
`, inventory, filepath.Join(dir, "ack")))

	ccm := framework.StartCCM(t, cp, cloudConfig)
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		if err := framework.DeleteNodes(context.Background(), cp.Client, "node-a"); err != nil {
			t.Error(err)
		}
	})
	if _, err := framework.CreateNode(ctx, cp.Client, framework.NodeSpec{
		Name: "node-a", SystemUUID: "4c4c4544-0042-3510-8052-b4c04f4e4d32",
	}); err != nil {
		t.Fatal(err)
	}
	err := framework.WaitFor(ctx, 30*time.Second, "node-a initialized", func(ctx context.Context) (bool, error) {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if n.Spec.ProviderID != "baremetal://node-a" || framework.HasTaint(n, cloudproviderapi.TaintExternalCloudProvider) {
			return false, fmt.Errorf("providerID %q, taints %v", n.Spec.ProviderID, n.Spec.Taints)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	metrics, err := ccm.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(metrics, "baremetal_ccm_inventory_hosts") {
		t.Errorf("/metrics lacks baremetal_ccm_inventory_hosts:\n%s", metrics)
	}

	if err := framework.DeleteNodes(ctx, cp.Client, "node-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node-a after delete: got %v, want NotFound", err)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
