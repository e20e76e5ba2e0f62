// Package informerscope lends a process's shared informers to users that live
// shorter than it — a leadership term's controllers — without leaving their event
// handlers behind.
//
// A Scope is an informers.SharedInformerFactory whose informers are those of another
// factory (its parent): listers and caches are shared, nothing is listed or watched
// twice. What it adds is bookkeeping: every event handler added through it (by any
// code given the Scope, including the upstream cloud-provider controllers, which
// never remove theirs) is remembered until it is removed, and Close removes what is
// left and waits for those handlers to finish.
//
// Lifetimes: the root Scope (New) wraps the process's factory and lives as long; it
// starts the informers, for the process's life. A child (Child) lives for one
// leadership term: starting informers through it starts them for the process (a
// term's end must not stop an informer the next term and the agent use), and its
// Close, at the term's end, removes the term's handlers.
//
// The root counts the handlers registered through it and its children in the metric
// baremetal_ccm_informer_event_handlers, so a leak across terms is visible.
package informerscope

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/admissionregistration"
	"k8s.io/client-go/informers/apiserverinternal"
	"k8s.io/client-go/informers/apps"
	"k8s.io/client-go/informers/autoscaling"
	"k8s.io/client-go/informers/batch"
	"k8s.io/client-go/informers/certificates"
	"k8s.io/client-go/informers/coordination"
	"k8s.io/client-go/informers/core"
	"k8s.io/client-go/informers/discovery"
	"k8s.io/client-go/informers/events"
	"k8s.io/client-go/informers/extensions"
	"k8s.io/client-go/informers/flowcontrol"
	"k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/informers/lifecycle"
	"k8s.io/client-go/informers/networking"
	"k8s.io/client-go/informers/node"
	"k8s.io/client-go/informers/policy"
	"k8s.io/client-go/informers/rbac"
	"k8s.io/client-go/informers/resource"
	"k8s.io/client-go/informers/scheduling"
	"k8s.io/client-go/informers/storage"
	"k8s.io/client-go/informers/storagemigration"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
)

// ErrClosed is returned by the AddEventHandler methods of a closed Scope's informers.
var ErrClosed = errors.New("informer scope closed (its leadership term ended)")

// Scope is a SharedInformerFactory over its parent's informers that remembers the
// event handlers added through it. It is safe for concurrent use.
type Scope struct {
	informers.SharedInformerFactory // the parent: the process's factory, or the root Scope

	root *Scope // itself for a root

	mu     sync.Mutex
	wraps  map[any]*informer // by the parent's informer (wrapKey)
	regs   map[cache.ResourceEventHandlerRegistration]*informer
	closed bool
	stop   <-chan struct{} // root: the channel the informers run until (the first Start's)
}

var _ informers.SharedInformerFactory = (*Scope)(nil)

// New returns the root Scope over the process's factory f. Use it instead of f, so
// every event handler is counted.
func New(f informers.SharedInformerFactory) *Scope {
	registerMetrics()
	s := newScope(f)
	s.root = s
	return s
}

func newScope(parent informers.SharedInformerFactory) *Scope {
	return &Scope{SharedInformerFactory: parent,
		wraps: map[any]*informer{}, regs: map[cache.ResourceEventHandlerRegistration]*informer{}}
}

// Child returns a Scope for one leadership term over s's informers.
func (s *Scope) Child() *Scope {
	c := newScope(s)
	c.root = s.root
	return c
}

// Handlers returns how many event handlers added through s (and its children) are
// registered.
func (s *Scope) Handlers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.regs)
}

// Start starts the informers asked for so far. The root runs them until stopCh
// closes (the first Start's channel is the process's); a child starts them on the
// root's channel, never on its own: they outlive the term.
func (s *Scope) Start(stopCh <-chan struct{}) {
	r := s.root
	r.mu.Lock()
	if r.stop == nil && s == r {
		r.stop = stopCh
	}
	stop := r.stop
	r.mu.Unlock()
	if stop != nil {
		r.SharedInformerFactory.Start(stop)
	}
}

// StartWithContext is Start with ctx.Done().
func (s *Scope) StartWithContext(ctx context.Context) { s.Start(ctx.Done()) }

// Shutdown shuts the process's factory down (root); it does nothing for a child,
// whose informers are the process's.
func (s *Scope) Shutdown() {
	if s == s.root {
		s.SharedInformerFactory.Shutdown()
	}
}

// Close removes every event handler added through s and not removed yet, makes later
// additions fail with ErrClosed, and waits, until ctx ends, for the removed handlers
// to finish the notification they handle. It returns how many handlers it removed.
func (s *Scope) Close(ctx context.Context) (int, error) {
	s.mu.Lock()
	s.closed = true
	regs := s.regs
	s.regs = map[cache.ResourceEventHandlerRegistration]*informer{}
	s.mu.Unlock()
	var errs []error
	for reg, i := range regs {
		if err := i.SharedIndexInformer.RemoveEventHandler(reg); err != nil {
			errs = append(errs, fmt.Errorf("removing an event handler: %w", err))
			continue
		}
		s.counted(-1)
		if sc, ok := reg.(interface{ ShutdownChan() <-chan struct{} }); ok {
			select {
			case <-sc.ShutdownChan():
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("an event handler still handles a notification: %w", context.Cause(ctx)))
			}
		}
	}
	return len(regs), errors.Join(errs...)
}

// counted moves the metric by d for a root's registrations.
func (s *Scope) counted(d float64) {
	if s == s.root {
		handlers.Add(d)
	}
}

// InformerFor returns the parent's informer for obj, as s gives it out. The parent's
// own constructor is used when it knows the resource (every built-in type), so the
// parent's options (namespace, list options) hold; newFunc otherwise.
func (s *Scope) InformerFor(obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) cache.SharedIndexInformer {
	if gvr, ok := resourceOf(obj); ok {
		if gi, err := s.SharedInformerFactory.ForResource(gvr); err == nil {
			return s.wrap(gi.Informer())
		}
	}
	return s.wrap(s.SharedInformerFactory.InformerFor(obj, newFunc))
}

// ForResource implements informers.SharedInformerFactory.
func (s *Scope) ForResource(gvr schema.GroupVersionResource) (informers.GenericInformer, error) {
	gi, err := s.SharedInformerFactory.ForResource(gvr)
	if err != nil {
		return nil, err
	}
	return genericInformer{informer: s.wrap(gi.Informer()), lister: gi.Lister()}, nil
}

// resourceOf returns obj's resource, for a built-in type.
func resourceOf(obj runtime.Object) (schema.GroupVersionResource, bool) {
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return schema.GroupVersionResource{}, false
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvks[0])
	return gvr, true
}

func (s *Scope) wrap(inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	k := wrapKey(inf)
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.wraps[k]
	if !ok {
		w = &informer{SharedIndexInformer: inf, scope: s}
		s.wraps[k] = w
	}
	return w
}

// wrapKey identifies the informer under inf: client-go's typed informers (Nodes()
// and the rest, since v0.37) hand out a new wrapper at every Informer() and Lister()
// call, all over one informer and its one indexer. Keyed by the wrapper, every
// Lister() call (the upstream node controller makes one per Node sync) added an
// entry for the process's life.
func wrapKey(inf cache.SharedIndexInformer) any {
	if idx := inf.GetIndexer(); idx != nil {
		return idx
	}
	return inf
}

// add registers a handler through add and remembers it.
func (s *Scope) add(i *informer, add func() (cache.ResourceEventHandlerRegistration, error)) (cache.ResourceEventHandlerRegistration, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	reg, err := add()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed { // closed meanwhile
		s.mu.Unlock()
		_ = i.SharedIndexInformer.RemoveEventHandler(reg)
		return nil, ErrClosed
	}
	s.regs[reg] = i
	s.mu.Unlock()
	s.counted(1)
	return reg, nil
}

// forget drops reg, removed by its owner.
func (s *Scope) forget(reg cache.ResourceEventHandlerRegistration) {
	s.mu.Lock()
	_, ok := s.regs[reg]
	delete(s.regs, reg)
	s.mu.Unlock()
	if ok {
		s.counted(-1)
	}
}

// informer is a parent's informer as a Scope gives it out.
type informer struct {
	cache.SharedIndexInformer
	scope *Scope
}

func (i *informer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.scope.add(i, func() (cache.ResourceEventHandlerRegistration, error) {
		return i.SharedIndexInformer.AddEventHandler(h)
	})
}

func (i *informer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.scope.add(i, func() (cache.ResourceEventHandlerRegistration, error) {
		return i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, resync)
	})
}

func (i *informer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, o cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return i.scope.add(i, func() (cache.ResourceEventHandlerRegistration, error) {
		return i.SharedIndexInformer.AddEventHandlerWithOptions(h, o)
	})
}

func (i *informer) RemoveEventHandler(reg cache.ResourceEventHandlerRegistration) error {
	i.scope.forget(reg)
	return i.SharedIndexInformer.RemoveEventHandler(reg)
}

type genericInformer struct {
	informer cache.SharedIndexInformer
	lister   cache.GenericLister
}

func (g genericInformer) Informer() cache.SharedIndexInformer { return g.informer }
func (g genericInformer) Lister() cache.GenericLister         { return g.lister }

// The API groups, over s (so their informers come through InformerFor).

func (s *Scope) Admissionregistration() admissionregistration.Interface {
	return admissionregistration.New(s, "", nil)
}
func (s *Scope) Internal() apiserverinternal.Interface { return apiserverinternal.New(s, "", nil) }
func (s *Scope) Apps() apps.Interface                  { return apps.New(s, "", nil) }
func (s *Scope) Autoscaling() autoscaling.Interface    { return autoscaling.New(s, "", nil) }
func (s *Scope) Batch() batch.Interface                { return batch.New(s, "", nil) }
func (s *Scope) Certificates() certificates.Interface  { return certificates.New(s, "", nil) }
func (s *Scope) Coordination() coordination.Interface  { return coordination.New(s, "", nil) }
func (s *Scope) Core() core.Interface                  { return core.New(s, "", nil) }
func (s *Scope) Discovery() discovery.Interface        { return discovery.New(s, "", nil) }
func (s *Scope) Events() events.Interface              { return events.New(s, "", nil) }
func (s *Scope) Extensions() extensions.Interface      { return extensions.New(s, "", nil) }
func (s *Scope) Flowcontrol() flowcontrol.Interface    { return flowcontrol.New(s, "", nil) }
func (s *Scope) Lifecycle() lifecycle.Interface        { return lifecycle.New(s, "", nil) }
func (s *Scope) Networking() networking.Interface      { return networking.New(s, "", nil) }
func (s *Scope) Node() node.Interface                  { return node.New(s, "", nil) }
func (s *Scope) Policy() policy.Interface              { return policy.New(s, "", nil) }
func (s *Scope) Rbac() rbac.Interface                  { return rbac.New(s, "", nil) }
func (s *Scope) Resource() resource.Interface          { return resource.New(s, "", nil) }
func (s *Scope) Scheduling() scheduling.Interface      { return scheduling.New(s, "", nil) }
func (s *Scope) Storage() storage.Interface            { return storage.New(s, "", nil) }
func (s *Scope) Storagemigration() storagemigration.Interface {
	return storagemigration.New(s, "", nil)
}
