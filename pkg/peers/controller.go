package peers

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	v1alpha1listers "github.com/baremetal-ccm/baremetal-ccm/pkg/generated/listers/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/kick"
)

// Controller runs on the leader, for its term: it decides, for every BGPPeer, what
// is in force (status.applied) and says why in the condition Accepted.
type Controller struct {
	Client versioned.Interface
	Peers  v1alpha1listers.BGPPeerLister
	Synced []cache.InformerSynced
	// File are the CloudConfig's bgp.peers.
	File []config.BGPPeer
	// Kick, when it receives, starts a pass at once (BGPPeer events).
	Kick <-chan struct{}
	// Interval between passes without events. Default 30s.
	Interval time.Duration
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time
}

// writeTimeout bounds one write to the API server.
const writeTimeout = 10 * time.Second

// Run passes over the BGPPeers until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("bgp-peers")
	ctx = klog.NewContext(ctx, logger)
	if !cache.WaitForCacheSync(ctx.Done(), c.Synced...) {
		return
	}
	interval := c.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	kick.Loop(ctx, c.Kick, interval, func() { c.Pass(ctx) })
}

// Pass decides every BGPPeer once, oldest first. Write errors are logged and retried
// at the next.
func (c *Controller) Pass(ctx context.Context) {
	now := time.Now
	if c.Clock != nil {
		now = c.Clock
	}
	objs, err := c.Peers.List(labels.Everything())
	if err != nil || len(objs) == 0 {
		return
	}
	objs = sorted(objs)
	// owner: which object holds each address in force: what the objects apply now
	// (the older first, should two), replaced as the pass decides. A change to an
	// address another object has in force is a Conflict, whatever their ages; among
	// objects not applied yet, the older gets an address.
	owner := map[netip.Addr]string{}
	for _, o := range objs {
		if o.DeletionTimestamp != nil || o.Status.Applied == nil {
			continue
		}
		if a, err := netip.ParseAddr(o.Status.Applied.Address); err == nil {
			if _, taken := owner[a.Unmap()]; !taken {
				owner[a.Unmap()] = o.Name
			}
		}
	}
	for _, o := range objs {
		if o.DeletionTimestamp != nil {
			continue
		}
		o = o.DeepCopy()
		applied := o.Status.Applied
		cond := metav1.Condition{Type: v1alpha1.PoolConditionAccepted, ObservedGeneration: o.Generation}
		reason, msg := check(o, c.File, owner)
		if reason != "" {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, reason, msg
			if applied != nil && !taken(o.Name, applied, c.File, owner) {
				cond.Message += "; the last accepted spec (status.applied) stays in force"
			} else {
				// Its address is a CloudConfig peer's or an older object's now.
				applied = nil
				cond.Message += "; nothing of it is in force"
			}
		} else {
			applied = o.Spec.DeepCopy()
			cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.PeerReasonAccepted
			cond.Message = "in force in every speaker its nodeSelector picks (status.applied)"
			if i := slices.IndexFunc(c.File, func(f config.BGPPeer) bool { return sameAddr(f.Address, applied.Address) }); i >= 0 {
				cond.Message = fmt.Sprintf("the same as the CloudConfig's bgp.peers[%d]: in force where a replica's CloudConfig has it no more (status.applied)", i)
			}
		}
		for a, n := range owner {
			if n == o.Name {
				delete(owner, a)
			}
		}
		if applied != nil {
			if a, err := netip.ParseAddr(applied.Address); err == nil {
				owner[a.Unmap()] = o.Name
			}
		}
		c.writeStatus(ctx, o, cond, applied, now())
	}
}

// taken reports whether the address of self's applied spec belongs to a
// CloudConfig peer (other than the same peer) or another object.
func taken(self string, applied *v1alpha1.BGPPeerSpec, file []config.BGPPeer, owner map[netip.Addr]string) bool {
	for i := range file {
		if sameAddr(file[i].Address, applied.Address) && !SameAsFile(&file[i], applied) {
			return true
		}
	}
	a, err := netip.ParseAddr(applied.Address)
	if err != nil {
		return true
	}
	n, ok := owner[a.Unmap()]
	return ok && n != self
}

// writeStatus writes o's status when it differs.
func (c *Controller) writeStatus(ctx context.Context, o *v1alpha1.BGPPeer, cond metav1.Condition, applied *v1alpha1.BGPPeerSpec, now time.Time) {
	logger := klog.FromContext(ctx)
	st := o.Status.DeepCopy()
	cond.LastTransitionTime = metav1.NewTime(now)
	meta.SetStatusCondition(&st.Conditions, cond)
	st.ObservedGeneration = o.Generation
	st.Applied = applied
	if equality.Semantic.DeepEqual(*st, o.Status) {
		return
	}
	o.Status = *st
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if _, err := c.Client.BaremetalCCMV1alpha1().BGPPeers().UpdateStatus(ctx, o, metav1.UpdateOptions{}); err != nil {
		logger.V(2).Info("Writing a BGPPeer's status failed; retrying", "peer", o.Name, "err", err)
		return
	}
	if cond.Status != metav1.ConditionTrue {
		logger.Info("BGPPeer not applied", "peer", o.Name, "reason", cond.Reason, "message", cond.Message)
	} else {
		logger.Info("BGPPeer accepted", "peer", o.Name, "generation", o.Generation, "address", applied.Address)
	}
}
