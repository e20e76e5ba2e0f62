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
	f.putNode(t, map[string]string{AnnotationOffSince: now.Add(-2 * time.Hour).UTC().Format(time.RFC3339), AnnotationOffSeen: now.UTC().Format(time.RFC3339)},
		[]v1.NodeCondition{
			{Type: v1.NodeReady, Status: v1.ConditionUnknown, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))},
			{Type: ConditionBMCReachable, Status: v1.ConditionTrue, Reason: ReasonBMCReachable, Message: "the BMC answered",
				LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour)), LastHeartbeatTime: metav1.NewTime(now.Add(-2 * time.Hour))},
			{Type: ConditionPoweredOn, Status: v1.ConditionFalse, Reason: ReasonPoweredOff, Message: "the BMC reports the host off",
				LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour)), LastHeartbeatTime: metav1.NewTime(now.Add(-2 * time.Hour))},
		})

	f.power.set(bmc.PowerOff, nil)
	f.sync(t)
	n := f.sync(t) // the taint lands in the pass after the annotation is seen
	if hasTaint(n, v1.TaintNodeOutOfService) {
		t.Fatalf("out-of-service added one minute after the Node was last Ready, from an off-since stamped two hours ago: %v", n.Annotations)
	}
	if since, ok := OffSince(n, f.clock.Now(), MaxUnobserved(10*time.Second)); ok && since.Before(now.Add(-time.Minute)) {
		t.Errorf("off-since %s predates the Node's last readiness change %s: the host was on meanwhile", since, now.Add(-time.Minute))
	}
}

// TestOffCountRestartsAfterAnUnreadPeriod: the Node stayed NotReady for hours (its
// kubelet broken), the host was stamped off two hours ago and last seen off an hour
// ago; then nobody read it (no leader, the CCM down) while it may have been on. Its
// next "off" restarts the count: no out-of-service taint from the two-hour-old stamp,
// and OffSince does not count it even before the monitor restamps it.
func TestOffCountRestartsAfterAnUnreadPeriod(t *testing.T) {
	f := newFixture(t, false)
	f.m.cfg.OutOfServiceAfter = 5 * time.Minute
	now := f.clock.Now()
	n := f.putNode(t, map[string]string{
		AnnotationOffSince: now.Add(-2 * time.Hour).UTC().Format(time.RFC3339),
		AnnotationOffSeen:  now.Add(-time.Hour).UTC().Format(time.RFC3339),
	}, []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown, LastTransitionTime: metav1.NewTime(now.Add(-3 * time.Hour))}})
	if _, ok := OffSince(n, now, MaxUnobserved(10*time.Second)); ok {
		t.Fatal("OffSince counts a stamp whose host went unread for an hour")
	}

	f.power.set(bmc.PowerOff, nil)
	f.sync(t)
	n = f.sync(t)
	if hasTaint(n, v1.TaintNodeOutOfService) {
		t.Fatalf("out-of-service added from a stamp across an hour nobody read the host: %v", n.Annotations)
	}
	since, ok := OffSince(n, f.clock.Now(), MaxUnobserved(10*time.Second))
	if !ok || since.Before(now.Add(-time.Second)) {
		t.Fatalf("off-since %v (%v) after the unread hour, want restarted at %v", since, ok, now)
	}

	// Read every 10 s from now on: last-seen is rewritten once a minute, not at
	// every read, and the count stands; after 5 minutes the taint goes on.
	writes := 0
	for range 31 {
		f.clock.Step(10 * time.Second)
		before := len(f.client.Actions())
		n = f.sync(t)
		for _, a := range f.client.Actions()[before:] {
			if a.GetVerb() == "patch" {
				writes++
			}
		}
	}
	if _, ok := OffSince(n, f.clock.Now(), MaxUnobserved(10*time.Second)); !ok {
		t.Errorf("the count did not stand over 5 minutes of reads: %v", n.Annotations)
	}
	if !fenced(n) {
		t.Errorf("no out-of-service taint after 5 minutes seen off: %v", n.Annotations)
	}
	if writes > 5+5 { // 5 last-seen refreshes, the taint's annotation and taint, then their release
		t.Errorf("%d patches over 5 minutes of reads, want about one a minute", writes)
	}
}

// putNode gives the fixture's Node n1 these annotations and conditions, in the API and
// the lister.
func (f *fixture) putNode(t *testing.T, annotations map[string]string, conditions []v1.NodeCondition) *v1.Node {
	t.Helper()
	n, err := f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations, n.Status.Conditions = annotations, conditions
	if n, err = f.client.CoreV1().Nodes().Update(f.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err = f.client.CoreV1().Nodes().UpdateStatus(f.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = f.idx.Update(n)
	return n
}
