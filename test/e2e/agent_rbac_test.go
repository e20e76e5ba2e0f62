//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestAgentRBAC: a per-node agent kubeconfig from `baremetal-ccmctl agent kubeconfig`
// authenticates as system:baremetal-ccm-agent:<node> in group
// system:baremetal-ccm-agents; with the packaged agent RBAC it can do what an agent
// does (list and watch Nodes, Services and EndpointSlices, record Events, write
// BGPSessionStates: TestBGPSessionStateOwnNode keeps them to its node) and nothing
// else, and so can the agents' ServiceAccount (SubjectAccessReviews, and the real
// client's Forbidden answers).
func TestAgentRBAC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := framework.Shared()
	const node = "agent-rbac-w1"
	if err := framework.ApplyAgentRBAC(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if err := framework.ApplyAgentRBAC(ctx, cp); err != nil {
		t.Fatalf("applying the agent RBAC again: %v", err)
	}
	t.Cleanup(func() {
		if err := framework.DeleteNodes(context.Background(), cp.Client, node); err != nil {
			t.Error(err)
		}
	})
	if _, err := framework.CreateNode(ctx, cp.Client, framework.NodeSpec{Name: node}); err != nil {
		t.Fatal(err)
	}

	kubeconfig := framework.AgentKubeconfig(t, cp, nil, node)
	if fi, err := os.Stat(kubeconfig); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("agent kubeconfig: %v, mode %v; want 0600", err, fi.Mode())
	}
	agent, err := framework.ClientFor(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	user := manifests.AgentUserName(node)

	// The certificate is the agent's identity (and the API server was verified with its
	// serving CA: the kubeconfig does not skip TLS verification).
	ssr, err := agent.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ssr.Status.UserInfo.Username != user || !slices.Contains(ssr.Status.UserInfo.Groups, manifests.AgentGroup) {
		t.Errorf("agent authenticates as %q in %v, want %q in %s", ssr.Status.UserInfo.Username, ssr.Status.UserInfo.Groups, user, manifests.AgentGroup)
	}

	t.Run("works", func(t *testing.T) { agentCanWork(ctx, t, cp, agent, node) })
	t.Run("forbidden", func(t *testing.T) { agentForbidden(ctx, t, agent, node) })
	t.Run("through a host's proxy", func(t *testing.T) {
		h := framework.NewHost(t, cp)
		c, err := framework.ClientFor(framework.AgentKubeconfig(t, cp, h, node))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
			t.Errorf("get Node through %s's proxy: %v", h.Name, err)
		}
	})

	certUser := authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{manifests.AgentGroup, "system:authenticated"}}
	saUser := authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + manifests.Namespace + ":" + manifests.AgentServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + manifests.Namespace, "system:authenticated"},
	}
	for name, subject := range map[string]authorizationv1.SubjectAccessReviewSpec{"certificate": certUser, "ServiceAccount": saUser} {
		t.Run("SubjectAccessReviews for the "+name, func(t *testing.T) { agentAccessReviews(ctx, t, cp, subject, node) })
	}
}

// agentCanWork uses the agent's client for everything an agent does.
func agentCanWork(ctx context.Context, t *testing.T, cp *framework.ControlPlane, agent kubernetes.Interface, node string) {
	nodes, err := agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list Nodes: %v", err)
	}
	if !slices.ContainsFunc(nodes.Items, func(n v1.Node) bool { return n.Name == node }) {
		t.Errorf("list Nodes lacks %s", node)
	}
	if _, err := agent.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		t.Errorf("get Node: %v", err)
	}
	if _, err := agent.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list EndpointSlices: %v", err)
	}

	svcs, err := agent.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list Services: %v", err)
	}
	w, err := agent.CoreV1().Services("").Watch(ctx, metav1.ListOptions{ResourceVersion: svcs.ResourceVersion})
	if err != nil {
		t.Fatalf("watch Services: %v", err)
	}
	defer w.Stop()
	const svcName = "agent-rbac-watched"
	t.Cleanup(func() {
		_ = cp.Client.CoreV1().Services("default").Delete(context.Background(), svcName, metav1.DeleteOptions{})
	})
	if _, err := cp.Client.CoreV1().Services("default").Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, Ports: []v1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for seen := false; !seen; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the Services watch ended")
			}
			if s, isSvc := ev.Object.(*v1.Service); ev.Type == watch.Added && isSvc && s.Name == svcName {
				seen = true
			}
		case <-timeout:
			t.Fatalf("the agent's Services watch did not see %s created", svcName)
		}
	}

	ev, err := agent.CoreV1().Events("default").Create(ctx, &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: node + "."},
		InvolvedObject: v1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node), APIVersion: "v1"},
		Reason:         "AgentRBACTest", Message: "the agent records events", Type: v1.EventTypeNormal,
		Source:         v1.EventSource{Component: "baremetal-ccm-agent", Host: node},
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Event: %v", err)
	}
	// A recorder patches the count of a repeated Event.
	if _, err := agent.CoreV1().Events("default").Patch(ctx, ev.Name, types.StrategicMergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("patch Event: %v", err)
	}
}

// agentForbidden: the agent's client is refused what it must not do.
func agentForbidden(ctx context.Context, t *testing.T, agent kubernetes.Interface, node string) {
	expiry := int64(600)
	for what, call := range map[string]func() error{
		"list Secrets in " + manifests.CredentialsNamespace: func() error {
			_, err := agent.CoreV1().Secrets(manifests.CredentialsNamespace).List(ctx, metav1.ListOptions{})
			return err
		},
		"list Secrets everywhere": func() error { _, err := agent.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); return err },
		"get a Secret in kube-system": func() error {
			_, err := agent.CoreV1().Secrets("kube-system").Get(ctx, "any", metav1.GetOptions{})
			return err
		},
		"delete its Node": func() error { return agent.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}) },
		"patch its Node": func() error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		},
		"patch its Node's status": func() error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
			return err
		},
		"get the deletion guard's ConfigMap": func() error {
			_, err := agent.CoreV1().ConfigMaps(framework.GuardStateNamespace).Get(ctx, framework.GuardStateName, metav1.GetOptions{})
			return err
		},
		"create a Lease in kube-system": func() error {
			_, err := agent.CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "agent-rbac"}}, metav1.CreateOptions{})
			return err
		},
		"request a token for the CCM's ServiceAccount": func() error {
			_, err := agent.CoreV1().ServiceAccounts(manifests.Namespace).CreateToken(ctx, manifests.ServiceAccount,
				&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
			return err
		},
		"create a Service": func() error {
			_, err := agent.CoreV1().Services("default").Create(ctx, &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "agent-rbac-denied"},
				Spec: v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: got %v, want Forbidden", what, err)
		}
	}
}

// agentAccessReviews asks the API server's authorizer what subject may do: exactly the
// agent's rules, and a thorough list of what it must not do denied.
func agentAccessReviews(ctx context.Context, t *testing.T, cp *framework.ControlPlane, subject authorizationv1.SubjectAccessReviewSpec, node string) {
	type check struct {
		group, resource, sub, verb, ns, name string
	}
	core := func(resource, verb, ns string) check { return check{"", resource, "", verb, ns, ""} }
	allowed := []check{
		core("nodes", "get", ""), {"", "nodes", "", "get", "", node}, core("nodes", "list", ""), core("nodes", "watch", ""),
		core("services", "list", ""), core("services", "watch", ""), core("services", "list", "default"), core("services", "watch", "default"),
		{"discovery.k8s.io", "endpointslices", "", "list", "", ""}, {"discovery.k8s.io", "endpointslices", "", "watch", "", ""},
		{"discovery.k8s.io", "endpointslices", "", "list", "default", ""}, {"discovery.k8s.io", "endpointslices", "", "watch", "default", ""},
		core("events", "create", "default"), core("events", "patch", "default"), core("events", "create", "kube-system"),
		// Its node's BGPSessionStates (the ValidatingAdmissionPolicy keeps it to its own).
		{"baremetal-ccm.io", "bgpsessionstates", "", "list", "", ""}, {"baremetal-ccm.io", "bgpsessionstates", "", "create", "", ""},
		{"baremetal-ccm.io", "bgpsessionstates", "", "update", "", node + ".10.0.0.1"}, {"baremetal-ccm.io", "bgpsessionstates", "", "delete", "", node + ".10.0.0.1"},
		{"baremetal-ccm.io", "ippools", "", "list", "", ""}, {"baremetal-ccm.io", "ippools", "", "watch", "", ""},
	}
	denied := []check{
		{"baremetal-ccm.io", "bgpsessionstates", "", "watch", "", ""}, {"baremetal-ccm.io", "bgpsessionstates", "", "patch", "", ""},
		{"baremetal-ccm.io", "bgpsessionstates", "", "deletecollection", "", ""},
		{"baremetal-ccm.io", "ippools", "", "create", "", ""}, {"baremetal-ccm.io", "ippools", "", "update", "", ""},
		{"baremetal-ccm.io", "ippools", "status", "update", "", ""},
		// Secrets: none, anywhere, least of all the BMC credentials.
		core("secrets", "get", manifests.CredentialsNamespace), core("secrets", "list", manifests.CredentialsNamespace),
		core("secrets", "watch", manifests.CredentialsNamespace), {"", "secrets", "", "get", manifests.CredentialsNamespace, "e2e-bmc-sec-1"},
		core("secrets", "get", "kube-system"), core("secrets", "list", "kube-system"), core("secrets", "get", "default"),
		core("secrets", "list", ""), core("secrets", "watch", ""), core("secrets", "create", manifests.CredentialsNamespace),
		// Nodes: read only.
		core("nodes", "patch", ""), {"", "nodes", "", "patch", "", node}, core("nodes", "update", ""), {"", "nodes", "", "update", "", node},
		core("nodes", "delete", ""), {"", "nodes", "", "delete", "", node}, core("nodes", "create", ""), core("nodes", "deletecollection", ""),
		{"", "nodes", "status", "patch", "", node}, {"", "nodes", "status", "update", "", node}, {"", "nodes", "proxy", "get", "", node},
		// Services: list and watch only.
		core("services", "get", "default"), core("services", "create", "default"), core("services", "update", "default"),
		core("services", "patch", "default"), core("services", "delete", "default"),
		{"", "services", "status", "patch", "default", ""}, {"", "services", "status", "update", "default", ""},
		{"discovery.k8s.io", "endpointslices", "", "get", "default", ""}, {"discovery.k8s.io", "endpointslices", "", "create", "default", ""},
		{"discovery.k8s.io", "endpointslices", "", "update", "default", ""}, core("endpoints", "get", "default"), core("endpoints", "update", "default"),
		// Events: record only.
		core("events", "update", "default"), core("events", "delete", "default"), core("events", "list", "default"),
		// The CCM's state and leadership.
		core("configmaps", "get", manifests.CredentialsNamespace), core("configmaps", "list", manifests.CredentialsNamespace),
		{"", "configmaps", "", "get", manifests.CredentialsNamespace, framework.GuardStateName},
		{"", "configmaps", "", "update", manifests.CredentialsNamespace, framework.GuardStateName},
		core("configmaps", "create", manifests.CredentialsNamespace), core("configmaps", "get", "kube-system"),
		{"coordination.k8s.io", "leases", "", "get", "kube-system", ""}, {"coordination.k8s.io", "leases", "", "create", "kube-system", ""},
		{"coordination.k8s.io", "leases", "", "update", "kube-system", ""},
		// Workloads and identities.
		core("pods", "create", "kube-system"), core("pods", "create", "default"), core("pods", "list", ""),
		{"", "pods", "exec", "create", "kube-system", ""},
		core("serviceaccounts", "create", "kube-system"), core("serviceaccounts", "get", "kube-system"),
		{"", "serviceaccounts", "token", "create", manifests.Namespace, manifests.ServiceAccount},
		{"", "serviceaccounts", "token", "create", manifests.Namespace, manifests.AgentServiceAccount},
		{"certificates.k8s.io", "certificatesigningrequests", "", "create", "", ""},
		{"certificates.k8s.io", "certificatesigningrequests", "approval", "update", "", ""},
		{"rbac.authorization.k8s.io", "clusterroles", "", "create", "", ""}, {"rbac.authorization.k8s.io", "clusterrolebindings", "", "create", "", ""},
		{"rbac.authorization.k8s.io", "clusterroles", "", "escalate", "", manifests.AgentClusterRole},
		{"rbac.authorization.k8s.io", "clusterroles", "", "bind", "", manifests.ClusterRole},
		core("namespaces", "create", ""), core("persistentvolumes", "update", ""),
		{"metallb.io", "ipaddresspools", "", "create", "metallb-system", ""},
		// Wildcards.
		{"*", "*", "", "*", "", ""}, {"*", "*", "", "*", "default", ""}, core("nodes", "*", ""), core("services", "*", "default"),
		core("events", "*", "default"), {"discovery.k8s.io", "endpointslices", "", "*", "default", ""},
	}
	review := func(c check) bool {
		spec := subject
		spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Group: c.group, Resource: c.resource, Subresource: c.sub, Verb: c.verb, Namespace: c.ns, Name: c.name,
		}
		sar, err := cp.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	describe := func(c check) string {
		res := c.resource
		if c.sub != "" {
			res += "/" + c.sub
		}
		return fmt.Sprintf("%s %s (group %q) in %q name %q", c.verb, res, c.group, c.ns, c.name)
	}
	for _, c := range allowed {
		if !review(c) {
			t.Errorf("%s: %s denied, want allowed", subject.User, describe(c))
		}
	}
	for _, c := range denied {
		if review(c) {
			t.Errorf("%s: %s allowed, want denied", subject.User, describe(c))
		}
	}
}
