package powermon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bmc"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/identity"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/maintenance"
)

type fakeInv struct {
	mu        sync.Mutex
	v         *inventory.View
	budgetErr error
	budget    []string
	hold      error    // what RemediationHold answers
	health    [][2]int // ObserveHealth calls: unhealthy, matched
}

func (f *fakeInv) ObserveHealth(_ context.Context, unhealthy, matched int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.health = append(f.health, [2]int{unhealthy, matched})
	return nil
}

func (f *fakeInv) RemediationHold() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hold
}

func (f *fakeInv) View() (*inventory.View, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v, nil
}

func (f *fakeInv) TakePowerBudget(_ context.Context, host, _ string, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold != nil {
		return f.hold // as the Store: a storm refuses before any budget
	}
	f.budget = append(f.budget, host)
	return f.budgetErr
}

type fakePower struct {
	mu    sync.Mutex
	state bmc.PowerState
	uuid  string // the system UUID the BMC reports
	err   error
	asked map[string]int
	fresh map[string]int // asks that refused any cached answer
	block chan struct{}  // non-nil: every ask waits for it to close
	began chan string    // non-nil: every ask sends its host first
}

func (f *fakePower) Recent(ctx context.Context, t bmc.Target, maxAge time.Duration) (bmc.Reading, error) {
	if maxAge <= 0 {
		f.mu.Lock()
		f.fresh[t.Host]++
		f.mu.Unlock()
	}
	return f.PowerState(ctx, t)
}

// Probe is a fresh ask, as Recent with no cache.
func (f *fakePower) Probe(ctx context.Context, t bmc.Target) (bmc.Reading, error) {
	return f.Recent(ctx, t, 0)
}

func (f *fakePower) set(s bmc.PowerState, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state, f.err = s, err
}

func (f *fakePower) PowerState(_ context.Context, t bmc.Target) (bmc.Reading, error) {
	f.mu.Lock()
	f.asked[t.Host]++
	block, began := f.block, f.began
	f.mu.Unlock()
	if began != nil {
		began <- t.Host
	}
	if block != nil {
		<-block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return bmc.Reading{State: f.state, SystemUUID: f.uuid}, f.err
}

func (f *fakePower) askedOf(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[host]
}

// TestMonitorDoesNotWaitForAHungRead: the loop's pass returns while a read hangs; the
// Node is not read a second time while its read is under way, and is read again once
// it has ended and the Node is due.
func TestMonitorDoesNotWaitForAHungRead(t *testing.T) {
	f := newFixture(t, false)
	release := make(chan struct{})
	f.power.block, f.power.began = release, make(chan string, 10)
	wg := f.m.sync(f.ctx) // returns at once although the read hangs
	<-f.power.began
	f.clock.Step(time.Minute)
	f.m.sync(f.ctx)
	if n := f.power.askedOf("h1"); n != 1 {
		t.Fatalf("reads while the first one hangs = %d, want 1", n)
	}
	close(release)
	wg.Wait()
	f.m.Sync(f.ctx)
	if n := f.power.askedOf("h1"); n != 2 {
		t.Fatalf("reads after the hung one ended = %d, want 2 (the Node stayed due)", n)
	}
}

// TestRunJoinsItsReads (issue 25): Run belongs to a leadership term, and returned at
// the term's end while the reads it started went on, writing conditions and asking for
// power grants after the term. It returns once they have ended.
func TestRunJoinsItsReads(t *testing.T) {
	f := newFixture(t, false)
	release := make(chan struct{})
	f.power.block, f.power.began = release, make(chan string, 10)
	ctx, end := context.WithCancel(f.ctx)
	var released atomic.Bool
	go func() {
		<-f.power.began // the read is under way: the term ends, the read goes on a while
		end()
		time.Sleep(200 * time.Millisecond)
		released.Store(true)
		close(release)
	}()
	f.m.Run(ctx)
	if !released.Load() {
		t.Fatal("Run returned while a read it started was under way")
	}
}

type fixture struct {
	m      *Monitor
	client *fake.Clientset
	idx    cache.Indexer
	power  *fakePower
	clock  *clocktesting.FakeClock
	inv    *fakeInv
	events []string
	ctx    context.Context
}

func newFixture(t *testing.T, ready bool) *fixture {
	v, err := inventory.Parse([]byte(`apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
hosts:
- name: h1
  systemUUID: 4c4c4544-0000-4000-8000-0000000000a1
  bmc: {protocol: redfish, address: "https://10.1.0.1", credentialsFile: /c}
- name: nobmc
`))
	if err != nil {
		t.Fatal(err)
	}
	status := v1.ConditionUnknown
	if ready {
		status = v1.ConditionTrue
	}
	nodes := []*v1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1.NodeSpec{ProviderID: "baremetal://h1"},
			Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: status}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: v1.NodeSpec{ProviderID: "baremetal://nobmc"}},
	}
	f := &fixture{inv: &fakeInv{v: v}, client: fake.NewClientset(nodes[0], nodes[1]), idx: cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil),
		power: &fakePower{state: bmc.PowerOn, asked: map[string]int{}, fresh: map[string]int{}}, clock: clocktesting.NewFakeClock(time.Now())}
	_, f.ctx = ktesting.NewTestContext(t)
	for _, n := range nodes {
		_ = f.idx.Add(n)
	}
	f.m = New(Config{ReadyInterval: 5 * time.Minute, NotReadyInterval: 10 * time.Second, Tick: time.Second},
		f.inv, f.power, corelisters.NewNodeLister(f.idx), f.client,
		func(n *v1.Node, typ, reason, format string, args ...any) {
			f.events = append(f.events, reason+": "+fmt.Sprintf(format, args...))
		}, f.clock)
	return f
}

// sync runs one pass and refreshes the lister from the API, as an informer would.
func (f *fixture) sync(t *testing.T) *v1.Node {
	t.Helper()
	f.m.Sync(f.ctx)
	n, err := f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = f.idx.Update(n)
	return n
}

func cond(n *v1.Node, t v1.NodeConditionType) v1.ConditionStatus {
	if c := condition(n, t); c != nil {
		return c.Status
	}
	return ""
}

func TestMonitorPowerCycle(t *testing.T) {
	f := newFixture(t, false)
	f.power.set(bmc.PowerOff, nil)
	n := f.sync(t)
	if cond(n, ConditionBMCReachable) != v1.ConditionTrue || cond(n, ConditionPoweredOn) != v1.ConditionFalse {
		t.Fatalf("conditions = %+v", n.Status.Conditions)
	}
	since, ok := OffSince(n, f.clock.Now(), MaxUnobserved(10*time.Second))
	if !ok || !since.Equal(f.clock.Now().Truncate(time.Second)) {
		t.Fatalf("%s = %v, %v", AnnotationOffSince, since, ok)
	}
	if len(f.events) != 1 || f.events[0] != "PoweredOff: The BMC reports the host powered off" {
		t.Fatalf("events = %v", f.events)
	}
	if f.power.asked["nobmc"] != 0 {
		t.Error("a host without a BMC was asked")
	}

	// Still off after a while: the first-seen-off time stays, nothing is written.
	f.clock.Step(11 * time.Second)
	actions := len(f.client.Actions())
	n = f.sync(t)
	if s, _ := OffSince(n, f.clock.Now(), MaxUnobserved(10*time.Second)); !s.Equal(since) {
		t.Errorf("off-since moved to %v", s)
	}
	if writes := len(f.client.Actions()) - actions - 1; writes != 0 { // -1: the test's own Get
		t.Errorf("%d writes for an unchanged state", writes)
	}

	// Unreachable: condition False and an event; the off-since is cleared, since
	// nothing proves the host stayed off meanwhile.
	f.clock.Step(11 * time.Second)
	f.power.set("", fmt.Errorf("%w: timeout", bmc.ErrUnreachable))
	n = f.sync(t)
	if cond(n, ConditionBMCReachable) != v1.ConditionFalse || cond(n, ConditionPoweredOn) != v1.ConditionUnknown {
		t.Fatalf("unreachable: conditions = %+v", n.Status.Conditions)
	}
	if _, ok := OffSince(n, f.clock.Now(), MaxUnobserved(10*time.Second)); ok {
		t.Error("off-since kept across an unreachable BMC: continuity is not proven")
	}

	// Back on: annotation removed, events.
	f.clock.Step(11 * time.Second)
	f.power.set(bmc.PowerOn, nil)
	n = f.sync(t)
	if _, ok := OffSince(n, f.clock.Now(), MaxUnobserved(10*time.Second)); ok || cond(n, ConditionPoweredOn) != v1.ConditionTrue || cond(n, ConditionBMCReachable) != v1.ConditionTrue {
		t.Fatalf("back on: annotations %v conditions %+v", n.Annotations, n.Status.Conditions)
	}
	want := []string{"PoweredOff", "BMCUnreachable", "BMCReachable", "PoweredOn"}
	if len(f.events) != len(want) {
		t.Fatalf("events = %v, want reasons %v", f.events, want)
	}
	for i, w := range want {
		if len(f.events[i]) < len(w) || f.events[i][:len(w)] != w {
			t.Errorf("event %d = %q, want %s", i, f.events[i], w)
		}
	}
}

func TestMonitorIntervals(t *testing.T) {
	f := newFixture(t, true) // Ready: slow refresh
	f.sync(t)
	f.clock.Step(time.Minute)
	f.sync(t)
	if f.power.asked["h1"] != 1 {
		t.Fatalf("a Ready node was read %d times within the ready interval", f.power.asked["h1"])
	}
	f.clock.Step(5 * time.Minute)
	f.sync(t)
	if f.power.asked["h1"] != 2 {
		t.Fatalf("reads = %d after the ready interval, want 2", f.power.asked["h1"])
	}
	// A readiness change makes the Node due at once.
	n, _ := f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
	condition(n, v1.NodeReady).Status = v1.ConditionFalse
	_ = f.idx.Update(n)
	f.m.Sync(f.ctx)
	if f.power.asked["h1"] != 3 {
		t.Fatalf("reads = %d after the Node went NotReady, want 3", f.power.asked["h1"])
	}
	// ... and that read bypasses the cache (an answer from before the change could
	// show a host back on as off for a whole ready interval); periodic reads do not.
	if f.power.fresh["h1"] != 1 {
		t.Fatalf("uncached reads = %d, want 1 (only the readiness change)", f.power.fresh["h1"])
	}
}

// fenced reports whether the monitor acted on n with the out-of-service taint (it may
// have removed the taint again while the host read off).
func fenced(n *v1.Node) bool {
	_, ok := n.Annotations[AnnotationOutOfService]
	return ok || hasTaint(n, v1.TaintNodeOutOfService)
}

// The taint goes on after outOfServiceAfter; while the host still reads off it comes
// off once no pod the taint evicts and no VolumeAttachment is left on the Node, and it
// is not added again in that off period; the host coming on clears the marker.
func TestOutOfServicePolicy(t *testing.T) {
	f := newFixture(t, false)
	f.m.cfg.OutOfServiceAfter = time.Minute
	pod := func(name string, mutate func(*v1.Pod)) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: v1.PodSpec{NodeName: "n1"}}
		if mutate != nil {
			mutate(p)
		}
		if _, err := f.client.CoreV1().Pods("default").Create(f.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("app", nil)
	pod("elsewhere", func(p *v1.Pod) { p.Spec.NodeName = "n2" })
	pod("static", func(p *v1.Pod) { p.Annotations = map[string]string{v1.MirrorPodAnnotationKey: "x"} })
	pod("done", func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded })
	pod("tolerates", func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeOutOfService, Operator: v1.TolerationOpExists}}
	})
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "csi-1"}, Spec: storagev1.VolumeAttachmentSpec{Attacher: "csi.example.com", NodeName: "n1"}}
	if _, err := f.client.StorageV1().VolumeAttachments().Create(f.ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	f.power.set(bmc.PowerOff, nil)
	n := f.sync(t)
	if fenced(n) {
		t.Fatal("tainted before outOfServiceAfter")
	}
	step := func() *v1.Node { f.clock.Step(11 * time.Second); return f.sync(t) }
	f.clock.Step(61 * time.Second)
	f.sync(t) // the annotation patch and the taint land in this pass
	n = step()
	if !hasTaint(n, v1.TaintNodeOutOfService) || n.Annotations[AnnotationOutOfService] != OutOfServiceAdded {
		t.Fatalf("after outOfServiceAfter: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	// A pod the taint evicts holds the taint, then the VolumeAttachment does.
	if n = step(); !hasTaint(n, v1.TaintNodeOutOfService) {
		t.Fatal("taint removed while a pod is still bound to the Node")
	}
	if err := f.client.CoreV1().Pods("default").Delete(f.ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n = step(); !hasTaint(n, v1.TaintNodeOutOfService) {
		t.Fatal("taint removed while a VolumeAttachment is still there")
	}
	if err := f.client.StorageV1().VolumeAttachments().Delete(f.ctx, "csi-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nothing left, host still off: removed now, and not added again.
	if n = step(); hasTaint(n, v1.TaintNodeOutOfService) || n.Annotations[AnnotationOutOfService] != OutOfServiceReleased {
		t.Fatalf("empty Node, host off: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	if !f.hasEvent(ReasonOutOfServiceRemoved) {
		t.Fatalf("events %v, want %s", f.events, ReasonOutOfServiceRemoved)
	}
	for range 3 {
		if n = step(); hasTaint(n, v1.TaintNodeOutOfService) {
			t.Fatal("added again in the same off period")
		}
	}
	// The host comes on: the marker goes, the next off period may fence again.
	f.power.set(bmc.PowerOn, nil)
	if n = step(); fenced(n) {
		t.Fatalf("host on: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
}

// A host that comes on while the taint is still there (the Node was not empty in
// time) keeps it, even Ready, with a warning event; a person removes it.
func TestOutOfServiceKeptWhenHostComesOn(t *testing.T) {
	f := newFixture(t, false)
	f.m.cfg.OutOfServiceAfter = time.Minute
	if _, err := f.client.CoreV1().Pods("default").Create(f.ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app"}, Spec: v1.PodSpec{NodeName: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := f.offLongEnough(t)
	if !hasTaint(n, v1.TaintNodeOutOfService) {
		t.Fatalf("not tainted: %v", n.Annotations)
	}
	f.clock.Step(11 * time.Second)
	f.power.set(bmc.PowerOn, nil)
	condition(n, v1.NodeReady).Status = v1.ConditionTrue
	n, _ = f.client.CoreV1().Nodes().UpdateStatus(f.ctx, n, metav1.UpdateOptions{})
	_ = f.idx.Update(n)
	n = f.sync(t)
	if !hasTaint(n, v1.TaintNodeOutOfService) || n.Annotations[AnnotationOutOfService] != OutOfServiceKept {
		t.Fatalf("host on and Ready with the taint: taints %v annotations %v, want kept", n.Spec.Taints, n.Annotations)
	}
	if !f.hasEvent(ReasonOutOfServiceKept) {
		t.Fatalf("events %v, want %s", f.events, ReasonOutOfServiceKept)
	}
	events := len(f.events)
	f.clock.Step(5 * time.Minute)
	if n = f.sync(t); !hasTaint(n, v1.TaintNodeOutOfService) || len(f.events) != events {
		t.Fatalf("a later reading: taints %v, events %v (want one warning only)", n.Spec.Taints, f.events[events:])
	}
	// A person removes the taint: the marker goes.
	n.Spec.Taints = nil
	n, _ = f.client.CoreV1().Nodes().Update(f.ctx, n, metav1.UpdateOptions{})
	_ = f.idx.Update(n)
	f.clock.Step(5 * time.Minute)
	if n = f.sync(t); fenced(n) {
		t.Fatalf("after a person removed the taint: annotations %v", n.Annotations)
	}
}

func TestOutOfServiceTaintOfAPersonIsKept(t *testing.T) {
	f := newFixture(t, true)
	f.m.cfg.OutOfServiceAfter = time.Minute
	n, _ := f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
	n.Spec.Taints = append(n.Spec.Taints, *OutOfServiceTaint())
	n, _ = f.client.CoreV1().Nodes().Update(f.ctx, n, metav1.UpdateOptions{})
	_ = f.idx.Update(n)
	n = f.sync(t)
	if !hasTaint(n, v1.TaintNodeOutOfService) {
		t.Fatal("removed an out-of-service taint a person added")
	}
}

// offLongEnough powers h1 off and runs passes until it has been off for more than a
// minute (the out-of-service policy's time here).
func (f *fixture) offLongEnough(t *testing.T) *v1.Node {
	t.Helper()
	f.m.cfg.OutOfServiceAfter = time.Minute
	f.power.set(bmc.PowerOff, nil)
	f.sync(t)
	f.clock.Step(61 * time.Second)
	f.sync(t)
	return f.sync(t)
}

func (f *fixture) hasEvent(reason string) bool {
	for _, e := range f.events {
		if strings.HasPrefix(e, reason+":") {
			return true
		}
	}
	return false
}

// TestOutOfServiceBudget is defect 4: beyond the power-off budget the taint waits,
// with an event.
func TestOutOfServiceBudget(t *testing.T) {
	f := newFixture(t, false)
	f.inv.budgetErr = fmt.Errorf("%w: %w: 5 of 5 hosts used", inventory.ErrNowWaiting, inventory.ErrPowerBudget)
	n := f.offLongEnough(t)
	if hasTaint(n, v1.TaintNodeOutOfService) || n.Annotations[AnnotationOutOfService] != "" {
		t.Fatalf("tainted beyond the budget: %v %v", n.Spec.Taints, n.Annotations)
	}
	if !f.hasEvent(inventory.ReasonPowerBudget) {
		t.Fatalf("events %v, want %s", f.events, inventory.ReasonPowerBudget)
	}
	// The acknowledgement releases it.
	f.inv.budgetErr = nil
	f.clock.Step(11 * time.Second)
	f.sync(t)
	f.clock.Step(11 * time.Second)
	if n := f.sync(t); !fenced(n) {
		t.Fatal("not tainted once the budget allows it")
	}
}

// TestOutOfServiceMaintenanceExempt is defect 4: a host in maintenance is off by
// design: never fenced, and no budget is spent on it.
func TestOutOfServiceMaintenanceExempt(t *testing.T) {
	f := newFixture(t, false)
	v, err := inventory.Parse([]byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: h1\n  state: maintenance\n  bmc: {protocol: redfish, address: \"https://10.1.0.1\", credentialsFile: /c}\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.inv.v = v
	n := f.offLongEnough(t)
	if hasTaint(n, v1.TaintNodeOutOfService) || len(f.inv.budget) != 0 {
		t.Fatalf("maintenance host: taints %v, budget asked for %v", n.Spec.Taints, f.inv.budget)
	}
}

// TestOutOfServiceLifecycleConditionExempt: a Node that a Node lifecycle condition
// (KEP-5683) puts in maintenance is exempt like a host in maintenance in the inventory:
// never fenced, no budget spent; once the condition turns False the policy applies.
func TestOutOfServiceLifecycleConditionExempt(t *testing.T) {
	for _, typ := range []v1.NodeConditionType{v1.NodeMaintenanceInProgress, v1.NodeMaintenancePlanned} {
		t.Run(string(typ), func(t *testing.T) {
			f := newFixture(t, false)
			setCondition := func(status v1.ConditionStatus) {
				n, err := f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				n.Status.Conditions = append(slices.DeleteFunc(n.Status.Conditions, func(c v1.NodeCondition) bool { return c.Type == typ }),
					v1.NodeCondition{Type: typ, Status: status, Reason: "FirmwareUpdate", LastTransitionTime: metav1.NewTime(f.clock.Now())})
				if n, err = f.client.CoreV1().Nodes().UpdateStatus(f.ctx, n, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				_ = f.idx.Update(n)
			}
			setCondition(v1.ConditionTrue)
			n := f.offLongEnough(t)
			if hasTaint(n, v1.TaintNodeOutOfService) || len(f.inv.budget) != 0 {
				t.Fatalf("%s True: taints %v, budget asked for %v", typ, n.Spec.Taints, f.inv.budget)
			}
			// The maintenance ends with the host still off: off time counts from then.
			setCondition(v1.ConditionFalse)
			f.clock.Step(11 * time.Second)
			if n := f.sync(t); hasTaint(n, v1.TaintNodeOutOfService) || len(f.inv.budget) != 0 {
				t.Fatalf("%s False for 11 s: taints %v, budget asked for %v; want outOfServiceAfter from the end of the maintenance", typ, n.Spec.Taints, f.inv.budget)
			}
			f.clock.Step(time.Minute)
			if n := f.sync(t); !hasTaint(n, v1.TaintNodeOutOfService) || len(f.inv.budget) != 1 {
				t.Fatalf("%s False for 71 s: taints %v, budget asked for %v; want fenced", typ, n.Spec.Taints, f.inv.budget)
			}
		})
	}
}

// TestOutOfServiceExcludeLabel: baremetal-ccm.io/exclude-from-remediation=true keeps a
// Node from being fenced, without spending budget; removing the label lets the policy act.
func TestOutOfServiceExcludeLabel(t *testing.T) {
	f := newFixture(t, false)
	label := func(v *string) {
		n, err := f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels = map[string]string{}
		if v != nil {
			n.Labels[maintenance.ExcludeLabel] = *v
		}
		if n, err = f.client.CoreV1().Nodes().Update(f.ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		_ = f.idx.Update(n)
	}
	yes := "true"
	label(&yes)
	if n := f.offLongEnough(t); hasTaint(n, v1.TaintNodeOutOfService) || len(f.inv.budget) != 0 {
		t.Fatalf("excluded Node: taints %v, budget asked for %v", n.Spec.Taints, f.inv.budget)
	}
	label(nil)
	f.clock.Step(11 * time.Second)
	if n := f.sync(t); !hasTaint(n, v1.TaintNodeOutOfService) {
		t.Fatalf("label removed: taints %v, want fenced", n.Spec.Taints)
	}
}

// TestRemediationHeldCondition: the monitor counts the matched and unhealthy Nodes for
// the storm gate on every pass; while the gate holds, a Node whose host is off gets
// RemediationHeld True (StormCooldown in the cooldown) and is not fenced; once the gate
// opens the condition turns False and the policy acts.
func TestRemediationHeldCondition(t *testing.T) {
	f := newFixture(t, false)
	f.inv.hold = fmt.Errorf("%w since 2026-11-27T12:00:00Z: 10 of 20 Nodes were unhealthy", inventory.ErrRemediationStorm)
	n := f.offLongEnough(t)
	if c := condition(n, ConditionRemediationHeld); c == nil || c.Status != v1.ConditionTrue || c.Reason != ReasonRemediationStorm || !strings.Contains(c.Message, "10 of 20") {
		t.Fatalf("RemediationHeld = %+v", c)
	}
	if hasTaint(n, v1.TaintNodeOutOfService) || len(f.inv.budget) != 0 {
		t.Fatalf("fenced in a storm: taints %v, budget %v", n.Spec.Taints, f.inv.budget)
	}
	// n1 (NotReady) and n2 (no Ready condition; its host has no BMC but its Node counts).
	if last := f.inv.health[len(f.inv.health)-1]; last != [2]int{2, 2} {
		t.Errorf("ObserveHealth(unhealthy, matched) = %v, want [2 2]", last)
	}
	f.inv.hold = fmt.Errorf("%w: the storm was over at 2026-11-27T12:10:00Z", inventory.ErrStormCooldown)
	f.clock.Step(11 * time.Second)
	if c := condition(f.sync(t), ConditionRemediationHeld); c == nil || c.Reason != ReasonStormCooldown {
		t.Fatalf("in the cooldown: RemediationHeld = %+v", c)
	}
	f.inv.hold = nil
	f.clock.Step(11 * time.Second)
	n = f.sync(t)
	if c := condition(n, ConditionRemediationHeld); c == nil || c.Status != v1.ConditionFalse || c.Reason != ReasonNotHeld {
		t.Fatalf("after the storm: RemediationHeld = %+v", c)
	}
	if !hasTaint(n, v1.TaintNodeOutOfService) {
		t.Fatalf("after the storm: taints %v, want fenced", n.Spec.Taints)
	}
}

// TestIdentityMismatch is defect 5: a BMC answering for another machine is no
// evidence: nothing is stamped off, nothing fenced, and the Node says why.
func TestIdentityMismatch(t *testing.T) {
	f := newFixture(t, false)
	f.power.uuid = "4c4c4544-0000-4000-8000-0000000000b2"
	n := f.offLongEnough(t)
	if _, ok := n.Annotations[AnnotationOffSince]; ok || hasTaint(n, v1.TaintNodeOutOfService) || len(f.inv.budget) != 0 {
		t.Fatalf("acted on another machine's power: annotations %v taints %v", n.Annotations, n.Spec.Taints)
	}
	c := condition(n, ConditionBMCReachable)
	if c == nil || c.Reason != identity.ReasonMismatch || !strings.Contains(c.Message, "0000000000b2") {
		t.Fatalf("BMCReachable = %+v", c)
	}
	if p := condition(n, ConditionPoweredOn); p == nil || p.Status != v1.ConditionUnknown {
		t.Fatalf("PoweredOn = %+v, want Unknown", p)
	}
	if !f.hasEvent(identity.ReasonMismatch) {
		t.Fatalf("events %v", f.events)
	}
	// The same machine again (either byte order): acted on as usual.
	f.power.uuid = "4C4C4544-0000-4000-8000-0000000000A1"
	f.clock.Step(11 * time.Second)
	if n := f.sync(t); n.Annotations[AnnotationOffSince] == "" {
		t.Fatalf("not stamped off for the right machine: %v", n.Annotations)
	}
}

// The Node the pass started from is re-read before the budget is taken: a maintenance
// condition set while the BMC was being read exempts the host (no taint, no budget).
func TestOutOfServiceRereadsTheNode(t *testing.T) {
	f := newFixture(t, false)
	f.m.cfg.OutOfServiceAfter = time.Minute
	f.power.set(bmc.PowerOff, nil)
	f.sync(t)
	f.clock.Step(61 * time.Second)
	n, _ := f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
	n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: v1.NodeMaintenanceInProgress, Status: v1.ConditionTrue})
	if _, err := f.client.CoreV1().Nodes().UpdateStatus(f.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.m.Sync(f.ctx) // the lister still has the Node without the condition
	n, _ = f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
	if fenced(n) || len(f.inv.budget) != 0 {
		t.Fatalf("acted on a stale view of the Node: taints %v annotations %v budget %v", n.Spec.Taints, n.Annotations, f.inv.budget)
	}
}
