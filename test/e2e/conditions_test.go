//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/explain"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata")

// waitCondition waits until the Service's condition has the status and reason.
func (l *lbLab) waitServiceCondition(name, typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	l.t.Helper()
	var got *metav1.Condition
	err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("%s %s=%s (%s)", name, typ, status, reason), func(ctx context.Context) (bool, error) {
		s, err := l.cp.Client.CoreV1().Services(l.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = meta.FindStatusCondition(s.Status.Conditions, typ)
		return got != nil && got.Status == status && got.Reason == reason, nil
	})
	if err != nil {
		l.t.Fatalf("%v; last: %+v", err, got)
	}
	return *got
}

// TestServiceConditions: every user mistake docs/operations.md lists leaves the Service
// pending with AddressAssigned False and the mistake's reason (written by the
// leader with no event needed); a Service that gets its address shows
// AddressAssigned True and Announced True naming the replica and its session; the
// leader publishes the pools' use (baremetal-ccmctl lb pools); and `explain` of a
// pending Service, an announced one and a replica's Node match their golden files.
func TestServiceConditions(t *testing.T) {
	l := newLBLab(t, 1)
	l.pools = lbPools + `  - name: restricted
    addresses: [198.51.100.20/31]
    namespaces: [somewhere-else]
`
	node := "cp-0"
	l.createNode(framework.NodeSpec{Name: node, InternalIPs: []string{l.router.SpeakerV4(0).String()}, Ready: ready(v1.ConditionTrue)})
	l.start(0, "self")

	l.createService("web", nil)
	ip := l.waitIPs("web", 1)[0]
	l.waitAnnounced(ip, 0)
	assigned := l.waitServiceCondition("web", lb.ConditionAddressAssigned, metav1.ConditionTrue, lb.ReasonAssigned)
	if !strings.Contains(assigned.Message, ip.String()+" (pool public)") {
		t.Errorf("AddressAssigned message %q does not name the address and its pool", assigned.Message)
	}
	announced := l.waitServiceCondition("web", lb.ConditionAnnounced, metav1.ConditionTrue, "BGP")
	if !strings.Contains(announced.Message, "1 of 1 CCM replicas: "+node+" (sessions up: "+l.router.RouterV4.String()) {
		t.Errorf("Announced message %q does not name the replica and its session", announced.Message)
	}
	// The replica's sessions, where kubectl lists them (its BGPSessionState objects).
	sessions, err := framework.Kubectl(l.ctx, l.cp, "get", "bgpsessionstates", "-l", v1alpha1.LabelNode+"="+node)
	if err != nil {
		t.Fatal(err)
	}
	for _, peer := range []string{l.router.RouterV4.String(), l.router.RouterV6.String()} {
		row := `(?m)^\S+\s+` + regexp.QuoteMeta(node) + `\s+Replica\s+` + regexp.QuoteMeta(peer) + `\s+established\s`
		if !regexp.MustCompile(row).MatchString(sessions) {
			t.Errorf("kubectl get bgpsessionstates does not list %s's established session with %s:\n%s", node, peer, sessions)
		}
	}

	mistakes := []struct {
		name   string
		mutate func(*v1.Service)
		reason string
	}{
		{"unknown-pool", func(s *v1.Service) { s.Annotations = map[string]string{ipam.AnnotationAddressPool: "nope"} }, lb.ReasonUnknownPool},
		{"not-in-pool", func(s *v1.Service) { s.Annotations = map[string]string{ipam.AnnotationLoadBalancerIPs: "203.0.113.9"} }, lb.ReasonNotInPool},
		{"bad-annotation", func(s *v1.Service) { s.Annotations = map[string]string{ipam.AnnotationLoadBalancerIPs: "not-an-ip"} }, lb.ReasonBadAnnotation},
		{"ip-taken", func(s *v1.Service) { s.Annotations = map[string]string{ipam.AnnotationLoadBalancerIPs: ip.String()} }, lb.ReasonIPInUse},
		{"not-allowed", func(s *v1.Service) { s.Annotations = map[string]string{ipam.AnnotationAddressPool: "restricted"} }, lb.ReasonNoPoolAllowed},
		{"no-ipv6", func(s *v1.Service) {
			s.Annotations = map[string]string{ipam.AnnotationAddressPool: "tiny"}
			s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicySingleStack)
			s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
		}, lb.ReasonFamilyUnavailable},
		{"shared-clash", func(s *v1.Service) {
			s.Annotations = map[string]string{ipam.AnnotationLoadBalancerIPs: ip.String(), ipam.AnnotationAllowSharedIP: "k"}
		}, lb.ReasonIPInUse},
	}
	for _, m := range mistakes {
		l.createService(m.name, m.mutate)
	}
	// The tiny pool has two addresses: a third Service asking for it waits.
	for i := range 3 {
		l.createService(fmt.Sprintf("tiny-%d", i), func(s *v1.Service) { s.Annotations = map[string]string{ipam.AnnotationAddressPool: "tiny"} })
	}
	mistakes = append(mistakes, struct {
		name   string
		mutate func(*v1.Service)
		reason string
	}{"tiny-2", nil, lb.ReasonExhausted})
	for _, m := range mistakes {
		c := l.waitServiceCondition(m.name, lb.ConditionAddressAssigned, metav1.ConditionFalse, m.reason)
		if c.Message == "" || strings.Contains(c.Message, "\n") {
			t.Errorf("%s: message %q, want one line naming the cause", m.name, c.Message)
		}
		s, err := l.cp.Client.CoreV1().Services(l.ns).Get(l.ctx, m.name, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) != 0 {
			t.Errorf("%s: has an address %v (%v), want pending", m.name, s.Status.LoadBalancer.Ingress, err)
		}
		t.Logf("%s: %s: %s", m.name, c.Reason, c.Message)
	}

	// The pools' use, where kubectl (and baremetal-ccmctl lb pools) sees it.
	e := &explain.Explainer{Client: l.cp.Client, Sessions: versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig))}
	var pools string
	err = framework.WaitFor(l.ctx, 30*time.Second, "the pools ConfigMap to count tiny's two Services", func(ctx context.Context) (bool, error) {
		var err error
		pools, err = e.Pools(ctx)
		return err == nil && regexp.MustCompile(`(?m)^tiny +IPv4 +2 +2 +0 +100% +2 `).MatchString(pools), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, pools)
	}

	// Both sessions up in the condition before its golden (each session is an object of
	// its own: the IPv6 one may come up a pass later).
	both := "(sessions up: " + l.router.RouterV4.String() + ", " + l.router.RouterV6.String() + ")"
	err = framework.WaitFor(l.ctx, 30*time.Second, "the Announced condition to name both sessions up", func(ctx context.Context) (bool, error) {
		s, err := l.cp.Client.CoreV1().Services(l.ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(s.Status.Conditions, lb.ConditionAnnounced)
		return c != nil && strings.Contains(c.Message, both), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct{ golden, kind, name string }{
		{"explain-svc-pending.golden", "svc", "tiny-2"},
		{"explain-svc-announced.golden", "svc", "web"},
		{"explain-node-replica.golden", "node", node},
	} {
		var out string
		var err error
		if g.kind == "svc" {
			out, err = e.Service(l.ctx, l.ns, g.name)
		} else {
			out, err = e.Node(l.ctx, g.name)
		}
		if err != nil {
			t.Fatal(err)
		}
		checkGolden(t, g.golden, l.normalize(out, ip))
	}
}

// normalize replaces what differs between runs: names, addresses, ages, ports.
func (l *lbLab) normalize(s string, ip fmt.Stringer) string {
	s = strings.ReplaceAll(s, l.ns, "NAMESPACE")
	s = strings.ReplaceAll(s, ip.String(), "IP")
	s = strings.ReplaceAll(s, l.router.RouterV4.String(), "ROUTER4")
	s = strings.ReplaceAll(s, l.router.RouterV6.String(), "ROUTER6")
	s = strings.ReplaceAll(s, l.router.SpeakerV4(0).String(), "SPEAKER4")
	s = regexp.MustCompile(`\b\d+[smhd] ago\b|just now`).ReplaceAllString(s, "AGO")
	s = regexp.MustCompile(`\bx\d+\b`).ReplaceAllString(s, "xN")
	s = regexp.MustCompile(`\b\d+ prefixes sent\b`).ReplaceAllString(s, "N prefixes sent")
	return s
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (run with -update after checking):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}
