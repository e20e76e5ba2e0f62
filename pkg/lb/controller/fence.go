package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ErrNotLeader is wrapped by the errors of LeaseFence.Check.
var ErrNotLeader = errors.New("this replica is no longer the leader")

// LeaseFence is a Fence over the leader-election Lease: client-go's leader election
// has no fencing, so a replica that was paused (SIGSTOP, a VM or cgroup freeze) for
// longer than the lease still believes it leads until its next renewal fails, and would
// write from a stale view meanwhile. Check reads the Lease from the API server and
// answers nil only while it is held by the holder it recorded at its first check (made
// when this replica started leading: the controllers run only then), without a change
// of leaseTransitions, and not expired. A positive answer is reused for MaxAge,
// measured on the monotonic and the wall clock both, so a pause of any kind makes the
// next Check read the Lease again.
type LeaseFence struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// MaxAge is how long a positive answer is reused. Default: 1s.
	MaxAge time.Duration
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// Hostname, when set, must prefix the holder identity recorded first (client-go's
	// identities are "<hostname>_<uuid>"). Default: os.Hostname.
	Hostname string

	mu          sync.Mutex
	holder      string
	transitions int32
	okAt        time.Time // with a monotonic reading
	okWall      time.Time // wall clock only
}

var _ Fence = (*LeaseFence)(nil)

// Check implements Fence.
func (f *LeaseFence) Check(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	clk := f.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	maxAge := f.MaxAge
	if maxAge <= 0 {
		maxAge = time.Second
	}
	now := clk.Now()
	if !f.okAt.IsZero() {
		mono, wall := now.Sub(f.okAt), now.Round(0).Sub(f.okWall)
		if mono >= 0 && mono < maxAge && wall >= 0 && wall < maxAge {
			return nil
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lease, err := f.Client.CoordinationV1().Leases(f.Namespace).Get(cctx, f.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%w: cannot read Lease %s/%s: %w", ErrNotLeader, f.Namespace, f.Name, err)
	}
	holder, transitions := leaseHolder(lease)
	if f.holder == "" {
		host := f.Hostname
		if host == "" {
			host, _ = os.Hostname()
		}
		if holder == "" || host != "" && !strings.HasPrefix(holder, host+"_") {
			return fmt.Errorf("%w: Lease %s/%s is held by %q, not by this host %q", ErrNotLeader, f.Namespace, f.Name, holder, host)
		}
		f.holder, f.transitions = holder, transitions
		klog.FromContext(ctx).V(2).Info("Leader lease recorded for fencing", "holder", holder, "transitions", transitions)
	}
	if holder != f.holder || transitions != f.transitions {
		return fmt.Errorf("%w: Lease %s/%s is now held by %q (transitions %d), this replica led as %q (transitions %d)",
			ErrNotLeader, f.Namespace, f.Name, holder, transitions, f.holder, f.transitions)
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return fmt.Errorf("%w: Lease %s/%s has no renew time", ErrNotLeader, f.Namespace, f.Name)
	}
	expiry := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	if !now.Round(0).Before(expiry) {
		return fmt.Errorf("%w: Lease %s/%s was last renewed at %s and expired at %s", ErrNotLeader, f.Namespace, f.Name,
			lease.Spec.RenewTime.UTC().Format(time.RFC3339Nano), expiry.UTC().Format(time.RFC3339Nano))
	}
	f.okAt, f.okWall = now, now.Round(0)
	return nil
}

func leaseHolder(l *coordinationv1.Lease) (string, int32) {
	var h string
	var t int32
	if l.Spec.HolderIdentity != nil {
		h = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		t = *l.Spec.LeaseTransitions
	}
	return h, t
}
