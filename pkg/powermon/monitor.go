// Package powermon makes BMC reachability and power visible on Nodes. On the elected
// leader it reads every Node's host power through the bmc service (cached and
// coalesced) — Ready Nodes rarely, NotReady Nodes often — and keeps two Node
// conditions current, records an event when either changes, and stamps the time a
// host was first seen off in an annotation, so "off continuously since" survives a
// restart or a leader change without any local state.
//
// Lifetime: a Monitor lives for one leadership term (Run's context), reads and writes
// included; the next term makes a new one.
package powermon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
	cloudnodeutil "k8s.io/cloud-provider/node/helpers"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bmc"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/identity"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/maintenance"
)

// Condition types, annotation and event reasons.
const (
	ConditionBMCReachable v1.NodeConditionType = "baremetal-ccm.io/BMCReachable"
	// ConditionPoweredOn False is BMC-confirmed off; load-balancer next hops leave
	// such a Node at once (lb.Eligible, which reads the same condition).
	ConditionPoweredOn = lb.ConditionPoweredOn
	// ConditionRemediationHeld True: the host is off and the Node would be eligible for
	// a power-based action, but a remediation storm (instances.maxUnhealthy) or its
	// cooldown holds every such action.
	ConditionRemediationHeld v1.NodeConditionType = "baremetal-ccm.io/RemediationHeld"
	// AnnotationOffSince holds the RFC 3339 time the host was first seen off; any
	// other answer (on, transitioning, unreachable, unknown) removes it, so it only
	// ever measures positively observed, continuous off time.
	AnnotationOffSince = "baremetal-ccm.io/powered-off-since"
	// AnnotationOffSeen holds the RFC 3339 time the host was last seen off (refreshed
	// at most every SeenRefresh while it stays off). A powered-off-since stamp counts
	// only while this is recent (MaxUnobserved): a host nobody read for longer may have
	// been on meanwhile, so its count restarts.
	AnnotationOffSeen = "baremetal-ccm.io/powered-off-seen"
	// AnnotationOutOfService marks an out-of-service taint this CCM added (one added by
	// a person is never removed): OutOfServiceAdded while the taint is on,
	// OutOfServiceReleased once it was removed while the host still read off (it is not
	// added again in that off period), OutOfServiceKept once the host came on with the
	// taint still there (left to a person). The annotation goes when the host reads on
	// without the taint.
	AnnotationOutOfService = "baremetal-ccm.io/out-of-service-taint"
	OutOfServiceAdded      = "true"
	OutOfServiceReleased   = "released"
	OutOfServiceKept       = "kept"

	ReasonOutOfService        = "OutOfServiceTaintAdded"
	ReasonOutOfServiceRemoved = "OutOfServiceTaintRemoved"
	// ReasonOutOfServiceKept: the host came on while the taint was still on the Node.
	ReasonOutOfServiceKept = "OutOfServiceTaintKept"
	// Reasons of ConditionRemediationHeld.
	ReasonRemediationStorm = "RemediationStorm"
	ReasonStormCooldown    = "StormCooldown"
	ReasonNotHeld          = "NotHeld"

	ReasonBMCUnreachable = "BMCUnreachable"
	ReasonBMCReachable   = "BMCReachable"
	ReasonPoweredOff     = "PoweredOff"
	ReasonPoweredOn      = "PoweredOn"
)

// SeenRefresh is how often, at most, AnnotationOffSeen is rewritten while a host
// stays off (one Node write per minute per powered-off host).
const SeenRefresh = time.Minute

// MaxUnobserved is how long a host may go unread before its off time restarts: at
// least 5 minutes (a leader change, a restart), and three read intervals of a NotReady
// Node (bmc.notReadyInterval).
func MaxUnobserved(notReadyInterval time.Duration) time.Duration {
	return max(5*time.Minute, 3*notReadyInterval)
}

// Power is what the monitor needs of bmc.Service.
type Power interface {
	PowerState(ctx context.Context, t bmc.Target) (bmc.Reading, error)
	Recent(ctx context.Context, t bmc.Target, maxAge time.Duration) (bmc.Reading, error)
	// Probe asks the BMC now, even while it is backed off (see bmc.Service.Probe).
	Probe(ctx context.Context, t bmc.Target) (bmc.Reading, error)
}

// Inventory is what the monitor needs of the inventory store.
type Inventory interface {
	View() (*inventory.View, error)
	// TakePowerBudget grants host a power-based action within the power-off budget.
	TakePowerBudget(ctx context.Context, host, kind string, controlPlane bool) error
	// ObserveHealth counts the unhealthy of the matched Nodes against
	// instances.maxUnhealthy (the remediation storm gate).
	ObserveHealth(ctx context.Context, unhealthy, matched int) error
	// RemediationHold says why a remediation storm holds every power-based action
	// (nil: none does).
	RemediationHold() error
}

// Config sets how often Nodes' power is read.
type Config struct {
	// ReadyInterval and NotReadyInterval: the least time between two reads for a Ready
	// and a NotReady Node.
	ReadyInterval, NotReadyInterval time.Duration
	// Tick is how often the monitor looks for Nodes due a read.
	Tick time.Duration
	// OutOfServiceAfter, when positive, enables the out-of-service policy.
	OutOfServiceAfter time.Duration
	// DefaultCA verifies Redfish BMCs without a caFile of their own.
	DefaultCA string
}

// OutOfServiceTaint returns the taint of non-graceful node shutdown (a new value each
// call: callers cannot change what the monitor adds).
func OutOfServiceTaint() *v1.Taint {
	return &v1.Taint{Key: v1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute}
}

// Monitor keeps the BMC conditions of Nodes current.
type Monitor struct {
	cfg    Config
	inv    Inventory
	power  Power
	nodes  corelisters.NodeLister
	client kubernetes.Interface
	record func(node *v1.Node, eventType, reason, format string, args ...any)
	clock  clock.PassiveClock

	last map[string]lastRead // by node name; only the Sync caller touches it

	mu      sync.Mutex
	reading map[string]bool // Nodes with a read (and update) under way

	reads sync.WaitGroup // every read under way, for Run's end
}

type lastRead struct {
	at    time.Time
	ready bool
}

// New returns a Monitor. record may be nil.
func New(cfg Config, inv Inventory, power Power, nodes corelisters.NodeLister, client kubernetes.Interface,
	record func(node *v1.Node, eventType, reason, format string, args ...any), clk clock.PassiveClock) *Monitor {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if record == nil {
		record = func(*v1.Node, string, string, string, ...any) {}
	}
	return &Monitor{cfg: cfg, inv: inv, power: power, nodes: nodes, client: client, record: record, clock: clk,
		last: map[string]lastRead{}, reading: map[string]bool{}}
}

// Run looks for due Nodes every Tick until ctx (the leadership term) is done, then
// waits for the reads it started (each bounded by the BMC service's deadlines and ctx).
// A pass does not wait for its reads, so a hung BMC never delays noticing another
// Node's readiness change; a Node whose read is still under way is not read again
// until it ends.
func (m *Monitor) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) { m.sync(ctx) }, m.cfg.Tick)
	m.reads.Wait()
}

// Sync reads the power of every Node that is due (never read, its interval passed, or
// its readiness changed) and updates it, and waits for those reads. Reads for different
// hosts run concurrently (the bmc service bounds them), so one hung BMC does not
// delay the others.
func (m *Monitor) Sync(ctx context.Context) {
	m.sync(ctx).Wait()
}

// sync starts the reads of the due Nodes; the WaitGroup ends with them.
func (m *Monitor) sync(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	view, err := m.inv.View()
	if err != nil {
		return &wg
	}
	nodes, err := m.nodes.List(labels.Everything())
	if err != nil {
		return &wg
	}
	m.observeHealth(ctx, view, nodes)
	now := m.clock.Now()
	type due struct {
		node   *v1.Node
		host   *inventory.Host
		target bmc.Target
		fresh  bool // readiness changed: a cached answer may predate it
	}
	var work []due
	for _, n := range nodes {
		id, ok := inventory.HostIDFromProviderID(n.Spec.ProviderID)
		if !ok {
			continue
		}
		h, ok := view.Host(id)
		if !ok {
			continue
		}
		t, ok := bmc.TargetFor(h, m.cfg.DefaultCA)
		if !ok {
			continue
		}
		ready := isReady(n)
		interval := m.cfg.ReadyInterval
		if !ready {
			interval = m.cfg.NotReadyInterval
		}
		// Due when never read, when its interval passed, or when its readiness changed
		// (a host back on must not show "off" for a whole ready interval).
		last, ok := m.last[n.Name]
		if ok && last.ready == ready && now.Sub(last.at) < interval {
			continue
		}
		m.mu.Lock()
		busy := m.reading[n.Name]
		if !busy {
			m.reading[n.Name] = true
		}
		m.mu.Unlock()
		if busy {
			continue // still due when that read ends
		}
		m.last[n.Name] = lastRead{at: now, ready: ready}
		work = append(work, due{n, h, t, ok && last.ready != ready})
	}
	// Forget deleted Nodes (a lookup per remembered Node: no per-tick set of names,
	// which at 5000 Nodes was most of what an idle leader allocated).
	for name := range m.last {
		if _, err := m.nodes.Get(name); apierrors.IsNotFound(err) {
			delete(m.last, name)
		}
	}
	for _, w := range work {
		m.reads.Add(1)
		wg.Go(func() {
			defer m.reads.Done()
			defer func() {
				m.mu.Lock()
				delete(m.reading, w.node.Name)
				m.mu.Unlock()
			}()
			var r bmc.Reading
			var err error
			if w.fresh {
				// Readiness changed: never the cache, and not held by a backoff (a
				// Node Ready again after an outage usually means its BMC is back too).
				r, err = m.power.Probe(ctx, w.target)
			} else {
				r, err = m.power.PowerState(ctx, w.target)
			}
			if err == nil {
				// A BMC that answers for another machine is no evidence about this one:
				// treated like a failed read, so nothing is stamped off.
				if ierr := identity.Check(w.node, w.host, r.SystemUUID); ierr != nil {
					r, err = bmc.Reading{}, ierr
				}
			}
			if uerr := m.update(ctx, w.node, w.host, r, err); uerr != nil {
				klog.FromContext(ctx).Error(uerr, "Cannot update the Node's BMC conditions", "node", w.node.Name)
			}
		})
	}
	return &wg
}

// observeHealth counts the matched Nodes (initialized Nodes of inventory hosts) and the
// unhealthy ones among them (not Ready, not in maintenance in the inventory or by a
// Node lifecycle condition) for the remediation storm gate.
func (m *Monitor) observeHealth(ctx context.Context, view *inventory.View, nodes []*v1.Node) {
	matched, unhealthy := 0, 0
	for _, n := range nodes {
		id, ok := inventory.HostIDFromProviderID(n.Spec.ProviderID)
		if !ok || hasTaint(n, cloudproviderapi.TaintExternalCloudProvider) {
			continue
		}
		h, ok := view.Host(id)
		if !ok || h.Gone() {
			continue
		}
		matched++
		if !isReady(n) && h.State != inventory.StateMaintenance && maintenance.Of(n) == nil {
			unhealthy++
		}
	}
	if err := m.inv.ObserveHealth(ctx, unhealthy, matched); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot update the remediation storm gate", "unhealthy", unhealthy, "matched", matched)
	}
}

// heldCondition is the RemediationHeld condition the Node should carry, or nil when
// none should be written: True on a Node whose host is off and that a remediation
// storm keeps from its power-based actions (initialized, NotReady, not exempt); False
// once that ends (only on a Node that had it True).
func (m *Monitor) heldCondition(node *v1.Node, host *inventory.Host, off bool) *v1.NodeCondition {
	candidate := off && !isReady(node) && !hasTaint(node, cloudproviderapi.TaintExternalCloudProvider) &&
		host.State != inventory.StateMaintenance && maintenance.Remediation(node) == nil
	if hold := m.inv.RemediationHold(); candidate && hold != nil {
		reason := ReasonRemediationStorm
		if errors.Is(hold, inventory.ErrStormCooldown) {
			reason = ReasonStormCooldown
		}
		return &v1.NodeCondition{Type: ConditionRemediationHeld, Status: v1.ConditionTrue, Reason: reason, Message: oneLine(hold.Error())}
	}
	if old := condition(node, ConditionRemediationHeld); old != nil && old.Status == v1.ConditionTrue {
		return &v1.NodeCondition{Type: ConditionRemediationHeld, Status: v1.ConditionFalse, Reason: ReasonNotHeld, Message: "no remediation storm holds this Node's power-based actions"}
	}
	return nil
}

// update patches the Node's conditions and annotation when they change, and records
// events for changes of reachability and power.
func (m *Monitor) update(ctx context.Context, node *v1.Node, host *inventory.Host, r bmc.Reading, perr error) error {
	now := metav1.NewTime(m.clock.Now())
	reach := v1.NodeCondition{Type: ConditionBMCReachable, Status: v1.ConditionTrue, Reason: ReasonBMCReachable, Message: "the BMC answered"}
	power := v1.NodeCondition{Type: ConditionPoweredOn, Status: v1.ConditionUnknown, Reason: "Unknown", Message: "power state not known"}
	if perr != nil {
		reach.Status, reach.Reason, reach.Message = v1.ConditionFalse, ReasonBMCUnreachable, oneLine(perr.Error())
		switch {
		case errors.Is(perr, bmc.ErrUnknownState):
			reach.Status, reach.Reason = v1.ConditionTrue, ReasonBMCReachable
		case errors.Is(perr, identity.ErrMismatch):
			reach.Status, reach.Reason = v1.ConditionTrue, identity.ReasonMismatch
			power.Message = "the BMC answers for another machine: " + oneLine(perr.Error())
		}
	} else {
		switch r.State {
		case bmc.PowerOn:
			power.Status, power.Reason, power.Message = v1.ConditionTrue, ReasonPoweredOn, "the BMC reports the host on"
		case bmc.PowerOff:
			power.Status, power.Reason, power.Message = v1.ConditionFalse, ReasonPoweredOff, "the BMC reports the host off"
		case bmc.PowerTransitioning:
			power.Reason, power.Message = "Transitioning", "the BMC reports the host powering on or off"
		}
	}

	oldReach, oldPower := condition(node, ConditionBMCReachable), condition(node, ConditionPoweredOn)
	pairs := []struct {
		old *v1.NodeCondition
		new v1.NodeCondition
	}{{oldReach, reach}, {oldPower, power}}
	if held := m.heldCondition(node, host, power.Status == v1.ConditionFalse); held != nil {
		pairs = append(pairs, struct {
			old *v1.NodeCondition
			new v1.NodeCondition
		}{condition(node, ConditionRemediationHeld), *held})
	}
	var conds []v1.NodeCondition
	for _, pair := range pairs {
		c := pair.new
		c.LastHeartbeatTime, c.LastTransitionTime = now, now
		if pair.old != nil && pair.old.Status == c.Status {
			c.LastTransitionTime = pair.old.LastTransitionTime
			if pair.old.Reason == c.Reason && pair.old.Message == c.Message {
				continue // unchanged: no write
			}
		}
		conds = append(conds, c)
	}
	if len(conds) > 0 {
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
		if _, err := m.client.CoreV1().Nodes().PatchStatus(ctx, node.Name, patch); err != nil {
			return fmt.Errorf("patching conditions: %w", err)
		}
	}

	// Events on changes only.
	if reach.Reason == identity.ReasonMismatch && (oldReach == nil || oldReach.Reason != reach.Reason) {
		m.record(node, v1.EventTypeWarning, identity.ReasonMismatch, "No action is based on this BMC's power state: %v", perr)
	}
	if oldReach == nil || oldReach.Status != reach.Status {
		if reach.Status == v1.ConditionFalse {
			m.record(node, v1.EventTypeWarning, ReasonBMCUnreachable, "BMC unreachable: %s", reach.Message)
		} else if oldReach != nil {
			m.record(node, v1.EventTypeNormal, ReasonBMCReachable, "BMC reachable again")
		}
	}
	if power.Status != v1.ConditionUnknown && (oldPower == nil || oldPower.Status != power.Status) {
		if power.Status == v1.ConditionFalse {
			m.record(node, v1.EventTypeWarning, ReasonPoweredOff, "The BMC reports the host powered off")
		} else {
			m.record(node, v1.EventTypeNormal, ReasonPoweredOn, "The BMC reports the host powered on")
		}
	}

	// First-seen-off and last-seen-off annotations: set when first seen off, or when
	// the count must restart (the stamp is older than the Node's last sign of life, or
	// the host went unread for longer than MaxUnobserved: it may have been on
	// meanwhile); last-seen refreshed at most every SeenRefresh while off; any other
	// answer removes both.
	off := power.Status == v1.ConditionFalse
	sinceStr, hasSince := node.Annotations[AnnotationOffSince]
	seenStr, hasSeen := node.Annotations[AnnotationOffSeen]
	_, why := offSince(node, now.Time, MaxUnobserved(m.cfg.NotReadyInterval))
	switch {
	case off && why != "":
		if hasSince {
			klog.FromContext(ctx).Info("Restarting the host's powered-off count", "node", node.Name, "reason", why)
		}
		sinceStr = now.UTC().Format(time.RFC3339)
		if err := m.annotateAll(ctx, node.Name, map[string]any{AnnotationOffSince: sinceStr, AnnotationOffSeen: sinceStr}); err != nil {
			return err
		}
	case off:
		if seen, _ := time.Parse(time.RFC3339, seenStr); now.Sub(seen) >= SeenRefresh {
			if err := m.annotate(ctx, node.Name, AnnotationOffSeen, now.UTC().Format(time.RFC3339)); err != nil {
				return err
			}
		}
	case hasSince || hasSeen:
		if err := m.annotateAll(ctx, node.Name, map[string]any{AnnotationOffSince: nil, AnnotationOffSeen: nil}); err != nil {
			return err
		}
	}
	return m.outOfService(ctx, node, host, off, power.Status == v1.ConditionTrue, sinceStr)
}

// outOfService applies the out-of-service policy: the taint goes on a NotReady,
// initialized Node whose host (not in maintenance: in the inventory, or by a Node
// lifecycle condition; nor excluded by label: see maintenance.Remediation) has been
// off for OutOfServiceAfter, as read just now from a BMC that names the same machine,
// when the power-off budget grants it. It comes off (only if we added it) while the
// host still reads off, once the Node holds no pod that the taint evicts and no
// VolumeAttachment: never after the host could have come back, when a stale informer
// could still treat the live Node as shut down (kubernetes#142331). A host that comes
// on while the taint is still there keeps it, with a warning event: a person removes
// it once the workloads are confirmed elsewhere.
func (m *Monitor) outOfService(ctx context.Context, node *v1.Node, host *inventory.Host, off, on bool, since string) error {
	if m.cfg.OutOfServiceAfter <= 0 {
		return nil
	}
	mark, ours := node.Annotations[AnnotationOutOfService]
	tainted := hasTaint(node, v1.TaintNodeOutOfService)
	switch {
	case off && tainted && ours:
		left, err := m.leftOn(ctx, node.Name)
		if err != nil {
			return fmt.Errorf("out-of-service taint kept: %w", err)
		}
		if left != "" {
			klog.FromContext(ctx).V(2).Info("Out-of-service taint kept until the Node is empty", "node", node.Name, "left", left)
			return nil
		}
		if err := m.annotate(ctx, node.Name, AnnotationOutOfService, OutOfServiceReleased); err != nil {
			return err
		}
		if err := cloudnodeutil.RemoveTaintOffNode(m.client, node.Name, node, OutOfServiceTaint()); err != nil {
			return fmt.Errorf("removing the out-of-service taint: %w", err)
		}
		m.record(node, v1.EventTypeNormal, ReasonOutOfServiceRemoved, "The host still reads off and the Node holds no pod the taint evicts and no volume attachment: removed %s before the host can come back; it is not added again until the host has been on", v1.TaintNodeOutOfService)
	case off && !tainted && !isReady(node) && mark != OutOfServiceReleased:
		t, err := time.Parse(time.RFC3339, since)
		if ended := maintenance.Ended(node); ended.After(t) {
			t = ended // off time counts from the end of the Node's maintenance
		}
		if err != nil || m.clock.Since(t) < m.cfg.OutOfServiceAfter || host.State == inventory.StateMaintenance || maintenance.Remediation(node) != nil || hasTaint(node, cloudproviderapi.TaintExternalCloudProvider) {
			return nil
		}
		// The Node in hand was read before the BMC answered: re-read it, so a
		// maintenance condition, an exclusion label or readiness that came meanwhile
		// is honored and no budget is spent on a stale view.
		fresh, err := m.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("re-reading the Node before the out-of-service taint: %w", err)
		}
		if isReady(fresh) || maintenance.Remediation(fresh) != nil || hasTaint(fresh, v1.TaintNodeOutOfService) || fresh.Annotations[AnnotationOutOfService] == OutOfServiceReleased {
			return nil
		}
		if err := m.inv.TakePowerBudget(ctx, host.Name, "outOfService", maintenance.ControlPlane(fresh)); err != nil {
			if errors.Is(err, inventory.ErrMaintenance) {
				return nil // exempt, as in the inventory that is settling
			}
			if errors.Is(err, inventory.ErrNowWaiting) {
				m.record(node, v1.EventTypeWarning, inventory.ReasonPowerBudget, "The host has been powered off since %s (more than %s), but %s is not added: %v", since, m.cfg.OutOfServiceAfter, v1.TaintNodeOutOfService, err)
			}
			return fmt.Errorf("out-of-service taint not added: %w", err)
		}
		if err := m.annotate(ctx, node.Name, AnnotationOutOfService, OutOfServiceAdded); err != nil {
			return err
		}
		if err := cloudnodeutil.AddOrUpdateTaintOnNode(m.client, node.Name, OutOfServiceTaint()); err != nil {
			return fmt.Errorf("adding the out-of-service taint: %w", err)
		}
		m.record(node, v1.EventTypeWarning, ReasonOutOfService, "The host has been powered off since %s (more than %s): added %s so its volumes detach and its pods are rescheduled", since, m.cfg.OutOfServiceAfter, v1.TaintNodeOutOfService)
	case on && ours && tainted:
		if mark == OutOfServiceKept {
			return nil
		}
		if err := m.annotate(ctx, node.Name, AnnotationOutOfService, OutOfServiceKept); err != nil {
			return err
		}
		m.record(node, v1.EventTypeWarning, ReasonOutOfServiceKept, "The host is powered on while %s is still on the Node (its pods or volume attachments were not gone while it was off): not removed automatically; once its workloads are confirmed elsewhere, remove it with: kubectl taint nodes %s %s-", v1.TaintNodeOutOfService, node.Name, v1.TaintNodeOutOfService)
	case on && ours:
		return m.annotate(ctx, node.Name, AnnotationOutOfService, nil)
	}
	return nil
}

// leftOn names what still holds the Node's workloads ("" when nothing does): a pod
// bound to it that the out-of-service taint evicts (not a mirror pod, not one that
// has finished, not one tolerating the taint), or a VolumeAttachment to it. Both are
// read from the API, not a cache, since this decides a taint removal.
func (m *Monitor) leftOn(ctx context.Context, node string) (string, error) {
	pods, err := m.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return "", fmt.Errorf("listing the Node's pods: %w", err)
	}
	taint, logger := OutOfServiceTaint(), klog.FromContext(ctx)
	for _, p := range pods.Items {
		if p.Spec.NodeName != node || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		if _, mirror := p.Annotations[v1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if slices.ContainsFunc(p.Spec.Tolerations, func(t v1.Toleration) bool { return t.ToleratesTaint(logger, taint, true) }) {
			continue
		}
		return "pod " + p.Namespace + "/" + p.Name, nil
	}
	vas, err := m.client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	for _, va := range vas.Items {
		if va.Spec.NodeName == node {
			return "VolumeAttachment " + va.Name, nil
		}
	}
	return "", nil
}

// annotate sets (value a string) or removes (value nil) one annotation.
func (m *Monitor) annotate(ctx context.Context, node, key string, value any) error {
	return m.annotateAll(ctx, node, map[string]any{key: value})
}

// annotateAll sets or removes annotations in one write.
func (m *Monitor) annotateAll(ctx context.Context, node string, values map[string]any) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": values}})
	if _, err := m.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		keys := slices.Sorted(maps.Keys(values))
		return fmt.Errorf("patching annotations %s: %w", strings.Join(keys, ", "), err)
	}
	return nil
}

func hasTaint(n *v1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// OffSince returns when the Node's host was first seen off, if it is recorded, not
// stale (see StaleAfterReady: a stamp from before the Node's last sign of life does
// not count) and the host was last seen off at most maxUnobserved before now (see
// MaxUnobserved: a host nobody read for longer may have been on meanwhile). So only
// positively observed, continuous off time is measured.
func OffSince(node *v1.Node, now time.Time, maxUnobserved time.Duration) (time.Time, bool) {
	t, why := offSince(node, now, maxUnobserved)
	return t, why == ""
}

// offSince is OffSince, with why the count does not stand ("" when it does).
func offSince(node *v1.Node, now time.Time, maxUnobserved time.Duration) (time.Time, string) {
	s, ok := node.Annotations[AnnotationOffSince]
	if !ok {
		return time.Time{}, "not seen off before"
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Sprintf("unreadable %s %q", AnnotationOffSince, s)
	}
	if stale(node, t) {
		return time.Time{}, "the stamp is older than the Node's last sign of life"
	}
	seen, err := time.Parse(time.RFC3339, node.Annotations[AnnotationOffSeen])
	switch {
	case err != nil:
		return time.Time{}, "no readable " + AnnotationOffSeen + " (a stamp of an older version)"
	case seen.Before(t):
		return time.Time{}, "last seen off before first seen off"
	case now.Sub(seen) > maxUnobserved:
		return time.Time{}, fmt.Sprintf("not read for %s (more than %s): it may have been on meanwhile", now.Sub(seen).Round(time.Second), maxUnobserved)
	}
	return t, ""
}

// StaleAfterReady bounds how much older than the Node's last sign of life (its Ready
// condition's last transition or heartbeat) a powered-off-since stamp may be. A host
// whose kubelet was running was on: a stamp older than that was left by a reader that
// did not watch the host meanwhile (a restart, a leader change) and restarts the count.
// A host that loses power is seen off at the earliest when its kubelet stops, and its
// Node turns NotReady one node-monitor-grace-period (50 s by default) later, so a real
// stamp is never older than that transition by more than the grace period; the bound
// leaves room for a longer grace period and for clocks that differ.
const StaleAfterReady = 3 * time.Minute

// stale reports whether since predates the Node's last sign of life by more than
// StaleAfterReady.
func stale(node *v1.Node, since time.Time) bool {
	c := condition(node, v1.NodeReady)
	if c == nil {
		return false
	}
	// The kubelet was alive until the last transition (it posted the status that
	// changed, or the grace period ran out after its last post) and at its last
	// heartbeat.
	life := c.LastTransitionTime.Time
	if c.LastHeartbeatTime.After(life) {
		life = c.LastHeartbeatTime.Time
	}
	return !life.IsZero() && since.Before(life.Add(-StaleAfterReady))
}

func condition(node *v1.Node, t v1.NodeConditionType) *v1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func isReady(n *v1.Node) bool {
	c := condition(n, v1.NodeReady)
	return c != nil && c.Status == v1.ConditionTrue
}

// oneLine makes a driver's message fit a condition or an event: one line, single
// spaces (some drivers and tools answer with several lines).
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
