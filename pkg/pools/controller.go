package pools

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
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
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
)

// Controller runs on the leader, for its term: it decides, for every IPPool, what is
// in force (status.applied), says why in the condition Accepted, reports the pool's
// use, and keeps the finalizer that holds a pool whose addresses Services hold.
type Controller struct {
	Client versioned.Interface
	Pools  v1alpha1listers.IPPoolLister
	Synced []cache.InformerSynced
	// File are the CloudConfig's pools.
	File []config.AddressPool
	// Holders returns every address a Service's status shows, with the Service's
	// namespace and labels (Synced covers its cache): a pool change never takes one
	// of them away, nor stops admitting its Service.
	Holders func() []Holder
	// Allocated returns every address the leader's allocator holds (some not yet in
	// any status).
	Allocated func() []netip.Addr
	// Apply puts a pool set in force in the leader's allocator before any status
	// says so, refusing one that leaves out an address held in a pool
	// (ipam.ErrWouldStrand): then nothing is written and the next pass decides
	// again. Nil: nothing is applied here (the Watcher applies the statuses).
	Apply func([]config.AddressPool) error
	// Usage returns every pool's size and use per family.
	Usage func() []ipam.PoolUsage
	// Kick, when it receives, starts a pass at once (IPPool events).
	Kick <-chan struct{}
	// Interval between passes without events. Default 5s.
	Interval time.Duration
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time
}

// heldShown bounds the addresses a condition names.
const heldShown = 5

// Run passes over the IPPools until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("ip-pools")
	ctx = klog.NewContext(ctx, logger)
	if !cache.WaitForCacheSync(ctx.Done(), c.Synced...) {
		return
	}
	interval := c.Interval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	kick.Loop(ctx, c.Kick, interval, func() { c.Pass(ctx) })
}

// Pass decides every IPPool once. Write errors are logged and retried at the next.
func (c *Controller) Pass(ctx context.Context) {
	logger := klog.FromContext(ctx)
	now := time.Now
	if c.Clock != nil {
		now = c.Clock
	}
	objs, err := c.Pools.List(labels.Everything())
	if err != nil || len(objs) == 0 {
		return // no IPPool: nothing to decide (and no Service list to read)
	}
	objs = slices.Clone(objs)
	sort.Slice(objs, func(i, j int) bool {
		a, b := objs[i], objs[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	file := map[string]*config.AddressPool{}
	for i := range c.File {
		file[c.File[i].Name] = &c.File[i]
	}
	// In force: what every object applies now, replaced as the pass decides.
	inForce := map[string][]span{}
	for _, o := range objs {
		if o.Status.Applied != nil {
			cfg := ToConfig(o.Name, o.Status.Applied)
			inForce[o.Name] = spans(&cfg)
		}
	}
	// others are the ranges in force but name's own (a CloudConfig pool of the same
	// name is its own when equal: check says so).
	others := func(name string) []span {
		var out []span
		for i := range c.File {
			if c.File[i].Name != name {
				out = append(out, spans(&c.File[i])...)
			}
		}
		for n, s := range inForce {
			if n != name {
				out = append(out, s...)
			}
		}
		return out
	}
	usage := map[string][2]*v1alpha1.PoolUsage{}
	if c.Usage != nil {
		for _, u := range c.Usage() {
			cur := usage[u.Pool]
			pu := &v1alpha1.PoolUsage{Size: strconv.FormatUint(u.Size, 10), Used: strconv.FormatUint(u.Used, 10), Free: strconv.FormatUint(u.Size-min(u.Used, u.Size), 10)}
			if u.Family == "IPv6" {
				cur[1] = pu
			} else {
				cur[0] = pu
			}
			usage[u.Pool] = cur
		}
	}
	// The addresses in use, read once per pass and only when a decision needs them
	// (a pool in force that changes or goes): O(Services).
	var inUseRead bool
	var inUseList []Holder
	inUse := func() []Holder {
		if !inUseRead {
			inUseRead = true
			if c.Holders != nil {
				inUseList = c.Holders()
			}
			if c.Allocated != nil {
				for _, ip := range c.Allocated() {
					inUseList = append(inUseList, Holder{IP: ip})
				}
			}
		}
		return inUseList
	}
	// Decide every object, then put the new set in force here, then say so.
	type write struct {
		o       *v1alpha1.IPPool
		cond    metav1.Condition
		applied *v1alpha1.IPPoolSpec
	}
	var writes []write
	decided := make([]*v1alpha1.IPPool, 0, len(objs))
	for _, o := range objs {
		o = o.DeepCopy()
		applied := o.Status.Applied
		cond := metav1.Condition{Type: v1alpha1.PoolConditionAccepted, ObservedGeneration: o.Generation}
		if o.DeletionTimestamp != nil {
			if !slices.Contains(o.Finalizers, v1alpha1.PoolFinalizer) {
				continue
			}
			if ips, n := held(applied, nil, o.Name, inUse, heldShown); n > 0 {
				cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.PoolReasonDeletionHeld
				cond.Message = fmt.Sprintf("being deleted, but Services hold %d of its addresses (%s): it stays in force, assigning no new address, until they release them", n, strings.Join(ips, ", "))
				writes = append(writes, write{o, cond, applied})
				decided = append(decided, withApplied(o, applied))
				continue
			}
			o.Finalizers = slices.DeleteFunc(o.Finalizers, func(f string) bool { return f == v1alpha1.PoolFinalizer })
			uctx, cancel := context.WithTimeout(ctx, writeTimeout)
			_, err := c.Client.BaremetalCCMV1alpha1().IPPools().Update(uctx, o, metav1.UpdateOptions{})
			cancel()
			if err != nil {
				logger.V(2).Info("Releasing a deleted IPPool failed; retrying", "pool", o.Name, "err", err)
			} else {
				delete(inForce, o.Name)
				logger.Info("IPPool deleted: no Service holds its addresses any more", "pool", o.Name)
			}
			continue
		}
		if !slices.Contains(o.Finalizers, v1alpha1.PoolFinalizer) {
			o.Finalizers = append(o.Finalizers, v1alpha1.PoolFinalizer)
			uctx, cancel := context.WithTimeout(ctx, writeTimeout)
			updated, err := c.Client.BaremetalCCMV1alpha1().IPPools().Update(uctx, o, metav1.UpdateOptions{})
			cancel()
			if err != nil {
				logger.V(2).Info("Adding the finalizer to an IPPool failed; retrying", "pool", o.Name, "err", err)
				continue
			}
			o = updated
		}
		reason, msg := check(o, file, others(o.Name))
		switch {
		case reason != "":
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, reason, msg
			if applied != nil {
				cond.Message += "; the last accepted spec (status.applied) stays in force"
			} else {
				cond.Message += "; nothing of it is in force"
			}
		default:
			if ips, n := held(applied, &o.Spec, o.Name, inUse, heldShown); n > 0 {
				cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.PoolReasonShrinkHeld
				cond.Message = fmt.Sprintf("the spec takes away %d addresses Services hold, or no longer admits the Services holding them (%s): the last accepted spec (status.applied) stays in force until they release them", n, strings.Join(ips, ", "))
				break
			}
			applied = o.Spec.DeepCopy()
			cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.PoolReasonAccepted
			cond.Message = "in force in every replica and agent (status.applied)"
			cfg := ToConfig(o.Name, applied)
			inForce[o.Name] = spans(&cfg)
		}
		writes = append(writes, write{o, cond, applied})
		decided = append(decided, withApplied(o, applied))
	}
	if c.Apply != nil {
		if err := c.Apply(Effective(c.File, decided)); err != nil {
			logger.Info("Warning: the IPPools decided cannot be put in force yet; deciding again at the next pass", "err", err)
			return
		}
	}
	for _, w := range writes {
		c.writeStatus(ctx, w.o, w.cond, w.applied, usage[w.o.Name], now())
	}
}

// writeTimeout bounds one write to the API server.
const writeTimeout = 10 * time.Second

// withApplied is a copy of o whose status.applied is applied.
func withApplied(o *v1alpha1.IPPool, applied *v1alpha1.IPPoolSpec) *v1alpha1.IPPool {
	c := o.DeepCopy()
	c.Status.Applied = applied
	return c
}

// writeStatus writes o's status when it differs.
func (c *Controller) writeStatus(ctx context.Context, o *v1alpha1.IPPool, cond metav1.Condition, applied *v1alpha1.IPPoolSpec, use [2]*v1alpha1.PoolUsage, now time.Time) {
	st := o.Status.DeepCopy()
	cond.LastTransitionTime = metav1.NewTime(now)
	meta.SetStatusCondition(&st.Conditions, cond)
	st.ObservedGeneration = o.Generation
	st.Applied = applied
	st.IPv4, st.IPv6 = use[0], use[1]
	if applied == nil {
		st.IPv4, st.IPv6 = nil, nil
	}
	if equality.Semantic.DeepEqual(*st, o.Status) {
		return
	}
	o.Status = *st
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if _, err := c.Client.BaremetalCCMV1alpha1().IPPools().UpdateStatus(ctx, o, metav1.UpdateOptions{}); err != nil {
		klog.FromContext(ctx).V(2).Info("Writing an IPPool's status failed; retrying", "pool", o.Name, "err", err)
		return
	}
	if cond.Status != metav1.ConditionTrue {
		klog.FromContext(ctx).Info("IPPool not applied", "pool", o.Name, "reason", cond.Reason, "message", cond.Message)
	} else if applied != nil {
		klog.FromContext(ctx).Info("IPPool accepted", "pool", o.Name, "generation", o.Generation, "addresses", applied.Addresses)
	}
}
