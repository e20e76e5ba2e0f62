package instances

// Regression tests from a hostile review: each reproduces a path on which
// InstanceExists answered (false, nil) — the node-lifecycle controller then deletes the
// NotReady Node at once — although the docs do not justify it. Each failed before
// its fix.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bmc"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/powermon"
)

// TestRenameHiddenByAmbiguity: host old-a was renamed new-a (same systemUUID) and
// the Node's InternalIP now belongs to another host. renamed() treats the ambiguous
// match as "no other host matches", so the Node is reported gone although a host with
// its systemUUID is in the inventory. docs/operations.md: "a host that is absent by name but
// another host matches the Node by systemUUID, name or InternalIP is a rename, not a
// removal".
func TestRenameHiddenByAmbiguity(t *testing.T) {
	v, err := inventory.Parse([]byte(`apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
hosts:
- name: new-a
  systemUUID: 4c4c4544-0042-3510-8052-b4c04f4e4d32
  addresses: [{type: InternalIP, address: 10.0.0.11}]
- name: other
  addresses: [{type: InternalIP, address: 10.0.0.12}]
`))
	if err != nil {
		t.Fatal(err)
	}
	inv := &fakeInventory{view: v} // the guard accepted old-a's removal
	rec := &fakeRecorder{}
	_, ctx := ktesting.NewTestContext(t)
	inst := New(inv, nil, rec, Policy{})
	node := withIP(withUUID(mkNode("x", "baremetal://old-a"), "4c4c4544-0042-3510-8052-b4c04f4e4d32"), "10.0.0.12")
	exists, err := inst.InstanceExists(ctx, node)
	if err == nil && !exists {
		t.Fatalf("InstanceExists = false, nil: the Node is deleted although host new-a carries its systemUUID (events %v)", rec.reasons())
	}
}

// TestRenameWithByteSwappedUUID: the same rename, the inventory's systemUUID
// written in the other SMBIOS byte order than kubelet reports (which docs/operations.md says
// is the same machine). renamed() uses Match, whose UUID lookup is exact, so the rename
// is not seen and the Node is reported gone.
func TestRenameWithByteSwappedUUID(t *testing.T) {
	inst, _, rec, ctx := setup(t)
	// node-a in the fixture inventory has 4c4c4544-0042-3510-8052-b4c04f4e4d32.
	node := withUUID(mkNode("x", "baremetal://old-a"), "44454c4c-4200-1035-8052-b4c04f4e4d32")
	exists, err := inst.InstanceExists(ctx, node)
	if !errors.Is(err, ErrHostRenamed) {
		t.Fatalf("InstanceExists = %v, %v (events %v); want ErrHostRenamed: host node-a has this Node's systemUUID", exists, err, rec.reasons())
	}
}

// memSource serves a document and says "unchanged" for the same bytes, like FileSource.
type memSource struct {
	mu   sync.Mutex
	data string
	last string
}

func (m *memSource) set(s string) { m.mu.Lock(); m.data = s; m.mu.Unlock() }
func (m *memSource) Fetch(context.Context) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == m.last {
		return nil, true, nil
	}
	m.last = m.data
	return []byte(m.data), false, nil
}
func (m *memSource) Interval() time.Duration { return 5 * time.Second }
func (m *memSource) String() string          { return "mem" }

// TestMidWriteReadDeletesMaintenanceNode, end to end through the real Store: a
// host in maintenance (off for days by design, exempt from deleteAfter) is the last
// entry of the inventory file; the file is rewritten in place and one poll reads it cut
// just before that host's "state: maintenance" line. The cut document removes no host,
// so it is installed at once (settling only covers removals), and the next lifecycle
// pass deletes the maintenance host's Node under deleteAfter.
func TestMidWriteReadDeletesMaintenanceNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	head := `apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
hosts:
- name: web-1
- name: db-1
  systemUUID: 6e1f0a52-3c1d-4e57-9a3e-0d0c7b5e2a11
  bmc: {protocol: redfish, address: "https://10.1.0.9", credentialsFile: /etc/baremetal-ccm/bmc/db-1}
`
	full := head + "  state: maintenance\n"
	src := &memSource{}
	store := inventory.NewStore(src, inventory.Guard{MaxHosts: 10, MaxPercent: 25, SettleTime: 10 * time.Second, PowerMaxHosts: 5}, nil, clk)
	store.Lead(ctx, inventory.Leadership{State: &inventory.MemoryState{},
		NodeHosts: func() ([]string, bool) { return []string{"web-1", "db-1"}, true }})
	src.set(full)
	for range 3 {
		if err := store.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Step(6 * time.Second)
	}
	node := mkNode("db-1", "baremetal://db-1")
	node.Status.NodeInfo.SystemUUID = "6e1f0a52-3c1d-4e57-9a3e-0d0c7b5e2a11"
	node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown, LastTransitionTime: metav1.NewTime(clk.Now().Add(-72 * time.Hour))}}
	node.Annotations = map[string]string{powermon.AnnotationOffSince: clk.Now().Add(-72 * time.Hour).Format(time.RFC3339), powermon.AnnotationOffSeen: clk.Now().Format(time.RFC3339)}
	power := &fakePower{state: bmc.PowerOff, uuid: "6e1f0a52-3c1d-4e57-9a3e-0d0c7b5e2a11"}
	rec := &fakeRecorder{}
	inst := New(store, power, rec, Policy{DeleteAfter: time.Hour, Clock: clk})
	if exists, err := inst.InstanceExists(ctx, node); !exists || err != nil {
		t.Fatalf("maintenance host before the cut read: %v, %v", exists, err)
	}

	src.set(head) // one poll reads the file cut before its last line
	if err := store.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	exists, err := inst.InstanceExists(ctx, node)
	if err == nil && !exists {
		t.Fatal("InstanceExists = false, nil: a single mid-write read took db-1 out of maintenance and its Node is deleted under deleteAfter")
	}
}

// TestDeleteAfterAcrossReadiness: deleteAfter trusts the powered-off-since
// annotation although the Node records that it was Ready (its host on) after the stamp:
// the Ready condition last changed one minute ago, the stamp is two hours old (left by
// a monitor that stopped observing the host, e.g. a restart or leader change while the
// Node was Ready). The host has really been off for about a minute; deleteAfter is an
// hour. docs/configuration.md: "only positively observed, continuous off time counts".
func TestDeleteAfterAcrossReadiness(t *testing.T) {
	_, inv, rec, ctx := setup(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	node := mkNode("x", "baremetal://power-1")
	node.Annotations = map[string]string{powermon.AnnotationOffSince: "2026-11-22T10:00:00Z", powermon.AnnotationOffSeen: clk.Now().Format(time.RFC3339)}
	node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown, LastTransitionTime: metav1.NewTime(clk.Now().Add(-time.Minute))}}
	inst := New(inv, &fakePower{state: bmc.PowerOff}, rec, Policy{DeleteAfter: time.Hour, Clock: clk})
	exists, err := inst.InstanceExists(ctx, node)
	if err == nil && !exists {
		t.Fatal("InstanceExists = false, nil one minute after the Node was last Ready, from an off-since stamped two hours ago")
	}
}

// TestDeleteAfterAcrossAnUnreadPeriod: the Node stayed NotReady, the host was stamped
// off two hours ago and last seen off an hour ago; nobody read it since (no leader, the
// CCM down), so it may have been on meanwhile. A fresh "off" reading does not make the
// two-hour-old stamp count for deleteAfter (30 min): the Node is not reported gone.
func TestDeleteAfterAcrossAnUnreadPeriod(t *testing.T) {
	_, inv, rec, ctx := setup(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	node := mkNode("x", "baremetal://power-1")
	node.Annotations = map[string]string{
		powermon.AnnotationOffSince: clk.Now().Add(-2 * time.Hour).Format(time.RFC3339),
		powermon.AnnotationOffSeen:  clk.Now().Add(-time.Hour).Format(time.RFC3339),
	}
	node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown, LastTransitionTime: metav1.NewTime(clk.Now().Add(-3 * time.Hour))}}
	inst := New(inv, &fakePower{state: bmc.PowerOff}, rec, Policy{DeleteAfter: 30 * time.Minute, Clock: clk, MaxUnobserved: powermon.MaxUnobserved(10 * time.Second)})
	exists, err := inst.InstanceExists(ctx, node)
	if err == nil && !exists {
		t.Fatal("InstanceExists = false, nil from an off-since whose host went unread for an hour")
	}
	// Seen off a minute ago: the same stamp counts.
	node.Annotations[powermon.AnnotationOffSeen] = clk.Now().Add(-time.Minute).Format(time.RFC3339)
	if exists, err := inst.InstanceExists(ctx, node); exists || err != nil {
		t.Fatalf("continuously seen off for two hours: InstanceExists = %v, %v, want false, nil", exists, err)
	}
}
