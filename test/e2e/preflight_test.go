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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/explain"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/preflight"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestPreflightWithoutNamespace runs the CCM against a fresh cluster where nobody
// applied the packaged RBAC (as the demo did, and as a systemd unit with an admin
// kubeconfig does): its namespace is missing. The CCM initializes Nodes anyway, but is
// not ready, and says so in one line with the fix: in /readyz, its log, a condition
// and an event on its Node, and explain ccm. Once the namespace is created it becomes
// ready without a restart, and the deletion guard saves its state there.
func TestPreflightWithoutNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cp, err := framework.StartControlPlane(ctx, filepath.Join(t.TempDir(), "control-plane"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	const cp1 = `apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
hosts:
- name: cp-1
  systemUUID: 4c4c4544-0042-3510-8052-b4c04f4e4d41
  addresses: [{type: InternalIP, address: 10.0.0.41}]
`
	writeFile(t, inv, cp1+`- name: worker-2
  systemUUID: 4c4c4544-0042-3510-8052-b4c04f4e4d42
  addresses: [{type: InternalIP, address: 10.0.0.42}]
`)
	cfg := filepath.Join(dir, "cloud-config.yaml")
	writeFile(t, cfg, fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: %s, pollInterval: 1s}
  deletionGuard: {maxRemovedHosts: 1, maxRemovedPercent: 50, settleTime: 2s, acknowledgeFile: %s}
`, inv, filepath.Join(dir, "ack")))
	if _, err := framework.CreateNode(ctx, cp.Client, framework.NodeSpec{Name: "cp-1", SystemUUID: "4c4c4544-0042-3510-8052-b4c04f4e4d41"}); err != nil {
		t.Fatal(err)
	}
	notReady := v1.ConditionFalse
	if _, err := framework.CreateNode(ctx, cp.Client, framework.NodeSpec{Name: "worker-2", SystemUUID: "4c4c4544-0042-3510-8052-b4c04f4e4d42", Ready: &notReady}); err != nil {
		t.Fatal(err)
	}
	ccm := framework.StartCCM(t, cp, cfg, "--kubeconfig="+cp.Kubeconfig, "--authentication-kubeconfig="+cp.Kubeconfig,
		"--authorization-kubeconfig="+cp.Kubeconfig, "--node-name=cp-1")
	if err := ccm.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	// Not ready, with what is missing and the fix.
	var body string
	err = framework.WaitFor(ctx, 30*time.Second, "/readyz to name the missing namespace", func(ctx context.Context) (bool, error) {
		ok, b, err := ccm.Ready(ctx)
		if err != nil {
			return false, nil
		}
		if ok {
			return false, fmt.Errorf("ready without its namespace: %q", b)
		}
		body = b
		return strings.Contains(b, "namespace baremetal-ccm does not exist"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kubectl create namespace baremetal-ccm", "baremetal-ccmctl manifests rbac | kubectl apply -f -"} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz %q lacks the fix %q", body, want)
		}
	}
	t.Logf("/readyz: %s", body)
	if n := strings.Count(ccm.Log(), "Not ready: namespace baremetal-ccm does not exist"); n != 1 {
		t.Errorf("the log says what is missing %d times, want once (a line per change)", n)
	}

	condition := func(status v1.ConditionStatus) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			n, err := cp.Client.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range n.Status.Conditions {
				if c.Type == preflight.ConditionType {
					return c.Status == status, nil
				}
			}
			return false, nil
		}
	}
	event := func(reason string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": "cp-1", "reason": reason}.AsSelector().String()
			evs, err := cp.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: sel})
			return err == nil && len(evs.Items) > 0, err
		}
	}
	if err := framework.WaitFor(ctx, 20*time.Second, "condition CCMPreflight False on cp-1", condition(v1.ConditionFalse)); err != nil {
		t.Error(err)
	}
	if err := framework.WaitFor(ctx, 20*time.Second, "a PreflightFailed event on cp-1", event(preflight.ReasonFailed)); err != nil {
		t.Error(err)
	}
	out, err := (&explain.Explainer{Client: cp.Client}).CCM(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "MISSING") || !strings.Contains(out, "replica on cp-1: FAILED") {
		t.Errorf("explain ccm:\n%s", out)
	}
	t.Logf("explain ccm without the namespace:\n%s", out)

	// The rest works meanwhile: the Node is initialized.
	if err := framework.WaitFor(ctx, 30*time.Second, "cp-1 initialized", func(ctx context.Context) (bool, error) {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
		return err == nil && n.Spec.ProviderID == "baremetal://cp-1", err
	}); err != nil {
		t.Error(err)
	}

	// worker-2 leaves the inventory; its Node is NotReady. The guard cannot save the
	// removal without the namespace, so the Node stays.
	if err := framework.WaitFor(ctx, 30*time.Second, "worker-2 initialized", func(ctx context.Context) (bool, error) {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, "worker-2", metav1.GetOptions{})
		return err == nil && n.Spec.ProviderID == "baremetal://worker-2", err
	}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, inv, cp1)
	time.Sleep(20 * time.Second) // several reloads, settle times and node-monitor periods
	if _, err := cp.Client.CoreV1().Nodes().Get(ctx, "worker-2", metav1.GetOptions{}); err != nil {
		t.Fatalf("worker-2 without a saved guard decision: %v", err)
	}
	if !strings.Contains(ccm.Log(), `namespaces \"baremetal-ccm\" not found`) {
		t.Errorf("the guard's save did not fail for the missing namespace; log tail:\n%s", tailLines(ccm.Log(), 30))
	}

	// The fix the message names; no restart.
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "baremetal-ccm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixed := time.Now()
	if err := ccm.WaitReady(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("ready %v after the namespace was created", time.Since(fixed).Round(100*time.Millisecond))
	if err := framework.WaitFor(ctx, 20*time.Second, "condition CCMPreflight True on cp-1", condition(v1.ConditionTrue)); err != nil {
		t.Error(err)
	}
	if err := framework.WaitFor(ctx, 20*time.Second, "a PreflightPassed event on cp-1", event(preflight.ReasonPassed)); err != nil {
		t.Error(err)
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "the deletion guard's state saved", func(ctx context.Context) (bool, error) {
		cm, err := cp.Client.CoreV1().ConfigMaps("baremetal-ccm").Get(ctx, framework.GuardStateName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && strings.Contains(fmt.Sprint(cm.Data), "worker-2"), err
	}); err != nil {
		t.Error(err)
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "worker-2 deleted", func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().Nodes().Get(ctx, "worker-2", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}); err != nil {
		t.Error(err)
	}
	out, err = (&explain.Explainer{Client: cp.Client}).CCM(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "  exists") || !strings.Contains(out, "replica on cp-1: passed") {
		t.Errorf("explain ccm after the fix:\n%s", out)
	}
}
