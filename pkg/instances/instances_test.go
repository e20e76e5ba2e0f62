package instances

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bmc"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/identity"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/maintenance"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/powermon"
)

const doc = `
apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
hosts:
- name: node-a
  systemUUID: 4c4c4544-0042-3510-8052-b4c04f4e4d32
  addresses:
  - {type: InternalIP, address: 10.0.0.11}
  - {type: InternalIP, address: "fd00::11"}
  - {type: Hostname, address: node-a}
  instanceType: r650
  zone: rack1
  region: dc1
  rack: r1
  labels: {pool: gpu, example.com/owner: team-a}
- name: node-b
  state: maintenance
- name: node-c
  state: decommissioned
- name: power-1
  systemUUID: 6e1f0a52-3c1d-4e57-9a3e-0d0c7b5e2a11
  bmc: {protocol: redfish, address: "https://10.1.0.1", credentialsFile: /etc/baremetal-ccm/bmc/power-1}
- name: power-m
  state: maintenance
  bmc: {protocol: redfish, address: "https://10.1.0.2", credentialsFile: /etc/baremetal-ccm/bmc/power-m}
`

// fakeInventory is a test double for the Store: every removal is accepted unless
// allowErr is set; the power budget answers budgetErr.
type fakeInventory struct {
	view      *inventory.View
	viewErr   error
	allowErr  error
	budgetErr error
	budget    []string // hosts TakePowerBudget was asked for
}

func (f *fakeInventory) View() (*inventory.View, error) { return f.view, f.viewErr }
func (f *fakeInventory) GoneAllowed(string) error       { return f.allowErr }
func (f *fakeInventory) TakePowerBudget(_ context.Context, host, _ string, _ bool) error {
	f.budget = append(f.budget, host)
	if f.allowErr != nil {
		return f.allowErr
	}
	return f.budgetErr
}

type event struct{ node, typ, reason, msg string }

type fakeRecorder struct {
	mu     sync.Mutex
	events []event
}

func (r *fakeRecorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{obj.(*v1.Node).Name, typ, reason, fmt.Sprintf(format, args...)})
}

func (r *fakeRecorder) reasons() []string {
	var out []string
	for _, e := range r.events {
		out = append(out, e.reason)
	}
	return out
}

func setup(t *testing.T) (*Instances, *fakeInventory, *fakeRecorder, context.Context) {
	t.Helper()
	v, err := inventory.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	inv := &fakeInventory{view: v}
	rec := &fakeRecorder{}
	_, ctx := ktesting.NewTestContext(t)
	return New(inv, nil, rec, Policy{}), inv, rec, ctx
}

func mkNode(name, providerID string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
}

func TestInstanceMetadata(t *testing.T) {
	inst, _, rec, ctx := setup(t)
	n := mkNode("x", "")
	n.Status.NodeInfo.SystemUUID = "4C4C4544-0042-3510-8052-B4C04F4E4D32"
	md, err := inst.InstanceMetadata(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "baremetal://node-a" || md.InstanceType != "r650" || md.Zone != "rack1" || md.Region != "dc1" {
		t.Errorf("metadata = %+v", md)
	}
	if len(md.NodeAddresses) != 3 || md.NodeAddresses[0].Address != "10.0.0.11" || md.NodeAddresses[1].Address != "fd00::11" {
		t.Errorf("addresses = %v", md.NodeAddresses)
	}
	want := map[string]string{"baremetal-ccm.io/pool": "gpu", "example.com/owner": "team-a", "baremetal-ccm.io/rack": "r1"}
	if fmt.Sprint(md.AdditionalLabels) != fmt.Sprint(want) {
		t.Errorf("labels = %v, want %v", md.AdditionalLabels, want)
	}
	if len(rec.events) != 0 {
		t.Errorf("unexpected events %v", rec.events)
	}
}

func TestInstanceMetadataProvidedNodeIP(t *testing.T) {
	inst, _, rec, ctx := setup(t)
	n := mkNode("node-a", "")
	n.Annotations = map[string]string{"alpha.kubernetes.io/provided-node-ip": "10.0.0.11,fd00::99"}
	md, err := inst.InstanceMetadata(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, a := range md.NodeAddresses {
		ips = append(ips, a.Address)
	}
	if got := strings.Join(ips, ","); got != "10.0.0.11,fd00::11,node-a,fd00::99" {
		t.Errorf("addresses = %s; the provided node IPs must be included", got)
	}
	if fmt.Sprint(rec.reasons()) != "[NodeIPNotInInventory]" || !strings.Contains(rec.events[0].msg, "fd00::99") {
		t.Errorf("events = %v", rec.events)
	}
}

func TestInstanceMetadataErrors(t *testing.T) {
	tests := []struct {
		name       string
		node       *v1.Node
		viewErr    error
		wantErr    error
		wantReason string
	}{
		{"no match", mkNode("stranger", ""), nil, inventory.ErrNoMatch, ReasonHostNotFound},
		{"gone host", mkNode("x", "baremetal://vanished"), nil, inventory.ErrHostGone, ReasonHostNotFound},
		{"foreign", mkNode("x", "aws:///i-1"), nil, inventory.ErrForeignProviderID, ReasonHostAmbiguous},
		{"decommissioned", mkNode("node-c", ""), nil, ErrDecommissioned, ReasonHostDecommissioned},
		{"not loaded", mkNode("node-a", ""), inventory.ErrNotLoaded, inventory.ErrNotLoaded, ReasonInventoryNotLoaded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst, inv, rec, ctx := setup(t)
			if tt.viewErr != nil {
				inv.view, inv.viewErr = nil, tt.viewErr
			}
			md, err := inst.InstanceMetadata(ctx, tt.node)
			if !errors.Is(err, tt.wantErr) || md != nil {
				t.Fatalf("InstanceMetadata = %v, %v; want %v", md, err, tt.wantErr)
			}
			if len(rec.events) != 1 || rec.events[0].reason != tt.wantReason || rec.events[0].typ != v1.EventTypeWarning {
				t.Fatalf("events = %v, want one %s warning", rec.events, tt.wantReason)
			}
		})
	}
}

// TestLifecycleConditionNotGone: a Node in maintenance by a Node lifecycle condition
// (KEP-5683) is never reported gone, even when its host left the inventory: an error
// that wraps inventory.ErrMaintenance and names the condition; False does not exempt.
func TestLifecycleConditionNotGone(t *testing.T) {
	for _, tt := range []struct {
		typ    v1.NodeConditionType
		status v1.ConditionStatus
		gone   bool
	}{
		{v1.NodeMaintenanceInProgress, v1.ConditionTrue, false},
		{v1.NodeMaintenancePlanned, v1.ConditionTrue, false},
		{v1.NodeMaintenanceInProgress, v1.ConditionFalse, true},
		{v1.NodeDrainInProgress, v1.ConditionTrue, true}, // draining is not maintenance
	} {
		_, inv, rec, ctx := setup(t)
		inst := New(inv, nil, rec, Policy{})
		for _, pid := range []string{"baremetal://vanished", "baremetal://node-c"} {
			n := mkNode("x", pid)
			n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: tt.typ, Status: tt.status, Reason: "Rma"})
			exists, err := inst.InstanceExists(ctx, n)
			if tt.gone {
				if exists || err != nil {
					t.Errorf("%s %s, %s: %v, %v; want gone", tt.typ, tt.status, pid, exists, err)
				}
				continue
			}
			if exists || !errors.Is(err, inventory.ErrMaintenance) || !strings.Contains(err.Error(), string(tt.typ)) {
				t.Errorf("%s %s, %s: %v, %v; want an ErrMaintenance naming the condition", tt.typ, tt.status, pid, exists, err)
			}
		}
	}
}

// TestInstanceExists is the deletion contract: (false, nil) only on positive evidence.
func TestInstanceExists(t *testing.T) {
	tests := []struct {
		name       string
		node       *v1.Node
		viewErr    error
		allowErr   error
		wantExists bool
		wantErr    error
	}{
		{"active host", mkNode("x", "baremetal://node-a"), nil, nil, true, nil},
		{"maintenance host exists", mkNode("node-b", ""), nil, nil, true, nil},
		{"matched by name", mkNode("node-a", ""), nil, nil, true, nil},
		{"absent host is gone", mkNode("x", "baremetal://vanished"), nil, nil, false, nil},
		{"decommissioned host is gone", mkNode("x", "baremetal://node-c"), nil, nil, false, nil},
		{"decommissioned, matched by name only, is not proven gone", mkNode("node-c", ""), nil, nil, false, ErrNoProviderID},
		{"never-matched node is an error, not gone", mkNode("stranger", ""), nil, nil, false, inventory.ErrNoMatch},
		{"foreign providerID is an error", mkNode("x", "aws:///i-1"), nil, nil, false, inventory.ErrForeignProviderID},
		{"inventory not loaded is an error", mkNode("x", "baremetal://vanished"), inventory.ErrNotLoaded, nil, false, inventory.ErrNotLoaded},
		{"reload failing: gone is held", mkNode("x", "baremetal://vanished"), nil, inventory.ErrReloadFailing, false, inventory.ErrReloadFailing},
		{"guard tripped: gone is held", mkNode("x", "baremetal://node-c"), nil, inventory.ErrDeletionGuard, false, inventory.ErrDeletionGuard},
		{"guard tripped: existing host still exists", mkNode("x", "baremetal://node-a"), nil, inventory.ErrDeletionGuard, true, nil},
		{"removal not accepted by the guard", mkNode("x", "baremetal://vanished"), nil, inventory.ErrNotAccepted, false, inventory.ErrNotAccepted},
		// Defect 6: a kubelet --provider-id typo registers a NotReady Node that was never
		// initialized: never gone.
		{"uninitialized node with an unknown providerID", uninitializedNode("typo", "baremetal://nod-a"), nil, nil, false, ErrUninitialized},
		{"uninitialized node of a decommissioned host", uninitializedNode("node-c", "baremetal://node-c"), nil, nil, false, ErrUninitialized},
		// Defect 6: the host renamed in the inventory (same systemUUID, same IP).
		{"renamed host: same systemUUID", withUUID(mkNode("x", "baremetal://old-a"), "4c4c4544-0042-3510-8052-b4c04f4e4d32"), nil, nil, false, ErrHostRenamed},
		{"renamed host: same InternalIP", withIP(mkNode("x", "baremetal://old-a"), "10.0.0.11"), nil, nil, false, ErrHostRenamed},
		// Defect 5: a set providerID does not win over a contradicting systemUUID.
		{"providerID but another machine's systemUUID", withUUID(mkNode("x", "baremetal://node-a"), "00000000-0000-4000-8000-000000000001"), nil, nil, false, inventory.ErrUUIDMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst, inv, rec, ctx := setup(t)
			inv.allowErr = tt.allowErr
			if tt.viewErr != nil {
				inv.view, inv.viewErr = nil, tt.viewErr
			}
			exists, err := inst.InstanceExists(ctx, tt.node)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("InstanceExists = %v, %v; want error %v", exists, err, tt.wantErr)
				}
				return
			}
			if err != nil || exists != tt.wantExists {
				t.Fatalf("InstanceExists = %v, %v; want %v", exists, err, tt.wantExists)
			}
			if !exists && (len(rec.events) != 1 || rec.events[0].reason != ReasonHostGone) {
				t.Errorf("events = %v, want one HostGone", rec.events)
			}
		})
	}
}

func uninitializedNode(name, providerID string) *v1.Node {
	n := mkNode(name, providerID)
	n.Spec.Taints = []v1.Taint{{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule}}
	return n
}

func withUUID(n *v1.Node, uuid string) *v1.Node {
	n.Status.NodeInfo.SystemUUID = uuid
	return n
}

func withIP(n *v1.Node, ip string) *v1.Node {
	n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	return n
}

// TestInstanceExistsEvents: a rename and an identity contradiction say so on the Node.
func TestInstanceExistsEvents(t *testing.T) {
	inst, _, rec, ctx := setup(t)
	_, err := inst.InstanceExists(ctx, withIP(mkNode("x", "baremetal://old-a"), "10.0.0.11"))
	if !errors.Is(err, ErrHostRenamed) || len(rec.events) != 1 || rec.events[0].reason != ReasonHostRenamed ||
		!strings.Contains(rec.events[0].msg, `host "node-a" matches this Node by InternalIP 10.0.0.11`) {
		t.Fatalf("rename: %v, events %v", err, rec.events)
	}
	rec.events = nil
	_, err = inst.InstanceExists(ctx, withUUID(mkNode("x", "baremetal://node-a"), "00000000-0000-4000-8000-000000000001"))
	if !errors.Is(err, inventory.ErrUUIDMismatch) || len(rec.events) != 1 || rec.events[0].reason != identity.ReasonMismatch ||
		!strings.Contains(rec.events[0].msg, "00000000-0000-4000-8000-000000000001") || !strings.Contains(rec.events[0].msg, "4c4c4544-0042-3510-8052-b4c04f4e4d32") {
		t.Fatalf("mismatch: %v, events %v", err, rec.events)
	}
}

type fakePower struct {
	state bmc.PowerState
	uuid  string // the system UUID the BMC reports
	err   error
	asked []string
}

func (f *fakePower) PowerState(_ context.Context, t bmc.Target) (bmc.Reading, error) {
	f.asked = append(f.asked, t.Host)
	return bmc.Reading{State: f.state, SystemUUID: f.uuid}, f.err
}

func (f *fakePower) Recent(ctx context.Context, t bmc.Target, _ time.Duration) (bmc.Reading, error) {
	return f.PowerState(ctx, t)
}

// scriptedDriver answers from state; a host in hang never answers until release.
type scriptedDriver struct {
	mu      sync.Mutex
	state   string
	calls   int
	hang    map[string]bool
	release chan struct{}
}

func (d *scriptedDriver) PowerState(ctx context.Context, t bmc.Target) (string, error) {
	d.mu.Lock()
	d.calls++
	state, hang := d.state, d.hang[t.Host]
	d.mu.Unlock()
	if hang {
		select {
		case <-d.release:
		case <-ctx.Done():
			return "", fmt.Errorf("%w: %w", bmc.ErrUnreachable, ctx.Err())
		}
	}
	return state, nil
}

func (d *scriptedDriver) set(state string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state = state
}

func (d *scriptedDriver) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

// TestInstanceShutdownFromRecentReading, through the real power service: a fresh
// "off" reading (the power monitor's) answers without a BMC call; a reading older
// than ShutdownMaxAge is not trusted and the BMC is asked again; a BMC that does not
// answer gives an error after ShutdownWait, not after the call timeout, and is never
// reported off.
func TestInstanceShutdownFromRecentReading(t *testing.T) {
	_, inv, rec, ctx := setup(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	drv := &scriptedDriver{state: "Off", hang: map[string]bool{}, release: make(chan struct{})}
	svc := bmc.NewService(drv, bmc.Config{CallTimeout: time.Hour, CacheTTL: time.Second, MaxConcurrent: 4, FailureThreshold: 3, BackoffBase: time.Minute, BackoffMax: time.Minute}, clk)
	inst := New(inv, svc, rec, Policy{Clock: clk, ShutdownMaxAge: 20 * time.Second, ShutdownWait: 50 * time.Millisecond})
	node := mkNode("x", "baremetal://power-1")
	view, err := inv.View()
	if err != nil {
		t.Fatal(err)
	}
	h, ok := view.Host("power-1")
	if !ok {
		t.Fatal("no host power-1")
	}
	target, _ := bmc.TargetFor(h, "")

	// The monitor's read.
	if r, err := svc.PowerState(ctx, target); err != nil || r.State != bmc.PowerOff {
		t.Fatalf("PowerState = %+v, %v", r, err)
	}
	clk.Step(15 * time.Second) // past the cache TTL, within ShutdownMaxAge
	off, err := inst.InstanceShutdown(ctx, node)
	if err != nil || !off {
		t.Fatalf("InstanceShutdown with a 15s-old off reading = %v, %v; want true", off, err)
	}
	if n := drv.count(); n != 1 {
		t.Fatalf("BMC calls = %d, want 1 (the answer came from the recent reading)", n)
	}

	clk.Step(10 * time.Second) // 25 s: too old to trust
	drv.set("On")
	off, err = inst.InstanceShutdown(ctx, node)
	if err != nil || off {
		t.Fatalf("InstanceShutdown after the host came back on = %v, %v; want false", off, err)
	}
	if n := drv.count(); n != 2 {
		t.Fatalf("BMC calls = %d, want 2 (a stale reading is read again)", n)
	}

	// A reading from before the Node went NotReady is not trusted either.
	clk.Step(5 * time.Second)
	drv.set("Off")
	notReady := node.DeepCopy()
	notReady.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown, LastTransitionTime: metav1.NewTime(clk.Now())}}
	clk.Step(2 * time.Second)
	off, err = inst.InstanceShutdown(ctx, notReady)
	if err != nil || !off || drv.count() != 3 {
		t.Fatalf("InstanceShutdown with a reading older than NotReady = %v, %v, %d BMC calls; want true from a new read (3 calls)", off, err, drv.count())
	}

	// The BMC hangs: an error once ShutdownWait passes, never true.
	clk.Step(time.Minute)
	drv.set("Off")
	drv.mu.Lock()
	drv.hang[target.Host] = true
	drv.mu.Unlock()
	off, err = inst.InstanceShutdown(ctx, node)
	if err == nil || off || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("InstanceShutdown with a hung BMC = %v, %v; want an error wrapping the wait's deadline", off, err)
	}
	// The read went on; once it answers, the next pass uses its answer.
	close(drv.release)
	if _, err := svc.PowerState(ctx, target); err != nil {
		t.Fatal(err)
	}
	if off, err := inst.InstanceShutdown(ctx, node); err != nil || !off {
		t.Fatalf("InstanceShutdown after the BMC answered = %v, %v; want true", off, err)
	}
}

// TestInstanceShutdown: true only when the BMC says off; an unreachable BMC is an
// error, never a guess; a host without a BMC is not shut down.
func TestInstanceShutdown(t *testing.T) {
	tests := []struct {
		name    string
		node    *v1.Node
		state   bmc.PowerState
		err     error
		want    bool
		wantErr error
		asked   bool
	}{
		{"off", mkNode("x", "baremetal://power-1"), bmc.PowerOff, nil, true, nil, true},
		{"on", mkNode("x", "baremetal://power-1"), bmc.PowerOn, nil, false, nil, true},
		{"powering off is not yet off", mkNode("x", "baremetal://power-1"), bmc.PowerTransitioning, nil, false, nil, true},
		{"unreachable is an error", mkNode("x", "baremetal://power-1"), "", fmt.Errorf("%w: timeout", bmc.ErrUnreachable), false, bmc.ErrUnreachable, true},
		{"backed off is an error", mkNode("x", "baremetal://power-1"), "", fmt.Errorf("%w", bmc.ErrBackoff), false, bmc.ErrBackoff, true},
		{"no BMC: not shut down", mkNode("node-a", "baremetal://node-a"), bmc.PowerOff, nil, false, nil, false},
		{"no match is an error", mkNode("stranger", ""), bmc.PowerOff, nil, false, inventory.ErrNoMatch, false},
		// Defect 5: the BMC answers for another machine (swapped BMC addresses).
		{"BMC reports another system UUID", withUUID(mkNode("x", "baremetal://power-1"), "6e1f0a52-3c1d-4e57-9a3e-0d0c7b5e2a11"), bmc.PowerOff, nil, false, identity.ErrMismatch, true},
		{"Node's systemUUID contradicts the host's", withUUID(mkNode("x", "baremetal://power-1"), "00000000-0000-4000-8000-000000000009"), bmc.PowerOff, nil, false, inventory.ErrUUIDMismatch, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, inv, rec, ctx := setup(t)
			power := &fakePower{state: tt.state, err: tt.err}
			if strings.HasPrefix(tt.name, "BMC reports") {
				power.uuid = "7f000000-0000-4000-8000-0000000000aa"
			} else {
				power.uuid = "6E1F0A52-3C1D-4E57-9A3E-0D0C7B5E2A11" // the same machine
			}
			inst := New(inv, power, rec, Policy{})
			off, err := inst.InstanceShutdown(ctx, tt.node)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || off {
					t.Fatalf("InstanceShutdown = %v, %v; want error %v", off, err, tt.wantErr)
				}
			} else if err != nil || off != tt.want {
				t.Fatalf("InstanceShutdown = %v, %v; want %v", off, err, tt.want)
			}
			if asked := len(power.asked) > 0; asked != tt.asked {
				t.Errorf("BMC asked = %v, want %v", asked, tt.asked)
			}
		})
	}
}

// TestMetadataNeverTouchesTheBMC: initialization answers from memory.
func TestMetadataNeverTouchesTheBMC(t *testing.T) {
	_, inv, rec, ctx := setup(t)
	power := &fakePower{state: bmc.PowerOff}
	inst := New(inv, power, rec, Policy{})
	if _, err := inst.InstanceMetadata(ctx, mkNode("power-1", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := inst.InstanceExists(ctx, mkNode("power-1", "")); err != nil {
		t.Fatal(err)
	}
	if len(power.asked) != 0 {
		t.Fatalf("InstanceMetadata/InstanceExists asked the BMC: %v", power.asked)
	}
}

// TestDeleteAfterPolicy: gone only when continuously off for deleteAfter, confirmed
// off now, and the guard allows it.
func TestDeleteAfterPolicy(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	node := func(since string) *v1.Node {
		n := mkNode("x", "baremetal://power-1")
		if since != "" {
			n.Annotations = map[string]string{powermon.AnnotationOffSince: since, powermon.AnnotationOffSeen: clk.Now().Format(time.RFC3339)}
		}
		return n
	}
	tests := []struct {
		name     string
		node     *v1.Node
		state    bmc.PowerState
		powerErr error
		allowErr error
		want     bool
		wantErr  error
	}{
		{"off long enough", node("2026-11-22T11:00:00Z"), bmc.PowerOff, nil, nil, false, nil},
		{"off, not long enough", node("2026-11-22T11:45:00Z"), bmc.PowerOff, nil, nil, true, nil},
		{"annotation old but on now", node("2026-11-22T11:00:00Z"), bmc.PowerOn, nil, nil, true, nil},
		{"annotation old but BMC unreachable", node("2026-11-22T11:00:00Z"), "", bmc.ErrUnreachable, nil, true, nil},
		{"no annotation", node(""), bmc.PowerOff, nil, nil, true, nil},
		{"off long enough but guard tripped", node("2026-11-22T11:00:00Z"), bmc.PowerOff, nil, inventory.ErrDeletionGuard, false, inventory.ErrDeletionGuard},
		// Defect 4: the power-off budget is used up: an error, not gone.
		{"off long enough, budget used up", node("2026-11-22T11:00:00Z"), bmc.PowerOff, nil, nil, false, inventory.ErrPowerBudget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, inv, rec, ctx := setup(t)
			inv.allowErr = tt.allowErr
			if strings.Contains(tt.name, "budget") {
				inv.budgetErr = fmt.Errorf("%w: %w: 5 of 5", inventory.ErrNowWaiting, inventory.ErrPowerBudget)
			}
			inst := New(inv, &fakePower{state: tt.state, err: tt.powerErr}, rec, Policy{DeleteAfter: 30 * time.Minute, Clock: clk})
			exists, err := inst.InstanceExists(ctx, tt.node)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("InstanceExists = %v, %v; want %v", exists, err, tt.wantErr)
				}
				return
			}
			if err != nil || exists != tt.want {
				t.Fatalf("InstanceExists = %v, %v; want %v", exists, err, tt.want)
			}
		})
	}
	// Defect 4: a host in maintenance, off for days by design, is never deleted for it.
	_, inv, rec, ctx := setup(t)
	maint := mkNode("m", "baremetal://power-m")
	maint.Annotations = map[string]string{powermon.AnnotationOffSince: "2026-11-01T00:00:00Z", powermon.AnnotationOffSeen: clk.Now().Format(time.RFC3339)}
	inst := New(inv, &fakePower{state: bmc.PowerOff}, rec, Policy{DeleteAfter: 30 * time.Minute, Clock: clk})
	if exists, err := inst.InstanceExists(ctx, maint); !exists || err != nil || len(inv.budget) != 0 {
		t.Fatalf("maintenance host: %v, %v (budget asked for %v)", exists, err, inv.budget)
	}
	// A Node lifecycle condition (KEP-5683) exempts an active host's Node the same way.
	for _, typ := range []v1.NodeConditionType{v1.NodeMaintenanceInProgress, v1.NodeMaintenancePlanned} {
		n := node("2026-11-22T11:00:00Z")
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: typ, Status: v1.ConditionTrue, Reason: "FirmwareUpdate"})
		inv.budget = nil
		if exists, err := inst.InstanceExists(ctx, n); !exists || err != nil || len(inv.budget) != 0 {
			t.Fatalf("Node with %s True: %v, %v (budget asked for %v)", typ, exists, err, inv.budget)
		}
	}
	// A maintenance that ended 5 minutes ago: off time counts from then (under 30m).
	ended := node("2026-11-22T11:00:00Z")
	ended.Status.Conditions = append(ended.Status.Conditions, v1.NodeCondition{Type: v1.NodeMaintenanceInProgress, Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(clk.Now().Add(-5 * time.Minute))})
	inv.budget = nil
	if exists, err := inst.InstanceExists(ctx, ended); !exists || err != nil || len(inv.budget) != 0 {
		t.Fatalf("Node whose maintenance ended 5m ago: %v, %v (budget asked for %v)", exists, err, inv.budget)
	}
	// So does the label baremetal-ccm.io/exclude-from-remediation=true.
	excluded := node("2026-11-22T11:00:00Z")
	excluded.Labels = map[string]string{maintenance.ExcludeLabel: "true"}
	inv.budget = nil
	if exists, err := inst.InstanceExists(ctx, excluded); !exists || err != nil || len(inv.budget) != 0 {
		t.Fatalf("Node excluded from remediation: %v, %v (budget asked for %v)", exists, err, inv.budget)
	}
	// Defect 5: the BMC reports another machine: an error with an event, never gone.
	wrong := &fakePower{state: bmc.PowerOff, uuid: "7f000000-0000-4000-8000-0000000000aa"}
	inst = New(inv, wrong, rec, Policy{DeleteAfter: 30 * time.Minute, Clock: clk})
	if exists, err := inst.InstanceExists(ctx, node("2026-11-22T11:00:00Z")); exists || !errors.Is(err, identity.ErrMismatch) {
		t.Fatalf("BMC of another machine: %v, %v", exists, err)
	}
	if r := rec.reasons(); len(r) == 0 || r[len(r)-1] != identity.ReasonMismatch {
		t.Fatalf("events %v, want IdentityMismatch", r)
	}

	// Without the policy, an old annotation changes nothing.
	inst = New(inv, &fakePower{state: bmc.PowerOff}, rec, Policy{Clock: clk})
	if exists, err := inst.InstanceExists(ctx, node("2020-01-01T00:00:00Z")); !exists || err != nil {
		t.Fatalf("policy off: %v, %v", exists, err)
	}
}

// TestDeleteAfterDoesNotWaitForTheBMC is defect 8: the deleteAfter check answers from a
// recent reading or waits at most ShutdownWait, so a hung BMC never holds a
// node-lifecycle worker (it used to wait for the whole BMC call, up to ~70 s).
func TestDeleteAfterDoesNotWaitForTheBMC(t *testing.T) {
	_, inv, rec, ctx := setup(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	drv := &scriptedDriver{state: "Off", hang: map[string]bool{"power-1": true}, release: make(chan struct{})}
	defer close(drv.release)
	svc := bmc.NewService(drv, bmc.Config{CallTimeout: time.Hour, CacheTTL: time.Second, MaxConcurrent: 4, FailureThreshold: 3, BackoffBase: time.Minute, BackoffMax: time.Minute}, clk)
	inst := New(inv, svc, rec, Policy{DeleteAfter: 30 * time.Minute, Clock: clk, ShutdownWait: 50 * time.Millisecond})
	node := mkNode("x", "baremetal://power-1")
	node.Annotations = map[string]string{powermon.AnnotationOffSince: "2026-11-22T11:00:00Z", powermon.AnnotationOffSeen: clk.Now().Format(time.RFC3339)}
	type result struct {
		exists bool
		err    error
	}
	done := make(chan result, 1)
	go func() {
		exists, err := inst.InstanceExists(ctx, node)
		done <- result{exists, err}
	}()
	select {
	case r := <-done:
		if !r.exists || r.err != nil {
			t.Fatalf("InstanceExists with a hung BMC = %v, %v; want true (no evidence it is off)", r.exists, r.err)
		}
	case <-time.After(30 * time.Second): // a deadlock detector, not a speed assertion
		t.Fatal("InstanceExists waited for a hung BMC")
	}
	if len(inv.budget) != 0 {
		t.Fatalf("the power budget was asked for without an off reading: %v", inv.budget)
	}
}
