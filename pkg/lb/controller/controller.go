// Package controller is baremetal-ccm's service controller: it gives type LoadBalancer
// Services (without a loadBalancerClass) their addresses through a
// cloudprovider.LoadBalancer and keeps status.loadBalancer and the
// service.kubernetes.io/load-balancer-cleanup finalizer in step with it.
//
// It replaces the upstream service controller (k8s.io/cloud-provider/controllers/service)
// under the same name, service-lb-controller, with the same finalizer and status
// semantics, for two reasons specific to bare metal:
//
//   - Memory. The upstream controller keeps, for every Service, the list of Nodes it
//     last synced, for clouds whose load balancers point at nodes. Our addresses are
//     announced over BGP by every replica's agent, which follows Nodes and endpoints
//     itself, so the node list is never used: with 5000 Nodes and 10,000 Services it
//     was 400 MB of pointers. This controller does not watch Nodes.
//   - API writes. A new Service cost five writes (two events, a finalizer patch, a
//     status patch, our assignment event); here it costs two: one patch carrying the
//     finalizer and the status together, and the assignment event (three with the
//     MetalLB announcer, which also writes its annotations).
//
// Guarantees: a Service gets the finalizer no later than its first status; the
// finalizer is removed only after EnsureLoadBalancerDeleted succeeded; a Service that
// disappears without passing through here (finalizer removed by hand) still has its
// addresses released; every error is retried (api.RetryError after its delay, other
// errors with exponential backoff from 5 s to 5 min).
package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/eventrec"
	"github.com/baremetal-ccm/baremetal-ccm/internal/testhook"
)

// Event reasons this controller records (the upstream controller's names).
const (
	ReasonSyncFailed = "SyncLoadBalancerFailed"
	ReasonDeleted    = "DeletedLoadBalancer"
)

// Component is the event source name, as the upstream controller's.
const Component = "service-controller"

const (
	minRetryDelay = 5 * time.Second
	maxRetryDelay = 300 * time.Second
	// callTimeout bounds one sync's calls to the balancer and the API server.
	callTimeout = 30 * time.Second
)

// Options configure a Controller.
type Options struct {
	// Client writes Service status and finalizers and records events.
	Client kubernetes.Interface
	// Services is the shared Service informer.
	Services coreinformers.ServiceInformer
	// Balancer assigns and releases addresses.
	Balancer cloudprovider.LoadBalancer
	// ClusterName is passed to the Balancer.
	ClusterName string
	// Recorder records events on Services. Default: one of Run's own, recording to
	// Client as Component.
	Recorder record.EventRecorder
	// Fence, when set, must answer nil right before every write: a replica that is no
	// longer the leader (paused past its lease, then resumed) writes nothing.
	Fence Fence
}

// Fence tells whether this replica may still write as the leader.
type Fence interface {
	Check(ctx context.Context) error
}

// Conditioner is implemented by a Balancer that explains its answers as Service
// conditions (lb.LoadBalancer): AssignedCondition(svc, err) is the condition after
// EnsureLoadBalancer returned err. The controller writes it with the status patch it
// makes anyway when the addresses change, and alone only when it changed.
type Conditioner interface {
	AssignedCondition(svc *v1.Service, err error) metav1.Condition
}

// Repriming is implemented by a Balancer that can rebuild its view from the Services
// (lb.LoadBalancer): called when a status write conflicts, since the Service then
// changed behind this replica's back.
type Repriming interface {
	Reprime()
}

// PoolWatcher is implemented by a Balancer whose pools change at run time
// (lb.LoadBalancer): when they do, the Services waiting for an address are retried
// at once rather than at their backoff.
type PoolWatcher interface {
	PoolsChanged() <-chan struct{}
}

// Committer is implemented by a Balancer that claims addresses in the API server
// (lb.LoadBalancer): told after every status write of a Service (before: the
// addresses its status showed, after: those it shows now; a Service that is gone
// has neither, and no UID), it releases the claims no status needs any more.
type Committer interface {
	Committed(ctx context.Context, svc *v1.Service, before, after []netip.Addr) error
}

// Controller reconciles LoadBalancer Services. Create it with New, then Run it.
type Controller struct {
	client   kubernetes.Interface
	lister   corelisters.ServiceLister
	synced   cache.InformerSynced
	balancer cloudprovider.LoadBalancer
	cluster  string
	recorder record.EventRecorder
	fence    Fence
	queue    workqueue.TypedRateLimitingInterface[string]
	clock    func() time.Time
	// pending are the Services that want an address and have none, since when.
	pending *pendingSet
	// own are the versions of Services that this controller's own writes replaced.
	own *ownWrites
}

// New creates the controller and registers its handlers on the Service informer.
func New(o Options) (*Controller, error) {
	if o.Client == nil || o.Services == nil || o.Balancer == nil {
		return nil, errors.New("service controller: Client, Services and Balancer are required")
	}
	c := &Controller{
		client:   o.Client,
		lister:   o.Services.Lister(),
		synced:   o.Services.Informer().HasSynced,
		balancer: o.Balancer,
		cluster:  o.ClusterName,
		recorder: o.Recorder,
		fence:    o.Fence,
		clock:    time.Now,
		pending:  newPendingSet(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](minRetryDelay, maxRetryDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "service"},
		),
	}
	c.own = newOwnWrites(func() time.Time { return c.clock() })
	_, err := o.Services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if svc, ok := obj.(*v1.Service); ok && (wantsLoadBalancer(svc) || hasOurs(svc)) {
				c.enqueue(svc)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Service)
			n, ok2 := cur.(*v1.Service)
			if ok2 {
				c.own.seen(n.Namespace+"/"+n.Name, n.ResourceVersion)
			}
			if ok1 && ok2 && (wantsLoadBalancer(n) || hasOurs(n) || wantsLoadBalancer(o)) && changed(o, n) {
				c.enqueue(n)
			}
		},
		DeleteFunc: func(obj any) {
			// Normally the finalizer brings a deletion through UpdateFunc first; this
			// catches a Service whose finalizer was removed by someone else.
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if svc, ok := obj.(*v1.Service); ok {
				c.own.forget(svc.Namespace + "/" + svc.Name)
			}
			if svc, ok := obj.(*v1.Service); ok && (wantsLoadBalancer(svc) || hasOurs(svc)) {
				c.enqueue(svc)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("service controller: %w", err)
	}
	return c, nil
}

func (c *Controller) enqueue(svc *v1.Service) {
	if testhook.Ignored(svc.Name) {
		return
	}
	c.queue.Add(svc.Namespace + "/" + svc.Name)
}

// Run processes Services with the given number of workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	if c.recorder == nil {
		b := eventrec.NewBroadcaster(ctx)
		b.StartStructuredLogging(3)
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
		defer b.Shutdown()
		c.recorder = b.NewRecorder(scheme.Scheme, v1.EventSource{Component: Component})
	}
	logger.Info("Starting service controller", "workers", workers)
	defer logger.Info("Shutting down service controller")
	defer c.pending.reset() // another replica leads now: it reports them
	go wait.UntilWithContext(ctx, func(context.Context) { c.pending.publish(c.clock()) }, 5*time.Second)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	if c.fence != nil {
		// Take note of the lease this replica just acquired.
		if err := c.fence.Check(ctx); err != nil {
			logger.Error(err, "Not the leader: the service controller writes nothing")
		}
	}
	if pw, ok := c.balancer.(PoolWatcher); ok {
		go c.retryOnPoolChange(ctx, pw)
	}
	if workers < 1 {
		workers = 1
	}
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for c.processNext(ctx) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

// retryOnPoolChange requeues the waiting Services, past their backoff, whenever the
// pools change, until ctx ends.
func (c *Controller) retryOnPoolChange(ctx context.Context, pw PoolWatcher) {
	changed := pw.PoolsChanged()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		// A change from here on closes this one: none is missed while requeueing.
		changed = pw.PoolsChanged()
		for _, key := range c.pending.keys() {
			c.queue.Forget(key)
			c.queue.Add(key)
		}
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := c.sync(ctx, key)
	if err == nil {
		c.queue.Forget(key)
		return true
	}
	logger := klog.FromContext(ctx)
	var re *api.RetryError
	if errors.As(err, &re) {
		logger.V(2).Info("Service not ready yet; retrying", "service", key, "after", re.RetryAfter(), "reason", err.Error())
		c.queue.AddAfter(key, re.RetryAfter())
	} else {
		logger.Error(err, "Syncing load balancer failed; retrying with backoff", "service", key)
		c.queue.AddRateLimited(key)
	}
	return true
}

// sync brings one Service's load balancer, finalizer and status in step.
func (c *Controller) sync(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not ours to retry: a malformed key never becomes valid
	}
	svc, err := c.lister.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.pending.done(key)
		c.own.forget(key)
		// Gone without its finalizer passing through here: release what it held.
		gone := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := c.balancer.EnsureLoadBalancerDeleted(ctx, c.cluster, gone); err != nil && !errors.Is(err, cloudprovider.ImplementedElsewhere) {
			return fmt.Errorf("releasing the load balancer of deleted Service %s: %w", key, err)
		}
		c.committed(ctx, gone, nil, nil)
		return nil
	}
	if err != nil {
		return err
	}
	if c.own.replaced(key, svc.ResourceVersion) {
		// This version was the start of a sync that ended in writes of its own, which
		// the informer has not delivered yet: syncing it again would write the same on
		// top of a stale resourceVersion, a conflict and a re-prime for nothing. The
		// newer version's event enqueues the Service; this re-check covers a write
		// that changed nothing the event handler looks at.
		klog.FromContext(ctx).V(4).Info("The informer has not caught up with this controller's last write yet", "service", key, "resourceVersion", svc.ResourceVersion)
		c.queue.AddAfter(key, ownWriteRecheck)
		return nil
	}
	svc = svc.DeepCopy() // the informer's object is shared; the balancer gets its own
	if c.fence != nil {
		if err := c.fence.Check(ctx); err != nil {
			return fmt.Errorf("not syncing: %w", err)
		}
	}
	var w trail
	if !wantsLoadBalancer(svc) || svc.DeletionTimestamp != nil {
		c.pending.done(key)
		err := c.cleanup(ctx, svc, &w)
		if err == nil {
			c.own.wrote(key, w)
		}
		return err
	}
	assigned, err := c.ensure(ctx, svc, &w)
	if assigned || len(svc.Status.LoadBalancer.Ingress) > 0 { // pending: wants one and has none
		c.pending.done(key)
	} else {
		c.pending.waiting(key, pendingSince(svc, c.clock()))
	}
	if err == nil {
		// Only a sync that succeeded: a failed one is retried, whatever the informer shows.
		c.own.wrote(key, w)
	}
	return err
}

// pendingSince is when the Service started waiting for its address: when its
// AddressAssigned condition turned False, else when it was created (or now).
func pendingSince(svc *v1.Service, now time.Time) time.Time {
	for _, c := range svc.Status.Conditions {
		if c.Type == "baremetal-ccm.io/AddressAssigned" && c.Status == metav1.ConditionFalse && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	if !svc.CreationTimestamp.IsZero() {
		return svc.CreationTimestamp.Time
	}
	return now
}

// ensure assigns the Service its addresses and writes finalizer and status in one
// patch when either is missing or different. It reports whether the Service holds
// addresses now.
func (c *Controller) ensure(ctx context.Context, svc *v1.Service, w *trail) (bool, error) {
	from := svc.ResourceVersion
	status, err := c.balancer.EnsureLoadBalancer(ctx, c.cluster, svc, nil)
	w.moved(from, svc) // the announcer's write (metallb annotations) advances svc
	if errors.Is(err, cloudprovider.ImplementedElsewhere) {
		return true, nil // not ours to report
	}
	if err != nil {
		var re *api.RetryError
		if !errors.As(err, &re) {
			c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonSyncFailed, "Error syncing load balancer: %v", err)
		}
		if cd, ok := c.balancer.(Conditioner); ok {
			// Why it waits, where kubectl describe shows it: written only when it
			// changed (a Service retried every 30 s is not rewritten).
			want := svc.DeepCopy()
			setCondition(&want.Status.Conditions, cd.AssignedCondition(svc, err), c.clock())
			if perr := c.patch(ctx, svc, want); perr != nil && !apierrors.IsNotFound(perr) {
				klog.FromContext(ctx).V(2).Info("Writing the AddressAssigned condition failed", "service", svc.Namespace+"/"+svc.Name, "err", perr)
			}
		}
		return false, fmt.Errorf("ensuring the load balancer: %w", err)
	}
	if status == nil {
		return false, errors.New("the balancer returned no status")
	}
	want := svc.DeepCopy()
	if !servicehelper.HasLBFinalizer(want) {
		want.Finalizers = append(want.Finalizers, servicehelper.LoadBalancerCleanupFinalizer)
	}
	want.Status.LoadBalancer = *status
	if cd, ok := c.balancer.(Conditioner); ok {
		setCondition(&want.Status.Conditions, cd.AssignedCondition(svc, nil), c.clock())
	}
	from = svc.ResourceVersion
	if err := c.patch(ctx, svc, want); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted meanwhile (it had no finalizer yet): give the addresses back.
			err := c.balancer.EnsureLoadBalancerDeleted(ctx, c.cluster, svc)
			if err == nil {
				c.committed(ctx, svc, ingressIPs(&svc.Status.LoadBalancer), nil)
			}
			return true, err
		}
		if apierrors.IsConflict(err) {
			// Changed since this replica read it: retried with the new version, from
			// an allocator rebuilt from the Services (another writer may have moved
			// addresses).
			return false, fmt.Errorf("writing the load balancer status: %w", err)
		}
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonSyncFailed, "Error writing load balancer status and finalizer: %v", err)
		return false, fmt.Errorf("writing the load balancer status: %w", err)
	}
	w.moved(from, svc)
	c.committed(ctx, svc, ingressIPs(&svc.Status.LoadBalancer), ingressIPs(status))
	return len(status.Ingress) > 0, nil
}

// committed tells a Committer balancer about a status write; a failure is left
// to the balancer's collector of claims (logged).
func (c *Controller) committed(ctx context.Context, svc *v1.Service, before, after []netip.Addr) {
	cm, ok := c.balancer.(Committer)
	if !ok {
		return
	}
	if err := cm.Committed(ctx, svc, before, after); err != nil {
		klog.FromContext(ctx).V(2).Info("Releasing address claims failed; the collector deletes them later", "service", svc.Namespace+"/"+svc.Name, "err", err)
	}
}

func ingressIPs(st *v1.LoadBalancerStatus) []netip.Addr {
	var ips []netip.Addr
	for _, in := range st.Ingress {
		if ip, err := netip.ParseAddr(in.IP); err == nil {
			ips = append(ips, ip.Unmap())
		}
	}
	return ips
}

// cleanup releases the Service's addresses, then removes the finalizer and clears the
// status in one patch, also for a Service that other finalizers keep terminating, so
// that no Service shows an address that is free again. A Service of another
// loadBalancerClass that carries the finalizer only loses the finalizer: its status
// and annotations are its own controller's.
func (c *Controller) cleanup(ctx context.Context, svc *v1.Service, w *trail) error {
	_, exists, err := c.balancer.GetLoadBalancer(ctx, c.cluster, svc)
	if err != nil {
		return fmt.Errorf("checking the load balancer before cleanup: %w", err)
	}
	ours := exists || hasOurs(svc) && svc.Spec.LoadBalancerClass == nil
	if ours {
		from := svc.ResourceVersion
		err := c.balancer.EnsureLoadBalancerDeleted(ctx, c.cluster, svc)
		w.moved(from, svc)
		if err != nil && !errors.Is(err, cloudprovider.ImplementedElsewhere) {
			var re *api.RetryError
			if !errors.As(err, &re) {
				c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonSyncFailed, "Error deleting load balancer: %v", err)
			}
			return fmt.Errorf("deleting the load balancer: %w", err)
		}
	}
	want := svc.DeepCopy()
	want.Finalizers = slices.DeleteFunc(want.Finalizers, func(f string) bool { return f == servicehelper.LoadBalancerCleanupFinalizer })
	if ours {
		want.Status.LoadBalancer = v1.LoadBalancerStatus{}
		want.Status.Conditions = slices.DeleteFunc(want.Status.Conditions, func(c metav1.Condition) bool { return ownedCondition(c.Type) })
	}
	from := svc.ResourceVersion
	if err := c.patch(ctx, svc, want); err != nil && !apierrors.IsNotFound(err) {
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonSyncFailed, "Error removing load balancer status and cleanup finalizer: %v", err)
		return fmt.Errorf("removing the load balancer cleanup finalizer: %w", err)
	}
	w.moved(from, svc)
	if ours {
		c.committed(ctx, svc, ingressIPs(&svc.Status.LoadBalancer), nil)
		c.recorder.Event(svc, v1.EventTypeNormal, ReasonDeleted, "Deleted load balancer")
	}
	return nil
}

// patch writes the difference between old's and want's cleanup finalizer and
// status.loadBalancer through the status subresource (which also takes metadata) as
// one strategic merge patch, or nothing when there is none. The patch names only our
// finalizer, so finalizers others add meanwhile are kept whatever the informer's view.
// It is conditional on old's resourceVersion: a Service changed since (by a user, or
// by another replica that acted as leader) is not overwritten; the Conflict makes the
// balancer re-prime. The Fence is checked right before the write. After a write, old
// carries the resourceVersion it stored (old is otherwise unchanged).
func (c *Controller) patch(ctx context.Context, old, want *v1.Service) error {
	meta := map[string]any{"resourceVersion": old.ResourceVersion}
	switch had, has := servicehelper.HasLBFinalizer(old), servicehelper.HasLBFinalizer(want); {
	case has && !had:
		meta["finalizers"] = []string{servicehelper.LoadBalancerCleanupFinalizer}
	case had && !has:
		meta["$deleteFromPrimitiveList/finalizers"] = []string{servicehelper.LoadBalancerCleanupFinalizer}
	}
	body := map[string]any{}
	status := map[string]any{}
	if !servicehelper.LoadBalancerStatusEqual(&old.Status.LoadBalancer, &want.Status.LoadBalancer) {
		// ingress is replaced as a whole; null clears it.
		status["loadBalancer"] = map[string]any{"ingress": want.Status.LoadBalancer.Ingress}
	}
	if conds := conditionsPatch(old.Status.Conditions, want.Status.Conditions); len(conds) > 0 {
		status["conditions"] = conds // merged by type: others' conditions are kept
	}
	if len(status) > 0 {
		body["status"] = status
	}
	if len(meta) == 1 && len(status) == 0 {
		return nil // nothing but the precondition
	}
	body["metadata"] = meta
	if c.fence != nil {
		if err := c.fence.Check(ctx); err != nil {
			return fmt.Errorf("not writing: %w", err)
		}
	}
	p, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encoding the patch: %w", err)
	}
	out, err := c.client.CoreV1().Services(old.Namespace).Patch(ctx, old.Name, types.StrategicMergePatchType, p, metav1.PatchOptions{}, "status")
	if err == nil && out != nil {
		old.ResourceVersion = out.ResourceVersion
	}
	if apierrors.IsConflict(err) {
		if r, ok := c.balancer.(Repriming); ok {
			r.Reprime()
		}
	}
	return err
}

// wantsLoadBalancer reports whether the Service is a LoadBalancer this controller
// serves: type LoadBalancer and no loadBalancerClass.
func wantsLoadBalancer(svc *v1.Service) bool {
	return svc.Spec.Type == v1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil
}

// hasOurs reports whether the Service carries our finalizer.
func hasOurs(svc *v1.Service) bool { return servicehelper.HasLBFinalizer(svc) }

// changed reports whether an update can change what this controller does: spec,
// annotations and labels (address requests, pool selectors), finalizers, deletion,
// identity, or the addresses in status.loadBalancer. A change of the addresses is seen
// because the status is the record of what a Service holds: one this replica did not
// write (a former leader that resumed, a person) is checked against the allocator at
// once. That cannot start a write war with another writer: the balancer keeps the
// addresses a status shows whenever the request allows them, and otherwise leaves
// the status alone with an event.
func changed(old, cur *v1.Service) bool {
	return old.UID != cur.UID ||
		!servicehelper.LoadBalancerStatusEqual(&old.Status.LoadBalancer, &cur.Status.LoadBalancer) ||
		!reflect.DeepEqual(old.Spec, cur.Spec) ||
		!reflect.DeepEqual(old.Annotations, cur.Annotations) ||
		!reflect.DeepEqual(old.Labels, cur.Labels) ||
		!reflect.DeepEqual(old.Finalizers, cur.Finalizers) ||
		!reflect.DeepEqual(old.DeletionTimestamp, cur.DeletionTimestamp)
}
