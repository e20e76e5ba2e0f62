package metallb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

func newFakeDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		SecretsGVR:           "SecretList",
		IPAddressPoolsGVR:    "IPAddressPoolList",
		BGPPeersGVR:          "BGPPeerList",
		BGPAdvertisementsGVR: "BGPAdvertisementList",
	}, objs...)
}

func foreign(gvr schema.GroupVersionResource, kind, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kind)
	u.SetNamespace(DefaultNamespace)
	u.SetName(name)
	u.SetLabels(map[string]string{"owner": "someone-else"})
	_ = unstructured.SetNestedStringSlice(u.Object, []string{"203.0.113.0/24"}, "spec", "addresses")
	return u
}

func getObj(t *testing.T, c *dynamicfake.FakeDynamicClient, gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, bool) {
	t.Helper()
	u, err := c.Resource(gvr).Namespace(DefaultNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return u, true
}

const reconcileConfig = `loadBalancer:
  announcer: metallb
  pools:
  - {name: public, addresses: [192.0.2.0/24], communities: [65000:1]}
  - {name: internal, addresses: [10.200.0.0/16]}
bgp:
  localASN: 64512
  peers:
  - {address: 10.0.0.1, asn: 65000, passwordFile: /etc/baremetal-ccm/spine.password}
`

func TestSyncCreatesUpdatesAndCollects(t *testing.T) {
	ctx := context.Background()
	client := newFakeDynamic(
		foreign(IPAddressPoolsGVR, "IPAddressPool", "someone-elses-pool"),
	)
	view := parseInventory(t, labInventory)
	r, err := NewReconciler(ReconcilerOptions{
		Client: client, Config: parseConfig(t, reconcileConfig),
		Inventory: func() (*inventory.View, error) { return view, nil },
		Options:   Options{ReadFile: labFiles},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{
		{SecretsGVR, "baremetal-ccm-peer-10-0-0-1"},
		{IPAddressPoolsGVR, "baremetal-ccm-public"},
		{IPAddressPoolsGVR, "baremetal-ccm-internal"},
		{BGPPeersGVR, "baremetal-ccm-peer-10-0-0-1"},
		{BGPPeersGVR, "baremetal-ccm-rack-peer-10-9-9-9"},
		{BGPAdvertisementsGVR, "baremetal-ccm-public"},
	} {
		if _, ok := getObj(t, client, want.gvr, want.name); !ok {
			t.Errorf("%s %s not created", want.gvr.Resource, want.name)
		}
	}

	// A second sync with nothing changed writes nothing.
	client.ClearActions()
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" {
			t.Errorf("idempotent sync made a %s %s call", a.GetVerb(), a.GetResource().Resource)
		}
	}

	// Someone edits our pool: the next sync restores it, keeping their label.
	pool, _ := getObj(t, client, IPAddressPoolsGVR, "baremetal-ccm-public")
	_ = unstructured.SetNestedStringSlice(pool.Object, []string{"198.51.100.0/24"}, "spec", "addresses")
	pool.SetLabels(map[string]string{LabelManagedBy: ManagedBy, "team": "net"})
	if _, err := client.Resource(IPAddressPoolsGVR).Namespace(DefaultNamespace).Update(ctx, pool, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pools change: internal goes away, public changes.
	r.o.Config = parseConfig(t, strings.Replace(strings.Replace(reconcileConfig,
		"  - {name: internal, addresses: [10.200.0.0/16]}\n", "", 1), "192.0.2.0/24", "192.0.2.0/25", 1))
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	pool, _ = getObj(t, client, IPAddressPoolsGVR, "baremetal-ccm-public")
	if got, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", "addresses"); strings.Join(got, ",") != "192.0.2.0/25" {
		t.Errorf("pool addresses = %v, want the new config's", got)
	}
	if pool.GetLabels()["team"] != "net" {
		t.Errorf("update dropped another party's label: %v", pool.GetLabels())
	}
	if _, ok := getObj(t, client, IPAddressPoolsGVR, "baremetal-ccm-internal"); ok {
		t.Error("pool of a removed CCM pool not garbage-collected")
	}
	if _, ok := getObj(t, client, BGPAdvertisementsGVR, "baremetal-ccm-internal"); ok {
		t.Error("advertisement of a removed CCM pool not garbage-collected")
	}
	if _, ok := getObj(t, client, IPAddressPoolsGVR, "someone-elses-pool"); !ok {
		t.Error("a foreign object was deleted")
	}
	for _, a := range client.Actions() {
		if n := actionName(a); n == "someone-elses-pool" && a.GetVerb() != "list" {
			t.Errorf("foreign object touched: %s", a.GetVerb())
		}
	}
}

func actionName(a k8stesting.Action) string {
	switch a := a.(type) {
	case k8stesting.DeleteAction:
		return a.GetName()
	case k8stesting.CreateAction: // also matches UpdateAction: same methods
		return a.GetObject().(*unstructured.Unstructured).GetName()
	}
	return ""
}

func TestSyncConflictFreezesDependents(t *testing.T) {
	ctx := context.Background()
	// Foreign objects with our names: a pool, and the peer's password Secret.
	fpool := foreign(IPAddressPoolsGVR, "IPAddressPool", "baremetal-ccm-public")
	fsecret := foreign(SecretsGVR, "Secret", "baremetal-ccm-peer-10-0-0-1")
	client := newFakeDynamic(fpool, fsecret)
	rec := record.NewFakeRecorder(10)
	r, err := NewReconciler(ReconcilerOptions{
		Client: client, Config: parseConfig(t, reconcileConfig),
		Inventory: func() (*inventory.View, error) { return nil, nil },
		Options:   Options{ReadFile: labFiles}, Recorder: rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Sync(ctx)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("Sync = %v, want ErrConflict", err)
	}
	for _, name := range []string{"IPAddressPool metallb-system/baremetal-ccm-public", "Secret metallb-system/baremetal-ccm-peer-10-0-0-1"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
	if got, _ := getObj(t, client, IPAddressPoolsGVR, "baremetal-ccm-public"); got.GetLabels()[LabelManagedBy] != "" {
		t.Error("foreign pool was taken over")
	}
	if got, _ := getObj(t, client, SecretsGVR, "baremetal-ccm-peer-10-0-0-1"); got.GetLabels()[LabelManagedBy] != "" {
		t.Error("foreign secret was taken over")
	}
	if _, ok := getObj(t, client, BGPPeersGVR, "baremetal-ccm-peer-10-0-0-1"); ok {
		t.Error("a peer referencing a foreign Secret was created")
	}
	if _, ok := getObj(t, client, BGPAdvertisementsGVR, "baremetal-ccm-public"); ok {
		t.Error("an advertisement of a foreign pool was created")
	}
	if _, ok := getObj(t, client, IPAddressPoolsGVR, "baremetal-ccm-internal"); !ok {
		t.Error("an unaffected pool was not created")
	}
	close(rec.Events)
	var events []string
	for e := range rec.Events {
		events = append(events, e)
	}
	if len(events) != 2 || !strings.HasPrefix(events[0], "Warning "+ReasonObjectConflict) {
		t.Errorf("events = %q, want two %s warnings", events, ReasonObjectConflict)
	}
	for _, e := range events {
		if strings.Contains(e, "spine-secret") {
			t.Errorf("event leaks the password: %q", e)
		}
	}
}

func TestSyncRecreatesOnImmutableChange(t *testing.T) {
	ctx := context.Background()
	client := newFakeDynamic()
	cfg := parseConfig(t, reconcileConfig)
	r, err := NewReconciler(ReconcilerOptions{
		Client: client, Config: cfg, Options: Options{ReadFile: labFiles},
		Inventory: func() (*inventory.View, error) { return nil, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	r.o.Config = parseConfig(t, strings.Replace(reconcileConfig, "asn: 65000,", "asn: 65000, gracefulRestart: 60s,", 1))
	client.ClearActions()
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, a := range client.Actions() {
		if a.GetResource() == BGPPeersGVR && a.GetVerb() != "list" {
			verbs = append(verbs, a.GetVerb())
		}
	}
	if strings.Join(verbs, ",") != "delete,create" {
		t.Errorf("changing gracefulRestart made calls %v, want delete,create", verbs)
	}
	peer, _ := getObj(t, client, BGPPeersGVR, "baremetal-ccm-peer-10-0-0-1")
	if gr, _, _ := unstructured.NestedBool(peer.Object, "spec", "enableGracefulRestart"); !gr {
		t.Error("recreated peer lacks enableGracefulRestart")
	}
}

func TestSyncRefusesUnsupportedAndMissingInventory(t *testing.T) {
	ctx := context.Background()
	client := newFakeDynamic()
	invErr := errors.New("inventory not loaded")
	r, _ := NewReconciler(ReconcilerOptions{
		Client: client, Config: parseConfig(t, reconcileConfig), Options: Options{ReadFile: labFiles},
		Inventory: func() (*inventory.View, error) { return nil, invErr },
	})
	if err := r.Sync(ctx); !errors.Is(err, invErr) {
		t.Errorf("Sync without inventory = %v", err)
	}
	r.o.Inventory = func() (*inventory.View, error) { return nil, nil }
	r.o.Options.ReadFile = fakeFiles(nil)
	if err := r.Sync(ctx); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Sync with an unreadable password file = %v", err)
	}
	for _, a := range client.Actions() {
		t.Errorf("a refused sync made a %s call", a.GetVerb())
	}
}

func TestSyncReportsMissingMetalLB(t *testing.T) {
	client := newFakeDynamic()
	client.PrependReactor("list", "ipaddresspools", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(IPAddressPoolsGVR.GroupResource(), "")
	})
	r, _ := NewReconciler(ReconcilerOptions{
		Client: client, Config: parseConfig(t, reconcileConfig), Options: Options{ReadFile: labFiles},
		Inventory: func() (*inventory.View, error) { return nil, nil },
	})
	if err := r.Sync(context.Background()); !errors.Is(err, ErrMetalLBMissing) {
		t.Errorf("Sync = %v, want ErrMetalLBMissing", err)
	}
}

// TestRunSyncsOnTriggerDigestAndResync drives Run with a fake clock: it syncs at start,
// on a trigger, when the inventory digest changes, and after the resync interval, and
// not otherwise.
func TestRunSyncsOnTriggerDigestAndResync(t *testing.T) {
	client := newFakeDynamic()
	views := []*inventory.View{
		parseInventory(t, labInventory),
		parseInventory(t, strings.ReplaceAll(labInventory, "asn: 65200}", "asn: 65201}")),
	}
	var current atomic.Pointer[inventory.View]
	current.Store(views[0])
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	trigger := make(chan struct{})
	r, _ := NewReconciler(ReconcilerOptions{
		Client: client, Config: parseConfig(t, reconcileConfig), Options: Options{ReadFile: labFiles},
		Inventory: func() (*inventory.View, error) { return current.Load(), nil },
		Trigger:   trigger, Clock: clk, PollInterval: time.Second, ResyncInterval: time.Minute,
	})
	synced := make(chan error)
	r.afterSync = func(ctx context.Context, err error) {
		select {
		case synced <- err:
		case <-ctx.Done():
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	next := func(what string) {
		t.Helper()
		if err := <-synced; err != nil {
			t.Fatalf("%s: sync failed: %v", what, err)
		}
	}
	next("start")
	// Ticks with nothing changed do not sync: the next sync seen is the trigger's.
	for range 3 {
		clk.Step(time.Second)
	}
	select {
	case trigger <- struct{}{}:
	case err := <-synced:
		t.Fatalf("a tick with nothing changed made a sync (err %v)", err)
	}
	next("trigger")
	if peer, _ := getObj(t, client, BGPPeersGVR, "baremetal-ccm-rack-peer-10-9-9-9"); peerASN(peer) != 65200 {
		t.Fatalf("shared rack peer ASN %d before the change, want 65200", peerASN(peer))
	}

	current.Store(views[1])
	clk.Step(time.Second)
	next("inventory change")
	peer, _ := getObj(t, client, BGPPeersGVR, "baremetal-ccm-rack-peer-10-9-9-9")
	if peerASN(peer) != 65201 {
		t.Errorf("after the inventory change the shared rack peer has ASN %d, want 65201", peerASN(peer))
	}

	clk.Step(time.Minute)
	next("resync")
}

func peerASN(u *unstructured.Unstructured) int64 {
	v, _, _ := unstructured.NestedInt64(u.Object, "spec", "peerASN")
	return v
}

func TestRetriable(t *testing.T) {
	api := errors.New("connection refused")
	conflict := fmt.Errorf("x: %w", ErrConflict)
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{api, true},
		{conflict, false},
		{fmt.Errorf("not changing: %w", ErrUnsupported), false},
		{errors.Join(conflict, conflict), false},
		{errors.Join(conflict, api), true},
	} {
		if got := retriable(tc.err); got != tc.want {
			t.Errorf("retriable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestSyncIsFenced: a replica whose fence says it no longer leads creates, updates
// and deletes nothing; each write asks the fence right before it.
func TestSyncIsFenced(t *testing.T) {
	ctx := context.Background()
	client := newFakeDynamic()
	view := parseInventory(t, labInventory)
	errNotLeader := errors.New("not the leader")
	leading, checks := false, 0
	r, err := NewReconciler(ReconcilerOptions{
		Client: client, Config: parseConfig(t, reconcileConfig),
		Inventory: func() (*inventory.View, error) { return view, nil },
		Options:   Options{ReadFile: labFiles},
		Fence: func(context.Context) error {
			checks++
			if !leading {
				return errNotLeader
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(ctx); !errors.Is(err, errNotLeader) {
		t.Fatalf("Sync without the Lease = %v, want the fence's error", err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" {
			t.Errorf("Sync without the Lease made a %s of %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	leading, checks = true, 0
	client.ClearActions()
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	writes := 0
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "get" {
			writes++
		}
	}
	if writes == 0 || checks != writes {
		t.Errorf("%d fence checks for %d writes, want one before each", checks, writes)
	}
}
