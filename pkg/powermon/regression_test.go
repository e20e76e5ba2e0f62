package powermon

// Regression tests from a hostile review: each reproduces a sequence that fenced a
// machine on a guess. Each failed before its fix.

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bmc"
)

// TestOffSinceAcrossAnUnobservedGap: the powered-off-since stamp is kept by any
// later "off" reading, however long nothing observed the host in between. Here the
// stamp is two hours old, the Node itself records that it was Ready until a minute ago
// (its Ready condition last changed a minute ago: the host was on meanwhile), and the
// replica that reads now never observed the host before (a restart or a new leader; no
// monitor ran while the Node was Ready). The first reading of "off" fences the Node at
// once, one minute after the host really went off. docs/configuration.md: "only positively observed,
// continuous off time counts".
func TestOffSinceAcrossAnUnobservedGap(t *testing.T) {
	f := newFixture(t, false)
	f.m.cfg.OutOfServiceAfter = 5 * time.Minute
	now := f.clock.Now()
	n, err := f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations = map[string]string{AnnotationOffSince: now.Add(-2 * time.Hour).UTC().Format(time.RFC3339)}
	n.Status.Conditions = []v1.NodeCondition{
		{Type: v1.NodeReady, Status: v1.ConditionUnknown, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))},
		{Type: ConditionBMCReachable, Status: v1.ConditionTrue, Reason: ReasonBMCReachable, Message: "the BMC answered",
			LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour)), LastHeartbeatTime: metav1.NewTime(now.Add(-2 * time.Hour))},
		{Type: ConditionPoweredOn, Status: v1.ConditionFalse, Reason: ReasonPoweredOff, Message: "the BMC reports the host off",
			LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour)), LastHeartbeatTime: metav1.NewTime(now.Add(-2 * time.Hour))},
	}
	if n, err = f.client.CoreV1().Nodes().Update(f.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err = f.client.CoreV1().Nodes().UpdateStatus(f.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = f.idx.Update(n)

	f.power.set(bmc.PowerOff, nil)
	f.sync(t)
	n = f.sync(t) // the taint lands in the pass after the annotation is seen
	if hasTaint(n, v1.TaintNodeOutOfService) {
		t.Fatalf("out-of-service added one minute after the Node was last Ready, from an off-since stamped two hours ago: %v", n.Annotations)
	}
	if since, ok := OffSince(n); ok && since.Before(now.Add(-time.Minute)) {
		t.Errorf("off-since %s predates the Node's last readiness change %s: the host was on meanwhile", since, now.Add(-time.Minute))
	}
}
