package adverts

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	v1alpha1listers "github.com/baremetal-ccm/baremetal-ccm/pkg/generated/listers/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/kick"
)

// Controller runs on the leader, for its term: it decides, for every
// BGPAdvertisement, what is in force (status.applied and the resolved pools and
// peers) and says why in the condition Accepted. It passes again when an
// advertisement, an IPPool or a BGPPeer changes (Kick), so a reference that comes,
// goes or moves is resolved anew.
type Controller struct {
	Client         versioned.Interface
	Advertisements v1alpha1listers.BGPAdvertisementLister
	Pools          v1alpha1listers.IPPoolLister
	Peers          v1alpha1listers.BGPPeerLister
	Synced         []cache.InformerSynced
	// FilePools are the CloudConfig's pool names.
	FilePools []string
	Kick      <-chan struct{}
	// Interval between passes without events. Default 30s.
	Interval time.Duration
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time
}

const writeTimeout = 10 * time.Second

// Run passes until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("bgp-advertisements")
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

// Pass decides every BGPAdvertisement once. Write errors are logged and retried at
// the next.
func (c *Controller) Pass(ctx context.Context) {
	now := time.Now
	if c.Clock != nil {
		now = c.Clock
	}
	objs, err := c.Advertisements.List(labels.Everything())
	if err != nil || len(objs) == 0 {
		return
	}
	refs := Refs{FilePools: c.FilePools}
	if c.Pools != nil {
		refs.Pools, _ = c.Pools.List(labels.Everything())
	}
	if c.Peers != nil {
		refs.Peers, _ = c.Peers.List(labels.Everything())
	}
	for _, o := range objs {
		if o.DeletionTimestamp != nil {
			continue
		}
		o = o.DeepCopy()
		st := o.Status.DeepCopy()
		cond := metav1.Condition{Type: v1alpha1.PoolConditionAccepted, ObservedGeneration: o.Generation}
		if errs := validate(&o.Spec); len(errs) > 0 {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.AdvertisementReasonInvalid, errs.ToAggregate().Error()
		} else if r, err := resolve(&o.Spec, refs); err != nil {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.AdvertisementReasonMissingReference, err.Error()
		} else {
			st.Applied = o.Spec.DeepCopy()
			st.AllPools, st.Pools, st.AllPeers, st.PeerAddresses = r.allPools, r.pools, r.allPeers, r.peers
			cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v1alpha1.AdvertisementReasonAccepted, "in force in every replica and agent (status)"
		}
		if cond.Status != metav1.ConditionTrue {
			if st.Applied != nil {
				// The last accepted spec stays; its references are resolved anew when
				// they still resolve (a moved BGPPeer), else kept as they were.
				if r, err := resolve(st.Applied, refs); err == nil {
					st.AllPools, st.Pools, st.AllPeers, st.PeerAddresses = r.allPools, r.pools, r.allPeers, r.peers
				}
				cond.Message += "; the last accepted spec (status.applied) stays in force"
			} else {
				cond.Message += "; nothing of it is in force"
			}
		}
		c.writeStatus(ctx, o, st, cond, now())
	}
}

// writeStatus writes o's status when it differs.
func (c *Controller) writeStatus(ctx context.Context, o *v1alpha1.BGPAdvertisement, st *v1alpha1.BGPAdvertisementStatus, cond metav1.Condition, now time.Time) {
	logger := klog.FromContext(ctx)
	cond.LastTransitionTime = metav1.NewTime(now)
	meta.SetStatusCondition(&st.Conditions, cond)
	st.ObservedGeneration = o.Generation
	if len(st.Pools) == 0 {
		st.Pools = nil
	}
	if len(st.PeerAddresses) == 0 {
		st.PeerAddresses = nil
	}
	if equality.Semantic.DeepEqual(*st, o.Status) {
		return
	}
	o.Status = *st
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if _, err := c.Client.BaremetalCCMV1alpha1().BGPAdvertisements().UpdateStatus(ctx, o, metav1.UpdateOptions{}); err != nil {
		logger.V(2).Info("Writing a BGPAdvertisement's status failed; retrying", "advertisement", o.Name, "err", err)
		return
	}
	if cond.Status != metav1.ConditionTrue {
		logger.Info("BGPAdvertisement not applied", "advertisement", o.Name, "reason", cond.Reason, "message", cond.Message)
	} else {
		logger.Info("BGPAdvertisement accepted", "advertisement", o.Name, "generation", o.Generation, "pools", poolsOf(st), "peers", peersOf(st))
	}
}

func poolsOf(st *v1alpha1.BGPAdvertisementStatus) []string {
	if st.AllPools {
		return []string{"*"}
	}
	return slices.Clone(st.Pools)
}

func peersOf(st *v1alpha1.BGPAdvertisementStatus) []string {
	if st.AllPeers {
		return []string{"*"}
	}
	return slices.Clone(st.PeerAddresses)
}
