//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestSharedIPRules: Services with the same sharing key share an address when their
// ports differ and their traffic policies (and, for Local, selectors) agree, and get
// SharingConflict otherwise, through the CCM's Service cache, which keeps ports and
// selectors only of Services that may share. A Service that gains the sharing key
// later is cached with its ports from then on: they clash, and once changed, share.
// A Service holding an address alone that gains the key keeps it, its claim now the
// key's, and others with the key join it.
func TestSharedIPRules(t *testing.T) {
	l := newLBLab(t, 1)
	l.createNode(framework.NodeSpec{Name: "cp-0", InternalIPs: []string{l.router.SpeakerV4(0).String()}, Ready: ready(v1.ConditionTrue)})
	l.start(0, "self")

	svc := func(name, key, ip string, port int32, local bool, selector string) {
		l.createService(name, func(s *v1.Service) {
			s.Annotations = map[string]string{ipam.AnnotationLoadBalancerIPs: ip}
			if key != "" {
				s.Annotations[ipam.AnnotationAllowSharedIP] = key
			}
			s.Spec.Ports[0].Port = port
			if local {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			}
			if selector != "" {
				s.Spec.Selector = map[string]string{"app": selector}
			}
		})
	}
	holds := func(name, ip string) {
		t.Helper()
		if got := l.waitIPs(name, 1)[0]; got != netip.MustParseAddr(ip) {
			t.Fatalf("%s got %s, want %s", name, got, ip)
		}
	}
	refused := func(name, reason string) {
		t.Helper()
		c := l.waitServiceCondition(name, lb.ConditionAddressAssigned, metav1.ConditionFalse, reason)
		t.Logf("%s: %s", name, c.Message)
	}

	// Cluster policy: other ports share, the same port clashes.
	svc("share-80", "s", "192.0.2.9", 80, false, "")
	holds("share-80", "192.0.2.9")
	svc("share-443", "s", "192.0.2.9", 443, false, "")
	holds("share-443", "192.0.2.9")
	svc("share-80-again", "s", "192.0.2.9", 80, false, "")
	refused("share-80-again", lb.ReasonSharingConflict)
	l.waitAnnounced(netip.MustParseAddr("192.0.2.9"), 0)

	// Local policy: only with the same selector.
	svc("local-a", "l", "192.0.2.10", 80, true, "a")
	holds("local-a", "192.0.2.10")
	svc("local-b", "l", "192.0.2.10", 81, true, "b")
	refused("local-b", lb.ReasonSharingConflict)
	svc("local-a2", "l", "192.0.2.10", 82, true, "a")
	holds("local-a2", "192.0.2.10")

	// A Service without the key does not share; given the key, its ports count (the
	// cache holds them from the event of that change on).
	svc("holder", "t", "192.0.2.11", 80, false, "")
	holds("holder", "192.0.2.11")
	svc("late", "", "192.0.2.11", 80, false, "")
	refused("late", lb.ReasonIPInUse)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"t"}}}`, ipam.AnnotationAllowSharedIP)
	if _, err := l.cp.Client.CoreV1().Services(l.ns).Patch(l.ctx, "late", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	refused("late", lb.ReasonSharingConflict)
	if _, err := l.cp.Client.CoreV1().Services(l.ns).Patch(l.ctx, "late", types.MergePatchType, []byte(`{"spec":{"ports":[{"name":"http","protocol":"TCP","port":8080}]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	holds("late", "192.0.2.11")
	holds("holder", "192.0.2.11")

	// A Service holding its address alone that then allows sharing keeps it (its
	// claim, an IPAddress object, becomes the key's), and another Service joins.
	svc("alone", "", "192.0.2.12", 80, false, "")
	holds("alone", "192.0.2.12")
	patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:"u"}}}`, ipam.AnnotationAllowSharedIP)
	if _, err := l.cp.Client.CoreV1().Services(l.ns).Patch(l.ctx, "alone", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(l.ctx, 60*time.Second, "the claim of 192.0.2.12 under sharing key u", func(ctx context.Context) (bool, error) {
		claim, err := l.cp.Client.NetworkingV1().IPAddresses().Get(ctx, "192.0.2.12", metav1.GetOptions{})
		return err == nil && claim.Annotations[lb.ClaimSharingKeyAnnotation] == "u", err
	}); err != nil {
		t.Fatal(err)
	}
	svc("joiner", "u", "192.0.2.12", 443, false, "")
	holds("joiner", "192.0.2.12")
	// Both show it, and the claim is still the key's.
	holds("alone", "192.0.2.12")
	claim, err := l.cp.Client.NetworkingV1().IPAddresses().Get(l.ctx, "192.0.2.12", metav1.GetOptions{})
	if err != nil || claim.Annotations[lb.ClaimSharingKeyAnnotation] != "u" {
		t.Errorf("claim of 192.0.2.12 after joiner joined: %v (%v), want it under key u", claim, err)
	}
}
