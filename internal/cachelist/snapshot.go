package cachelist

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// snapshot holds every object of an informer's cache in one slice that listings share
// until the cache changes: a loop that lists everything each second or each few
// seconds (the power monitor, the Announced condition) allocates nothing while
// nothing changes. Changes are counted by an event handler, which the informer calls
// after its cache holds the change, so a listing made after a handler ran sees it; a
// listing made between the cache's update and the handler's call may miss it, which
// only a periodic caller can accept (it sees the change at its next listing).
//
// A relist replaces unchanged objects with new copies without notifying this
// handler (same resourceVersion: a resync event, delivered only to handlers whose
// resync period is due): a snapshot older than maxSnapshotAge is rebuilt anyway, so
// it never holds a second copy of the cache for long.
type snapshot[T any] struct {
	store   cache.Store
	changes atomic.Uint64
	now     func() time.Time

	mu      sync.Mutex
	built   uint64    // changes when list was built
	builtAt time.Time // when list was built
	list    []T       // nil: not built yet
}

// maxSnapshotAge is how long a snapshot of an unchanged cache is kept.
const maxSnapshotAge = time.Minute

func newSnapshot[T any](ctx context.Context, informer cache.SharedIndexInformer) (*snapshot[T], error) {
	s := &snapshot[T]{store: informer.GetStore(), now: time.Now}
	bump := func(any) { s.changes.Add(1) }
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: bump, UpdateFunc: func(_, obj any) { bump(obj) }, DeleteFunc: bump,
	})
	if err != nil {
		return nil, fmt.Errorf("watching the cache for changes: %w", err)
	}
	context.AfterFunc(ctx, func() { _ = informer.RemoveEventHandler(reg) })
	return s, nil
}

func (s *snapshot[T]) all() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if n := s.changes.Load(); s.list == nil || s.built != n || now.Sub(s.builtAt) >= maxSnapshotAge {
		s.list, s.built, s.builtAt = all[T](s.store), n, now
	}
	return s.list
}

// SharedNodeLister is NodeLister whose listing of everything (an empty selector)
// returns a slice shared by every caller and kept until the informer's cache changes:
// callers must not modify it, and may see a change only at their next listing (see
// snapshot). For periodic passes; an event-driven caller takes NodeLister. Nodes
// whose kubelets post status change the cache every few seconds in a large cluster,
// so a Node listing is mostly rebuilt there; Services change far less often. The
// event handler it adds to informer is removed when ctx ends. An informer that
// takes no handler (it has stopped) gets the plain NodeLister, with the cause logged.
func SharedNodeLister(ctx context.Context, informer cache.SharedIndexInformer) corelisters.NodeLister {
	plain := NodeLister(informer.GetIndexer())
	s, err := newSnapshot[*v1.Node](ctx, informer)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing Nodes without a shared snapshot")
		return plain
	}
	return sharedNodeLister{plain, s}
}

// SharedServiceLister is ServiceLister with a shared listing of everything, as
// SharedNodeLister.
func SharedServiceLister(ctx context.Context, informer cache.SharedIndexInformer) corelisters.ServiceLister {
	plain := ServiceLister(informer.GetIndexer())
	s, err := newSnapshot[*v1.Service](ctx, informer)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing Services without a shared snapshot")
		return plain
	}
	return sharedServiceLister{plain, s}
}

type sharedNodeLister struct {
	corelisters.NodeLister
	s *snapshot[*v1.Node]
}

func (l sharedNodeLister) List(selector labels.Selector) ([]*v1.Node, error) {
	if selector != nil && !selector.Empty() {
		return l.NodeLister.List(selector)
	}
	return l.s.all(), nil
}

type sharedServiceLister struct {
	corelisters.ServiceLister
	s *snapshot[*v1.Service]
}

func (l sharedServiceLister) List(selector labels.Selector) ([]*v1.Service, error) {
	if selector != nil && !selector.Empty() {
		return l.ServiceLister.List(selector)
	}
	return l.s.all(), nil
}
