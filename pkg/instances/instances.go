// Package instances implements cloudprovider.InstancesV2 from the server inventory and
// the hosts' BMCs.
//
// InstanceMetadata and InstanceExists answer from the in-memory inventory and never
// make a network call; InstanceShutdown asks the BMC through the power service. InstanceExists reports a host gone only on positive evidence:
// the Node's baremetal:// host is absent from, or decommissioned in, an inventory that
// loaded without error while the deletion guard is not tripped. Everything else that is
// not a clear "exists" is an error, so the node-lifecycle controller never deletes a
// Node on a guess.
package instances

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bmc"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/identity"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/maintenance"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/powermon"
)

// Event reasons recorded on Nodes.
const (
	ReasonHostNotFound         = "HostNotFound"
	ReasonHostAmbiguous        = "HostAmbiguous"
	ReasonHostDecommissioned   = "HostDecommissioned"
	ReasonHostGone             = "HostGone"
	ReasonNodeIPNotInInventory = "NodeIPNotInInventory"
	ReasonInventoryNotLoaded   = "InventoryNotLoaded"
	ReasonHostRenamed          = "HostRenamed"
)

// Errors wrapped by what Instances returns.
var (
	// ErrDecommissioned: the Node's host is decommissioned, so it is not initialized.
	ErrDecommissioned = errors.New("host is decommissioned")
	// ErrHostRenamed: the host the Node's providerID names is gone, but another host
	// matches the Node: a rename, never a removal.
	ErrHostRenamed = errors.New("host renamed in the inventory")
	// ErrUninitialized: the Node was never initialized, so it is never reported gone.
	ErrUninitialized = errors.New("node not initialized")
	// ErrNoProviderID: the Node's host is decommissioned but the Node has no
	// providerID naming it (it matched by systemUUID, name or address), so it is not
	// reported gone.
	ErrNoProviderID = errors.New("no providerID names the host")
)

// Inventory is what Instances needs of the inventory store.
type Inventory interface {
	View() (*inventory.View, error)
	// GoneAllowed returns nil when the deletion guard accepted host's removal.
	GoneAllowed(host string) error
	// TakePowerBudget grants host a power-based action within the power-off budget.
	TakePowerBudget(ctx context.Context, host, kind string, controlPlane bool) error
}

// EventRecorder records events on Nodes (a subset of record.EventRecorder).
type EventRecorder interface {
	Eventf(object runtime.Object, eventType, reason, messageFmt string, args ...any)
}

// Power reads a host's power state from its BMC (bmc.Service).
type Power interface {
	PowerState(ctx context.Context, t bmc.Target) (bmc.Reading, error)
	// Recent answers from a successful reading of at most maxAge when there is one
	// and no call for the host is under way, else like PowerState.
	Recent(ctx context.Context, t bmc.Target, maxAge time.Duration) (bmc.Reading, error)
}

// Policy holds the opt-in power-off policies.
type Policy struct {
	// DeleteAfter, when positive: a host continuously off this long (the Node's
	// powered-off-since annotation) and confirmed off now is reported gone.
	DeleteAfter time.Duration
	// Clock is for tests; nil is the real clock.
	Clock clock.PassiveClock
	// DefaultCA verifies Redfish BMCs without a caFile of their own.
	DefaultCA string
	// ShutdownMaxAge is the oldest reading InstanceShutdown answers from (the power
	// monitor re-reads NotReady Nodes' hosts every bmc.notReadyInterval and at once
	// when readiness changes). Zero: DefaultShutdownMaxAge.
	ShutdownMaxAge time.Duration
	// MaxUnobserved: a powered-off-since stamp counts only while the host was last seen
	// off at most this long ago (powermon.OffSince). Zero: powermon.MaxUnobserved(0).
	MaxUnobserved time.Duration
	// ShutdownWait bounds how long InstanceShutdown waits for a BMC when it has no
	// such reading, so a slow or hung BMC does not hold a node-lifecycle worker: the
	// call goes on and the next pass finds its answer. Zero: DefaultShutdownWait.
	ShutdownWait time.Duration
}

func (p Policy) maxUnobserved() time.Duration {
	if p.MaxUnobserved > 0 {
		return p.MaxUnobserved
	}
	return powermon.MaxUnobserved(0)
}

// Defaults of Policy.
const (
	DefaultShutdownMaxAge = 20 * time.Second
	DefaultShutdownWait   = 2 * time.Second
)

// Instances implements cloudprovider.InstancesV2.
type Instances struct {
	inv    Inventory
	power  Power
	events EventRecorder
	policy Policy
}

var _ cloudprovider.InstancesV2 = (*Instances)(nil)

// New returns Instances answering from inv, reading power through power, recording
// Node events through events (which may be nil), and applying policy.
func New(inv Inventory, power Power, events EventRecorder, policy Policy) *Instances {
	if policy.Clock == nil {
		policy.Clock = clock.RealClock{}
	}
	if policy.ShutdownMaxAge <= 0 {
		policy.ShutdownMaxAge = DefaultShutdownMaxAge
	}
	if policy.ShutdownWait <= 0 {
		policy.ShutdownWait = DefaultShutdownWait
	}
	return &Instances{inv: inv, power: power, events: events, policy: policy}
}

// InstanceExists returns true when the Node's host is in the inventory and not
// decommissioned. It returns (false, nil) only on positive evidence that the Node's
// host is gone, and only when:
//   - the Node is initialized (a Node still carrying the uninitialized taint was never
//     matched to a host, so nothing proves its host is gone);
//   - its baremetal:// providerID names a host the inventory lacks or decommissions
//     (a Node matched only by systemUUID, name or address is not enough), and the
//     deletion guard accepted that removal
//     (inventory.Store.GoneAllowed); a host that another inventory host now matches by
//     systemUUID or InternalIP is a rename, not a removal (an error and a HostRenamed
//     event);
//   - and no Node lifecycle condition puts it in maintenance (package maintenance);
//   - or, with the deleteAfter policy, its host (not in maintenance) has been off
//     continuously for that long, a recent BMC reading confirms it off and names the
//     same machine as the Node and the inventory, and the power-off budget grants it.
//
// Everything else that is not a clear "exists" is an error, so the node-lifecycle
// controller never deletes a Node on a guess.
func (i *Instances) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	logger := klog.FromContext(ctx).WithValues("node", node.Name)
	view, err := i.inv.View()
	if err != nil {
		return false, err
	}
	host, by, err := view.Match(node)
	var why, hostID string
	switch {
	case err == nil && !host.Gone():
		off, offWhy, err := i.offTooLong(ctx, node, host)
		if err != nil {
			return false, fmt.Errorf("node %s: %w", node.Name, err)
		}
		if !off {
			return true, nil
		}
		logger.Info("Reporting instance gone", "event", "instanceGone", "reason", offWhy, "inventory", view.Digest())
		i.eventf(node, v1.EventTypeNormal, ReasonHostGone, "Instance reported gone: %s. The node-lifecycle controller deletes NotReady Nodes whose instance is gone.", offWhy)
		return false, nil
	case err == nil && by != "providerID":
		// Matched by systemUUID, name or address only: a reused name or IP could
		// point at another machine's record; only a providerID says which host this
		// Node was initialized from.
		return false, fmt.Errorf("node %s: host %q (matched by %s) is decommissioned in inventory %s, but the Node has no providerID naming it, so it is not reported gone: %w",
			node.Name, host.Name, by, view.Digest(), ErrNoProviderID)
	case err == nil:
		why = fmt.Sprintf("host %q is decommissioned in inventory %s", host.Name, view.Digest())
		hostID = host.Name
	case errors.Is(err, inventory.ErrHostGone):
		hostID, _ = inventory.HostIDFromProviderID(node.Spec.ProviderID)
		why = fmt.Sprintf("its host is not in inventory %s (%v)", view.Digest(), err)
		other, by, rerr := renamed(view, node)
		switch {
		case other != nil:
			i.eventf(node, v1.EventTypeWarning, ReasonHostRenamed, "Host %q is not in inventory %s, but host %q matches this Node by %s: a rename is not a removal, so the Node is not reported gone. A Node's providerID cannot change: rename the host back, or delete the Node so it registers again as %q.",
				hostID, view.Digest(), other.Name, by, other.Name)
			return false, fmt.Errorf("node %s: %w: host %q is not in inventory %s but host %q matches the Node by %s", node.Name, ErrHostRenamed, hostID, view.Digest(), other.Name, by)
		case rerr != nil:
			// Other hosts match the Node in contradicting ways: it may have been
			// renamed, so it is not proven gone.
			i.eventf(node, v1.EventTypeWarning, ReasonHostRenamed, "Host %q is not in inventory %s, and other hosts match this Node in contradicting ways (%v): it may have been renamed, so the Node is not reported gone. Fix the inventory so that at most one host matches it, or delete the Node.",
				hostID, view.Digest(), rerr)
			return false, fmt.Errorf("node %s: %w: host %q is not in inventory %s and other hosts may be it: %w", node.Name, ErrHostRenamed, hostID, view.Digest(), rerr)
		}
	case errors.Is(err, inventory.ErrUUIDMismatch):
		i.eventf(node, v1.EventTypeWarning, identity.ReasonMismatch, "Not reporting the instance's existence or power: %v", err)
		return false, fmt.Errorf("node %s: %w", node.Name, err)
	default:
		return false, fmt.Errorf("node %s: %w", node.Name, err)
	}
	if err := maintenance.Of(node); err != nil {
		// A Node lifecycle condition (KEP-5683) exempts it, as inventory maintenance
		// exempts a host: whoever set it is working on the machine.
		return false, fmt.Errorf("node %s: %s, but not reporting it gone: %w", node.Name, why, err)
	}
	if uninitialized(node) {
		return false, fmt.Errorf("node %s: %s, but the Node still carries %s (it was never initialized from the inventory), so it is never reported gone: %w",
			node.Name, why, cloudproviderapi.TaintExternalCloudProvider, ErrUninitialized)
	}
	if err := i.inv.GoneAllowed(hostID); err != nil {
		return false, fmt.Errorf("node %s: %s, but not reporting it gone: %w", node.Name, why, err)
	}
	logger.Info("Reporting instance gone", "event", "instanceGone", "reason", why, "inventory", view.Digest())
	i.eventf(node, v1.EventTypeNormal, ReasonHostGone, "Instance reported gone: %s. The node-lifecycle controller deletes NotReady Nodes whose instance is gone.", why)
	return false, nil
}

// renamed returns the host that matches node by systemUUID, name or InternalIP when
// its providerID names a host the inventory lacks. err is set when hosts match it in
// contradicting ways (ambiguous, or a systemUUID that contradicts the host matched by
// name or address): then a rename cannot be ruled out either.
func renamed(view *inventory.View, node *v1.Node) (*inventory.Host, string, error) {
	n := node.DeepCopy()
	n.Spec.ProviderID = ""
	h, by, err := view.Match(n)
	switch {
	case errors.Is(err, inventory.ErrNoMatch):
		return nil, "", nil
	case err != nil:
		return nil, "", err
	case h.Gone():
		return nil, "", nil
	}
	return h, by, nil
}

func uninitialized(node *v1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == cloudproviderapi.TaintExternalCloudProvider {
			return true
		}
	}
	return false
}

// offTooLong applies the deleteAfter policy: the host is not in maintenance (in the
// inventory, or by a Node lifecycle condition) nor excluded by label (see
// maintenance.Remediation), the Node
// is initialized, has been seen off continuously for DeleteAfter (the Node's
// powered-off-since annotation), a reading of at most ShutdownMaxAge (or one it waits
// ShutdownWait for) says off and names the same machine, and the power-off budget
// grants the action. A host that does not qualify answers false, nil; a contradiction
// of identities or a budget used up answers an error (with an event).
func (i *Instances) offTooLong(ctx context.Context, node *v1.Node, host *inventory.Host) (bool, string, error) {
	if i.policy.DeleteAfter <= 0 || i.power == nil || host.State == inventory.StateMaintenance || maintenance.Remediation(node) != nil || uninitialized(node) {
		return false, "", nil
	}
	since, ok := powermon.OffSince(node, i.policy.Clock.Now(), i.policy.maxUnobserved())
	from := since
	if ended := maintenance.Ended(node); ended.After(from) {
		from = ended // off time counts from the end of the Node's maintenance
	}
	if !ok || i.policy.Clock.Since(from) < i.policy.DeleteAfter {
		return false, "", nil
	}
	target, ok := bmc.TargetFor(host, i.policy.DefaultCA)
	if !ok {
		return false, "", nil
	}
	r, err := i.recent(ctx, node, target)
	if err != nil || r.State != bmc.PowerOff {
		return false, "", nil
	}
	if err := identity.Check(node, host, r.SystemUUID); err != nil {
		i.eventf(node, v1.EventTypeWarning, identity.ReasonMismatch, "Not applying instances.deleteAfter: %v", err)
		return false, "", err
	}
	if err := i.inv.TakePowerBudget(ctx, host.Name, "deleteAfter", maintenance.ControlPlane(node)); err != nil {
		if errors.Is(err, inventory.ErrMaintenance) {
			return false, "", nil // exempt, as in the inventory that is settling
		}
		if errors.Is(err, inventory.ErrNowWaiting) {
			i.eventf(node, v1.EventTypeWarning, inventory.ReasonPowerBudget, "Host %q has been off since %s, longer than instances.deleteAfter (%s), but the Node is not reported gone: %v",
				host.Name, since.Format(time.RFC3339), i.policy.DeleteAfter, err)
		}
		return false, "", err
	}
	return true, fmt.Sprintf("host %q has been powered off since %s, longer than instances.deleteAfter (%s)", host.Name, since.Format(time.RFC3339), i.policy.DeleteAfter), nil
}

// recent returns a reading taken after the Node's readiness last changed and at most
// ShutdownMaxAge old, joining a read under way, or waits at most ShutdownWait for the
// BMC, so a slow or hung BMC never holds a node-lifecycle worker.
func (i *Instances) recent(ctx context.Context, node *v1.Node, target bmc.Target) (bmc.Reading, error) {
	maxAge := i.policy.ShutdownMaxAge
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady && !c.LastTransitionTime.IsZero() {
			maxAge = min(maxAge, i.policy.Clock.Since(c.LastTransitionTime.Time))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, i.policy.ShutdownWait)
	defer cancel()
	r, err := i.power.Recent(wctx, target, maxAge)
	if err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("no reading yet after %s, the read goes on for the next pass: %w", i.policy.ShutdownWait, err)
	}
	return r, err
}

// InstanceShutdown reports whether the Node's host is powered off, as its BMC says.
// It answers from a successful reading of at most ShutdownMaxAge and taken after the
// Node's Ready condition last changed (the power monitor reads a Node's host when its
// readiness changes, and keeps NotReady Nodes' readings that fresh), or joins a read
// under way, so the
// node-lifecycle controller's workers do not wait on BMCs; without such a reading it
// asks the BMC but waits at most ShutdownWait. Off is true; on or powering on/off is
// false; an unreachable, refusing, backed-off, unknown-answering or not yet answering
// BMC is an error, never a guess. A host without a BMC in the inventory is false:
// there is no evidence it is off.
func (i *Instances) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	view, err := i.inv.View()
	if err != nil {
		return false, err
	}
	host, _, err := view.Match(node)
	if err != nil {
		if errors.Is(err, inventory.ErrUUIDMismatch) {
			i.eventf(node, v1.EventTypeWarning, identity.ReasonMismatch, "Not reporting the host's power state: %v", err)
		}
		return false, fmt.Errorf("node %s: %w", node.Name, err)
	}
	target, ok := bmc.TargetFor(host, i.policy.DefaultCA)
	if !ok || i.power == nil {
		return false, nil
	}
	r, err := i.recent(ctx, node, target)
	if err != nil {
		return false, fmt.Errorf("node %s: power state of host %q: %w", node.Name, host.Name, err)
	}
	if err := identity.Check(node, host, r.SystemUUID); err != nil {
		i.eventf(node, v1.EventTypeWarning, identity.ReasonMismatch, "Not reporting the host's power state: %v", err)
		return false, fmt.Errorf("node %s: %w", node.Name, err)
	}
	klog.FromContext(ctx).V(4).Info("Power state", "node", node.Name, "host", host.Name, "state", r.State, "cached", r.Cached)
	return r.State == bmc.PowerOff, nil
}

// InstanceMetadata returns the Node's providerID, instance type, zone, region,
// addresses and labels from the inventory, without any network call. When kubelet set
// --node-ip (annotation alpha.kubernetes.io/provided-node-ip) the returned addresses
// include it. A Node that matches no host, matches ambiguously, or whose host is
// decommissioned gets an error and an event on the Node saying why, and stays
// uninitialized.
func (i *Instances) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	logger := klog.FromContext(ctx).WithValues("node", node.Name)
	view, err := i.inv.View()
	if err != nil {
		i.eventf(node, v1.EventTypeWarning, ReasonInventoryNotLoaded, "Cannot initialize the Node: %v", err)
		return nil, err
	}
	host, by, err := view.Match(node)
	if err != nil {
		reason := ReasonHostNotFound
		if errors.Is(err, inventory.ErrAmbiguous) || errors.Is(err, inventory.ErrForeignProviderID) {
			reason = ReasonHostAmbiguous
		}
		i.eventf(node, v1.EventTypeWarning, reason, "No instance metadata for the Node (inventory %s): %v", view.Digest(), err)
		return nil, fmt.Errorf("node %s: %w", node.Name, err)
	}
	if host.Gone() {
		i.eventf(node, v1.EventTypeWarning, ReasonHostDecommissioned, "Host %q is decommissioned in inventory %s; no instance metadata is served for it (an uninitialized Node stays tainted). Set its state to active if it is back in service.", host.Name, view.Digest())
		return nil, fmt.Errorf("node %s: host %q: %w", node.Name, host.Name, ErrDecommissioned)
	}
	logger.V(4).Info("Matched node to host", "host", host.Name, "by", by)

	md := &cloudprovider.InstanceMetadata{
		ProviderID:   host.ProviderID(),
		InstanceType: host.InstanceType,
		Zone:         host.Zone,
		Region:       host.Region,
	}
	known := map[netip.Addr]bool{}
	for _, a := range host.Addresses {
		md.NodeAddresses = append(md.NodeAddresses, v1.NodeAddress{Type: a.Type, Address: a.Address})
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			known[ip] = true
		}
	}
	var missing []string
	for _, ip := range inventory.ProvidedNodeIPs(node) {
		if !known[ip] {
			md.NodeAddresses = append(md.NodeAddresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip.String()})
			missing = append(missing, ip.String())
		}
	}
	if len(missing) > 0 {
		i.eventf(node, v1.EventTypeWarning, ReasonNodeIPNotInInventory, "kubelet --node-ip %s is not among host %q's addresses in the inventory; published it as InternalIP. Add it to the host's addresses if it is right, or fix kubelet's --node-ip.", strings.Join(missing, ","), host.Name)
	}
	if len(host.Labels) > 0 || host.Rack != "" {
		md.AdditionalLabels = make(map[string]string, len(host.Labels)+1)
		for k, v := range host.Labels {
			md.AdditionalLabels[inventory.NodeLabelKey(k)] = v
		}
		if host.Rack != "" {
			md.AdditionalLabels[inventory.LabelRack] = host.Rack
		}
	}
	return md, nil
}

func (i *Instances) eventf(node *v1.Node, eventType, reason, format string, args ...any) {
	if i.events != nil {
		i.events.Eventf(node, eventType, reason, format, args...)
	}
}
