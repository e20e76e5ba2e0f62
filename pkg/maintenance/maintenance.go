// Package maintenance reads the Node lifecycle conditions of Kubernetes 1.37
// (KEP-5683) that put a Node in maintenance: MaintenanceInProgress or
// MaintenancePlanned with status True. Such a Node is exempt from deletion and from the
// power-based policies (out-of-service taint, deleteAfter) and never counts against a
// budget, exactly like a host whose inventory state is maintenance. Admins and their
// tools set the conditions; this CCM only reads them.
//
// The label ExcludeLabel opts a Node out of remediation only: the power-based
// policies, not the removal of its host from the inventory.
package maintenance

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// ExcludeLabel opts a Node out of remediation (as medik8s Node Health Check's
// exclude-from-remediation label does): no out-of-service taint, no deletion under
// deleteAfter, no budget spent on it. It counts when present with any value but a false
// one ("false", "0", "f", ...: see strconv.ParseBool), so "yes" does not fail open.
const ExcludeLabel = "baremetal-ccm.io/exclude-from-remediation"

// ErrExcluded: the Node carries ExcludeLabel.
var ErrExcluded = errors.New("excluded from remediation")

// Conditions are the Node conditions that exempt a Node while True, the more specific
// first.
var Conditions = []v1.NodeConditionType{v1.NodeMaintenanceInProgress, v1.NodeMaintenancePlanned}

// Condition returns the first of Conditions that is True on node.
func Condition(node *v1.Node) (v1.NodeCondition, bool) {
	for _, t := range Conditions {
		for _, c := range node.Status.Conditions {
			if c.Type == t && c.Status == v1.ConditionTrue {
				return c, true
			}
		}
	}
	return v1.NodeCondition{}, false
}

// Ended returns when a lifecycle condition that exempts node while True last stopped
// doing so: the latest LastTransitionTime of a MaintenanceInProgress or
// MaintenancePlanned condition that is not True (zero when there is none). The
// power-off policies count off time only from then, so a host left off through its
// maintenance is not fenced or deleted the moment the maintenance ends. (A condition
// that was removed, or the label, leaves no such time.)
func Ended(node *v1.Node) time.Time {
	var t time.Time
	for _, c := range node.Status.Conditions {
		if slices.Contains(Conditions, c.Type) && c.Status != v1.ConditionTrue && c.LastTransitionTime.After(t) {
			t = c.LastTransitionTime.Time
		}
	}
	return t
}

// Of returns nil when no lifecycle condition puts node in maintenance, else an error
// that wraps inventory.ErrMaintenance and names the condition, so callers treat it as
// they treat a host in maintenance in the inventory.
func Of(node *v1.Node) error {
	c, ok := Condition(node)
	if !ok {
		return nil
	}
	return fmt.Errorf("%w: %s", inventory.ErrMaintenance, Describe(c))
}

// Describe says which condition exempts a Node, with its reason and since when.
func Describe(c v1.NodeCondition) string {
	s := fmt.Sprintf("Node condition %s is %s", c.Type, c.Status)
	if !c.LastTransitionTime.IsZero() {
		s += " since " + c.LastTransitionTime.UTC().Format(time.RFC3339)
	}
	if c.Reason != "" {
		s += fmt.Sprintf(" (reason %s)", c.Reason)
	}
	return s
}

// Remediation returns nil when node may get a power-based action (out-of-service taint,
// deletion under deleteAfter), else why not: in maintenance by a lifecycle condition
// (see Of), or ErrExcluded for ExcludeLabel.
func Remediation(node *v1.Node) error {
	if err := Of(node); err != nil {
		return err
	}
	if Excluded(node) {
		return fmt.Errorf("%w: the Node has the label %s=%q", ErrExcluded, ExcludeLabel, node.Labels[ExcludeLabel])
	}
	return nil
}

// Excluded reports whether node carries ExcludeLabel with a value that is not false.
func Excluded(node *v1.Node) bool {
	v, ok := node.Labels[ExcludeLabel]
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}

// ControlPlaneLabel marks a control-plane Node (kubeadm and most installers set it).
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// ControlPlane reports whether node is a control-plane Node: such Nodes get a
// power-based action one at a time (inventory.Store.TakePowerBudget).
func ControlPlane(node *v1.Node) bool {
	_, ok := node.Labels[ControlPlaneLabel]
	return ok
}
