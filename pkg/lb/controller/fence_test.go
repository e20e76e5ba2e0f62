package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func lease(holder string, transitions int32, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "ccm"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseTransitions: ptr.To(transitions),
			RenewTime: ptr.To(metav1.NewMicroTime(renew)), LeaseDurationSeconds: ptr.To(int32(15)),
		},
	}
}

// TestLeaseFence: the fence answers nil while the Lease is held, as recorded at the
// first check, and fresh; a pause past the lease in which another replica took it, an
// expired lease, or a first check by a host that does not hold it are refused.
func TestLeaseFence(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	client := fake.NewClientset(lease("cp-1_abc", 3, clk.Now()))
	f := &LeaseFence{Client: client, Namespace: "kube-system", Name: "ccm", Clock: clk, Hostname: "cp-1"}
	gets := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" {
				n++
			}
		}
		return n
	}

	if err := f.Check(ctx); err != nil {
		t.Fatalf("first check by the holder: %v", err)
	}
	clk.Step(500 * time.Millisecond)
	if err := f.Check(ctx); err != nil || gets() != 1 {
		t.Fatalf("within MaxAge: %v, %d reads; want nil and the answer reused", err, gets())
	}
	clk.Step(time.Second)
	if err := f.Check(ctx); err != nil || gets() != 2 {
		t.Fatalf("after MaxAge: %v, %d reads; want nil after a fresh read", err, gets())
	}

	// Paused for 20 s: the Lease expired and another replica took it.
	clk.Step(20 * time.Second)
	if _, err := client.CoordinationV1().Leases("kube-system").Update(ctx, lease("cp-2_def", 4, clk.Now()), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("after losing the lease: %v, want ErrNotLeader", err)
	}
	// Even if the same identity took it back meanwhile: the transitions changed.
	if _, err := client.CoordinationV1().Leases("kube-system").Update(ctx, lease("cp-1_abc", 5, clk.Now()), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("after a change of transitions: %v, want ErrNotLeader", err)
	}

	// Expired but not taken: not fresh.
	clk2 := clocktesting.NewFakeClock(clk.Now())
	client2 := fake.NewClientset(lease("cp-1_abc", 3, clk2.Now()))
	f2 := &LeaseFence{Client: client2, Namespace: "kube-system", Name: "ccm", Clock: clk2, Hostname: "cp-1"}
	if err := f2.Check(ctx); err != nil {
		t.Fatal(err)
	}
	clk2.Step(16 * time.Second)
	if err := f2.Check(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("expired lease: %v, want ErrNotLeader", err)
	}

	// A first check on a host that does not hold the lease records nothing.
	f3 := &LeaseFence{Client: fake.NewClientset(lease("cp-2_def", 1, clk.Now())), Namespace: "kube-system", Name: "ccm", Clock: clk, Hostname: "cp-1"}
	if err := f3.Check(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("first check on another host: %v, want ErrNotLeader", err)
	}
}

// TestFencedControllerWritesNothing: a controller whose fence refuses writes no status
// and no finalizer.
func TestFencedControllerWritesNothing(t *testing.T) {
	f := newFixture(t, lbService("web"))
	f.c.fence = refuse{}
	if err := f.c.sync(context.Background(), "ns/web"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("sync = %v, want ErrNotLeader", err)
	}
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "patch" || a.GetVerb() == "update" {
			t.Fatalf("a fenced controller wrote: %v", a)
		}
	}
}

type refuse struct{}

func (refuse) Check(context.Context) error { return ErrNotLeader }
