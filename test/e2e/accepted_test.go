//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// waitAccepted waits (30 s) until get's object has the condition Accepted with
// status and reason about its current generation, its message saying every word,
// and returns the object; it fails t otherwise, with the last object read. The
// leader writes this condition on IPPools, BGPPeers and BGPAdvertisements alike.
func waitAccepted[T any](t *testing.T, ctx context.Context, what string, get func(ctx context.Context) (T, metav1.Object, []metav1.Condition, error),
	status metav1.ConditionStatus, reason string, words ...string) T {
	t.Helper()
	var last T
	err := framework.WaitFor(ctx, 30*time.Second, fmt.Sprintf("%s Accepted=%s (%s)", what, status, reason), func(ctx context.Context) (bool, error) {
		o, m, conds, err := get(ctx)
		if err != nil {
			return false, err
		}
		last = o
		c := meta.FindStatusCondition(conds, v1alpha1.PoolConditionAccepted)
		if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != m.GetGeneration() {
			return false, nil
		}
		for _, w := range words {
			if !strings.Contains(c.Message, w) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v; last: %+v", err, last)
	}
	return last
}
