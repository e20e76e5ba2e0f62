package lb

import (
	"errors"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cloud-provider/api"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
)

// Service conditions (status.conditions) this CCM keeps, so `kubectl describe svc`
// and `baremetal-ccmctl explain` say why a Service is pending or not announced
// without the events, which expire after an hour.
const (
	// ConditionAddressAssigned is True once the Service holds its addresses, False
	// with the reason while it waits or its request cannot be met.
	ConditionAddressAssigned = "baremetal-ccm.io/AddressAssigned"
	// ConditionAnnounced says who announces the Service's addresses (announcer, how
	// many replicas or nodes, the BGP sessions).
	ConditionAnnounced = "baremetal-ccm.io/Announced"
)

// Reasons of ConditionAddressAssigned.
const (
	ReasonAssigned          = "Assigned"
	ReasonBadAnnotation     = "BadAnnotation"
	ReasonUnknownPool       = "UnknownPool"
	ReasonNoPoolAllowed     = "PoolNotAllowed"
	ReasonNotInPool         = "IPNotInPool"
	ReasonExhausted         = "PoolExhausted"
	ReasonIPInUse           = "IPInUse"
	ReasonSharingConflict   = "SharingConflict"
	ReasonIPConflict        = "IPConflict"
	ReasonFamilyUnavailable = "FamilyUnavailable"
	ReasonWaitingForPriming = "WaitingForInventoryOfAddresses"
	ReasonAssignError       = "Error"
)

// assignedReasons maps the allocator's errors to condition reasons, first match wins.
var assignedReasons = []struct {
	err    error
	reason string
}{
	{ipam.ErrBadAnnotation, ReasonBadAnnotation},
	{ipam.ErrUnknownPool, ReasonUnknownPool},
	{ipam.ErrNotAllowed, ReasonNoPoolAllowed},
	{ipam.ErrNotInPool, ReasonNotInPool},
	{ipam.ErrPoolExhausted, ReasonExhausted},
	{ipam.ErrHeldElsewhere, ReasonIPConflict},
	{ipam.ErrSharingConflict, ReasonSharingConflict},
	{ipam.ErrIPInUse, ReasonIPInUse},
	{ipam.ErrFamilyUnavailable, ReasonFamilyUnavailable},
	{ErrNotReady, ReasonWaitingForPriming},
}

// AssignedCondition returns the Service's ConditionAddressAssigned after
// EnsureLoadBalancer returned err: True naming the addresses and their pools, or
// False with the reason of err and its message on one line. LastTransitionTime is
// left zero (the caller's meta.SetStatusCondition sets it when the status changes).
func (l *LoadBalancer) AssignedCondition(svc *v1.Service, err error) metav1.Condition {
	c := metav1.Condition{Type: ConditionAddressAssigned, ObservedGeneration: svc.Generation}
	if err == nil {
		c.Status, c.Reason = metav1.ConditionTrue, ReasonAssigned
		c.Message = "assigned " + describeAssignment(l.alloc.Assigned(key(svc)))
		return c
	}
	c.Status, c.Reason = metav1.ConditionFalse, ReasonAssignError
	for _, r := range assignedReasons {
		if errors.Is(err, r.err) {
			c.Reason = r.reason
			break
		}
	}
	c.Message = oneLine(err.Error())
	return c
}

func describeAssignment(a ipam.Assignment, ok bool) string {
	if !ok || len(a.IPs) == 0 {
		return "no address"
	}
	parts := make([]string, len(a.IPs))
	for i, ip := range a.IPs {
		parts[i] = ip.String()
		if i < len(a.Pools) && a.Pools[i] != "" {
			parts[i] += " (pool " + a.Pools[i] + ")"
		} else {
			parts[i] += " (in no pool: kept, not announced)"
		}
	}
	return strings.Join(parts, ", ")
}

// oneLine keeps a condition message on one line and within the API's 32 KiB.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 1024 {
		s = s[:1021] + "..."
	}
	return s
}

// retryError is an api.RetryError (the controller retries after its delay) that
// also wraps its cause (errors.Is finds the allocator's sentinel for the condition).
type retryError struct {
	retry *api.RetryError
	cause error
}

func (e *retryError) Error() string   { return e.retry.Error() }
func (e *retryError) Unwrap() []error { return []error{e.retry, e.cause} }

func retryLater(cause error, after time.Duration) error {
	return &retryError{retry: api.NewRetryError(cause.Error(), after), cause: cause}
}
