// Package lb implements LoadBalancer Services for bare metal: cloudprovider.LoadBalancer
// assigns each Service its IPs from the CloudConfig's pools (package ipam), and the
// announcement side (Desired) computes the BGP paths every replica's agent announces.
//
// IPAM state lives only in the Services themselves (status.loadBalancer.ingress): the
// allocator is primed from every existing Service before its first allocation, so a
// restart or a leader change never hands out an IP that is in use.
package lb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	cloudprovider "k8s.io/cloud-provider"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
)

// Event reasons recorded on Services.
const (
	ReasonInvalidRequest  = "InvalidLoadBalancerRequest"
	ReasonPoolExhausted   = "AddressPoolExhausted"
	ReasonIPUnavailable   = "LoadBalancerIPUnavailable"
	ReasonIPAssigned      = "LoadBalancerIPAssigned"
	ReasonIPOutsidePools  = "LoadBalancerIPOutsidePools"
	ReasonPrimingConflict = "LoadBalancerIPConflict"
	ReasonNotAnnounced    = "LoadBalancerNotAnnounced"
)

// RetryAfter is how soon a Service waiting for an address (pool exhausted, IP held by
// another Service) is tried again.
const RetryAfter = 30 * time.Second

// ErrNotReady is returned while the Service informer has not synced, so the allocator
// cannot be primed yet.
var ErrNotReady = errors.New("load balancer IPAM is not primed yet: waiting for the Service informer to sync")

// EventRecorder records events on objects (a subset of record.EventRecorder).
type EventRecorder interface {
	Eventf(obj runtime.Object, eventType, reason, format string, args ...any)
}

// Announcer is told about every Service's addresses after they are assigned and
// before they are released, for announcers that work through the Service object
// (metallb.Services).
type Announcer interface {
	Ensure(ctx context.Context, svc *v1.Service, ips []netip.Addr) error
	Delete(ctx context.Context, svc *v1.Service) error
}

// ErrNotAnnounced, wrapped by an Announcer's error, means the addresses are assigned
// but cannot be announced as they are (the Service is not failed for it).
var ErrNotAnnounced = errors.New("assigned but not announceable")

// LoadBalancer is the provider's cloudprovider.LoadBalancer. It is safe for concurrent
// use by the service controller's workers.
type LoadBalancer struct {
	cfg    *config.LoadBalancerConfig
	alloc  *ipam.Allocator
	events EventRecorder

	// allocMu is held for reading by every call that uses the allocator, and for
	// writing while it is (re)primed, so nothing allocates from a half-built state.
	allocMu sync.RWMutex

	annMu     sync.Mutex
	announcer Announcer

	mu         sync.Mutex // guards the fields below; taken before allocMu
	services   corelisters.ServiceLister
	synced     cache.InformerSynced
	list       func(context.Context) ([]*v1.Service, error)
	primed     bool
	reprime    bool
	reprimedAt time.Time // the last re-prime (not the first prime)
}

// minReprimeInterval bounds how often conflicts make the allocator re-prime (each time
// lists every Service).
const minReprimeInterval = 10 * time.Second

var _ cloudprovider.LoadBalancer = (*LoadBalancer)(nil)

// New builds the LoadBalancer over validated pools.
func New(cfg *config.LoadBalancerConfig, events EventRecorder) (*LoadBalancer, error) {
	alloc, err := ipam.New(cfg.Pools)
	if err != nil {
		return nil, err
	}
	registerMetrics()
	return &LoadBalancer{cfg: cfg, alloc: alloc, events: events}, nil
}

// Allocator returns the allocator (for metrics and tests).
func (l *LoadBalancer) Allocator() *ipam.Allocator { return l.alloc }

// SetServices gives the LoadBalancer the Service lister it primes the allocator from.
// Until it is set and synced, EnsureLoadBalancer allocates nothing.
func (l *LoadBalancer) SetServices(lister corelisters.ServiceLister, synced cache.InformerSynced) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.services, l.synced = lister, synced
}

// SetLister gives the LoadBalancer a consistent List of every Service (from the API
// server, not a cache) to prime from; without it priming uses the Service lister.
func (l *LoadBalancer) SetLister(list func(context.Context) ([]*v1.Service, error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = list
}

// Reprime makes the next call rebuild the allocator's state from a consistent List
// of the Services before it allocates anything: called when the allocator's view and
// the Services disagree (a status write conflicted, a Service's status shows an IP
// the allocator has another Service hold, this replica became the leader). At most
// once per minReprimeInterval.
func (l *LoadBalancer) Reprime() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.primed && time.Since(l.reprimedAt) >= minReprimeInterval {
		l.reprime = true
	}
}

// NewTerm makes the next call re-prime the allocator from a consistent List, however
// recently it did: called when this replica becomes the leader again, since another
// leader may have assigned IPs in between.
func (l *LoadBalancer) NewTerm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.primed {
		l.reprime = true
	}
}

// SetAnnouncer sets the announcer told about every assignment (nil: none).
func (l *LoadBalancer) SetAnnouncer(a Announcer) {
	l.annMu.Lock()
	defer l.annMu.Unlock()
	l.announcer = a
}

func (l *LoadBalancer) getAnnouncer() Announcer {
	l.annMu.Lock()
	defer l.annMu.Unlock()
	return l.announcer
}

// Owned reports whether svc is a LoadBalancer Service this provider serves: type
// LoadBalancer without a spec.loadBalancerClass (the service controller skips Services
// with a class).
func Owned(svc *v1.Service) bool {
	return svc.Spec.Type == v1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil
}

// prime records every IP the existing Services hold, before the first allocation
// and again after Reprime. Phase one claims each Service's current IPs as they are;
// only then may anything move, so no Service can be handed an IP another one holds
// but was not yet seen. While it runs no other call uses the allocator.
func (l *LoadBalancer) prime(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.primed && !l.reprime {
		return nil
	}
	if l.services == nil || !l.synced() {
		return retryLater(ErrNotReady, time.Second)
	}
	var svcs []*v1.Service
	var err error
	if l.list != nil {
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		svcs, err = l.list(lctx)
		cancel()
	} else {
		svcs, err = l.services.List(labels.Everything())
	}
	if err != nil {
		return fmt.Errorf("listing Services to prime IPAM: %w", err)
	}
	l.allocMu.Lock()
	defer l.allocMu.Unlock()
	if l.primed {
		l.alloc.Reset()
	}
	// Oldest first (ipam.Prime keeps the first holder of a contested IP), so the
	// winner of a conflict is the same on every replica and every restart.
	slices.SortStableFunc(svcs, func(a, b *v1.Service) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(key(a), key(b))
	})
	logger := klog.FromContext(ctx)
	held := 0
	for _, svc := range svcs {
		// A Service being deleted without the cleanup finalizer has had its
		// addresses released already (other finalizers may keep it around).
		if !Owned(svc) || svc.DeletionTimestamp != nil && !servicehelper.HasLBFinalizer(svc) {
			continue
		}
		current := IngressIPs(svc)
		if len(current) == 0 {
			continue
		}
		req, _ := ipam.ParseService(svc) // a bad annotation does not release what it holds
		if err := l.alloc.Prime(key(svc), req, current); err != nil {
			logger.Error(err, "Service holds an IP another Service holds too; keeping the first holder", "service", key(svc), "ips", current)
			l.events.Eventf(svc, v1.EventTypeWarning, ReasonPrimingConflict, "%v", err)
			continue
		}
		held++
	}
	again := l.primed
	if again {
		l.reprimedAt = time.Now()
	}
	l.primed, l.reprime = true, false
	logger.Info("IPAM primed from existing Services", "services", held, "again", again)
	updateUsage(l.alloc)
	return nil
}

// GetLoadBalancer reports the Service's addresses when it has any.
func (l *LoadBalancer) GetLoadBalancer(ctx context.Context, _ string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	if err := l.prime(ctx); err != nil {
		return nil, false, err
	}
	l.allocMu.RLock()
	defer l.allocMu.RUnlock()
	if a, ok := l.alloc.Assigned(key(svc)); ok && len(a.IPs) > 0 {
		return status(a.IPs), true, nil
	}
	return nil, false, nil
}

// GetLoadBalancerName returns the framework's default name for the Service.
func (l *LoadBalancer) GetLoadBalancerName(_ context.Context, _ string, svc *v1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// EnsureLoadBalancer assigns the Service its addresses (keeping those it holds when
// they still satisfy its request) and returns them as status, one ingress per family
// with ipMode VIP. A request that cannot be met is an event on the Service naming the
// cause, and an error: the Service stays pending and nothing else changes.
func (l *LoadBalancer) EnsureLoadBalancer(ctx context.Context, _ string, svc *v1.Service, _ []*v1.Node) (*v1.LoadBalancerStatus, error) {
	if err := l.prime(ctx); err != nil {
		return nil, err
	}
	l.allocMu.RLock()
	defer l.allocMu.RUnlock()
	logger := klog.FromContext(ctx).WithValues("service", key(svc))
	req, err := ipam.ParseService(svc)
	if err != nil {
		l.events.Eventf(svc, v1.EventTypeWarning, ReasonInvalidRequest, "%v", err)
		return nil, err
	}
	before, had := l.alloc.Assigned(key(svc))
	a, err := l.alloc.Assign(key(svc), req, IngressIPs(svc))
	updateUsage(l.alloc)
	if err != nil {
		if held, ok := l.alloc.Assigned(key(svc)); ok {
			l.reportOutOfPool(svc, held.OutOfPool) // what it keeps while its request fails
		}
		reason, retry := classify(err)
		if errors.Is(err, ipam.ErrHeldElsewhere) {
			l.Reprime() // the allocator's view is stale, or two statuses show one IP
		}
		l.events.Eventf(svc, v1.EventTypeWarning, reason, "%v", err)
		logger.Info("Cannot assign load balancer IPs", "reason", reason, "err", err)
		if retry {
			// Both: the controller retries after RetryAfter (api.RetryError) and its
			// condition names the cause (the allocator's sentinel).
			return nil, retryLater(err, RetryAfter)
		}
		return nil, err
	}
	if !had || !sameIPs(before.IPs, a.IPs) {
		l.events.Eventf(svc, v1.EventTypeNormal, ReasonIPAssigned, "Assigned %v from pool %v", a.IPs, a.Pools)
		logger.Info("Assigned load balancer IPs", "ips", a.IPs, "pools", a.Pools)
	}
	l.reportOutOfPool(svc, a.OutOfPool)
	if an := l.getAnnouncer(); an != nil {
		if err := an.Ensure(ctx, svc, a.IPs); err != nil {
			if !errors.Is(err, ErrNotAnnounced) {
				return nil, fmt.Errorf("announcing %v: %w", a.IPs, err)
			}
			l.events.Eventf(svc, v1.EventTypeWarning, ReasonNotAnnounced, "%v", err)
		}
	}
	return status(a.IPs), nil
}

// reportOutOfPool sets the Service's out-of-pool metric and records an event when it
// holds IPs no pool contains.
func (l *LoadBalancer) reportOutOfPool(svc *v1.Service, ips []netip.Addr) {
	if len(ips) == 0 {
		// Series exist only for Services that have the problem: one per Service
		// would be 10,000 series (and megabytes) on a large cluster.
		outOfPool.DeleteLabelValues(svc.Namespace, svc.Name)
		return
	}
	outOfPool.WithLabelValues(svc.Namespace, svc.Name).Set(float64(len(ips)))
	l.events.Eventf(svc, v1.EventTypeWarning, ReasonIPOutsidePools,
		"%v is in no configured pool any more: it stays assigned but is not announced. Add the range back to a pool, or recreate the Service to get an address from the current pools", ips)
}

// UpdateLoadBalancer has nothing to do for a node set change: announcements follow
// nodes and endpoints in every replica's agent.
func (l *LoadBalancer) UpdateLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) error {
	return nil
}

// EnsureLoadBalancerDeleted releases the Service's addresses (a shared address is
// freed when its last Service goes). The agents withdraw the routes once the status is
// cleared or the Service is gone.
func (l *LoadBalancer) EnsureLoadBalancerDeleted(ctx context.Context, _ string, svc *v1.Service) error {
	if err := l.prime(ctx); err != nil {
		return err
	}
	l.allocMu.RLock()
	defer l.allocMu.RUnlock()
	if an := l.getAnnouncer(); an != nil {
		if err := an.Delete(ctx, svc); err != nil {
			return fmt.Errorf("withdrawing the announcement: %w", err)
		}
	}
	if a, ok := l.alloc.Assigned(key(svc)); ok {
		l.alloc.Release(key(svc))
		klog.FromContext(ctx).Info("Released load balancer IPs", "service", key(svc), "ips", a.IPs)
	}
	outOfPool.DeleteLabelValues(svc.Namespace, svc.Name)
	updateUsage(l.alloc)
	return nil
}

// classify maps an allocation error to an event reason and whether retrying later
// (without a change to the Service) may succeed.
func classify(err error) (reason string, retry bool) {
	switch {
	case errors.Is(err, ipam.ErrPoolExhausted):
		return ReasonPoolExhausted, true
	case errors.Is(err, ipam.ErrHeldElsewhere):
		return ReasonPrimingConflict, true
	case errors.Is(err, ipam.ErrIPInUse):
		return ReasonIPUnavailable, true
	case errors.Is(err, ipam.ErrSharingConflict):
		return ReasonIPUnavailable, true
	default:
		return ReasonInvalidRequest, false
	}
}

func key(svc *v1.Service) string { return svc.Namespace + "/" + svc.Name }

// IngressIPs returns the IPs in the Service's status.
func IngressIPs(svc *v1.Service) []netip.Addr {
	var ips []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(in.IP); err == nil {
			ips = append(ips, ip.Unmap())
		}
	}
	return ips
}

func status(ips []netip.Addr) *v1.LoadBalancerStatus {
	st := &v1.LoadBalancerStatus{}
	for _, ip := range ips {
		mode := v1.LoadBalancerIPModeVIP
		st.Ingress = append(st.Ingress, v1.LoadBalancerIngress{IP: ip.String(), IPMode: &mode})
	}
	return st
}

func sameIPs(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
