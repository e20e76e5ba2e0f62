//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestStaticPodManifest: the packaged static pod passes the real API server's
// validation and admission (server-side dry-run).
func TestStaticPodManifest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp := framework.Shared()
	root, err := framework.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "packaging", "kubernetes", "static-pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.DecodeManifests(data)
	if err != nil {
		t.Fatal(err)
	}
	pod, ok := objs[0].(*v1.Pod)
	if len(objs) != 1 || !ok {
		t.Fatalf("static-pod.yaml holds %d objects, want one Pod", len(objs))
	}
	// The ServiceAccount admission plugin wants the namespace's default account, which
	// kube-controller-manager would create; a kubelet's mirror pod does not need it.
	_, err = cp.Client.CoreV1().ServiceAccounts("kube-system").Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	got, err := cp.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("server-side dry-run of the static pod: %v", err)
	}
	if got.Spec.Priority == nil || *got.Spec.Priority < 2000000000 {
		t.Errorf("priority = %v, want system-node-critical's", got.Spec.Priority)
	}
	if _, err := cp.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("dry-run persisted the pod: %v", err)
	}
}

// TestPackagedRBACBounds: the packaged ClusterRole grants what the CCM needs and nothing
// beyond; the rest of the suite runs the CCM with exactly these permissions.
func TestPackagedRBACBounds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp := framework.Shared()
	sa := "system:serviceaccount:" + manifests.Namespace + ":" + manifests.ServiceAccount
	type check struct {
		group, resource, sub, verb, ns string
		allowed                        bool
		name                           string
	}
	for _, c := range []check{
		{"", "nodes", "", "delete", "", true, ""},
		{"", "nodes", "", "patch", "", true, ""},
		{"", "nodes", "status", "patch", "", true, ""},
		{"", "events", "", "create", "default", true, ""},
		{"", "services", "status", "patch", "default", true, ""},
		{"coordination.k8s.io", "leases", "", "update", "kube-system", true, ""},
		{"discovery.k8s.io", "endpointslices", "", "watch", "default", true, ""},
		{"networking.k8s.io", "ipaddresses", "", "create", "", true, ""},
		{"networking.k8s.io", "ipaddresses", "", "delete", "", true, ""},
		{"networking.k8s.io", "ipaddresses", "", "update", "", true, ""}, // a claim given a sharing key
		{"networking.k8s.io", "ipaddresses", "", "patch", "", false, ""},
		{"networking.k8s.io", "servicecidrs", "", "list", "", false, ""},
		{"", "configmaps", "", "get", "kube-system", false, ""},
		{"", "secrets", "", "get", "kube-system", false, ""},
		// The out-of-service taint's removal lists pods and VolumeAttachments, nothing more.
		{"", "pods", "", "list", "", true, ""},
		{"", "pods", "", "get", "default", false, ""},
		{"", "pods", "", "delete", "default", false, ""},
		{"", "pods", "", "watch", "", false, ""},
		{"storage.k8s.io", "volumeattachments", "", "list", "", true, ""},
		{"storage.k8s.io", "volumeattachments", "", "delete", "", false, ""},
		{"", "nodes", "", "create", "", false, ""},
		{"", "services", "", "delete", "default", false, ""},
		{"", "persistentvolumes", "", "update", "", false, ""},
		{"discovery.k8s.io", "endpointslices", "", "update", "default", false, ""},
		{"rbac.authorization.k8s.io", "clusterroles", "", "create", "", false, ""},
		// The deletion guard's state: its own ConfigMap, by name, in the CCM's namespace.
		{"", "configmaps", "", "get", "baremetal-ccm", true, "baremetal-ccm-deletion-guard"},
		{"", "configmaps", "", "update", "baremetal-ccm", true, "baremetal-ccm-deletion-guard"},
		{"", "configmaps", "", "create", "baremetal-ccm", true, ""},
		{"", "configmaps", "", "get", "baremetal-ccm", false, "other"},
		{"", "configmaps", "", "update", "baremetal-ccm", false, "other"},
		{"", "configmaps", "", "list", "baremetal-ccm", false, ""},
		{"", "configmaps", "", "delete", "baremetal-ccm", false, "baremetal-ccm-deletion-guard"},
		{"", "configmaps", "", "create", "kube-system", false, ""},
	} {
		sar, err := cp.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: sa, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: c.group, Resource: c.resource, Subresource: c.sub, Verb: c.verb, Namespace: c.ns, Name: c.name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != c.allowed {
			t.Errorf("%s %s/%s %s in %q: allowed = %v, want %v", c.verb, c.resource, c.sub, c.group, c.ns, sar.Status.Allowed, c.allowed)
		}
	}
}

// TestLeaderElection: two replicas under the packaged RBAC. The first takes the Lease
// in kube-system and initializes Nodes; when it stops, the standby takes over.
func TestLeaderElection(t *testing.T) {
	l := newLabNoCCM(t, host{name: "le-1", ip: "10.60.0.1"}, host{name: "le-2", ip: "10.60.0.2"})
	const leaseName = "baremetal-ccm-e2e"
	args := []string{"--leader-elect=true", "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s", "--leader-elect-resource-name=" + leaseName}
	holder := func(ctx context.Context) (string, error) {
		lease, err := l.cp.Client.CoordinationV1().Leases("kube-system").Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if lease.Spec.HolderIdentity == nil {
			return "", nil
		}
		return *lease.Spec.HolderIdentity, nil
	}
	leader := framework.StartCCM(t, l.cp, l.config, args...)
	var first string
	if err := framework.WaitFor(l.ctx, time.Minute, "the first replica to take the lease", func(ctx context.Context) (bool, error) {
		h, err := holder(ctx)
		first = h
		return h != "", err
	}); err != nil {
		t.Fatal(err)
	}
	standby := framework.StartCCM(t, l.cp, l.config, args...)
	if err := standby.WaitHealthy(l.ctx); err != nil {
		t.Fatal(err)
	}
	l.createNode(framework.NodeSpec{Name: "le-1", InternalIPs: []string{"10.60.0.1"}, Ready: ready(v1.ConditionTrue)})
	l.waitInitialized("le-1")
	if h, _ := holder(l.ctx); h != first {
		t.Fatalf("the lease moved to %q while its holder %q was running", h, first)
	}

	leader.Stop()
	if err := framework.WaitFor(l.ctx, time.Minute, "the standby to take the lease", func(ctx context.Context) (bool, error) {
		h, err := holder(ctx)
		return h != "" && h != first, err
	}); err != nil {
		t.Fatal(err)
	}
	l.createNode(framework.NodeSpec{Name: "le-2", InternalIPs: []string{"10.60.0.2"}, Ready: ready(v1.ConditionTrue)})
	l.waitInitialized("le-2")
}
