//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/metallb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// metallbUser is the identity the announcer runs as in these tests: it holds exactly
// the RBAC rules the announcer documents (metallbRules), so a missing rule fails here.
const metallbUser = "e2e-metallb-announcer"

// metallbRules are the packaged rules of the announcer (packaging/kubernetes/
// rbac-metallb.yaml) beyond the packaged ClusterRole (which already grants services
// patch and events create/patch).
var metallbRules = manifests.MetalLBRules()

// setupMetalLB installs MetalLB's CRDs from the module, creates MetalLB's namespace and
// the announcer's RBAC, and returns clients that act as metallbUser.
func setupMetalLB(ctx context.Context, t *testing.T) (dynamic.Interface, kubernetes.Interface) {
	t.Helper()
	cp := framework.Shared()
	admin, err := dynamic.NewForConfig(cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := framework.ModuleDir(ctx, "go.universe.tf/metallb")
	if err != nil {
		t.Fatal(err)
	}
	crds, err := filepath.Glob(filepath.Join(dir, "config", "crd", "bases", "metallb.io_*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("MetalLB CRDs in %s: %v (found %d)", dir, err, len(crds))
	}
	var fixed []string
	if err := framework.InstallCRDs(ctx, admin, func(crd *unstructured.Unstructured) error {
		fixed = append(fixed, widenUint32Formats(crd.Object, crd.GetName())...)
		return nil
	}, crds...); err != nil {
		t.Fatal(err)
	}
	sort.Strings(fixed)
	t.Logf("MetalLB CRD fields widened from format int32 to int64 (metallb/metallb#3034): %v", fixed)
	ns := metallb.DefaultNamespace
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "baremetal-ccm-metallb"}, Rules: metallbRules}
	if _, err := cp.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: metallbUser}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "baremetal-ccm-metallb"}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}
	if _, err := cp.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The packaged ClusterRole's services patch and events rules, for this user.
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-metallb-announcer-packaged-subset"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}}
	if _, err := cp.Client.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}}
	if _, err := cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(cp.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: metallbUser}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn, kube
}

// widenUint32Formats rewrites every integer property declared format: int32 with a
// maximum above the int32 range to format: int64, and returns their paths.
//
// MetalLB v0.15.3's CRDs declare the BGPPeer ASNs (uint32 in Go) as format: int32 with
// maximum 4294967295. kube-apiserver 1.36 and later enforce numeric formats, and then
// reject every BGPPeer, whatever its ASNs ("Maximum boundary value must be of type
// integer with format int32 in spec.myASN"; metallb/metallb#3034, fixed upstream after
// v0.15.3). This is the same change as the upstream fix; everything else in the
// schemas, CEL rules included, is MetalLB's as shipped.
func widenUint32Formats(node any, path string) []string {
	var out []string
	switch n := node.(type) {
	case map[string]any:
		if n["type"] == "integer" && n["format"] == "int32" {
			var max float64
			switch m := n["maximum"].(type) {
			case int64:
				max = float64(m)
			case float64:
				max = m
			}
			if max > math.MaxInt32 {
				n["format"] = "int64"
				out = append(out, path)
			}
		}
		for k, v := range n {
			out = append(out, widenUint32Formats(v, path+"."+k)...)
		}
	case []any:
		for i, v := range n {
			out = append(out, widenUint32Formats(v, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return out
}

const metallbInventory = `apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
racks:
- name: r1
  bgpPeers:
  - {address: 10.1.0.1, asn: 65101}
- name: r2
  bgpPeers:
  - {address: 10.2.0.1, asn: 65102, holdTime: 9s}
hosts:
- {name: node-a, rack: r1, addresses: [{type: InternalIP, address: 10.1.0.11}]}
- {name: node-b, rack: r2, addresses: [{type: InternalIP, address: 10.2.0.11}]}
`

func metallbCloudConfig(t *testing.T, passwordFile, pools string) *config.CloudConfig {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: /unused}
loadBalancer:
  announcer: metallb
  pools:
%s
bgp:
  localASN: 64512
  communities: [65000:1]
  peers:
  - {address: 10.0.0.1, asn: 65000, passwordFile: %s, ebgpMultihop: 2, gracefulRestart: 120s}
`, pools, passwordFile)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var (
	poolsGVR = metallb.IPAddressPoolsGVR
	peersGVR = metallb.BGPPeersGVR
	advsGVR  = metallb.BGPAdvertisementsGVR
)

// TestMetalLBObjects runs the announcer's reconciler against the real apiserver with
// MetalLB's CRDs (so every object is validated by MetalLB's schemas and CEL rules),
// as a user holding only the documented RBAC rules.
func TestMetalLBObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := framework.Shared()
	dyn, kube := setupMetalLB(ctx, t)
	admin, err := dynamic.NewForConfig(cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := metallb.DefaultNamespace
	res := func(gvr schema.GroupVersionResource) dynamic.ResourceInterface {
		return admin.Resource(gvr).Namespace(ns)
	}

	// Foreign objects: one with the name of our "clash" pool, two with other names.
	foreignPool := func(name string, cidr string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"owner": "netops"}},
			"spec":     map[string]any{"addresses": []any{cidr}},
		}}
		created, err := res(poolsGVR).Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	clash := foreignPool("baremetal-ccm-clash", "203.0.113.0/28")
	other := foreignPool("netops-pool", "203.0.113.16/28")
	otherPeer, err := res(peersGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta2", "kind": "BGPPeer",
		"metadata": map[string]any{"name": "netops-peer", "namespace": ns, "labels": map[string]any{metallb.LabelManagedBy: "netops"}},
		"spec":     map[string]any{"myASN": int64(64512), "peerASN": int64(65000), "peerAddress": "10.0.0.2"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	foreign := []*unstructured.Unstructured{clash, other, otherPeer}
	t.Cleanup(func() {
		for _, f := range foreign {
			gvr := poolsGVR
			if f.GetKind() == "BGPPeer" {
				gvr = peersGVR
			}
			_ = admin.Resource(gvr).Namespace(ns).Delete(context.Background(), f.GetName(), metav1.DeleteOptions{})
		}
	})

	dir := t.TempDir()
	pw := filepath.Join(dir, "spine.password")
	writeFile(t, pw, "s3cret-spine\n")
	pools := `  - {name: public, addresses: [192.0.2.0/24, "2001:db8::/120"], communities: [no-export], largeCommunities: ["65000:1:2"], localPreference: 200}
  - {name: internal, addresses: [10.200.0.0/16]}
  - {name: clash, addresses: [198.51.100.0/24]}`
	cfg := metallbCloudConfig(t, pw, pools)
	view, err := inventory.Parse([]byte(metallbInventory))
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[inventory.View]
	current.Store(view)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "baremetal-ccm"})

	trigger := make(chan struct{})
	r, err := metallb.NewReconciler(metallb.ReconcilerOptions{
		Client: dyn, Config: cfg, Recorder: recorder, Trigger: trigger,
		Inventory: func() (*inventory.View, error) { return current.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}

	// First sync: everything created except what depends on the clash.
	err = r.Sync(ctx)
	if !errors.Is(err, metallb.ErrConflict) || !strings.Contains(err.Error(), "baremetal-ccm-clash") {
		t.Fatalf("first Sync = %v, want a conflict naming baremetal-ccm-clash", err)
	}
	for _, want := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{
		{poolsGVR, "baremetal-ccm-public"}, {poolsGVR, "baremetal-ccm-internal"},
		{advsGVR, "baremetal-ccm-public"}, {advsGVR, "baremetal-ccm-internal"},
		{peersGVR, "baremetal-ccm-peer-10-0-0-1"}, {peersGVR, "baremetal-ccm-rack-peer-10-1-0-1"}, {peersGVR, "baremetal-ccm-rack-peer-10-2-0-1"},
		{metallb.SecretsGVR, "baremetal-ccm-peer-10-0-0-1"},
	} {
		got, err := res(want.gvr).Get(ctx, want.name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s %s: %v", want.gvr.Resource, want.name, err)
			continue
		}
		if got.GetLabels()[metallb.LabelManagedBy] != metallb.ManagedBy {
			t.Errorf("%s %s lacks our label: %v", want.gvr.Resource, want.name, got.GetLabels())
		}
	}
	if _, err := res(advsGVR).Get(ctx, "baremetal-ccm-clash", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("advertisement for the clashing pool: err = %v, want NotFound (it would advertise a foreign pool)", err)
	}
	pool, _ := res(poolsGVR).Get(ctx, "baremetal-ccm-public", metav1.GetOptions{})
	if aa, _, _ := unstructured.NestedBool(pool.Object, "spec", "autoAssign"); aa {
		t.Error("our pool has autoAssign true")
	}
	adv, _ := res(advsGVR).Get(ctx, "baremetal-ccm-public", metav1.GetOptions{})
	if comms, _, _ := unstructured.NestedStringSlice(adv.Object, "spec", "communities"); strings.Join(comms, ",") != "65000:1,65535:65281,large:65000:1:2" {
		t.Errorf("advertisement communities = %v", comms)
	}
	peer, _ := res(peersGVR).Get(ctx, "baremetal-ccm-rack-peer-10-2-0-1", metav1.GetOptions{})
	if sel, _, _ := unstructured.NestedSlice(peer.Object, "spec", "nodeSelectors"); !strings.Contains(fmt.Sprint(sel), "baremetal-ccm.io/rack") || !strings.Contains(fmt.Sprint(sel), "r2") {
		t.Errorf("rack peer node selectors = %v, want rack r2", sel)
	}
	spine, _ := res(peersGVR).Get(ctx, "baremetal-ccm-peer-10-0-0-1", metav1.GetOptions{})
	if p, _, _ := unstructured.NestedString(spine.Object, "spec", "password"); p != "" {
		t.Error("the password is in the BGPPeer")
	}
	if ref, _, _ := unstructured.NestedString(spine.Object, "spec", "passwordSecret", "name"); ref != "baremetal-ccm-peer-10-0-0-1" {
		t.Errorf("passwordSecret = %q", ref)
	}
	secret, err := cp.Client.CoreV1().Secrets(ns).Get(ctx, "baremetal-ccm-peer-10-0-0-1", metav1.GetOptions{})
	if err != nil || string(secret.Data["password"]) != "s3cret-spine" || secret.Type != v1.SecretTypeBasicAuth {
		t.Errorf("password Secret = %v, %v", secret, err)
	}

	// The conflict is a Warning event on the foreign object.
	if err := framework.WaitFor(ctx, 30*time.Second, "conflict event on the foreign pool", func(ctx context.Context) (bool, error) {
		evs, err := framework.Events(ctx, cp.Client, ns, "IPAddressPool", "baremetal-ccm-clash")
		for _, e := range evs {
			if e.Reason == metallb.ReasonObjectConflict && e.Type == v1.EventTypeWarning {
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		t.Error(err)
	}

	// Nothing changed: a second sync writes nothing (resourceVersions stay).
	rvs := resourceVersions(ctx, t, admin)
	if err := r.Sync(ctx); !errors.Is(err, metallb.ErrConflict) {
		t.Fatalf("second Sync = %v", err)
	}
	if after := resourceVersions(ctx, t, admin); fmt.Sprint(after) != fmt.Sprint(rvs) {
		t.Errorf("an unchanged sync wrote objects:\nbefore %v\nafter  %v", rvs, after)
	}

	// Pools change: internal removed, public's addresses change, clash renamed away.
	r2, err := metallb.NewReconciler(metallb.ReconcilerOptions{
		Client: dyn, Recorder: recorder, Trigger: trigger,
		Config: metallbCloudConfig(t, pw, `  - {name: public, addresses: [192.0.2.0/25], localPreference: 300}
  - {name: edge, addresses: [198.51.100.0/24]}`),
		Inventory: func() (*inventory.View, error) { return current.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Sync(ctx); err != nil {
		t.Fatalf("Sync after the pool change = %v", err)
	}
	pool, _ = res(poolsGVR).Get(ctx, "baremetal-ccm-public", metav1.GetOptions{})
	if a, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", "addresses"); strings.Join(a, ",") != "192.0.2.0/25" {
		t.Errorf("public pool addresses = %v after the change", a)
	}
	adv, _ = res(advsGVR).Get(ctx, "baremetal-ccm-public", metav1.GetOptions{})
	if lp, _, _ := unstructured.NestedInt64(adv.Object, "spec", "localPref"); lp != 300 {
		t.Errorf("localPref = %d after the change, want 300", lp)
	}
	if _, ok, _ := unstructured.NestedStringSlice(adv.Object, "spec", "communities"); !ok {
		t.Error("bgp.communities vanished from the advertisement")
	}
	for _, gone := range []schema.GroupVersionResource{poolsGVR, advsGVR} {
		if _, err := res(gone).Get(ctx, "baremetal-ccm-internal", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s baremetal-ccm-internal after its pool was removed: err = %v, want NotFound", gone.Resource, err)
		}
	}
	if _, err := res(poolsGVR).Get(ctx, "baremetal-ccm-edge", metav1.GetOptions{}); err != nil {
		t.Errorf("new pool: %v", err)
	}
	assertForeignUntouched(ctx, t, admin, foreign)

	// Run: an inventory change (rack r1's router moves to another ASN) is applied after
	// a trigger.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r2.Run(runCtx) }()
	changed, err := inventory.Parse([]byte(strings.Replace(metallbInventory, "asn: 65101", "asn: 65111", 1)))
	if err != nil {
		t.Fatal(err)
	}
	current.Store(changed)
	select {
	case trigger <- struct{}{}:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if err := framework.WaitFor(ctx, time.Minute, "rack peer to follow the inventory", func(ctx context.Context) (bool, error) {
		p, err := res(peersGVR).Get(ctx, "baremetal-ccm-rack-peer-10-1-0-1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		asn, _, _ := unstructured.NestedInt64(p.Object, "spec", "peerASN")
		return asn == 65111, nil
	}); err != nil {
		t.Error(err)
	}
	stop()
	<-done

	// No load balancer any more: everything of ours is collected, foreign objects stay.
	empty, err := config.Parse([]byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory:\n  file: {path: /unused}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r3, err := metallb.NewReconciler(metallb.ReconcilerOptions{Client: dyn, Config: empty,
		Inventory: func() (*inventory.View, error) { return current.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r3.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, gvr := range []schema.GroupVersionResource{metallb.SecretsGVR, poolsGVR, peersGVR, advsGVR} {
		list, err := res(gvr).List(ctx, metav1.ListOptions{LabelSelector: metallb.LabelManagedBy + "=" + metallb.ManagedBy})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range list.Items {
			t.Errorf("%s %s left after the load balancer config was removed", gvr.Resource, o.GetName())
		}
	}
	assertForeignUntouched(ctx, t, admin, foreign)
}

// resourceVersions returns name -> resourceVersion of every metallb.io object and
// Secret in MetalLB's namespace.
func resourceVersions(ctx context.Context, t *testing.T, c dynamic.Interface) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, gvr := range []schema.GroupVersionResource{metallb.SecretsGVR, poolsGVR, peersGVR, advsGVR} {
		list, err := c.Resource(gvr).Namespace(metallb.DefaultNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range list.Items {
			out[gvr.Resource+"/"+o.GetName()] = o.GetResourceVersion()
		}
	}
	return out
}

func assertForeignUntouched(ctx context.Context, t *testing.T, c dynamic.Interface, foreign []*unstructured.Unstructured) {
	t.Helper()
	for _, f := range foreign {
		gvr := poolsGVR
		if f.GetKind() == "BGPPeer" {
			gvr = peersGVR
		}
		got, err := c.Resource(gvr).Namespace(f.GetNamespace()).Get(ctx, f.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("foreign %s %s: %v", f.GetKind(), f.GetName(), err)
			continue
		}
		if got.GetResourceVersion() != f.GetResourceVersion() {
			t.Errorf("foreign %s %s was modified (resourceVersion %s -> %s)", f.GetKind(), f.GetName(), f.GetResourceVersion(), got.GetResourceVersion())
		}
	}
}

// TestMetalLBServiceAnnotations round-trips MetalLB's Service annotations through the
// real apiserver, as a user allowed only to patch Services.
func TestMetalLBServiceAnnotations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := framework.Shared()
	_, kube := setupMetalLB(ctx, t)
	svcs := cp.Client.CoreV1().Services("default")
	svc, err := svcs.Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "metallb-web", Annotations: map[string]string{
			"baremetal-ccm.io/allow-shared-ip": "web", "team": "a",
		}},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svcs.Delete(context.Background(), "metallb-web", metav1.DeleteOptions{}) })

	cfg := metallbCloudConfig(t, "/unused", `  - {name: public, addresses: [192.0.2.0/24, "2001:db8::/120"]}`)
	s, err := metallb.NewServices(kube, cfg.LoadBalancer, nil)
	if err != nil {
		t.Fatal(err)
	}
	given := svc.DeepCopy()
	ips := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}
	written, err := s.Ensure(ctx, svc, ips)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(svc.Annotations) != fmt.Sprint(given.Annotations) {
		t.Errorf("Ensure modified the Service it was passed: %v", svc.Annotations)
	}
	got, err := svcs.Get(ctx, "metallb-web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if written.ResourceVersion != got.ResourceVersion {
		t.Errorf("Ensure returned resourceVersion %s, the Service has %s", written.ResourceVersion, got.ResourceVersion)
	}
	// The write was conditional: a copy older than the Service is refused.
	if _, err := s.Ensure(ctx, svc, ips[:1]); !apierrors.IsConflict(err) {
		t.Errorf("Ensure with a stale copy = %v, want a Conflict", err)
	}
	// The status subresource accepts the service controller's conditional patch at
	// the version the annotation write returned.
	status := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10","ipMode":"VIP"}]}}}`, written.ResourceVersion)
	if _, err := cp.Client.CoreV1().Services("default").Patch(ctx, "metallb-web", types.StrategicMergePatchType, []byte(status), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("the status patch at the annotation write's resourceVersion: %v", err)
	}
	if got, err = svcs.Get(ctx, "metallb-web", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		metallb.AnnotationLoadBalancerIPs: "192.0.2.10,2001:db8::10",
		metallb.AnnotationAddressPool:     "baremetal-ccm-public",
		metallb.AnnotationAllowSharedIP:   "web",
		"team":                            "a",
	}
	for k, v := range want {
		if got.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, got.Annotations[k], v)
		}
	}
	rv := got.ResourceVersion
	if _, err := s.Ensure(ctx, got, ips); err != nil {
		t.Fatal(err)
	}
	if again, _ := svcs.Get(ctx, "metallb-web", metav1.GetOptions{}); again.ResourceVersion != rv {
		t.Error("Ensure with the annotations in place wrote the Service")
	}

	// The allocation changes to one IP.
	if _, err := s.Ensure(ctx, got, ips[:1]); err != nil {
		t.Fatal(err)
	}
	got, _ = svcs.Get(ctx, "metallb-web", metav1.GetOptions{})
	if v := got.Annotations[metallb.AnnotationLoadBalancerIPs]; v != "192.0.2.10" {
		t.Errorf("loadBalancerIPs after the change = %q", v)
	}

	if _, err := s.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	got, _ = svcs.Get(ctx, "metallb-web", metav1.GetOptions{})
	for _, k := range []string{metallb.AnnotationLoadBalancerIPs, metallb.AnnotationAddressPool, metallb.AnnotationAllowSharedIP} {
		if _, ok := got.Annotations[k]; ok {
			t.Errorf("%s left after Delete", k)
		}
	}
	if got.Annotations["team"] != "a" || got.Annotations["baremetal-ccm.io/allow-shared-ip"] != "web" {
		t.Errorf("Delete removed other annotations: %v", got.Annotations)
	}
}

// TestMetalLBAnnouncerCCM runs the CCM process with loadBalancer.announcer: metallb and
// the packaged RBAC (rbac.yaml and rbac-metallb.yaml): the service controller assigns
// a Service its IP, the Service carries exactly that IP in metallb.io/loadBalancerIPs,
// and MetalLB's IPAddressPool for the CCM pool exists with autoAssign false; an
// IPPool added in the cluster gets its IPAddressPool too, and names a Service's.
func TestMetalLBAnnouncerCCM(t *testing.T) {
	l := newLabNoCCM(t)
	setupMetalLB(l.ctx, t)
	applyMetalLBAnnouncerRBAC(l.ctx, t)
	// The CCM leaves MetalLB's objects when it stops; remove them for the other tests.
	t.Cleanup(func() { deleteOurMetalLBObjects(t) })
	l.writeConfig("", `loadBalancer:
  announcer: metallb
  pools:
  - {name: ccm-e2e, addresses: [203.0.113.0/28]}
bgp:
  localASN: 64512
  peers:
  - {address: 10.0.0.1, asn: 65000}
`)
	l.ccm = framework.StartCCM(t, l.cp, l.config, "--controllers=service-lb-controller")
	if err := l.ccm.WaitHealthy(l.ctx); err != nil {
		t.Fatal(err)
	}
	ns := "mlb-" + rand.String(6)
	if _, err := l.cp.Client.CoreV1().Namespaces().Create(l.ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.cp.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: 80}}},
	}
	created := time.Now()
	if _, err := l.cp.Client.CoreV1().Services(ns).Create(l.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip, annotated string
	err := framework.WaitFor(l.ctx, 60*time.Second, "an IP in status and in metallb.io/loadBalancerIPs", func(ctx context.Context) (bool, error) {
		s, err := l.cp.Client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, err
		}
		ip, annotated = s.Status.LoadBalancer.Ingress[0].IP, s.Annotations["metallb.io/loadBalancerIPs"]
		return annotated != "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if annotated != ip {
		t.Errorf("metallb.io/loadBalancerIPs = %q, want exactly the assigned %q", annotated, ip)
	}
	// The annotation write and the status write follow each other without a
	// conflict: no re-prime, no retry 5 s later.
	took := time.Since(created)
	t.Logf("Service created to its IP in status and annotation: %v", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("the IP took %v to reach status and annotation, want at once (under 3 s)", took)
	}
	// Not one write of the CCM conflicted: not the status write right after the
	// annotation patch, and not a second sync of the version that those writes
	// replaced while the informer still showed it (pkg/lb/controller, ownWrites).
	// Only this test's Services: the shared control plane runs no namespace controller,
	// so earlier tests' Services outlive their namespaces and this CCM serves them too.
	for _, line := range strings.Split(l.ccm.Log(), "\n") {
		if strings.Contains(line, "the object has been modified") && strings.Contains(line, ns+"/") {
			t.Errorf("a write of the CCM conflicted: %s", line)
			// Who wrote the Service: its managers, what they own, and when.
			if s, err := l.cp.Client.CoreV1().Services(ns).Get(l.ctx, "web", metav1.GetOptions{}); err == nil {
				for _, mf := range s.ManagedFields {
					t.Logf("  managed by %s: %s %s at %v: %s", mf.Manager, mf.Operation, mf.Subresource, mf.Time, mf.FieldsV1)
				}
			}
		}
	}
	t.Logf("syncs of a version the CCM's own writes had replaced, skipped: %d", strings.Count(l.ccm.Log(), "has not caught up with this controller's last write"))
	admin, err := dynamic.NewForConfig(l.cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(l.ctx, 60*time.Second, "MetalLB's IPAddressPool for pool ccm-e2e", func(ctx context.Context) (bool, error) {
		p, err := admin.Resource(poolsGVR).Namespace(metallb.DefaultNamespace).Get(ctx, metallb.PoolName("ccm-e2e"), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		auto, found, _ := unstructured.NestedBool(p.Object, "spec", "autoAssign")
		if !found || auto {
			return false, fmt.Errorf("pool %s has autoAssign %v (found %v), want false", p.GetName(), auto, found)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// An IPPool added in the cluster: MetalLB gets its IPAddressPool, and a Service of
	// it the annotation naming it.
	ippools := versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig)).BaremetalCCMV1alpha1().IPPools()
	poolName := "mlb-" + strings.ToLower(rand.String(5))
	if _, err := ippools.Create(l.ctx, &v1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: v1alpha1.IPPoolSpec{Addresses: []string{"198.51.100.96/29"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { framework.DeleteIPPool(l.cp, poolName) })
	err = framework.WaitFor(l.ctx, 60*time.Second, "MetalLB's IPAddressPool for IPPool "+poolName, func(ctx context.Context) (bool, error) {
		p, err := admin.Resource(poolsGVR).Namespace(metallb.DefaultNamespace).Get(ctx, metallb.PoolName(poolName), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		addrs, _, _ := unstructured.NestedStringSlice(p.Object, "spec", "addresses")
		return err == nil && slices.Contains(addrs, "198.51.100.96/29"), err
	})
	if err != nil {
		t.Fatal(err)
	}
	pooled := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pooled", Annotations: map[string]string{"baremetal-ccm.io/address-pool": poolName}},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: 80}}}}
	if _, err := l.cp.Client.CoreV1().Services(ns).Create(l.ctx, pooled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(l.ctx, 60*time.Second, "pooled's metallb.io/address-pool", func(ctx context.Context) (bool, error) {
		s, err := l.cp.Client.CoreV1().Services(ns).Get(ctx, "pooled", metav1.GetOptions{})
		return err == nil && s.Annotations["metallb.io/address-pool"] == metallb.PoolName(poolName), err
	})
	if err != nil {
		t.Fatal(err)
	}
}
