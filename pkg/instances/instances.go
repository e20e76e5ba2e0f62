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
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bmc"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
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
)

// ErrDecommissioned: the Node's host is decommissioned, so it is not initialized.
var ErrDecommissioned = errors.New("host is decommissioned")

// Inventory is what Instances needs of the inventory store.
type Inventory interface {
	View() (*inventory.View, error)
	DeletionAllowed(ctx context.Context) error
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
	// ShutdownWait bounds how long InstanceShutdown waits for a BMC when it has no
	// such reading, so a slow or hung BMC does not hold a node-lifecycle worker: the
	// call goes on and the next pass finds its answer. Zero: DefaultShutdownWait.
	ShutdownWait time.Duration
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
// decommissioned. It returns (false, nil) only when the Node's host is positively gone
// (its baremetal:// providerID names a host the inventory lacks, or the matched host is
// decommissioned) and the inventory loaded without error with the deletion guard not
// tripped; or, with the deleteAfter policy, when its host has been continuously off
// for that long and its BMC confirms it is off now (the guard still applies). A Node
// that matches no host and has no providerID is an error, not "gone":
// it was never known, so nothing proves it is gone.
func (i *Instances) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	logger := klog.FromContext(ctx).WithValues("node", node.Name)
	view, err := i.inv.View()
	if err != nil {
		return false, err
	}
	host, _, err := view.Match(node)
	var why string
	switch {
	case err == nil && !host.Gone():
		off, offWhy := i.offTooLong(ctx, node, host)
		if !off {
			return true, nil
		}
		why = offWhy
	case err == nil:
		why = fmt.Sprintf("host %q is decommissioned in inventory %s", host.Name, view.Digest())
	case errors.Is(err, inventory.ErrHostGone):
		why = fmt.Sprintf("its host is not in inventory %s (%v)", view.Digest(), err)
	default:
		return false, fmt.Errorf("node %s: %w", node.Name, err)
	}
	if err := i.inv.DeletionAllowed(ctx); err != nil {
		return false, fmt.Errorf("node %s: %s, but not reporting it gone: %w", node.Name, why, err)
	}
	logger.Info("Reporting instance gone", "event", "instanceGone", "reason", why, "inventory", view.Digest())
	i.eventf(node, v1.EventTypeNormal, ReasonHostGone, "Instance reported gone: %s. The node-lifecycle controller deletes NotReady Nodes whose instance is gone.", why)
	return false, nil
}

// offTooLong applies the deleteAfter policy: the host has been seen off continuously
// for DeleteAfter (the Node's powered-off-since annotation) and its BMC confirms it is
// off now. Any doubt (no annotation, BMC error, not off) answers false.
func (i *Instances) offTooLong(ctx context.Context, node *v1.Node, host *inventory.Host) (bool, string) {
	if i.policy.DeleteAfter <= 0 || i.power == nil {
		return false, ""
	}
	since, ok := powermon.OffSince(node)
	if !ok || i.policy.Clock.Since(since) < i.policy.DeleteAfter {
		return false, ""
	}
	target, ok := bmc.TargetFor(host, i.policy.DefaultCA)
	if !ok {
		return false, ""
	}
	r, err := i.power.PowerState(ctx, target)
	if err != nil || r.State != bmc.PowerOff {
		return false, ""
	}
	return true, fmt.Sprintf("host %q has been powered off since %s, longer than instances.deleteAfter (%s)", host.Name, since.Format(time.RFC3339), i.policy.DeleteAfter)
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
		return false, fmt.Errorf("node %s: %w", node.Name, err)
	}
	target, ok := bmc.TargetFor(host, i.policy.DefaultCA)
	if !ok || i.power == nil {
		return false, nil
	}
	// A reading from before the Node's readiness last changed may predate the power
	// loss: it must be younger than that change, too.
	maxAge := i.policy.ShutdownMaxAge
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady && !c.LastTransitionTime.IsZero() {
			maxAge = min(maxAge, i.policy.Clock.Since(c.LastTransitionTime.Time))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, i.policy.ShutdownWait)
	r, err := i.power.Recent(wctx, target, maxAge)
	waited := ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded)
	cancel()
	if err != nil {
		if waited {
			err = fmt.Errorf("no reading yet after %s, the read goes on for the next pass: %w", i.policy.ShutdownWait, err)
		}
		return false, fmt.Errorf("node %s: power state of host %q: %w", node.Name, host.Name, err)
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
