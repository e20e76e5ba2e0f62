// Package lb implements LoadBalancer Services for bare metal: cloudprovider.LoadBalancer
// assigns each Service its IPs from the CloudConfig's pools (package ipam), and the
// announcement side (Desired) computes the BGP paths every replica's agent announces.
//
// IPAM state lives in the cluster: the Services' status.loadBalancer.ingress, and a
// claim per address (see Claimer) that the API server keeps unique. The allocator is
// primed from every existing Service and claim before its first allocation, so a
// restart or a leader change never hands out an IP that is in use, and an address
// is claimed before any status shows it, so not even a leader with a stale view
// can give one address to two Services.
package lb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	cloudprovider "k8s.io/cloud-provider"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/testhook"
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
// (metallb.Services). Its writes to the Service must be fenced and conditional on
// svc's resourceVersion; after a write it may advance svc (resourceVersion and
// what it wrote, nothing else), so the service controller's status patch, based
// on svc, does not conflict with the announcer's own write.
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
	claimer    Claimer
	fence      func(context.Context) error
	primed     bool
	reprime    bool
	reprimedAt time.Time // the last re-prime (not the first prime)
	// forcedAt is the last re-prime a failed claim asked for (see forceReprime).
	forcedAt time.Time

	// known are the claims this replica knows to exist, by address: listed at the
	// last prime, made or released since. A claim known for the same holder is not
	// made again (a re-sync of a Service costs no write). Guarded by knownMu.
	knownMu sync.Mutex
	known   map[netip.Addr]Claim
	// knownByName indexes known by the holder's Service, for claims of a single
	// Service (not a sharing group's): a Service's claims are found without a scan.
	knownByName map[types.NamespacedName][]netip.Addr

	relMu sync.Mutex
	// released are the addresses EnsureLoadBalancerDeleted freed, per Service, whose
	// claims Committed deletes once the status no longer shows them.
	released map[string][]netip.Addr

	// pools are the pools in force (the CloudConfig's, then the IPPools' applied);
	// poolsChanged is closed, and replaced, when SetPools changes them.
	poolsMu      sync.Mutex
	pools        []config.AddressPool
	poolsChanged chan struct{}
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
	return &LoadBalancer{cfg: cfg, alloc: alloc, events: events, pools: slices.Clone(cfg.Pools), poolsChanged: make(chan struct{})}, nil
}

// SetPools puts pools (the CloudConfig's and the accepted IPPools', see pkg/pools)
// in force: every address held stays held (ipam.Allocator.SetPools), and waiters on
// PoolsChanged are woken. On an error nothing changes.
func (l *LoadBalancer) SetPools(pools []config.AddressPool) error {
	if l.samePools(pools) {
		return nil
	}
	if err := l.alloc.SetPools(pools); err != nil {
		return err
	}
	l.poolsChange(pools)
	return nil
}

// SetPoolsKeeping is SetPools, refusing (ipam.ErrWouldStrand) pools that leave out an
// address held in a pool now: the leader's IPPool controller applies with it before
// it writes what it decided.
func (l *LoadBalancer) SetPoolsKeeping(pools []config.AddressPool) error {
	if l.samePools(pools) {
		return nil
	}
	if err := l.alloc.SetPoolsKeeping(pools); err != nil {
		return err
	}
	l.poolsChange(pools)
	return nil
}

// samePools reports whether pools are those in force already (nothing to do, nobody
// to wake).
func (l *LoadBalancer) samePools(pools []config.AddressPool) bool {
	l.poolsMu.Lock()
	defer l.poolsMu.Unlock()
	return reflect.DeepEqual(l.pools, pools)
}

func (l *LoadBalancer) poolsChange(pools []config.AddressPool) {
	l.poolsMu.Lock()
	l.pools = slices.Clone(pools)
	close(l.poolsChanged)
	l.poolsChanged = make(chan struct{})
	l.poolsMu.Unlock()
}

// Pools returns the pools in force.
func (l *LoadBalancer) Pools() []config.AddressPool {
	l.poolsMu.Lock()
	defer l.poolsMu.Unlock()
	return l.pools
}

// PoolsChanged returns a channel closed at the next SetPools.
func (l *LoadBalancer) PoolsChanged() <-chan struct{} {
	l.poolsMu.Lock()
	defer l.poolsMu.Unlock()
	return l.poolsChanged
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

// SetClaimer makes every assignment claim its addresses first (see Claimer); nil: no
// claims (unit tests, and clusters without networking.k8s.io/v1 IPAddress).
func (l *LoadBalancer) SetClaimer(c Claimer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claimer = c
}

// SetFence makes every claim and release first ask fence whether this replica
// still leads (see controller.Fence).
func (l *LoadBalancer) SetFence(fence func(context.Context) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fence = fence
}

func (l *LoadBalancer) claims() (Claimer, func(context.Context) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.claimer, l.fence
}

// forceReprime makes the next call re-prime, at most once a second: a claim that
// failed means another leader assigned addresses this replica does not know of.
func (l *LoadBalancer) forceReprime() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.primed && time.Since(l.forcedAt) >= time.Second {
		l.reprime, l.forcedAt = true, time.Now()
	}
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
	var claims map[netip.Addr]Claim
	if l.claimer != nil {
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		claims, err = l.claimer.List(lctx, false)
		cancel()
		if err != nil {
			return fmt.Errorf("listing address claims to prime IPAM: %w", err)
		}
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
	used := map[netip.Addr]bool{} // claims a Service was primed with
	for _, svc := range svcs {
		// A Service being deleted without the cleanup finalizer has had its
		// addresses released already (other finalizers may keep it around).
		if !Owned(svc) || svc.DeletionTimestamp != nil && !servicehelper.HasLBFinalizer(svc) {
			continue
		}
		req, _ := ipam.ParseService(svc) // a bad annotation does not release what it holds
		current := primeIPs(svc, req, claims, used)
		if len(current) == 0 {
			continue
		}
		if err := l.alloc.Prime(key(svc), req, current); err != nil {
			logger.Error(err, "Service holds an IP another Service holds too; keeping the first holder", "service", key(svc), "ips", current)
			l.events.Eventf(svc, v1.EventTypeWarning, ReasonPrimingConflict, "%v", err)
			continue
		}
		held++
	}
	reserved := l.reserveClaims(claims, used)
	l.knownMu.Lock()
	l.known, l.knownByName = map[netip.Addr]Claim{}, map[types.NamespacedName][]netip.Addr{}
	for ip, c := range claims {
		if c.Ours {
			l.putKnownLocked(ip, c)
		}
	}
	l.knownMu.Unlock()
	again := l.primed
	if again {
		l.reprimedAt = time.Now()
	}
	l.primed, l.reprime = true, false
	logger.Info("IPAM primed from existing Services", "services", held, "claims", len(claims), "reservedByClaimsOnly", reserved, "again", again)
	updateUsage(l.alloc)
	return nil
}

// holderOf is the claim holder of a Service with request req.
func holderOf(svc *v1.Service, req ipam.Request) Holder {
	return Holder{Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID, SharingKey: req.SharingKey}
}

// primeIPs are the addresses svc is primed with: those of its status that no other
// holder claims (claims decide a duplicate: the other Service keeps the address),
// and those claimed for it that its status does not show yet (a leader that claimed
// them and stopped before writing the status). used collects the claims taken.
func primeIPs(svc *v1.Service, req ipam.Request, claims map[netip.Addr]Claim, used map[netip.Addr]bool) []netip.Addr {
	status := IngressIPs(svc)
	if claims == nil {
		return status
	}
	h := holderOf(svc, req)
	var out []netip.Addr
	for _, ip := range status {
		if c, ok := claims[ip]; ok && !c.owns(h) {
			continue
		}
		out = append(out, ip)
		used[ip] = true
	}
	if h.SharingKey == "" {
		for ip, c := range claims {
			if c.owns(h) && !slices.Contains(out, ip) {
				out = append(out, ip)
				used[ip] = true
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// reservationKey is the allocator key that holds an address claimed by no live
// Service known here (a deleted Service's, not collected yet, or another
// manager's, such as a ClusterIP), so it is not handed out. It has no "/", unlike
// a Service's key.
func reservationKey(ip netip.Addr) string { return "claim:" + ip.String() }

// reserveClaims reserves the claimed addresses no Service was primed with, and
// returns how many (allocMu held for writing).
func (l *LoadBalancer) reserveClaims(claims map[netip.Addr]Claim, used map[netip.Addr]bool) int {
	n := 0
	for ip, c := range claims {
		if used[ip] || l.alloc.InUse(ip) {
			continue
		}
		if _, inPool := l.alloc.PoolOf(ip); !inPool && !c.Ours {
			continue // another manager's address outside the pools: not ours to care about
		}
		if l.alloc.Prime(reservationKey(ip), ipam.Request{}, []netip.Addr{ip}) == nil {
			n++
		}
	}
	return n
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
	current := IngressIPs(svc)
	a, err := l.alloc.Assign(key(svc), req, current)
	var he *ipam.HeldElsewhereError
	if errors.As(err, &he) {
		if current, err = l.resolveDuplicate(ctx, svc, req, current, he); err == nil {
			a, err = l.alloc.Assign(key(svc), req, current)
		}
	}
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
	if err := l.claim(ctx, svc, req, a.IPs); err != nil {
		if errors.Is(err, ErrClaimed) {
			// Another leader gave an address away that this replica did not know
			// of: rebuild the view from the cluster and try again.
			l.forceReprime()
			logger.Info("An assigned address is claimed by another holder; re-priming and retrying", "err", err)
			return nil, retryLater(err, time.Second)
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

// claim claims ips for svc before any status shows them (nothing without a
// Claimer). The error wraps ErrClaimed when another holder has one of them.
func (l *LoadBalancer) claim(ctx context.Context, svc *v1.Service, req ipam.Request, ips []netip.Addr) error {
	claimer, fence := l.claims()
	if claimer == nil {
		return nil
	}
	if fence != nil {
		if err := fence(ctx); err != nil {
			return fmt.Errorf("not claiming: %w", err)
		}
	}
	testhook.HoldBeforeClaim(ctx, svc.Namespace, svc.Name, "ips", ips)
	h := holderOf(svc, req)
	for _, ip := range ips {
		if l.knownFor(ip, h) {
			// Claimed for it already: the claim stays while the Service lives (only
			// a leader that wrote this Service's status since, or the Service's
			// deletion, releases it; see Committed and RunClaimCollector).
			continue
		}
		if err := claimer.Claim(ctx, ip, h); err != nil {
			return err
		}
		l.setKnown(ip, &Claim{IP: ip, Holder: h, Ours: true, Created: time.Now()})
	}
	return nil
}

// knownFor reports whether this replica knows a claim of ip for h.
func (l *LoadBalancer) knownFor(ip netip.Addr, h Holder) bool {
	l.knownMu.Lock()
	defer l.knownMu.Unlock()
	c, ok := l.known[ip]
	return ok && c.owns(h)
}

// setKnown records the claim of ip (nil: none).
func (l *LoadBalancer) setKnown(ip netip.Addr, c *Claim) {
	l.knownMu.Lock()
	defer l.knownMu.Unlock()
	if old, ok := l.known[ip]; ok && old.Holder.SharingKey == "" {
		name := types.NamespacedName{Namespace: old.Holder.Namespace, Name: old.Holder.Name}
		if ips := slices.DeleteFunc(l.knownByName[name], func(a netip.Addr) bool { return a == ip }); len(ips) == 0 {
			delete(l.knownByName, name)
		} else {
			l.knownByName[name] = ips
		}
	}
	delete(l.known, ip)
	if c != nil {
		l.putKnownLocked(ip, *c)
	}
}

// putKnownLocked records a claim not known yet (under knownMu).
func (l *LoadBalancer) putKnownLocked(ip netip.Addr, c Claim) {
	if l.known == nil {
		l.known, l.knownByName = map[netip.Addr]Claim{}, map[types.NamespacedName][]netip.Addr{}
	}
	l.known[ip] = c
	if c.Holder.SharingKey == "" {
		name := types.NamespacedName{Namespace: c.Holder.Namespace, Name: c.Holder.Name}
		l.knownByName[name] = append(l.knownByName[name], ip)
	}
}

// knownHeldBy returns the addresses this replica knows claimed for exactly svc's
// holder h (not a sharing group's).
func (l *LoadBalancer) knownHeldBy(h Holder) []netip.Addr {
	l.knownMu.Lock()
	defer l.knownMu.Unlock()
	if h.SharingKey != "" {
		return nil
	}
	var out []netip.Addr
	for _, ip := range l.knownByName[types.NamespacedName{Namespace: h.Namespace, Name: h.Name}] {
		if c := l.known[ip]; c.owns(h) {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// resolveDuplicate handles an address of svc's status that the allocator has held
// by another Service. If the claim is svc's, the allocator is stale: it re-primes.
// Otherwise the other holder keeps the address (it holds the claim, or, unclaimed,
// it is the older Service), and unless svc asked for that very address, svc gets
// another one: resolveDuplicate returns the status addresses to keep, after an
// event. With a request for it, svc stays pending (the error).
func (l *LoadBalancer) resolveDuplicate(ctx context.Context, svc *v1.Service, req ipam.Request, current []netip.Addr, he *ipam.HeldElsewhereError) ([]netip.Addr, error) {
	claimer, _ := l.claims()
	if claimer == nil {
		return nil, he
	}
	c, ok, err := claimer.Get(ctx, he.IP)
	if err != nil {
		return nil, err
	}
	if ok && c.owns(holderOf(svc, req)) {
		l.forceReprime()
		return nil, retryLater(he, time.Second)
	}
	if slices.Contains(req.IPs, he.IP) {
		return nil, he
	}
	holder := "another Service that holds it (the older one)"
	if ok {
		holder = c.Holder.String() + ", which holds its claim"
	}
	l.events.Eventf(svc, v1.EventTypeWarning, ReasonPrimingConflict,
		"%s is also in the status of %s: this Service gets another address", he.IP, holder)
	klog.FromContext(ctx).Info("Two Services show one address; the other keeps it, this one moves", "service", key(svc), "ip", he.IP, "holder", holder)
	return slices.DeleteFunc(slices.Clone(current), func(ip netip.Addr) bool { return ip == he.IP }), nil
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
		l.relMu.Lock()
		if l.released == nil {
			l.released = map[string][]netip.Addr{}
		}
		l.released[key(svc)] = a.IPs
		l.relMu.Unlock()
		klog.FromContext(ctx).Info("Released load balancer IPs", "service", key(svc), "ips", a.IPs)
	}
	outOfPool.DeleteLabelValues(svc.Namespace, svc.Name)
	updateUsage(l.alloc)
	return nil
}

// Committed is told by the service controller that svc's status now shows after
// (it showed before): the claims of svc's addresses that the status no longer shows
// are deleted, once no other Service holds the address (sharing), so the address
// is free for others only after no status shows it. For a Service whose finalizer
// was removed by someone else (gone), before are the addresses
// EnsureLoadBalancerDeleted released. An error leaves a claim to the collector
// (RunClaimCollector).
func (l *LoadBalancer) Committed(ctx context.Context, svc *v1.Service, before, after []netip.Addr) error {
	claimer, fence := l.claims()
	l.relMu.Lock()
	gone := append(slices.Clone(before), l.released[key(svc)]...)
	delete(l.released, key(svc))
	l.relMu.Unlock()
	if claimer == nil {
		return nil
	}
	req, _ := ipam.ParseService(svc)
	h := holderOf(svc, req)
	// Claims made for this Service that its status, just written by this leader,
	// does not show (a claim whose status write failed, or another term's): any
	// stale writer's status write is conditional on an older version and fails.
	for _, ip := range l.knownHeldBy(h) {
		if !slices.Contains(gone, ip) {
			gone = append(gone, ip)
		}
	}
	var errs []error
	for _, ip := range gone {
		if slices.Contains(after, ip) {
			continue
		}
		l.allocMu.RLock()
		inUse := l.alloc.InUse(ip)
		if a, ok := l.alloc.Assigned(key(svc)); ok && slices.Contains(a.IPs, ip) {
			inUse = false // its own (about to be written): keep the claim
			l.allocMu.RUnlock()
			continue
		}
		l.allocMu.RUnlock()
		if inUse && h.SharingKey != "" {
			continue // another Service of the group holds it
		}
		if fence != nil {
			if err := fence(ctx); err != nil {
				return fmt.Errorf("not releasing claims: %w", err)
			}
		}
		if err := claimer.Release(ctx, ip, h); err != nil {
			errs = append(errs, err)
			continue
		}
		l.setKnown(ip, nil)
	}
	return errors.Join(errs...)
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
	return AppendIngressIPs(nil, svc)
}

// AppendIngressIPs appends the IPs of IngressIPs(svc) to dst: a pass over every
// Service reuses one buffer instead of allocating a slice per Service.
func AppendIngressIPs(dst []netip.Addr, svc *v1.Service) []netip.Addr {
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(in.IP); err == nil {
			dst = append(dst, ip.Unmap())
		}
	}
	return dst
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
