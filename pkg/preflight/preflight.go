// Package preflight checks that the cluster has what a CCM replica needs besides its
// ClusterRole's reads: its own namespace, where the deletion guard keeps its state and
// the leader publishes the pools' use, and the permissions to write there, to claim
// load-balancer addresses and to hold the leader-election Lease, and the project's
// CRDs (IPPool, BGPSessionState). The CCM does not
// create its namespace (that would take the power to create any namespace): the
// packaged RBAC manifest does. Until the check passes the replica is not ready, and
// says in one line what is missing and the command that fixes it: in its log, in
// /readyz, in an event and a condition on its Node, and to systemd.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// ConditionType is the Node condition a replica sets on its own Node: True when the
// check passed, False with the missing pieces in its message.
const ConditionType v1.NodeConditionType = "baremetal-ccm.io/CCMPreflight"

// Reasons of the condition and of the events on the Node.
const (
	ReasonPassed = "PreflightPassed"
	ReasonFailed = "PreflightFailed"
)

// FixRBAC is the command that creates the namespace and the permissions.
const FixRBAC = "baremetal-ccmctl manifests rbac | kubectl apply -f - (the same objects as packaging/kubernetes/rbac.yaml)"

// ErrInconclusive wraps a check the API server did not answer (a timeout, a 5xx): it
// changes nothing that was decided before.
var ErrInconclusive = errors.New("the check could not complete")

// Permission is one thing the replica must be allowed to do.
type Permission struct {
	Verb, Group, Resource, Namespace, Name string
	// For says what needs it ("the deletion guard's state").
	For string
}

func (p Permission) String() string {
	r := p.Resource
	if p.Group != "" {
		r += "." + p.Group
	}
	if p.Name != "" {
		r += " " + p.Name
	}
	if p.Namespace != "" {
		r += " in namespace " + p.Namespace
	}
	return p.Verb + " " + r
}

// Resource is an API resource the replica uses, served from a CRD.
type Resource struct {
	Group, Version, Resource string
	// For says what needs it; Fix how to install it.
	For, Fix string
}

// Problem is one missing piece and the command that fixes it.
type Problem struct {
	What, Fix string
}

// Result is one check's outcome; no Problems means it passed.
type Result struct {
	Problems []Problem
}

// OK reports whether the check passed.
func (r Result) OK() bool { return len(r.Problems) == 0 }

// String is the one-line summary: what is missing, then how to fix it.
func (r Result) String() string {
	if r.OK() {
		return "the namespace and permissions this replica needs are in place"
	}
	var whats, fixes []string
	for _, p := range r.Problems {
		whats = append(whats, p.What)
		if !slices.Contains(fixes, p.Fix) {
			fixes = append(fixes, p.Fix)
		}
	}
	return strings.Join(whats, "; ") + "; fix: " + strings.Join(fixes, "; then ")
}

// Checker checks Namespace and Permissions through Client, as the replica itself.
type Checker struct {
	Client kubernetes.Interface
	// Namespace is the CCM's namespace; ConfigMap a ConfigMap the replica creates there
	// (the deletion guard's), used for a dry-run create that tells a missing namespace
	// from a missing permission without any read permission on namespaces.
	Namespace, ConfigMap string
	// NamespaceFor says what the namespace holds, for the message.
	NamespaceFor string
	Permissions  []Permission
	// Resources are the API resources (served from CRDs) the replica uses.
	Resources []Resource
	// Timeout bounds one check (default 10 s).
	Timeout time.Duration
}

// Check runs the checks once. Its error wraps ErrInconclusive when the API server did
// not answer; the Result is then incomplete.
func (c *Checker) Check(ctx context.Context) (Result, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var r Result
	if c.Namespace != "" {
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: c.ConfigMap, Namespace: c.Namespace}}
		_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
		case apierrors.IsNotFound(err):
			r.Problems = append(r.Problems, Problem{
				What: fmt.Sprintf("namespace %s does not exist (it holds %s)", c.Namespace, c.NamespaceFor),
				Fix:  "kubectl create namespace " + c.Namespace + ", or apply the packaged RBAC: " + FixRBAC,
			})
		case apierrors.IsForbidden(err):
			r.Problems = append(r.Problems, Problem{
				What: fmt.Sprintf("may not create configmaps in namespace %s (for %s)", c.Namespace, c.NamespaceFor),
				Fix:  "apply the packaged RBAC: " + FixRBAC,
			})
		default:
			return r, fmt.Errorf("%w: dry-run create of ConfigMap %s/%s: %w", ErrInconclusive, c.Namespace, c.ConfigMap, err)
		}
	}
	served := map[string][]string{}
	for _, res := range c.Resources {
		gv := res.Group + "/" + res.Version
		names, ok := served[gv]
		if !ok {
			list, err := c.Client.Discovery().ServerResourcesForGroupVersion(gv)
			switch {
			case err == nil:
				for _, r := range list.APIResources {
					names = append(names, r.Name)
				}
			case apierrors.IsNotFound(err):
			default:
				return r, fmt.Errorf("%w: discovery of %s: %w", ErrInconclusive, gv, err)
			}
			served[gv] = names
		}
		if !slices.Contains(names, res.Resource) {
			r.Problems = append(r.Problems, Problem{
				What: fmt.Sprintf("the API server does not serve %s.%s/%s: its CustomResourceDefinition is not installed (for %s)", res.Resource, res.Group, res.Version, res.For),
				Fix:  res.Fix,
			})
		}
	}
	for _, p := range c.Permissions {
		ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: p.Verb, Group: p.Group, Resource: p.Resource, Namespace: p.Namespace, Name: p.Name,
			},
		}}
		res, err := c.Client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, ssar, metav1.CreateOptions{})
		if err != nil {
			return r, fmt.Errorf("%w: access review %q: %w", ErrInconclusive, p, err)
		}
		if !res.Status.Allowed {
			r.Problems = append(r.Problems, Problem{
				What: fmt.Sprintf("may not %s (for %s)", p, p.For),
				Fix:  "apply the packaged RBAC: " + FixRBAC,
			})
		}
	}
	return r, nil
}

// Reporter tells people about a change of the outcome (Node condition, event,
// systemd status); errors are logged, not retried until the next change.
type Reporter interface {
	Report(ctx context.Context, r Result) error
}

// Monitor runs the Checker for the process's life and keeps its last conclusive
// Result. It checks every Retry while the check fails or cannot complete, and every
// Interval while it passes; each change of outcome is logged once and reported.
type Monitor struct {
	Checker   *Checker
	Reporters []Reporter
	// Interval between checks while passing (default 5 min); Retry while failing
	// (default 5 s).
	Interval, Retry time.Duration

	mu      sync.Mutex
	last    *Result
	summary string
}

// Ready reports whether the last conclusive check passed, and otherwise why not.
func (m *Monitor) Ready() (bool, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.last == nil:
		return false, "checking the cluster for the CCM's namespace and permissions"
	case !m.last.OK():
		return false, m.summary
	}
	return true, ""
}

// Run checks until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	interval, retry := m.Interval, m.Retry
	if interval <= 0 {
		interval = 5 * time.Minute
	}
	if retry <= 0 {
		retry = 5 * time.Second
	}
	logger := klog.FromContext(ctx).WithName("preflight")
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := retry
		if ok := m.checkOnce(klog.NewContext(ctx, logger)); ok {
			next = interval
		}
		t.Reset(next)
	}
}

// checkOnce runs one check and reports a changed outcome; true when it passed.
func (m *Monitor) checkOnce(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	r, err := m.Checker.Check(ctx)
	if err != nil {
		logger.V(2).Info("Preflight check incomplete; keeping the last outcome", "err", err)
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.last != nil && m.last.OK()
	}
	summary := r.String()
	m.mu.Lock()
	changed := m.last == nil || m.summary != summary
	m.last, m.summary = &r, summary
	m.mu.Unlock()
	if !changed {
		return r.OK()
	}
	if r.OK() {
		logger.Info("Preflight passed: " + summary)
	} else {
		logger.Error(nil, "Not ready: "+summary)
	}
	for _, rep := range m.Reporters {
		if err := rep.Report(ctx, r); err != nil {
			logger.Error(err, "Warning: reporting the preflight outcome")
		}
	}
	return r.OK()
}
