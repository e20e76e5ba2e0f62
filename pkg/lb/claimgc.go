package lb

import (
	"context"
	"net/netip"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
)

// ClaimGrace is how old a claim must be before the collector may delete it: a
// leader claims an address and writes the status a moment later (the API
// server's own ClusterIP repair waits as long).
const ClaimGrace = time.Minute

// ClaimCollectInterval is how often the leader's collector looks for claims no
// Service needs. They are rare (a leader that crashed between claim and status, a
// failed release), and a pass lists every claim of the CCM's from the API server
// (10,000 claims: about 45 MB decoded, then garbage), so it runs every five minutes.
const ClaimCollectInterval = 5 * time.Minute

// RunClaimCollector deletes, every interval until ctx ends (the first time as soon
// as the allocator is primed, and after a failed pass within ClaimGrace), the claims no Service
// needs any more: a claim whose Service is gone (by UID), or whose Service shows
// other addresses in its status and is not assigned this one, or a sharing group's
// claim no Service of the group holds — each once older than ClaimGrace (a leader that claimed and
// crashed before writing the status, a release that failed). It runs on the
// leader, for the term; every deletion is fenced and conditional on the claim's
// UID and version.
func (l *LoadBalancer) RunClaimCollector(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx).WithName("claims")
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		// Until the term's first pass that reads the claims (the allocator is primed
		// a moment after the term starts), retry every ClaimGrace, not interval.
		wait = min(interval, ClaimGrace)
		if !l.claimsPrimed() {
			continue
		}
		n, err := l.collectClaims(ctx, time.Now())
		if err != nil {
			logger.V(2).Info("Collecting address claims failed; retrying", "err", err)
			continue
		}
		wait = interval
		if n > 0 {
			logger.Info("Deleted address claims no Service needs", "claims", n)
		}
	}
}

// claimsPrimed reports whether a collector pass would read the claims: a claimer is
// set and the allocator was primed this term.
func (l *LoadBalancer) claimsPrimed() bool {
	claimer, _ := l.claims()
	l.mu.Lock()
	defer l.mu.Unlock()
	return claimer != nil && l.services != nil && l.primed
}

// collectClaims is one pass of RunClaimCollector; it returns how many claims it
// deleted.
func (l *LoadBalancer) collectClaims(ctx context.Context, now time.Time) (int, error) {
	claimer, fence := l.claims()
	l.mu.Lock()
	lister, primed := l.services, l.primed
	l.mu.Unlock()
	if claimer == nil || lister == nil || !primed {
		return 0, nil
	}
	claims, err := claimer.List(ctx, true)
	if err != nil {
		return 0, err
	}
	n := 0
	for ip, c := range claims {
		if !c.Ours || now.Sub(c.Created) < ClaimGrace || l.needed(ip, c) {
			continue
		}
		if fence != nil {
			if err := fence(ctx); err != nil {
				return n, err
			}
		}
		if err := claimer.Release(ctx, ip, c.Holder); err != nil && !apierrors.IsNotFound(err) {
			return n, err
		}
		l.setKnown(ip, nil)
		l.allocMu.RLock()
		l.alloc.Release(reservationKey(ip))
		l.allocMu.RUnlock()
		n++
	}
	return n, nil
}

// needed reports whether a live Service holds, or is being given, the claimed
// address.
func (l *LoadBalancer) needed(ip netip.Addr, c Claim) bool {
	l.mu.Lock()
	lister := l.services
	l.mu.Unlock()
	if c.Holder.SharingKey != "" {
		// Any Service of the group that shows or is assigned the address.
		svcs, err := lister.List(labels.Everything())
		if err != nil {
			return true
		}
		for _, svc := range svcs {
			if svc.Annotations[ipam.AnnotationAllowSharedIP] == c.Holder.SharingKey && l.holds(svc.Namespace+"/"+svc.Name, IngressIPs(svc), ip) {
				return true
			}
		}
		return false
	}
	svc, err := lister.Services(c.Holder.Namespace).Get(c.Holder.Name)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil || svc.UID != c.Holder.UID {
		return err != nil // another Service of that name: the claim's is gone
	}
	status := IngressIPs(svc)
	if len(status) == 0 {
		// Pending: the claim may be a leader's that is about to write this status
		// (paused, for any time): it stays, as the Service's own candidate (prime
		// assigns it to it). Once any status was written, such a stale write
		// conflicts, and the claim is an orphan.
		return true
	}
	return l.holds(key(svc), status, ip)
}

// holds reports whether the Service with key shows ip in its status or is
// assigned it.
func (l *LoadBalancer) holds(k string, status []netip.Addr, ip netip.Addr) bool {
	if slices.Contains(status, ip) {
		return true
	}
	l.allocMu.RLock()
	defer l.allocMu.RUnlock()
	a, ok := l.alloc.Assigned(k)
	return ok && slices.Contains(a.IPs, ip)
}
