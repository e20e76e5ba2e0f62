package preflight

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// cluster is a fake API server whose dry-run create answers createErr and whose
// access reviews deny the verbs in denied ("verb resource").
func cluster(createErr error, denied ...string) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca := a.(k8stesting.CreateActionImpl)
		if len(ca.CreateOptions.DryRun) != 1 || ca.CreateOptions.DryRun[0] != metav1.DryRunAll {
			panic("preflight created a ConfigMap for real")
		}
		return true, ca.Object, createErr
	})
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		attr := r.Spec.ResourceAttributes
		r.Status.Allowed = true
		for _, d := range denied {
			if d == attr.Verb+" "+attr.Resource {
				r.Status.Allowed = false
			}
		}
		return true, r, nil
	})
	return c
}

func checker(c *fake.Clientset) *Checker {
	return &Checker{
		Client: c, Namespace: "baremetal-ccm", ConfigMap: "baremetal-ccm-deletion-guard",
		NamespaceFor: "the deletion guard's state",
		Permissions: []Permission{
			{Verb: "update", Resource: "configmaps", Namespace: "baremetal-ccm", Name: "baremetal-ccm-deletion-guard", For: "the deletion guard's state"},
			{Verb: "create", Group: "networking.k8s.io", Resource: "ipaddresses", For: "address claims"},
		},
	}
}

var nsGVR = schema.GroupResource{Resource: "namespaces"}

func TestCheck(t *testing.T) {
	cases := []struct {
		name      string
		createErr error
		denied    []string
		want      []string // substrings of the summary; none: passes
	}{
		{"everything in place", nil, nil, nil},
		{"the ConfigMap exists already", apierrors.NewAlreadyExists(schema.GroupResource{Resource: "configmaps"}, "x"), nil, nil},
		{"no namespace", apierrors.NewNotFound(nsGVR, "baremetal-ccm"), nil,
			[]string{"namespace baremetal-ccm does not exist (it holds the deletion guard's state)", "kubectl create namespace baremetal-ccm", "baremetal-ccmctl manifests rbac | kubectl apply -f -"}},
		{"no create permission", apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "x", errors.New("RBAC")), nil,
			[]string{"may not create configmaps in namespace baremetal-ccm", "baremetal-ccmctl manifests rbac"}},
		{"an older ClusterRole: no claims", nil, []string{"create ipaddresses"},
			[]string{"may not create ipaddresses.networking.k8s.io (for address claims)"}},
		{"no namespace and no update", apierrors.NewNotFound(nsGVR, "baremetal-ccm"), []string{"update configmaps"},
			[]string{"does not exist", "may not update configmaps baremetal-ccm-deletion-guard in namespace baremetal-ccm (for the deletion guard's state)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := checker(cluster(tc.createErr, tc.denied...)).Check(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s := r.String()
			if r.OK() != (len(tc.want) == 0) {
				t.Fatalf("OK %v: %s", r.OK(), s)
			}
			for _, w := range tc.want {
				if !strings.Contains(s, w) {
					t.Errorf("summary %q lacks %q", s, w)
				}
			}
			if strings.Contains(s, "\n") {
				t.Errorf("summary is not one line: %q", s)
			}
			if strings.Count(s, "fix:") > 1 {
				t.Errorf("summary repeats fix: %q", s)
			}
		})
	}
}

func TestCheckInconclusive(t *testing.T) {
	r, err := checker(cluster(apierrors.NewServiceUnavailable("etcd"))).Check(context.Background())
	if !errors.Is(err, ErrInconclusive) {
		t.Fatalf("err %v, want ErrInconclusive", err)
	}
	if !r.OK() {
		t.Errorf("an unanswered check reported problems: %s", r)
	}
}

// reporterFunc counts reports.
type recordingReporter struct{ got []Result }

func (r *recordingReporter) Report(_ context.Context, res Result) error {
	r.got = append(r.got, res)
	return nil
}

func TestMonitorReportsChangesOnly(t *testing.T) {
	c := cluster(apierrors.NewNotFound(nsGVR, "baremetal-ccm"))
	rep := &recordingReporter{}
	m := &Monitor{Checker: checker(c), Reporters: []Reporter{rep}}
	if ok, why := m.Ready(); ok || !strings.Contains(why, "checking") {
		t.Fatalf("before any check: %v %q", ok, why)
	}
	ctx := context.Background()
	if m.checkOnce(ctx) {
		t.Fatal("passed without the namespace")
	}
	m.checkOnce(ctx) // same outcome: no second report
	if ok, why := m.Ready(); ok || !strings.Contains(why, "namespace baremetal-ccm does not exist") {
		t.Fatalf("without the namespace: %v %q", ok, why)
	}
	// The API server stops answering: the outcome stands.
	c.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewTimeoutError("slow", 1)
	})
	m.checkOnce(ctx)
	if ok, _ := m.Ready(); ok {
		t.Fatal("an unanswered check made it ready")
	}
	// The namespace is created.
	m.Checker.Client = cluster(nil)
	if !m.checkOnce(ctx) {
		t.Fatal("still failing with everything in place")
	}
	if ok, why := m.Ready(); !ok {
		t.Fatalf("after the fix: %q", why)
	}
	if len(rep.got) != 2 || rep.got[0].OK() || !rep.got[1].OK() {
		t.Errorf("reports %v, want a failure then a pass", rep.got)
	}
}

func TestNodeReporter(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-1"}}
	c := fake.NewClientset(node)
	rec := record.NewFakeRecorder(10)
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	now := t0
	n := &NodeReporter{Client: c, Recorder: rec, NodeName: "cp-1", Now: func() time.Time { return now }}
	ctx := context.Background()
	cond := func() v1.NodeCondition {
		t.Helper()
		got, err := c.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == ConditionType {
				return c
			}
		}
		t.Fatalf("no %s condition: %v", ConditionType, got.Status.Conditions)
		return v1.NodeCondition{}
	}
	event := func() string {
		select {
		case e := <-rec.Events:
			return e
		default:
			return ""
		}
	}

	// A clean start: the condition, no event.
	if err := n.Report(ctx, Result{}); err != nil {
		t.Fatal(err)
	}
	if c := cond(); c.Status != v1.ConditionTrue || c.Reason != ReasonPassed {
		t.Errorf("passing: %+v", c)
	}
	if e := event(); e != "" {
		t.Errorf("an event for a clean start: %q", e)
	}

	failing := Result{Problems: []Problem{{What: "namespace baremetal-ccm does not exist", Fix: "kubectl create namespace baremetal-ccm"}}}
	now = t0.Add(time.Minute)
	if err := n.Report(ctx, failing); err != nil {
		t.Fatal(err)
	}
	if c := cond(); c.Status != v1.ConditionFalse || c.Reason != ReasonFailed || !strings.Contains(c.Message, "kubectl create namespace") || !c.LastTransitionTime.Time.Equal(now) {
		t.Errorf("failing: %+v", c)
	}
	if e := event(); !strings.HasPrefix(e, "Warning PreflightFailed namespace baremetal-ccm does not exist") {
		t.Errorf("event %q", e)
	}
	// Another failing outcome: a new message, the same transition time.
	failing.Problems = append(failing.Problems, Problem{What: "may not create ipaddresses", Fix: "apply the RBAC"})
	now = t0.Add(2 * time.Minute)
	if err := n.Report(ctx, failing); err != nil {
		t.Fatal(err)
	}
	if c := cond(); !strings.Contains(c.Message, "ipaddresses") || !c.LastTransitionTime.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("still failing: %+v", c)
	}
	event()
	if err := n.Report(ctx, Result{}); err != nil {
		t.Fatal(err)
	}
	if e := event(); !strings.HasPrefix(e, "Normal PreflightPassed") {
		t.Errorf("fixed: event %q", e)
	}

	// No Node for this replica: nothing fails.
	other := &NodeReporter{Client: c, NodeName: "not-a-node"}
	if err := other.Report(ctx, failing); err != nil {
		t.Errorf("a replica without a Node: %v", err)
	}
}

// A CRD the replica uses that the API server does not serve is named with its fix.
func TestCheckResources(t *testing.T) {
	c := cluster(nil)
	ck := checker(c)
	ck.Resources = []Resource{
		{Group: "baremetal-ccm.io", Version: "v1alpha1", Resource: "ippools", For: "IP pools", Fix: "apply the CRDs"},
		{Group: "baremetal-ccm.io", Version: "v1alpha1", Resource: "bgpsessionstates", For: "sessions", Fix: "apply the CRDs"},
	}
	r, err := ck.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s := r.String(); r.OK() || !strings.Contains(s, "does not serve ippools.baremetal-ccm.io/v1alpha1: its CustomResourceDefinition is not installed (for IP pools)") ||
		!strings.Contains(s, "bgpsessionstates") || strings.Count(s, "apply the CRDs") != 1 {
		t.Errorf("no CRDs: %s", s)
	}
	c.Resources = []*metav1.APIResourceList{{GroupVersion: "baremetal-ccm.io/v1alpha1", APIResources: []metav1.APIResource{{Name: "ippools"}}}}
	r, _ = ck.Check(context.Background())
	if s := r.String(); r.OK() || strings.Contains(s, "ippools") || !strings.Contains(s, "bgpsessionstates") {
		t.Errorf("one CRD: %s", s)
	}
	c.Resources[0].APIResources = append(c.Resources[0].APIResources, metav1.APIResource{Name: "bgpsessionstates"})
	if r, _ = ck.Check(context.Background()); !r.OK() {
		t.Errorf("both CRDs: %s", r)
	}
}
