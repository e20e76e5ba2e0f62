package agent

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/speakerstatus"
)

// pending is what changed since the last pass (guarded by Agent.mu). A pass that is
// not full recomputes only the announcements of the Services named here, when
// nodes is set the pod CIDRs, the mirror and the peers, and when peers is set the
// peers; a full pass recomputes everything (the
// first pass, every ResyncInterval, a drain's time running out, a node health
// verdict, and any change to a Node the Services' next hops depend on).
type pending struct {
	full bool
	// lbAll: every Service's announcement (a Node its next hops depend on changed).
	lbAll bool
	// nodes: the pod CIDRs, the mirror and the peers (a Node changed).
	nodes bool
	// peers: the peers (ClusterPeers' answer changed).
	peers bool
	// services are the namespace/name keys of Services whose announcement may have
	// changed (the Service or one of its EndpointSlices changed).
	services map[string]struct{}
}

// lbIndex remembers, after each pass, which prefixes each Service holds (its
// ingress IPs), so that an incremental pass can tell the speaker which prefixes a
// changed Service gave up, and recompute the other Services sharing an IP with it.
// Only the Run goroutine uses it.
type lbIndex struct {
	entries  map[types.NamespacedName]*lbEntry
	services map[netip.Prefix][]types.NamespacedName
	gen      uint64
}

type lbEntry struct {
	prefixes []netip.Prefix
	gen      uint64 // of the last resync that saw the Service
}

// prefixesOf are the /32 and /128 of a Service's ingress IPs (whether or not they
// are announced: a superset is harmless, the update names them to the speaker).
func prefixesOf(svc *v1.Service) []netip.Prefix {
	if svc == nil {
		return nil
	}
	ips := lb.IngressIPs(svc)
	out := make([]netip.Prefix, 0, len(ips))
	for _, ip := range ips {
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out
}

// holds reports whether prefixes are exactly the Service's (without allocating).
func holds(svc *v1.Service, prefixes []netip.Prefix) bool {
	i := 0
	for _, in := range svc.Status.LoadBalancer.Ingress {
		ip, err := netip.ParseAddr(in.IP)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		if i >= len(prefixes) || prefixes[i] != netip.PrefixFrom(ip, ip.BitLen()) {
			return false
		}
		i++
	}
	return i == len(prefixes)
}

func (x *lbIndex) prefixes(key types.NamespacedName) []netip.Prefix {
	if e := x.entries[key]; e != nil {
		return e.prefixes
	}
	return nil
}

// resync brings the index up to every Service; unchanged Services cost no allocation.
func (x *lbIndex) resync(svcs []*v1.Service) {
	x.gen++
	for _, svc := range svcs {
		key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		if e := x.entries[key]; e != nil && holds(svc, e.prefixes) {
			e.gen = x.gen
			continue
		}
		x.set(key, prefixesOf(svc))
	}
	for key, e := range x.entries {
		if e.gen != x.gen {
			x.set(key, nil)
		}
	}
}

// set records the prefixes a Service holds now (none: it is gone).
func (x *lbIndex) set(key types.NamespacedName, prefixes []netip.Prefix) {
	if x.entries == nil {
		x.entries = map[types.NamespacedName]*lbEntry{}
		x.services = map[netip.Prefix][]types.NamespacedName{}
	}
	if e := x.entries[key]; e != nil {
		for _, p := range e.prefixes {
			keys := slices.DeleteFunc(x.services[p], func(k types.NamespacedName) bool { return k == key })
			if len(keys) == 0 {
				delete(x.services, p)
			} else {
				x.services[p] = keys
			}
		}
	}
	if len(prefixes) == 0 {
		delete(x.entries, key)
		return
	}
	x.entries[key] = &lbEntry{prefixes: prefixes, gen: x.gen}
	for _, p := range prefixes {
		if !slices.Contains(x.services[p], key) {
			x.services[p] = append(x.services[p], key)
		}
	}
}

// mirrorRetryDelay is how long after a failed mirror pass it is tried again.
var mirrorRetryDelay = 5 * time.Second

// retryMirror schedules a pass of the mirror (and pod CIDRs) after a failure; one
// retry is pending at a time.
func (a *Agent) retryMirror() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mirrorRetry != nil {
		return // one is pending already
	}
	a.mirrorRetry = time.AfterFunc(mirrorRetryDelay, func() {
		a.mu.Lock()
		a.mirrorRetry = nil
		a.pend.nodes = true
		a.mu.Unlock()
		a.kick()
	})
}

// stopMirrorRetry cancels a pending retry (Run ends).
func (a *Agent) stopMirrorRetry() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mirrorRetry != nil {
		a.mirrorRetry.Stop()
		a.mirrorRetry = nil
	}
}

// Resync asks for a full pass soon: what the agent announces depends on something
// it does not watch that changed (the pools in force).
func (a *Agent) Resync() { a.kickFull() }

// PeersChanged asks for a pass soon that applies ClusterPeers' answer (and no
// Service or Node work beyond what changed).
func (a *Agent) PeersChanged() {
	a.mu.Lock()
	a.pend.peers = true
	a.mu.Unlock()
	a.kick()
}

// kickFull asks for a full pass.
func (a *Agent) kickFull() {
	a.mu.Lock()
	a.pend.full = true
	a.mu.Unlock()
	a.kick()
}

// takePending returns what changed since the last pass and starts a new record.
func (a *Agent) takePending() pending {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pend
	a.pend = pending{}
	return p
}

func (a *Agent) serviceChanged(key string) {
	a.mu.Lock()
	if a.pend.services == nil {
		a.pend.services = map[string]struct{}{}
	}
	a.pend.services[key] = struct{}{}
	a.mu.Unlock()
	a.kick()
}

// lbDependsOnAllNodes reports whether a Service's announcement depends on Nodes
// other than this host's: next-hop mode nodes, outside SelfOnly.
func (a *Agent) lbDependsOnAllNodes() bool {
	b := a.o.Config.BGP
	return b != nil && b.NextHop == config.NextHopNodes && !a.o.SelfOnly
}

func (a *Agent) nodeChanged(name string) {
	a.mu.Lock()
	a.pend.nodes = true
	if name == a.o.Self || a.lbDependsOnAllNodes() {
		a.pend.lbAll = true
	}
	a.mu.Unlock()
	a.kick()
}

// eventHandlers are the informers' handlers: each records what changed for the next
// pass and kicks it.
func (a *Agent) serviceHandler() cache.ResourceEventHandler {
	key := func(obj any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			a.serviceChanged(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: key, DeleteFunc: key, UpdateFunc: func(old, obj any) {
		if o, ok := old.(*v1.Service); ok {
			if n, ok := obj.(*v1.Service); ok && !serviceMatters(o, n) {
				return
			}
		}
		key(obj)
	}}
}

// serviceMatters reports whether a Service update can change what the agent
// applies: anything but its status conditions (the leader's Announced condition,
// written for every Service after each burst, at a bounded rate, for minutes) and
// the object's version. A resync (the same version) matters, as before. The metadata,
// spec and load-balancer status are compared field by field, not reflectively
// (TestServiceMattersCoversFields fails when their types gain a field): this runs for
// every Service update the agent sees, tens of thousands in a burst.
func serviceMatters(o, n *v1.Service) bool {
	if o.ResourceVersion == n.ResourceVersion {
		return true
	}
	return !metaEqual(&o.ObjectMeta, &n.ObjectMeta) || !specEqual(&o.Spec, &n.Spec) ||
		!slices.EqualFunc(o.Status.LoadBalancer.Ingress, n.Status.LoadBalancer.Ingress, ingressEqual)
}

// specEqual reports whether o and n are equal (nil and empty alike, as
// equality.Semantic has them).
func specEqual(o, n *v1.ServiceSpec) bool {
	return o.Type == n.Type && o.ClusterIP == n.ClusterIP && o.SessionAffinity == n.SessionAffinity &&
		o.LoadBalancerIP == n.LoadBalancerIP && o.ExternalName == n.ExternalName &&
		o.ExternalTrafficPolicy == n.ExternalTrafficPolicy && o.HealthCheckNodePort == n.HealthCheckNodePort &&
		o.PublishNotReadyAddresses == n.PublishNotReadyAddresses &&
		ptrEqual(o.IPFamilyPolicy, n.IPFamilyPolicy) && ptrEqual(o.AllocateLoadBalancerNodePorts, n.AllocateLoadBalancerNodePorts) &&
		ptrEqual(o.LoadBalancerClass, n.LoadBalancerClass) && ptrEqual(o.InternalTrafficPolicy, n.InternalTrafficPolicy) &&
		ptrEqual(o.TrafficDistribution, n.TrafficDistribution) &&
		slices.Equal(o.ClusterIPs, n.ClusterIPs) && slices.Equal(o.ExternalIPs, n.ExternalIPs) &&
		slices.Equal(o.LoadBalancerSourceRanges, n.LoadBalancerSourceRanges) && slices.Equal(o.IPFamilies, n.IPFamilies) &&
		maps.Equal(o.Selector, n.Selector) &&
		slices.EqualFunc(o.Ports, n.Ports, func(a, b v1.ServicePort) bool {
			return a.Name == b.Name && a.Protocol == b.Protocol && ptrEqual(a.AppProtocol, b.AppProtocol) &&
				a.Port == b.Port && a.TargetPort == b.TargetPort && a.NodePort == b.NodePort
		}) &&
		(o.SessionAffinityConfig == nil && n.SessionAffinityConfig == nil ||
			equality.Semantic.DeepEqual(o.SessionAffinityConfig, n.SessionAffinityConfig))
}

func ingressEqual(a, b v1.LoadBalancerIngress) bool {
	return a.IP == b.IP && a.Hostname == b.Hostname && ptrEqual(a.IPMode, b.IPMode) &&
		slices.EqualFunc(a.Ports, b.Ports, func(a, b v1.PortStatus) bool {
			return a.Port == b.Port && a.Protocol == b.Protocol && ptrEqual(a.Error, b.Error)
		})
}

// metaEqual reports whether o and n are equal but for the version, the managed fields
// and selfLink (deprecated, no longer populated).
func metaEqual(o, n *metav1.ObjectMeta) bool {
	return o.Name == n.Name && o.Namespace == n.Namespace && o.UID == n.UID &&
		o.GenerateName == n.GenerateName &&
		o.Generation == n.Generation && o.CreationTimestamp.Equal(&n.CreationTimestamp) &&
		o.DeletionTimestamp.Equal(n.DeletionTimestamp) &&
		ptrEqual(o.DeletionGracePeriodSeconds, n.DeletionGracePeriodSeconds) &&
		maps.Equal(o.Labels, n.Labels) && maps.Equal(o.Annotations, n.Annotations) &&
		slices.Equal(o.Finalizers, n.Finalizers) &&
		slices.EqualFunc(o.OwnerReferences, n.OwnerReferences, func(a, b metav1.OwnerReference) bool {
			return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
				ptrEqual(a.Controller, b.Controller) && ptrEqual(a.BlockOwnerDeletion, b.BlockOwnerDeletion)
		})
}

func ptrEqual[T comparable](a, b *T) bool {
	return a == b || (a != nil && b != nil && *a == *b)
}

func (a *Agent) sliceHandler() cache.ResourceEventHandler {
	key := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if keys, _ := sliceService(obj); len(keys) == 1 {
			a.serviceChanged(keys[0])
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: key,
		UpdateFunc: func(old, obj any) {
			// A slice relabelled to another Service changes both.
			key(old)
			key(obj)
		},
		DeleteFunc: key,
	}
}

func (a *Agent) nodeHandler() cache.ResourceEventHandler {
	name := func(obj any) string {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if n, ok := obj.(*v1.Node); ok {
			return n.Name
		}
		return ""
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { a.nodeChanged(name(obj)) },
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*v1.Node)
			n, ok2 := obj.(*v1.Node)
			if ok1 && ok2 && !nodeMatters(o, n) {
				return
			}
			a.nodeChanged(name(obj))
		},
		DeleteFunc: func(obj any) { a.nodeChanged(name(obj)) },
	}
}

// nodeMatters reports whether a Node update can change what the agent applies:
// anything but a status heartbeat (the conditions' heartbeat times and messages,
// images, capacity, node info, volumes, the speaker status annotation) and the
// object's metadata bookkeeping.
func nodeMatters(o, n *v1.Node) bool {
	if !equality.Semantic.DeepEqual(o.DeletionTimestamp, n.DeletionTimestamp) ||
		!equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
		!annotationsEqual(o.Annotations, n.Annotations) ||
		!equality.Semantic.DeepEqual(o.Spec, n.Spec) ||
		!equality.Semantic.DeepEqual(o.Status.Addresses, n.Status.Addresses) ||
		len(o.Status.Conditions) != len(n.Status.Conditions) {
		return true
	}
	for i, c := range o.Status.Conditions {
		d := n.Status.Conditions[i]
		if c.Type != d.Type || c.Status != d.Status || c.Reason != d.Reason || !c.LastTransitionTime.Equal(&d.LastTransitionTime) {
			return true
		}
	}
	return false
}

// annotationsEqual compares two Nodes' annotations, leaving out the speaker
// status each replica rewrites on its own Node as its paths change (a heartbeat
// to this agent).
func annotationsEqual(a, b map[string]string) bool {
	count := func(m map[string]string) int {
		if _, ok := m[speakerstatus.Annotation]; ok {
			return len(m) - 1
		}
		return len(m)
	}
	if count(a) != count(b) {
		return false
	}
	for k, v := range a {
		if k == speakerstatus.Annotation {
			continue
		}
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// syncLoadBalancersDelta recomputes the announcements of the changed Services and of
// the Services sharing an IP with them, and gives the speaker only the prefixes
// involved.
func (a *Agent) syncLoadBalancersDelta(ctx context.Context, sp Speaker, nodes []*v1.Node, changed map[string]struct{}) {
	if !a.announcesLoadBalancers() || len(changed) == 0 {
		return
	}
	// The prefixes whose announcement may change: those the changed Services held
	// and those they hold now.
	var prefixes []netip.Prefix
	inScope := map[netip.Prefix]bool{}
	add := func(ps []netip.Prefix) {
		for _, p := range ps {
			if !inScope[p] {
				inScope[p] = true
				prefixes = append(prefixes, p)
			}
		}
	}
	current := map[types.NamespacedName]*v1.Service{}
	for k := range changed {
		ns, name, _ := cache.SplitMetaNamespaceKey(k)
		key := types.NamespacedName{Namespace: ns, Name: name}
		add(a.lbIdx.prefixes(key))
		svc, err := a.services.Services(ns).Get(name)
		if err != nil {
			svc = nil // deleted: its prefixes are in the update, with no path from it
		}
		current[key] = svc
		add(prefixesOf(svc))
	}
	// Every Service holding one of them contributes to its announcement (a shared
	// IP); their other prefixes did not change and are left out of the update. The
	// holders come from the index as of the last pass: when an address moves from
	// one Service to another whose event is not handled yet, it is withdrawn for one
	// pass and announced again by the next (the new holder's event kicks it).
	for _, p := range prefixes {
		for _, key := range a.lbIdx.services[p] {
			if _, ok := current[key]; !ok {
				svc, err := a.services.Services(key.Namespace).Get(key.Name)
				if err != nil {
					svc = nil
				}
				current[key] = svc
			}
		}
	}
	scope := make(map[string]bool, len(current))
	svcs := make([]*v1.Service, 0, len(current))
	for key, svc := range current {
		scope[key.String()] = true
		if svc != nil {
			svcs = append(svcs, svc)
		}
	}
	for k := range changed {
		ns, name, _ := cache.SplitMetaNamespaceKey(k)
		key := types.NamespacedName{Namespace: ns, Name: name}
		a.lbIdx.set(key, prefixesOf(current[key]))
	}
	want, problems, gs := a.desired(ctx, svcs, nodes)
	want = slices.DeleteFunc(want, func(w lb.Announcement) bool { return !inScope[w.Prefix] })
	a.reportProblems(ctx, problems, scope)
	sp.Update(SourceLoadBalancers, prefixes, Paths(want))
	a.wakeForDrains(gs, nodes)
	klog.FromContext(ctx).V(4).Info("Incremental pass", "services", len(changed), "recomputed", len(svcs), "prefixes", len(prefixes))
}
