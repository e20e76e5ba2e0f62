package hostinfo

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/identity"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// PublisherOptions configure a Publisher.
type PublisherOptions struct {
	Client   kubernetes.Interface
	Nodes    corelisters.NodeLister
	Informer cache.SharedIndexInformer
	// View returns the accepted inventory.
	View func() (*inventory.View, error)
	// Interval is how often the inventory is checked for changes. Default 2s.
	Interval time.Duration
}

// Publisher keeps Annotation current on every initialized Node (providerID
// baremetal://<host>, no uninitialized taint) whose host is in the accepted inventory
// and whose systemUUID does not contradict the host's (identity.Check); from a Node
// that contradicts it, the annotation is removed. It runs on the leader,
// for one leadership term: its event handler, queue and worker end with Run.
// A Node whose host is missing from the inventory keeps its last annotation: a host
// leaving the inventory is the deletion guard's business, and an agent keeps peering
// meanwhile.
type Publisher struct {
	o      PublisherOptions
	queue  workqueue.TypedRateLimitingInterface[string]
	digest string
	reg    cache.ResourceEventHandlerRegistration
}

// NewPublisher registers its event handler on o.Informer.
func NewPublisher(o PublisherOptions) (*Publisher, error) {
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	p := &Publisher{o: o, queue: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "hostinfo"})}
	enqueue := func(obj any) {
		if n, ok := obj.(*v1.Node); ok {
			p.queue.Add(n.Name)
		}
	}
	reg, err := o.Informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	if err != nil {
		return nil, err
	}
	p.reg = reg
	return p, nil
}

// Run publishes until ctx is done (a leadership term), then removes its event
// handler from the informer, which outlives it, and returns once its worker has
// stopped (a write under way ends within its deadline or with ctx).
func (p *Publisher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("hostinfo")
	ctx = klog.NewContext(ctx, logger)
	var worker sync.WaitGroup
	defer worker.Wait()
	defer func() { _ = p.o.Informer.RemoveEventHandler(p.reg) }()
	defer p.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), p.o.Informer.HasSynced) {
		return
	}
	worker.Go(func() {
		for p.processNext(ctx) {
		}
	})
	tick := time.NewTicker(p.o.Interval)
	defer tick.Stop()
	for {
		p.checkInventory()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkInventory enqueues every Node when the accepted inventory changed.
func (p *Publisher) checkInventory() {
	v, err := p.o.View()
	if err != nil || v == nil || v.Digest() == p.digest {
		return
	}
	p.digest = v.Digest()
	nodes, _ := p.o.Nodes.List(labels.Everything())
	for _, n := range nodes {
		p.queue.Add(n.Name)
	}
}

func (p *Publisher) processNext(ctx context.Context) bool {
	name, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(name)
	if err := p.sync(ctx, name); err != nil {
		klog.FromContext(ctx).Error(err, "Publishing the host's BGP settings on its Node; retrying", "node", name)
		p.queue.AddRateLimited(name)
		return true
	}
	p.queue.Forget(name)
	return true
}

// sync publishes the annotation of one Node when it differs.
func (p *Publisher) sync(ctx context.Context, name string) error {
	n, err := p.o.Nodes.Get(name)
	if errors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	id, ok := inventory.HostIDFromProviderID(n.Spec.ProviderID)
	if !ok || uninitialized(n) {
		// Not initialized (yet): a kubelet may register any providerID; only the
		// cloud node controller's initialization, which checks the machine, makes
		// the Node the host's.
		return nil
	}
	v, err := p.o.View()
	if err != nil || v == nil {
		return nil // no accepted inventory yet: checkInventory enqueues once there is
	}
	h, ok := v.Host(id)
	if !ok || h.Name != id {
		return nil
	}
	want := Encode(For(v, h))
	if err := identity.Check(n, h, ""); err != nil {
		// The Node claims the host but reports another machine: its agent would
		// speak BGP as that host. Publish nothing, and take back what was published.
		klog.FromContext(ctx).Info("Not publishing the host's BGP settings on a Node that reports another machine", "node", name, "host", h.Name, "err", err)
		want = ""
	}
	if n.Annotations[Annotation] == want {
		return nil
	}
	var value any = want
	if want == "" {
		value = nil // removes it
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{Annotation: value}}})
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := p.o.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if errors.IsNotFound(err) {
			return nil
		}
		return err
	}
	klog.FromContext(ctx).V(2).Info("Published the host's BGP settings", "node", name, "host", h.Name, "value", want)
	return nil
}

// uninitialized reports whether the Node still carries the cloud provider's
// uninitialized taint.
func uninitialized(n *v1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == cloudproviderapi.TaintExternalCloudProvider {
			return true
		}
	}
	return false
}
