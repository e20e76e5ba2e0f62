//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"sigs.k8s.io/yaml"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// host is one inventory entry in a test.
type host struct {
	name, uuid, ip, zone, state string
	labels                      map[string]string
	hostnames                   []string
}

func inventoryDoc(hosts ...host) string {
	var b strings.Builder
	b.WriteString("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n")
	if len(hosts) == 0 {
		return "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts: []\n"
	}
	for _, h := range hosts {
		fmt.Fprintf(&b, "- name: %s\n  instanceType: r650\n  region: dc1\n  zone: %s\n  rack: r1\n", h.name, orDefault(h.zone, "dc1-row1"))
		if h.uuid != "" {
			fmt.Fprintf(&b, "  systemUUID: %s\n", h.uuid)
		}
		if h.ip != "" {
			fmt.Fprintf(&b, "  addresses:\n  - {type: InternalIP, address: %q}\n  - {type: Hostname, address: %s}\n", h.ip, h.name)
		}
		if len(h.hostnames) > 0 {
			fmt.Fprintf(&b, "  hostnames: [%s]\n", strings.Join(h.hostnames, ", "))
		}
		if h.state != "" {
			fmt.Fprintf(&b, "  state: %s\n", h.state)
		}
		if len(h.labels) > 0 {
			l, _ := yaml.Marshal(h.labels)
			b.WriteString("  labels:\n")
			for _, line := range strings.Split(strings.TrimSpace(string(l)), "\n") {
				b.WriteString("    " + line + "\n")
			}
		}
	}
	return b.String()
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// lab is one test's CCM with its inventory file.
type lab struct {
	t         *testing.T
	ctx       context.Context
	cp        *framework.ControlPlane
	dir       string
	inventory string
	config    string
	ack       string
	ccm       *framework.CCM
	nodes     []string
}

// newLab writes the inventory and a CloudConfig (file source polled every second) and
// starts the CCM with a 1 s node-monitor period.
func newLab(t *testing.T, guard string, hosts ...host) *lab {
	t.Helper()
	l := newLabConfig(t, guard, hosts...)
	l.startCCM(l.config)
	return l
}

// newLabNoCCM is newLab without starting a CCM.
func newLabNoCCM(t *testing.T, hosts ...host) *lab {
	t.Helper()
	return newLabConfig(t, "", hosts...)
}

func newLabConfig(t *testing.T, guard string, hosts ...host) *lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	l := &lab{t: t, ctx: ctx, cp: framework.Shared(), dir: t.TempDir()}
	l.inventory = filepath.Join(l.dir, "inventory.yaml")
	l.ack = filepath.Join(l.dir, "ack")
	l.setInventory(inventoryDoc(hosts...))
	l.config = filepath.Join(l.dir, "cloud-config.yaml")
	l.writeConfig(guard, "")
	if err := framework.ResetGuardState(ctx, l.cp.Client); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := framework.DeleteNodes(context.Background(), l.cp.Client, l.nodes...); err != nil {
			t.Error(err)
		}
		// What the garbage collector (absent from this control plane) does with a
		// deleted Node's session states: a later test's cp-1 is another replica.
		states := versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig)).BaremetalCCMV1alpha1().BGPSessionStates()
		for _, n := range l.nodes {
			if err := states.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: v1alpha1.LabelNode + "=" + n}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s's session states: %v", n, err)
			}
		}
		if err := framework.ResetGuardState(context.Background(), l.cp.Client); err != nil {
			t.Error(err)
		}
		if err := framework.DeleteAddressClaims(context.Background(), l.cp.Client); err != nil {
			t.Error(err)
		}
	})
	return l
}

// writeConfig writes the lab's CloudConfig: the inventory file polled every second,
// a shrinking document settling for 2 s, credentials files anywhere under the
// temporary directory (where tests write them), guard appended to the deletionGuard
// block (", maxRemovedHosts: 2"), and extra top-level sections (for example
// "bmc: {cacheTTL: 1s}\n").
func (l *lab) writeConfig(guard, extra string) {
	l.t.Helper()
	writeFile(l.t, l.config, fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: %s, pollInterval: 1s}
  credentialsDir: %s
  deletionGuard: {acknowledgeFile: %s, settleTime: 2s%s}
%s`, l.inventory, os.TempDir(), l.ack, guard, extra))
}

func (l *lab) startCCM(cfg string) {
	l.t.Helper()
	l.ccm = framework.StartCCM(l.t, l.cp, cfg, "--node-monitor-period=1s")
	if err := l.ccm.WaitHealthy(l.ctx); err != nil {
		l.t.Fatal(err)
	}
}

// setInventory replaces the inventory file atomically, as a config-management tool would.
func (l *lab) setInventory(doc string) {
	l.t.Helper()
	tmp := l.inventory + ".tmp"
	writeFile(l.t, tmp, doc)
	if err := os.Rename(tmp, l.inventory); err != nil {
		l.t.Fatal(err)
	}
}

func ready(s v1.ConditionStatus) *v1.ConditionStatus { return &s }

func (l *lab) createNode(spec framework.NodeSpec) {
	l.t.Helper()
	l.nodes = append(l.nodes, spec.Name)
	if _, err := framework.CreateNode(l.ctx, l.cp.Client, spec); err != nil {
		l.t.Fatal(err)
	}
}

func (l *lab) node(name string) (*v1.Node, error) {
	return l.cp.Client.CoreV1().Nodes().Get(l.ctx, name, metav1.GetOptions{})
}

func (l *lab) waitInitialized(name string) *v1.Node {
	l.t.Helper()
	var node *v1.Node
	err := framework.WaitFor(l.ctx, 60*time.Second, name+" initialized", func(context.Context) (bool, error) {
		n, err := l.node(name)
		if err != nil {
			return false, err
		}
		if framework.HasTaint(n, cloudproviderapi.TaintExternalCloudProvider) {
			return false, fmt.Errorf("still tainted")
		}
		node = n
		return true, nil
	})
	if err != nil {
		l.t.Fatal(err)
	}
	return node
}

func (l *lab) waitDeleted(name string) {
	l.t.Helper()
	err := framework.WaitFor(l.ctx, 60*time.Second, name+" deleted", func(context.Context) (bool, error) {
		_, err := l.node(name)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		l.t.Fatal(err)
	}
}

// waitEvent waits for an event with reason on the object and returns its message.
func (l *lab) waitEvent(namespace, kind, name, reason string) string {
	l.t.Helper()
	var msg string
	err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("%s event on %s %s", reason, kind, name), func(ctx context.Context) (bool, error) {
		evs, err := framework.Events(ctx, l.cp.Client, namespace, kind, name)
		if err != nil {
			return false, err
		}
		for _, e := range evs {
			if e.Reason == reason {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		l.t.Fatal(err)
	}
	return msg
}

func (l *lab) waitMetric(line string) {
	l.t.Helper()
	err := framework.WaitFor(l.ctx, 60*time.Second, "metric "+line, func(ctx context.Context) (bool, error) {
		m, err := l.ccm.Metrics(ctx)
		if err != nil {
			return false, err
		}
		for _, got := range strings.Split(m, "\n") {
			if got == line {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		l.t.Fatal(err)
	}
}

// stillThere asserts that the Nodes survive several node-monitor periods.
func (l *lab) stillThere(d time.Duration, names ...string) {
	l.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, n := range names {
			if _, err := l.node(n); err != nil {
				l.t.Fatalf("node %s: %v (it must not be deleted)", n, err)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

const (
	uuidA = "4c4c4544-0042-3510-8052-b4c04f4e4d01"
	uuidB = "4c4c4544-0042-3510-8052-b4c04f4e4d02"
)

// TestNodeInitialization: Nodes registered with the uninitialized taint get providerID,
// addresses, standard and our labels from the inventory, and the taint removed; a Node
// with no host stays tainted with an event saying why.
func TestNodeInitialization(t *testing.T) {
	l := newLab(t, "",
		host{name: "init-a", uuid: uuidA, ip: "10.10.0.1", zone: "dc1-row7", labels: map[string]string{"pool": "gpu", "example.com/owner": "team-a"}},
		host{name: "init-b", ip: "fd00:10::2", hostnames: []string{"init-b.dc1.example"}},
	)
	// init-a registers under another name and is found by its system UUID.
	l.createNode(framework.NodeSpec{Name: "kubelet-name-a", SystemUUID: strings.ToUpper(uuidA), Ready: ready(v1.ConditionTrue)})
	// init-b registers under a hostname alias with kubelet --node-ip.
	l.createNode(framework.NodeSpec{Name: "init-b.dc1.example", ProvidedNodeIP: "fd00:10::2", Ready: ready(v1.ConditionTrue)})
	// stranger is in no inventory.
	l.createNode(framework.NodeSpec{Name: "stranger", SystemUUID: "4c4c4544-0042-3510-8052-b4c04f4e4dff", InternalIPs: []string{"10.99.0.1"}, Ready: ready(v1.ConditionTrue)})

	a := l.waitInitialized("kubelet-name-a")
	if a.Spec.ProviderID != "baremetal://init-a" {
		t.Errorf("providerID = %q", a.Spec.ProviderID)
	}
	for k, want := range map[string]string{
		v1.LabelInstanceTypeStable: "r650",
		v1.LabelTopologyZone:       "dc1-row7",
		v1.LabelTopologyRegion:     "dc1",
		"baremetal-ccm.io/rack":    "r1",
		"baremetal-ccm.io/pool":    "gpu",
		"example.com/owner":        "team-a",
	} {
		if got := a.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	err := framework.WaitFor(l.ctx, 30*time.Second, "init-a addresses", func(ctx context.Context) (bool, error) {
		n, err := l.node("kubelet-name-a")
		if err != nil {
			return false, err
		}
		got := fmt.Sprint(n.Status.Addresses)
		if strings.Contains(got, "{InternalIP 10.10.0.1}") && strings.Contains(got, "{Hostname init-a}") {
			return true, nil
		}
		return false, fmt.Errorf("addresses %s", got)
	})
	if err != nil {
		t.Error(err)
	}

	b := l.waitInitialized("init-b.dc1.example")
	if b.Spec.ProviderID != "baremetal://init-b" {
		t.Errorf("init-b providerID = %q", b.Spec.ProviderID)
	}

	msg := l.waitEvent("default", "Node", "stranger", "HostNotFound")
	for _, want := range []string{"no inventory host matches", "4c4c4544-0042-3510-8052-b4c04f4e4dff", "10.99.0.1", "add a host"} {
		if !strings.Contains(msg, want) {
			t.Errorf("HostNotFound message lacks %q: %s", want, msg)
		}
	}
	n, err := l.node("stranger")
	if err != nil {
		t.Fatal(err)
	}
	if !framework.HasTaint(n, cloudproviderapi.TaintExternalCloudProvider) || n.Spec.ProviderID != "" {
		t.Errorf("stranger was initialized: providerID %q taints %v", n.Spec.ProviderID, n.Spec.Taints)
	}

	// A stranger that goes NotReady is not deleted: nothing proves a host we never knew is gone.
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, "stranger", v1.ConditionUnknown); err != nil {
		t.Fatal(err)
	}
	l.stillThere(4*time.Second, "stranger")

	// Adding the host to the inventory initializes it without a restart.
	l.setInventory(inventoryDoc(
		host{name: "init-a", uuid: uuidA, ip: "10.10.0.1", zone: "dc1-row7"},
		host{name: "init-b", ip: "fd00:10::2", hostnames: []string{"init-b.dc1.example"}},
		host{name: "stranger", ip: "10.99.0.1"},
	))
	if n := l.waitInitialized("stranger"); n.Spec.ProviderID != "baremetal://stranger" {
		t.Errorf("stranger providerID = %q", n.Spec.ProviderID)
	}
}

// TestNodeDeletion covers the deletion contract end to end: a host removed from the
// inventory or decommissioned, whose Node is NotReady, has its Node deleted; garbage
// and an inventory emptied beyond the guard delete nothing while the last good inventory
// keeps serving; acknowledging the held inventory lets the deletion proceed.
func TestNodeDeletion(t *testing.T) {
	hosts := []host{
		{name: "del-1", ip: "10.20.0.1"}, {name: "del-2", ip: "10.20.0.2"}, {name: "del-3", ip: "10.20.0.3"},
		{name: "del-4", ip: "10.20.0.4"}, {name: "del-5", ip: "10.20.0.5"}, {name: "del-6", ip: "10.20.0.6"},
		{name: "del-7", ip: "10.20.0.7"}, {name: "del-8", ip: "10.20.0.8"},
	}
	l := newLab(t, ", maxRemovedHosts: 3, maxRemovedPercent: 50", hosts...)
	for _, h := range hosts[:5] {
		l.createNode(framework.NodeSpec{Name: h.name, InternalIPs: []string{h.ip}, Ready: ready(v1.ConditionTrue)})
	}
	for _, h := range hosts[:5] {
		l.waitInitialized(h.name)
	}
	// del-1..del-3 stop heartbeating, as the node-lifecycle side would mark them.
	for _, n := range []string{"del-1", "del-2", "del-3"} {
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, n, v1.ConditionUnknown); err != nil {
			t.Fatal(err)
		}
	}
	l.stillThere(3*time.Second, "del-1", "del-2", "del-3") // all still in the inventory

	// Removed from the inventory: deleted once the document settled (1 of 3 allowed
	// within the window).
	l.setInventory(inventoryDoc(hosts[1:]...))
	l.waitEvent("kube-system", "Inventory", "inventory", inventory.ReasonSettling)
	l.waitDeleted("del-1")
	if msg := l.waitEvent("default", "Node", "del-1", "HostGone"); !strings.Contains(msg, "not in inventory") {
		t.Errorf("HostGone message: %s", msg)
	}

	// Decommissioned: deleted. A Ready Node of a removed host (del-5) is not. That
	// makes 3 removals in the window.
	withDecom := append([]host{{name: "del-2", ip: "10.20.0.2", state: "decommissioned"}}, hosts[2:4]...)
	withDecom = append(withDecom, hosts[5:]...) // del-5 removed, but Ready
	l.setInventory(inventoryDoc(withDecom...))
	l.waitDeleted("del-2")
	l.stillThere(3*time.Second, "del-3", "del-4", "del-5")
	l.waitMetric("baremetal_ccm_inventory_removals_in_window 3")

	// Garbage: nothing is deleted, even del-3 (NotReady) which garbage "lacks", and
	// the last good inventory still initializes new Nodes (del-6).
	l.setInventory("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: [broken\n")
	if msg := l.waitEvent("kube-system", "Inventory", "inventory", "InventoryReloadFailed"); !strings.Contains(msg, "Keeping the last good inventory") {
		t.Errorf("InventoryReloadFailed message: %s", msg)
	}
	l.waitMetric("baremetal_ccm_inventory_last_reload_failed 1")
	l.createNode(framework.NodeSpec{Name: "del-6", InternalIPs: []string{"10.20.0.6"}, Ready: ready(v1.ConditionTrue)})
	l.waitInitialized("del-6")
	l.stillThere(4*time.Second, "del-3")

	// A valid inventory with every host gone trips the guard: nothing deleted, new
	// Nodes (del-7) still initialized from the last good inventory.
	l.setInventory(inventoryDoc())
	msg := l.waitEvent("kube-system", "Inventory", "inventory", "DeletionGuardTripped")
	if !strings.Contains(msg, "acknowledge inventory-") || !strings.Contains(msg, "baremetal-ccm.io/acknowledge=inventory-") {
		t.Errorf("DeletionGuardTripped does not say how to acknowledge: %s", msg)
	}
	l.waitMetric("baremetal_ccm_inventory_deletion_guard_tripped 1")
	l.waitMetric("baremetal_ccm_inventory_last_reload_failed 0")
	l.createNode(framework.NodeSpec{Name: "del-7", InternalIPs: []string{"10.20.0.7"}, Ready: ready(v1.ConditionTrue)})
	l.waitInitialized("del-7")
	l.stillThere(4*time.Second, "del-3", "del-4", "del-6", "del-7")

	// Restoring the hosts but del-3 narrows the trip to del-3 (a 4th removal within the
	// window would not pass anyway); an acknowledgement of exactly it lets del-3 go.
	var withoutDel3 []host
	for _, h := range withDecom {
		if h.name != "del-3" {
			withoutDel3 = append(withoutDel3, h)
		}
	}
	l.setInventory(inventoryDoc(withoutDel3...))
	l.waitMetric("baremetal_ccm_inventory_deletion_guard_held_hosts 1")
	l.stillThere(3*time.Second, "del-3")
	l.acknowledge(l.tripID([]string{"del-3"}))
	l.waitDeleted("del-3")
	l.waitMetric("baremetal_ccm_inventory_deletion_guard_tripped 0")

	// Removing three hosts at once is held until acknowledged.
	for _, n := range []string{"del-4", "del-6", "del-7"} {
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, n, v1.ConditionUnknown); err != nil {
			t.Fatal(err)
		}
	}
	held := inventoryDoc(host{name: "del-8", ip: "10.20.0.8"}, host{name: "del-2", ip: "10.20.0.2", state: "decommissioned"})
	l.setInventory(held)
	l.waitMetric("baremetal_ccm_inventory_deletion_guard_held_hosts 3")
	l.stillThere(3*time.Second, "del-4", "del-6", "del-7")
	id := l.tripID([]string{"del-4", "del-6", "del-7"})
	writeFile(t, l.ack, id+"\n")
	for _, n := range []string{"del-4", "del-6", "del-7"} {
		l.waitDeleted(n)
	}
	// The acknowledgement is used up: the ID is recorded, and a later trip needs its own.
	state := l.guardState()
	if !slices.Contains(state.UsedAcks, id) {
		t.Errorf("used acknowledgements %v lack %s", state.UsedAcks, id)
	}
}

// readGuardState reads the deletion guard's state from its ConfigMap.
func (l *lab) readGuardState(ctx context.Context) (*inventory.GuardState, error) {
	cm, err := l.cp.Client.CoreV1().ConfigMaps(framework.GuardStateNamespace).Get(ctx, framework.GuardStateName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	st := &inventory.GuardState{}
	return st, json.Unmarshal([]byte(cm.Data[inventory.StateKey]), st)
}

// guardState is readGuardState failing the test on an error.
func (l *lab) guardState() *inventory.GuardState {
	l.t.Helper()
	st, err := l.readGuardState(l.ctx)
	if err != nil {
		l.t.Fatalf("guard state: %v", err)
	}
	return st
}

// tripID waits until the guard's state holds an inventory trip of exactly hosts and
// returns its ID.
func (l *lab) tripID(hosts []string) string {
	l.t.Helper()
	var id string
	err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("a trip of %v", hosts), func(ctx context.Context) (bool, error) {
		st, err := l.readGuardState(ctx)
		if err != nil {
			return false, err
		}
		if st.Trip == nil || !slices.Equal(st.Trip.Hosts, hosts) {
			return false, fmt.Errorf("trip %+v", st.Trip)
		}
		id = st.Trip.ID
		return true, nil
	})
	if err != nil {
		l.t.Fatal(err)
	}
	return id
}

// acknowledge acknowledges a trip the way the event says, through the state
// ConfigMap's annotation, as kubectl annotate would.
func (l *lab) acknowledge(id string) {
	l.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, inventory.AnnotationAcknowledge, id)
	if _, err := l.cp.Client.CoreV1().ConfigMaps(framework.GuardStateNamespace).Patch(l.ctx, framework.GuardStateName,
		types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		l.t.Fatal(err)
	}
}

// TestDeletionGuardAfterRestart is the scenario (a): the CCM restarts with an
// inventory that lost 45 of 50 hosts; the Nodes go NotReady and a comment is edited
// into the document (which used to clear the trip): nothing is deleted and
// DeletionGuardTripped stays until the trip is acknowledged, then exactly those 45 go.
func TestDeletionGuardAfterRestart(t *testing.T) {
	var hosts []host
	for i := range 50 {
		hosts = append(hosts, host{name: fmt.Sprintf("rs-%02d", i), ip: fmt.Sprintf("10.30.0.%d", i+1)})
	}
	l := newLab(t, "", hosts...)
	for _, h := range hosts {
		l.createNode(framework.NodeSpec{Name: h.name, InternalIPs: []string{h.ip}, Ready: ready(v1.ConditionTrue)})
	}
	for _, h := range hosts {
		l.waitInitialized(h.name)
	}
	l.ccm.Stop()
	if err := l.ccm.ExitErr(); err != nil {
		t.Errorf("the CCM did not exit cleanly on SIGTERM: %v", err)
	}
	kept := hosts[45:]
	lost := inventoryDoc(kept...) // 45 of 50 gone while the CCM was down
	l.setInventory(lost)
	l.startCCM(l.config)
	l.waitMetric("baremetal_ccm_inventory_deletion_guard_tripped 1")
	var gone []string
	for _, h := range hosts[:45] {
		gone = append(gone, h.name)
	}
	slices.Sort(gone)
	id := l.tripID(gone)

	// Nodes go NotReady, the document gets a comment, the CCM restarts once more.
	for _, h := range hosts {
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, h.name, v1.ConditionUnknown); err != nil {
			t.Fatal(err)
		}
	}
	l.setInventory(lost + "# checked by the night shift\n")
	l.stillThere(5*time.Second, gone...)
	l.ccm.Stop()
	l.startCCM(l.config)
	l.waitMetric("baremetal_ccm_inventory_deletion_guard_tripped 1")
	l.stillThere(8*time.Second, gone...)
	if got := l.tripID(gone); got != id {
		t.Fatalf("trip ID changed from %s to %s", id, got)
	}
	l.waitMetric("baremetal_ccm_inventory_deletion_guard_held_hosts 45")
	evs, err := framework.Events(l.ctx, l.cp.Client, "kube-system", "Inventory", "inventory")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs { // the Inventory's events are shared with earlier tests: this trip's only
		if e.Reason == inventory.ReasonGuardCleared && strings.Contains(e.Message, id) {
			t.Fatalf("the guard was cleared without an acknowledgement: %s", e.Message)
		}
	}

	// Acknowledged: exactly the 45 go; the 5 kept stay.
	l.acknowledge(id)
	for _, n := range gone {
		l.waitDeleted(n)
	}
	var keptNames []string
	for _, h := range kept {
		keptNames = append(keptNames, h.name)
	}
	l.stillThere(3*time.Second, keptNames...)
}

// TestHTTPInventory: the inventory polled from an HTTPS API (CA-verified, bearer token,
// ETag) initializes Nodes, and a change on the server is picked up.
func TestHTTPInventory(t *testing.T) {
	var mu sync.Mutex
	doc := []byte(inventoryDoc(host{name: "http-1", uuid: uuidB, ip: "10.40.0.1"}))
	var notModified atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer e2e-token" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		body := doc
		mu.Unlock()
		etag := `"` + inventory.Digest(body) + `"`
		if r.Header.Get("If-None-Match") == etag {
			notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	writeFile(t, ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	token := filepath.Join(dir, "token")
	writeFile(t, token, "e2e-token\n")
	cfg := filepath.Join(dir, "cloud-config.yaml")
	writeFile(t, cfg, fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  http: {url: %q, caFile: %s, bearerTokenFile: %s, pollInterval: 1s, timeout: 5s}
  deletionGuard: {acknowledgeFile: %s}
`, srv.URL+"/inventory", ca, token, filepath.Join(dir, "ack")))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := &lab{t: t, ctx: ctx, cp: framework.Shared(), dir: dir}
	l.startCCM(cfg)
	t.Cleanup(func() { _ = framework.DeleteNodes(context.Background(), l.cp.Client, l.nodes...) })

	l.createNode(framework.NodeSpec{Name: "http-node-1", SystemUUID: uuidB, Ready: ready(v1.ConditionTrue)})
	if n := l.waitInitialized("http-node-1"); n.Spec.ProviderID != "baremetal://http-1" {
		t.Errorf("providerID = %q", n.Spec.ProviderID)
	}
	l.waitMetric(`baremetal_ccm_inventory_hosts{state="active"} 1`)
	if err := framework.WaitFor(ctx, 10*time.Second, "a 304 answer", func(context.Context) (bool, error) {
		return notModified.Load() > 0, nil
	}); err != nil {
		t.Errorf("the CCM does not send If-None-Match: %v", err)
	}

	mu.Lock()
	doc = []byte(inventoryDoc(host{name: "http-1", uuid: uuidB, ip: "10.40.0.1"}, host{name: "http-2", ip: "10.40.0.2"}))
	mu.Unlock()
	l.createNode(framework.NodeSpec{Name: "http-2", InternalIPs: []string{"10.40.0.2"}, Ready: ready(v1.ConditionTrue)})
	if n := l.waitInitialized("http-2"); n.Spec.ProviderID != "baremetal://http-2" {
		t.Errorf("providerID = %q", n.Spec.ProviderID)
	}
	l.waitMetric(`baremetal_ccm_inventory_hosts{state="active"} 2`)
}
