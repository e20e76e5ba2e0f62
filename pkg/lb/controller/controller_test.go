package controller

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/cloud-provider/api"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/utils/ptr"
)

// fakeBalancer is a cloudprovider.LoadBalancer that assigns a fixed status and records
// its calls.
type fakeBalancer struct {
	mu       sync.Mutex
	status   *v1.LoadBalancerStatus
	err      error
	held     map[string]bool
	ensured  []string
	released []string
}

func newFakeBalancer(ip string) *fakeBalancer {
	return &fakeBalancer{status: &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: ip, IPMode: ptr.To(v1.LoadBalancerIPModeVIP)}}}, held: map[string]bool{}}
}

func (f *fakeBalancer) GetLoadBalancer(_ context.Context, _ string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held[svc.Namespace+"/"+svc.Name] {
		return f.status, true, nil
	}
	return nil, false, nil
}

func (f *fakeBalancer) GetLoadBalancerName(context.Context, string, *v1.Service) string { return "" }

func (f *fakeBalancer) EnsureLoadBalancer(_ context.Context, _ string, svc *v1.Service, _ []*v1.Node) (*v1.LoadBalancerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := svc.Namespace + "/" + svc.Name
	f.ensured = append(f.ensured, k)
	if f.err != nil {
		return nil, f.err
	}
	f.held[k] = true
	return f.status.DeepCopy(), nil
}

func (f *fakeBalancer) UpdateLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) error {
	return nil
}

func (f *fakeBalancer) EnsureLoadBalancerDeleted(_ context.Context, _ string, svc *v1.Service) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := svc.Namespace + "/" + svc.Name
	f.released = append(f.released, k)
	delete(f.held, k)
	return nil
}

type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	balancer *fakeBalancer
	recorder *record.FakeRecorder
	c        *Controller
	informer informers.SharedInformerFactory
}

// newFixture builds a controller over a fake clientset holding svcs, with the
// informer's store filled directly (no watch), and clears the recorded actions.
func newFixture(t *testing.T, svcs ...*v1.Service) *fixture {
	t.Helper()
	objs := make([]runtime.Object, 0, len(svcs))
	for _, s := range svcs {
		objs = append(objs, s)
	}
	f := &fixture{t: t, client: fake.NewClientset(objs...), balancer: newFakeBalancer("192.0.2.10"), recorder: record.NewFakeRecorder(10)}
	f.informer = informers.NewSharedInformerFactory(f.client, 0)
	svcInformer := f.informer.Core().V1().Services()
	c, err := New(Options{Client: f.client, Services: svcInformer, Balancer: f.balancer, ClusterName: "c", Recorder: f.recorder})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs {
		if err := svcInformer.Informer().GetIndexer().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	f.c = c
	f.client.ClearActions()
	return f
}

func (f *fixture) sync(key string) error {
	f.t.Helper()
	return f.c.sync(context.Background(), key)
}

// writes returns the fake clientset's write actions as "verb resource/subresource".
func (f *fixture) writes() []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range f.client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			out = append(out, a)
		}
	}
	return out
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func lbService(name string, mutate ...func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Port: 80}}},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func withOurs(s *v1.Service) {
	s.Finalizers = append(s.Finalizers, servicehelper.LoadBalancerCleanupFinalizer)
	s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "192.0.2.10", IPMode: ptr.To(v1.LoadBalancerIPModeVIP)}}
}

func TestNewServiceOnePatch(t *testing.T) {
	f := newFixture(t, lbService("web"))
	if err := f.sync("ns/web"); err != nil {
		t.Fatal(err)
	}
	w := f.writes()
	if len(w) != 1 {
		t.Fatalf("writes = %v, want one patch carrying finalizer and status", w)
	}
	p, ok := w[0].(k8stesting.PatchAction)
	if !ok || p.GetSubresource() != "status" {
		t.Fatalf("write %v is not a status patch", w[0])
	}
	body := string(p.GetPatch())
	for _, want := range []string{servicehelper.LoadBalancerCleanupFinalizer, "192.0.2.10"} {
		if !strings.Contains(body, want) {
			t.Errorf("patch %s lacks %s", body, want)
		}
	}
	if strings.Contains(body, `"spec"`) {
		t.Errorf("patch %s touches spec", body)
	}
	got, err := f.client.CoreV1().Services("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !servicehelper.HasLBFinalizer(got) || len(got.Status.LoadBalancer.Ingress) != 1 || got.Status.LoadBalancer.Ingress[0].IP != "192.0.2.10" {
		t.Errorf("stored Service finalizers %v status %v", got.Finalizers, got.Status.LoadBalancer)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("events %v, want none from the controller on success (the balancer records the assignment)", ev)
	}
}

func TestInSyncWritesNothing(t *testing.T) {
	f := newFixture(t, lbService("web", withOurs))
	if err := f.sync("ns/web"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("writes = %v for a Service already in step", w)
	}
	if len(f.balancer.ensured) != 1 {
		t.Errorf("EnsureLoadBalancer calls = %v, want 1 (it keeps the balancer's state current)", f.balancer.ensured)
	}
}

func TestEnsureErrors(t *testing.T) {
	t.Run("retry error: no event, RetryError kept", func(t *testing.T) {
		f := newFixture(t, lbService("web"))
		f.balancer.err = api.NewRetryError("pool exhausted", 30*time.Second)
		err := f.sync("ns/web")
		var re *api.RetryError
		if !errors.As(err, &re) || re.RetryAfter() != 30*time.Second {
			t.Fatalf("sync = %v, want the RetryError (30s) wrapped", err)
		}
		if ev := f.events(); len(ev) != 0 {
			t.Errorf("events %v: a retry error was already reported by the balancer", ev)
		}
		if w := f.writes(); len(w) != 0 {
			t.Errorf("writes %v after a failed ensure", w)
		}
	})
	t.Run("other error: SyncLoadBalancerFailed", func(t *testing.T) {
		f := newFixture(t, lbService("web"))
		f.balancer.err = errors.New("announcer down")
		if err := f.sync("ns/web"); err == nil || !strings.Contains(err.Error(), "announcer down") {
			t.Fatalf("sync = %v", err)
		}
		ev := f.events()
		if len(ev) != 1 || !strings.Contains(ev[0], ReasonSyncFailed) || !strings.Contains(ev[0], "announcer down") {
			t.Errorf("events %v, want one %s naming the cause", ev, ReasonSyncFailed)
		}
	})
}

func TestDeletionReleasesThenRemovesFinalizer(t *testing.T) {
	svc := lbService("web", withOurs, func(s *v1.Service) { s.DeletionTimestamp = ptr.To(metav1.Now()) })
	f := newFixture(t, svc)
	f.balancer.held["ns/web"] = true
	if err := f.sync("ns/web"); err != nil {
		t.Fatal(err)
	}
	if len(f.balancer.released) != 1 {
		t.Fatalf("released = %v, want ns/web once", f.balancer.released)
	}
	w := f.writes()
	if len(w) != 1 {
		t.Fatalf("writes = %v, want the finalizer removal", w)
	}
	body := string(w[0].(k8stesting.PatchAction).GetPatch())
	if !strings.Contains(body, "$deleteFromPrimitiveList/finalizers") {
		t.Errorf("patch %s does not remove the finalizer", body)
	}
	// Other finalizers may keep it terminating: it must not show the released IP.
	if !strings.Contains(body, `"ingress":null`) {
		t.Errorf("patch %s does not clear the status of the released Service", body)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], ReasonDeleted) {
		t.Errorf("events %v, want %s", ev, ReasonDeleted)
	}
}

func TestTypeChangeClearsStatus(t *testing.T) {
	svc := lbService("web", withOurs, func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeClusterIP })
	f := newFixture(t, svc)
	f.balancer.held["ns/web"] = true
	if err := f.sync("ns/web"); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.CoreV1().Services("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if servicehelper.HasLBFinalizer(got) || len(got.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("after the type change: finalizers %v status %v, want both cleared", got.Finalizers, got.Status.LoadBalancer)
	}
	if len(f.balancer.released) != 1 {
		t.Errorf("released = %v", f.balancer.released)
	}
}

func TestOtherClassUntouched(t *testing.T) {
	svc := lbService("other", func(s *v1.Service) {
		s.Spec.LoadBalancerClass = ptr.To("example.com/other")
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "203.0.113.1"}}
	})
	f := newFixture(t, svc)
	if err := f.sync("ns/other"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("writes %v on another class's Service", w)
	}
	if len(f.balancer.ensured)+len(f.balancer.released) != 0 {
		t.Errorf("balancer called: ensured %v released %v", f.balancer.ensured, f.balancer.released)
	}
	if f.c.queue.Len() != 0 {
		t.Errorf("queue holds %d keys: the informer handlers enqueue only Services of ours", f.c.queue.Len())
	}
}

func TestVanishedServiceReleased(t *testing.T) {
	f := newFixture(t)
	if err := f.sync("ns/gone"); err != nil {
		t.Fatal(err)
	}
	if len(f.balancer.released) != 1 || f.balancer.released[0] != "ns/gone" {
		t.Errorf("released = %v, want ns/gone", f.balancer.released)
	}
}

func TestDeletedBeforeFirstPatchReleased(t *testing.T) {
	f := newFixture(t, lbService("web"))
	// The Service is gone from the API server, the informer has not seen it yet.
	if err := f.client.Tracker().Delete(v1.SchemeGroupVersion.WithResource("services"), "ns", "web"); err != nil {
		t.Fatal(err)
	}
	if err := f.sync("ns/web"); err != nil {
		t.Fatal(err)
	}
	if len(f.balancer.released) != 1 {
		t.Errorf("released = %v: the addresses assigned to a Service that vanished before its status was written must be given back", f.balancer.released)
	}
}

func TestChanged(t *testing.T) {
	base := lbService("web", withOurs)
	for _, tc := range []struct {
		name   string
		mutate func(*v1.Service)
		want   bool
	}{
		{"resourceVersion only", func(s *v1.Service) { s.ResourceVersion = "42" }, false},
		{"managed fields only", func(s *v1.Service) { s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}} }, false},
		{"annotation", func(s *v1.Service) { s.Annotations = map[string]string{"baremetal-ccm.io/address-pool": "p"} }, true},
		{"label", func(s *v1.Service) { s.Labels = map[string]string{"tier": "web"} }, true},
		{"spec", func(s *v1.Service) { s.Spec.LoadBalancerIP = "192.0.2.20" }, true},
		{"finalizer removed", func(s *v1.Service) { s.Finalizers = nil }, true},
		{"deletion", func(s *v1.Service) { s.DeletionTimestamp = ptr.To(metav1.Now()) }, true},
		// The status is the record of what a Service holds: an address another writer
		// put there is checked at once.
		{"status addresses rewritten by another writer", func(s *v1.Service) { s.Status.LoadBalancer.Ingress[0].IP = "192.0.2.99" }, true},
		{"status conditions only", func(s *v1.Service) {
			s.Status.Conditions = []metav1.Condition{{Type: "x", Status: metav1.ConditionTrue}}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := base.DeepCopy()
			tc.mutate(cur)
			if got := changed(base, cur); got != tc.want {
				t.Errorf("changed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRunProcessesExistingServices(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := f.client.CoreV1().Services("ns").Create(ctx, lbService("web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.informer.Start(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); f.c.Run(ctx, 2) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := f.client.CoreV1().Services("ns").Get(ctx, "web", metav1.GetOptions{})
		if err == nil && len(got.Status.LoadBalancer.Ingress) == 1 && servicehelper.HasLBFinalizer(got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running controller did not write status and finalizer: %v, %v", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	f.informer.Shutdown()
}

func TestFinalizerRemovalKeepsOthers(t *testing.T) {
	svc := lbService("web", withOurs, func(s *v1.Service) { s.DeletionTimestamp = ptr.To(metav1.Now()) })
	f := newFixture(t, svc)
	// Someone added a finalizer the informer has not delivered yet.
	onServer := svc.DeepCopy()
	onServer.Finalizers = append(onServer.Finalizers, "example.com/keep")
	if err := f.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("services"), onServer, "ns"); err != nil {
		t.Fatal(err)
	}
	if err := f.sync("ns/web"); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.CoreV1().Services("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Finalizers) != 1 || got.Finalizers[0] != "example.com/keep" {
		t.Errorf("finalizers after cleanup = %v, want only example.com/keep", got.Finalizers)
	}
}

// TestOtherClassWithOurFinalizer: a Service of another class that still carries the
// cleanup finalizer (its type was changed while the CCM was down) loses only the
// finalizer; its status and annotations belong to its own controller.
func TestOtherClassWithOurFinalizer(t *testing.T) {
	svc := lbService("other", withOurs, func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/other") })
	f := newFixture(t, svc)
	if err := f.sync("ns/other"); err != nil {
		t.Fatal(err)
	}
	if len(f.balancer.released) != 0 {
		t.Errorf("released %v for a Service of another class", f.balancer.released)
	}
	got, err := f.client.CoreV1().Services("ns").Get(context.Background(), "other", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if servicehelper.HasLBFinalizer(got) {
		t.Error("the cleanup finalizer stays")
	}
	if len(got.Status.LoadBalancer.Ingress) != 1 {
		t.Errorf("status %v: another class's status was cleared", got.Status.LoadBalancer)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("events %v", ev)
	}
}

func TestPatchFailureIsAnEvent(t *testing.T) {
	f := newFixture(t, lbService("web"))
	f.client.PrependReactor("patch", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("admission webhook denied the request")
	})
	if err := f.sync("ns/web"); err == nil {
		t.Fatal("sync succeeded with the patch refused")
	}
	ev := f.events()
	if len(ev) != 1 || !strings.Contains(ev[0], ReasonSyncFailed) || !strings.Contains(ev[0], "webhook denied") {
		t.Errorf("events %v, want one %s naming the cause", ev, ReasonSyncFailed)
	}
}

// repriming is a fakeBalancer that counts Reprime calls.
type repriming struct {
	*fakeBalancer
	reprimes int
}

func (r *repriming) Reprime() { r.reprimes++ }

// TestStatusWriteIsConditional: the status patch carries the Service's resourceVersion
// as a precondition, and a Conflict (the Service changed behind this replica's back,
// e.g. written by another leader) makes the balancer re-prime and the sync fail, to be
// retried from the new version; nothing is written over it.
func TestStatusWriteIsConditional(t *testing.T) {
	s := lbService("web")
	s.ResourceVersion = "7"
	f := newFixture(t, s)
	rb := &repriming{fakeBalancer: f.balancer}
	f.c.balancer = rb
	var body string
	f.client.PrependReactor("patch", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		body = string(a.(k8stesting.PatchAction).GetPatch())
		return true, nil, apierrors.NewConflict(v1.Resource("services"), "web", errors.New("the object has been modified"))
	})
	err := f.sync("ns/web")
	if !apierrors.IsConflict(err) {
		t.Fatalf("sync = %v, want the Conflict", err)
	}
	if !strings.Contains(body, `"resourceVersion":"7"`) {
		t.Errorf("patch %s has no resourceVersion precondition", body)
	}
	if rb.reprimes != 1 {
		t.Errorf("%d re-primes after a conflict, want 1", rb.reprimes)
	}
}

// conditioner is a fakeBalancer that explains its answers as lb.LoadBalancer does.
type conditioner struct{ *fakeBalancer }

func (c conditioner) AssignedCondition(svc *v1.Service, err error) metav1.Condition {
	if err != nil {
		return metav1.Condition{Type: "baremetal-ccm.io/AddressAssigned", Status: metav1.ConditionFalse, Reason: "PoolExhausted", Message: err.Error()}
	}
	return metav1.Condition{Type: "baremetal-ccm.io/AddressAssigned", Status: metav1.ConditionTrue, Reason: "Assigned", Message: "assigned 192.0.2.10 (pool public)"}
}

// The AddressAssigned condition rides on the status patch of a new Service; an
// unchanged condition is never rewritten; a failure writes the False condition once,
// naming the reason, and a Service waiting counts in the pending metric.
func TestAddressAssignedCondition(t *testing.T) {
	f := newFixture(t, lbService("web"))
	cb := conditioner{f.balancer}
	f.c.balancer = cb
	if err := f.sync("ns/web"); err != nil {
		t.Fatal(err)
	}
	w := f.writes()
	if len(w) != 1 || !strings.Contains(string(w[0].(k8stesting.PatchAction).GetPatch()), `"reason":"Assigned"`) || !strings.Contains(string(w[0].(k8stesting.PatchAction).GetPatch()), "192.0.2.10") {
		t.Fatalf("writes = %v, want one patch with the address and the condition", w)
	}
	stored := func() *v1.Service {
		s, err := f.client.CoreV1().Services("ns").Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.informer.Core().V1().Services().Informer().GetIndexer().Update(s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := stored()
	if c := condition(s); c == nil || c.Status != metav1.ConditionTrue || c.LastTransitionTime.IsZero() {
		t.Fatalf("stored condition %+v", c)
	}
	f.client.ClearActions()
	if err := f.sync("ns/web"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("writes %v for an unchanged condition", w)
	}

	f.balancer.err = api.NewRetryError("pool public exhausted", time.Minute)
	for i := range 2 {
		f.client.ClearActions()
		if err := f.sync("ns/web"); err == nil {
			t.Fatal("sync succeeded with a failing balancer")
		}
		n := len(f.writes())
		if i == 0 && n != 1 || i == 1 && n != 0 {
			t.Errorf("attempt %d: %d writes, want the False condition written once", i, n)
		}
		s = stored()
	}
	if c := condition(s); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "PoolExhausted" || !strings.Contains(c.Message, "exhausted") {
		t.Errorf("condition after the failure %+v", c)
	}
	if n := len(f.c.pending.since); n != 0 {
		t.Errorf("%d pending Services, want 0: the Service keeps its address", n)
	}
	// A new Service the balancer cannot serve is pending.
	if err := f.informer.Core().V1().Services().Informer().GetIndexer().Add(lbService("new")); err != nil {
		t.Fatal(err)
	}
	_ = f.sync("ns/new")
	if _, ok := f.c.pending.since["ns/new"]; !ok || len(f.c.pending.since) != 1 {
		t.Errorf("pending %v, want ns/new", f.c.pending.since)
	}
}

func condition(s *v1.Service) *metav1.Condition {
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == "baremetal-ccm.io/AddressAssigned" {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}

// advancing is a fakeBalancer whose announcer writes the Service (as the MetalLB
// announcer writes its annotations): it advances svc to resourceVersion rv.
type advancing struct {
	*fakeBalancer
	rv string
}

func (a *advancing) EnsureLoadBalancer(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	st, err := a.fakeBalancer.EnsureLoadBalancer(ctx, cluster, svc, nodes)
	if err == nil {
		svc.ResourceVersion = a.rv
	}
	return st, err
}

// TestOwnWriteNotRedone: a sync whose informer copy is a version that this controller's
// own successful writes replaced (the announcer's 7→8, the status 8→9) writes nothing
// and does not call the balancer: the write it would make is made, and conditional on
// a stale version it would only conflict and re-prime. Once the informer shows another
// version the Service is synced as usual; a failed sync is not remembered.
func TestOwnWriteNotRedone(t *testing.T) {
	s := lbService("web")
	s.ResourceVersion = "7"
	f := newFixture(t, s)
	f.c.balancer = &advancing{fakeBalancer: f.balancer, rv: "8"}
	var bodies []string
	f.client.PrependReactor("patch", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		bodies = append(bodies, string(a.(k8stesting.PatchAction).GetPatch()))
		out := lbService("web", withOurs)
		out.ResourceVersion = "9"
		return true, out, nil
	})
	if err := f.sync("ns/web"); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 1 || !strings.Contains(bodies[0], `"resourceVersion":"8"`) {
		t.Fatalf("status patches %v, want one conditional on the announcer's version 8", bodies)
	}
	store := f.informer.Core().V1().Services().Informer().GetIndexer()
	for _, rv := range []string{"7", "8"} { // the informer has not caught up
		stale := s.DeepCopy()
		stale.ResourceVersion = rv
		if err := store.Update(stale); err != nil {
			t.Fatal(err)
		}
		if err := f.sync("ns/web"); err != nil {
			t.Fatalf("sync of replaced version %s: %v", rv, err)
		}
	}
	if len(bodies) != 1 || len(f.balancer.ensured) != 1 {
		t.Fatalf("after syncs of replaced versions: patches %v, balancer calls %v; want the first sync's only", bodies, f.balancer.ensured)
	}
	cur := lbService("web", withOurs)
	cur.ResourceVersion = "9"
	if err := store.Update(cur); err != nil {
		t.Fatal(err)
	}
	if err := f.sync("ns/web"); err != nil {
		t.Fatal(err)
	}
	if len(f.balancer.ensured) != 2 || len(bodies) != 1 {
		t.Errorf("the caught-up version: balancer calls %v (want 2), patches %d (want 1: in step)", f.balancer.ensured, len(bodies))
	}
	// A version the informer shows again after that is synced (the entry is gone).
	if err := store.Update(s); err != nil {
		t.Fatal(err)
	}
	f.balancer.err = errors.New("pool exhausted")
	f.c.balancer = f.balancer
	for i := range 2 {
		if err := f.sync("ns/web"); err == nil {
			t.Fatalf("sync %d with a failing balancer succeeded", i)
		}
	}
	if len(f.balancer.ensured) != 4 {
		t.Errorf("balancer calls %v, want every failed sync retried in full", f.balancer.ensured)
	}
}

// TestOwnWritesBounded: an entry goes when the informer shows any other version (also
// one no handler enqueues), when the Service is gone, and after ownWriteMaxWait (a
// broken watch does not hold a Service back for ever).
func TestOwnWritesBounded(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	o := newOwnWrites(func() time.Time { return now })
	o.wrote("ns/a", trail{"7", "8"})
	o.seen("ns/a", "8") // a replaced version: kept
	if !o.replaced("ns/a", "7") {
		t.Fatal("version 7 not remembered")
	}
	o.seen("ns/a", "9") // the informer caught up
	if o.len() != 0 || o.replaced("ns/a", "7") {
		t.Fatalf("entry kept after the informer showed version 9 (%d entries)", o.len())
	}
	o.wrote("ns/b", trail{"3"})
	o.forget("ns/b")
	if o.len() != 0 {
		t.Fatal("entry kept after the Service was deleted")
	}
	o.wrote("ns/c", trail{"5"})
	now = now.Add(ownWriteMaxWait)
	if o.replaced("ns/c", "5") || o.len() != 0 {
		t.Fatalf("entry honored after %v (%d entries)", ownWriteMaxWait, o.len())
	}
	o.wrote("ns/d", nil)
	if o.len() != 0 {
		t.Fatal("a sync that wrote nothing left an entry")
	}
}
