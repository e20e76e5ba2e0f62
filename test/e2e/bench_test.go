//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

const benchNodes = 1000

// BenchmarkNodeInit1000 registers 1000 Nodes at once with the uninitialized taint and
// measures the time until every one is initialized, for the baremetal provider (a
// 1000-host inventory file) and, in the same harness and run, for a zero-cost provider
// that answers instantly from nothing (test/e2e/zeroccm). Both run with default CCM
// flags and with raised API QPS and node-sync workers; the ratio baremetal/zero is
// the provider's own cost.
func BenchmarkNodeInit1000(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cp := framework.Shared()
	zero, err := framework.BuildBinary(ctx, "./test/e2e/zeroccm")
	if err != nil {
		b.Fatal(err)
	}
	cfg := benchInventory(b)
	client := fastClient(b, cp)

	tuned := []string{"--kube-api-qps=500", "--kube-api-burst=1000", "--concurrent-node-syncs=8"}
	for range b.N {
		for _, flags := range []struct {
			name string
			args []string
		}{{"default-flags", nil}, {"tuned", tuned}} {
			var zeroTime, bmTime time.Duration
			for _, p := range []struct {
				name, binary string
			}{{"zero", zero}, {"baremetal", framework.CCMBinary()}} {
				args := append([]string{"--node-monitor-period=5s"}, flags.args...)
				ccm := framework.StartCCMBinary(b, cp, p.binary, cfg, args...)
				if err := ccm.WaitHealthy(ctx); err != nil {
					b.Fatal(err)
				}
				d := initAll(ctx, b, client)
				ccm.Stop()
				deleteBenchNodes(ctx, b, client)
				b.Logf("%s, %s: %d Nodes initialized in %v", flags.name, p.name, benchNodes, d.Round(time.Millisecond))
				if p.name == "zero" {
					zeroTime = d
				} else {
					bmTime = d
				}
			}
			ratio := bmTime.Seconds() / zeroTime.Seconds()
			b.ReportMetric(bmTime.Seconds(), flags.name+"-baremetal-s")
			b.ReportMetric(zeroTime.Seconds(), flags.name+"-zero-s")
			b.ReportMetric(ratio, flags.name+"-ratio")
			b.Logf("%s: baremetal %v, zero-cost %v, ratio %.2f (target <= 1.2)", flags.name, bmTime.Round(time.Millisecond), zeroTime.Round(time.Millisecond), ratio)
		}
	}
}

// benchInventory writes a 1000-host inventory whose hosts carry exactly the addresses
// the Nodes register with, so neither provider needs an extra address patch.
func benchInventory(b *testing.B) string {
	dir := b.TempDir()
	var inv strings.Builder
	inv.WriteString("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n")
	for i := range benchNodes {
		fmt.Fprintf(&inv, "- name: bench-%04d\n  addresses: [{type: InternalIP, address: %s}, {type: Hostname, address: bench-%04d}]\n  instanceType: bench\n  zone: zone-1\n  region: region-1\n  rack: r1\n", i, benchIP(i), i)
	}
	invPath := filepath.Join(dir, "inventory.yaml")
	writeFileB(b, invPath, inv.String())
	cfg := filepath.Join(dir, "cloud-config.yaml")
	writeFileB(b, cfg, fmt.Sprintf("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory:\n  file: {path: %s}\n  deletionGuard: {acknowledgeFile: %s}\n", invPath, filepath.Join(dir, "ack")))
	return cfg
}

func benchIP(i int) string { return fmt.Sprintf("10.50.%d.%d", i/250, i%250+1) }

// fastClient is a client that does not throttle the benchmark's own Node creation.
func fastClient(b *testing.B, cp *framework.ControlPlane) kubernetes.Interface {
	cfg := *cp.RESTConfig
	cfg.QPS, cfg.Burst = 2000, 4000
	c, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// initAll creates the Nodes from 16 goroutines and returns the time from the first
// create until the last Node has lost the uninitialized taint.
func initAll(ctx context.Context, b *testing.B, client kubernetes.Interface) time.Duration {
	start := time.Now()
	parallel(b, benchNodes, func(i int) error {
		n := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%04d", i), Labels: map[string]string{"bench": "init"}},
			Spec: v1.NodeSpec{Taints: []v1.Taint{{
				Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule,
			}}},
			Status: v1.NodeStatus{
				Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: benchIP(i)}, {Type: v1.NodeHostName, Address: fmt.Sprintf("bench-%04d", i)}},
				Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			},
		}
		_, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		return err
	})
	var done time.Duration
	err := framework.WaitFor(ctx, 10*time.Minute, "all bench Nodes initialized", func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "bench=init", ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			if framework.HasTaint(&list.Items[i], cloudproviderapi.TaintExternalCloudProvider) {
				return false, nil
			}
		}
		if len(list.Items) != benchNodes {
			return false, fmt.Errorf("%d nodes", len(list.Items))
		}
		done = time.Since(start)
		return true, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return done
}

func deleteBenchNodes(ctx context.Context, b *testing.B, client kubernetes.Interface) {
	deleteNodesByLabel(ctx, b, client, "bench=init")
}

// deleteNodesByLabel deletes the Nodes the selector matches and waits until they are gone.
func deleteNodesByLabel(ctx context.Context, b *testing.B, client kubernetes.Interface, selector string) {
	if err := client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector}); err != nil {
		b.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 2*time.Minute, "Nodes "+selector+" deleted", func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
		return err == nil && len(list.Items) == 0, err
	}); err != nil {
		b.Fatal(err)
	}
}

func writeFileB(b *testing.B, path, content string) {
	b.Helper()
	writeFile(b, path, content)
}
