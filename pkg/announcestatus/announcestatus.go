// Package announcestatus keeps the Service condition baremetal-ccm.io/Announced on
// the leader: which announcer carries a Service's addresses, how many CCM replicas
// and which worker agents announce them and whether their BGP sessions are up (from
// the BGPSessionState objects every speaker writes, package speakerstatus), and in
// next-hop mode nodes which nodes the paths lead to. It only writes a condition that
// changed, at a bounded rate, so a BGP session that flaps does not turn into a burst
// of writes.
//
// The message names sessions up or down, never their transient states or errors
// (those are in the BGPSessionState objects and `baremetal-ccmctl explain`), so a
// session retrying does not rewrite every Service.
package announcestatus

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/cachelist"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	v1alpha1listers "github.com/baremetal-ccm/baremetal-ccm/pkg/generated/listers/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/speakerstatus"
)

// Reasons of lb.ConditionAnnounced.
const (
	ReasonBGP             = "BGP"
	ReasonMetalLB         = "MetalLB"
	ReasonNoAnnouncer     = "NoAnnouncer"
	ReasonNoSessionUp     = "NoSessionUp"
	ReasonNoReplica       = "NoReplicaReports"
	ReasonNoEligibleNode  = "NoEligibleNode"
	ReasonNoLocalEndpoint = "NoLocalEndpoint"
	ReasonNotInPool       = "NotInPool"
)

// Options configure a Controller.
type Options struct {
	Client    kubernetes.Interface
	Informers informers.SharedInformerFactory
	Config    *config.CloudConfig
	// Pool returns an IP's pool (an IP in none is not announced).
	Pool func(netip.Addr) (*config.AddressPool, bool)
	// Sessions lists the speakers' BGPSessionState objects (nil: none known). The
	// controller does not wait for its cache: without the CRD it reports that no
	// speaker publishes.
	Sessions v1alpha1listers.BGPSessionStateLister
	// Interval between full passes. Default 5s.
	Interval time.Duration
	// WriteQPS and WriteBurst bound the condition writes: a pass writes at most
	// WriteBurst, plus what WriteQPS refills while it writes. Default: a quarter of
	// ClientQPS and ClientBurst (the process's --kube-api-qps and --kube-api-burst),
	// at least 20 and 50, so the conditions of a burst of Services follow soon after
	// their announcements without taking most of the client's budget; a client
	// without a limit (negative ClientQPS) leaves the writes unlimited too.
	WriteQPS   float32
	WriteBurst int
	// ClientQPS and ClientBurst are the API client's own limits (0: unknown;
	// ClientQPS < 0: none, as in rest.Config).
	ClientQPS   float32
	ClientBurst int
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time
}

// The least rate of condition writes (the default client's whole budget is 20/s).
const (
	minWriteQPS   = 20
	minWriteBurst = 50
)

// Controller computes and writes the Announced condition.
type Controller struct {
	o        Options
	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	slices   discoverylisters.EndpointSliceLister
	synced   []cache.InformerSynced
	// informers of services and nodes, for Run's shared listings.
	svcInformer, nodeInformer cache.SharedIndexInformer
	kick                      chan struct{}
	limiter                   flowcontrol.RateLimiter

	mu      sync.Mutex
	written map[string]metav1.Condition // what this term wrote and the cache does not show yet
	// writtenPeak is the most entries written held since it was made: a map keeps
	// its buckets when emptied, so after a burst an empty one is made anew.
	writtenPeak int
}

// New registers the controller's informers (all shared with the agent).
func New(o Options) (*Controller, error) {
	if o.Client == nil || o.Informers == nil || o.Config == nil {
		return nil, fmt.Errorf("announcestatus: Client, Informers and Config are required")
	}
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	unlimited := false
	if o.WriteQPS <= 0 {
		unlimited = o.ClientQPS < 0 // the client has no limit: neither have they
		o.WriteQPS = max(minWriteQPS, o.ClientQPS/4)
	}
	if o.WriteBurst <= 0 {
		o.WriteBurst = max(minWriteBurst, o.ClientBurst/4)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	c := &Controller{o: o, kick: make(chan struct{}, 1), written: map[string]metav1.Condition{},
		limiter: flowcontrol.NewTokenBucketRateLimiter(o.WriteQPS, o.WriteBurst)}
	if unlimited {
		c.limiter = flowcontrol.NewFakeAlwaysRateLimiter()
	}
	svc := o.Informers.Core().V1().Services()
	nd := o.Informers.Core().V1().Nodes()
	sl := o.Informers.Discovery().V1().EndpointSlices()
	c.services, c.nodes, c.slices = cachelist.ServiceLister(svc.Informer().GetIndexer()), cachelist.NodeLister(nd.Informer().GetIndexer()), sl.Lister()
	c.synced = []cache.InformerSynced{svc.Informer().HasSynced, nd.Informer().HasSynced, sl.Informer().HasSynced}
	c.svcInformer, c.nodeInformer = svc.Informer(), nd.Informer()
	return c, nil
}

// Run passes over every Service each Interval until ctx ends (the leadership term).
func (c *Controller) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("announce-status")
	ctx = klog.NewContext(ctx, logger)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	// Passes every few seconds list every Service and Node: from listings shared
	// until the caches change (an idle pass allocates no list).
	svcs := cachelist.SharedServiceLister(ctx, c.svcInformer)
	nodes := cachelist.SharedNodeLister(ctx, c.nodeInformer)
	tick := time.NewTicker(c.o.Interval)
	defer tick.Stop()
	for {
		c.passWith(ctx, svcs, nodes)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pass computes every Service's condition and writes those that changed.
func (c *Controller) pass(ctx context.Context) { c.passWith(ctx, c.services, c.nodes) }

// passWith is pass with the listers given (their listings are only read).
func (c *Controller) passWith(ctx context.Context, services corelisters.ServiceLister, nodeLister corelisters.NodeLister) {
	svcs, err := services.List(labels.Everything())
	if err != nil {
		return
	}
	nodes, _ := nodeLister.List(labels.Everything())
	var sessions []*v1alpha1.BGPSessionState
	if c.o.Sessions != nil {
		sessions, _ = c.o.Sessions.List(labels.Everything())
	}
	c.mu.Lock()
	lagging := len(c.written) > 0 // some write not seen in the cache yet
	c.mu.Unlock()
	c.each(svcs, nodes, sessions, func(svc *v1.Service, cond metav1.Condition) {
		cur := meta.FindStatusCondition(svc.Status.Conditions, lb.ConditionAnnounced)
		if same(cur, cond) {
			if lagging {
				c.forget(svc.Namespace + "/" + svc.Name) // the cache shows it now
			}
			return
		}
		k := svc.Namespace + "/" + svc.Name
		c.mu.Lock()
		w, wrote := c.written[k]
		c.mu.Unlock()
		if wrote && same(&w, cond) {
			return
		}
		if !c.limiter.TryAccept() {
			return // the next pass writes it: bounded writes when much changes at once
		}
		if err := c.write(ctx, svc, cur, cond); err != nil {
			klog.FromContext(ctx).V(2).Info("Writing the Announced condition failed; retrying at the next pass", "service", k, "err", err)
			return
		}
		c.mu.Lock()
		c.written[k] = cond
		c.writtenPeak = max(c.writtenPeak, len(c.written))
		c.mu.Unlock()
	})
}

// forget drops what was written for key once the cache shows it (10,000 Services'
// conditions would otherwise be held twice for the term).
func (c *Controller) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.written, key)
	if len(c.written) == 0 && c.writtenPeak > 1024 {
		c.written, c.writtenPeak = map[string]metav1.Condition{}, 0
	}
}

func same(a *metav1.Condition, b metav1.Condition) bool {
	return a != nil && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

// write patches the condition (merged by type: the Service's other conditions stay).
func (c *Controller) write(ctx context.Context, svc *v1.Service, cur *metav1.Condition, cond metav1.Condition) error {
	cond.LastTransitionTime = metav1.NewTime(c.o.Clock())
	if cur != nil && cur.Status == cond.Status {
		cond.LastTransitionTime = cur.LastTransitionTime
	}
	cond.ObservedGeneration = svc.Generation
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []metav1.Condition{cond}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = c.o.Client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// Compute returns the Announced condition of every Service of ours that holds
// addresses, by namespace/name (without transition time).
func (c *Controller) Compute(svcs []*v1.Service, nodes []*v1.Node, sessions []*v1alpha1.BGPSessionState) map[string]metav1.Condition {
	out := map[string]metav1.Condition{}
	c.each(svcs, nodes, sessions, func(svc *v1.Service, cond metav1.Condition) {
		out[svc.Namespace+"/"+svc.Name] = cond
	})
	return out
}

// each calls fn with the Announced condition of every Service of ours that holds
// addresses, in the order of svcs. Services whose condition depends on nothing of
// their own (announced by the speakers themselves, externalTrafficPolicy Cluster, an
// address in a pool) share one condition, computed once: a pass over 10,000
// Services costs one message, not 10,000.
func (c *Controller) each(svcs []*v1.Service, nodes []*v1.Node, sessions []*v1alpha1.BGPSessionState, fn func(*v1.Service, metav1.Condition)) {
	now := c.o.Clock()
	cfg := c.o.Config
	announcer := config.AnnouncerNone
	if cfg.LoadBalancer != nil {
		announcer = cfg.LoadBalancer.Announcer
	}
	// Described once per pass, not once per Service.
	var replicas, agents []speaker
	for _, s := range speakerstatus.Fresh(sessions, now) {
		sp := speaker{node: s.Node}
		sp.desc, sp.up = describe(s)
		if s.Kind == v1alpha1.SpeakerAgent {
			agents = append(agents, sp)
		} else {
			replicas = append(replicas, sp)
		}
	}
	nodesMode := announcer == config.AnnouncerBGP && cfg.BGP != nil && cfg.BGP.NextHop == config.NextHopNodes
	var byName map[string]*v1.Node // only what needs it: agents, next hops
	if len(agents) > 0 || nodesMode {
		byName = make(map[string]*v1.Node, len(nodes))
		for _, n := range nodes {
			byName[n.Name] = n
		}
	}
	slicesOf := func(ns, name string) []*discoveryv1.EndpointSlice {
		sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name})
		out, _ := c.slices.EndpointSlices(ns).List(sel)
		return out
	}
	var hops, draining map[netip.Prefix][]netip.Addr
	if nodesMode {
		var gs *lb.GracefulShutdown
		if g := cfg.BGP.GracefulShutdown; g != nil {
			// A plain cordon (onCordon) has no start time in the API: the agents count
			// from when they saw it; here it counts as long ago.
			gs = &lb.GracefulShutdown{Draining: func(n *v1.Node) (time.Time, bool) { return lb.Draining(n, g.OnCordon) }, Time: g.Time.Duration, Now: now}
		}
		want, _ := lb.Desired(lb.State{Services: svcs, EndpointSlices: slicesOf, Node: func(n string) (*v1.Node, bool) { nd, ok := byName[n]; return nd, ok },
			Nodes: nodes, Pool: c.o.Pool, NextHop: config.NextHopNodes, GracefulShutdown: gs})
		hops = make(map[netip.Prefix][]netip.Addr, len(want))
		draining = map[netip.Prefix][]netip.Addr{}
		for _, a := range want {
			hops[a.Prefix] = a.NextHops
			if len(a.GracefulShutdown) > 0 {
				draining[a.Prefix] = a.GracefulShutdown
			}
		}
	}
	nodeOf := map[netip.Addr]string{}
	if hops != nil {
		for _, n := range nodes {
			for _, v4 := range []bool{true, false} {
				if ip, ok := lb.InternalIP(n, v4); ok {
					nodeOf[ip] = n.Name
				}
			}
		}
	}
	// The shared condition, by value: a pointer to the loop's condition would move
	// every Service's condition to the heap (10,000 allocations a pass).
	var shared metav1.Condition
	haveShared := false
	var buf []netip.Addr // one buffer for every Service's IPs (none is kept)
	for _, svc := range svcs {
		if !lb.Owned(svc) || svc.DeletionTimestamp != nil {
			continue
		}
		buf = lb.AppendIngressIPs(buf[:0], svc)
		ips := buf
		if len(ips) == 0 {
			continue
		}
		cond := metav1.Condition{Type: lb.ConditionAnnounced}
		switch announcer {
		case config.AnnouncerNone:
			cond.Status, cond.Reason = metav1.ConditionFalse, ReasonNoAnnouncer
			cond.Message = "loadBalancer.announcer is none: this CCM assigns the addresses; announce them by other means"
		case config.AnnouncerMetalLB:
			cond.Status, cond.Reason = metav1.ConditionUnknown, ReasonMetalLB
			cond.Message = "announced by MetalLB's speakers from the objects this CCM writes (see MetalLB's status and logs)"
		default:
			if p, ok := c.notInPool(ips); ok {
				cond = p
				break
			}
			plain := hops == nil && svc.Spec.ExternalTrafficPolicy != v1.ServiceExternalTrafficPolicyLocal
			if plain && haveShared {
				cond = shared
				break
			}
			cond = c.bgpCondition(svc, ips, replicas, agents, byName, hops, draining, nodeOf, slicesOf)
			if plain {
				shared, haveShared = cond, true
			}
		}
		fn(svc, cond)
	}
}

// notInPool is the condition of a Service none of whose addresses is in a pool.
func (c *Controller) notInPool(ips []netip.Addr) (metav1.Condition, bool) {
	if c.o.Pool == nil {
		return metav1.Condition{}, false
	}
	var out []string
	for _, ip := range ips {
		if _, ok := c.o.Pool(ip); !ok {
			out = append(out, ip.String())
		}
	}
	if len(out) < len(ips) {
		return metav1.Condition{}, false
	}
	return metav1.Condition{Type: lb.ConditionAnnounced, Status: metav1.ConditionFalse, Reason: ReasonNotInPool,
		Message: fmt.Sprintf("%s in no configured pool: not announced (add the range back to a pool, or recreate the Service)", strings.Join(out, ", "))}, true
}

// bgpCondition is the condition of a Service announced by the embedded speakers, an
// address of which is in a pool.
func (c *Controller) bgpCondition(svc *v1.Service, ips []netip.Addr, replicas, agents []speaker, byName map[string]*v1.Node, hops, draining map[netip.Prefix][]netip.Addr, nodeOf map[netip.Addr]string, slicesOf func(string, string) []*discoveryv1.EndpointSlice) metav1.Condition {
	cond := metav1.Condition{Type: lb.ConditionAnnounced, Status: metav1.ConditionFalse}
	local := svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
	var ready map[string]bool
	if local {
		ready = lb.ReadyEndpointNodes(slicesOf(svc.Namespace, svc.Name))
	}
	mode := config.NextHopSelf
	if hops != nil {
		mode = config.NextHopNodes
	}
	// Who announces: in mode self every replica with a session up (for Local only
	// those with a ready local endpoint); in mode nodes every replica, with the
	// eligible nodes as next hops.
	var by, notBy []string
	for _, r := range replicas {
		switch {
		case !r.up:
			notBy = append(notBy, r.desc)
		case mode == config.NextHopSelf && local && !ready[r.node]:
			notBy = append(notBy, r.node+" (no ready local endpoint)")
		default:
			by = append(by, r.desc)
		}
	}
	// A worker agent announces its own node as next hop while the node takes
	// traffic (and, for Local, has a ready endpoint): lb.Desired with SelfOnly.
	var agentsBy, agentsNotBy []string
	var localReady map[string]bool
	counted := 0
	for _, a := range agents {
		n, known := byName[a.node]
		if !known {
			continue // its Node is gone: it announces nothing (its objects go with it)
		}
		counted++
		switch {
		case !a.up:
			agentsNotBy = append(agentsNotBy, a.desc)
		case !lb.Eligible(n):
			agentsNotBy = append(agentsNotBy, a.node+" (node takes no traffic)")
		case local:
			if localReady == nil {
				localReady = lb.ReadyEndpointNodes(slicesOf(svc.Namespace, svc.Name))
			}
			if !localReady[a.node] {
				agentsNotBy = append(agentsNotBy, a.node+" (no ready local endpoint)")
				continue
			}
			agentsBy = append(agentsBy, a.desc)
		default:
			agentsBy = append(agentsBy, a.desc)
		}
	}
	var b strings.Builder
	var nh, dh []string
	if mode == config.NextHopNodes {
		seen := map[string]bool{}
		for _, ip := range ips {
			for _, hop := range hops[netip.PrefixFrom(ip, ip.BitLen())] {
				if n := nodeOf[hop]; n != "" && !seen[n] {
					seen[n] = true
					nh = append(nh, n)
				}
			}
		}
		for _, ip := range ips {
			for _, hop := range draining[netip.PrefixFrom(ip, ip.BitLen())] {
				if n := nodeOf[hop]; n != "" && !seen[n] {
					seen[n] = true
					dh = append(dh, n)
				}
			}
		}
		slices.Sort(nh)
		slices.Sort(dh)
	}
	switch {
	case len(replicas)+len(agents) == 0:
		cond.Reason = ReasonNoReplica
		b.WriteString("no BGP speaker reports its sessions (BGPSessionState objects, written by CCM replicas that know their --node-name and by worker agents; is the CRD " + speakerstatus.CRD + " installed?)")
	case mode == config.NextHopNodes && len(nh)+len(dh) == 0:
		cond.Reason = ReasonNoEligibleNode
		b.WriteString("no eligible node to send the traffic to (Ready, not excluded, powered on, healthy")
		if local {
			b.WriteString(", with a ready local endpoint")
		}
		b.WriteString("): not announced, so the routers drop nothing into a black hole")
	case len(by)+len(agentsBy) == 0 && mode == config.NextHopSelf && local && len(agents) == 0:
		cond.Reason = ReasonNoLocalEndpoint
		b.WriteString("externalTrafficPolicy Local and no CCM replica's node has a ready endpoint: not announced in next-hop mode self (use bgp.nextHop: nodes for Local Services)")
	case len(by)+len(agentsBy) == 0:
		cond.Reason = ReasonNoSessionUp
		b.WriteString("no BGP speaker announces it (no session up, or no node that may take the traffic)")
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, ReasonBGP
		if len(by) > 0 {
			fmt.Fprintf(&b, "announced over BGP by %d of %d CCM replicas: %s", len(by), len(replicas), strings.Join(by, ", "))
		} else {
			b.WriteString("announced over BGP")
		}
		if len(agentsBy) > 0 {
			fmt.Fprintf(&b, "; by %d of %d worker agents: %s", len(agentsBy), counted, strings.Join(limit(agentsBy, 20), ", "))
		}
	}
	if len(notBy) > 0 && cond.Reason != ReasonNoReplica {
		b.WriteString("; not by " + strings.Join(notBy, ", "))
	}
	if len(agentsNotBy) > 0 && cond.Reason != ReasonNoReplica {
		b.WriteString("; not by agents " + strings.Join(limit(agentsNotBy, 20), ", "))
	}
	if len(nh) > 0 {
		b.WriteString("; next hops: " + strings.Join(limit(nh, 20), ", "))
	}
	if len(dh) > 0 {
		b.WriteString("; draining (GRACEFUL_SHUTDOWN, least preferred until withdrawn): " + strings.Join(limit(dh, 20), ", "))
	}
	cond.Message = b.String()
	return cond
}

// speaker is a speaker as the condition names it.
type speaker struct {
	node, desc string
	up         bool
}

// describe names a speaker's node and sessions, and whether one is up.
func describe(s speakerstatus.Speaker) (string, bool) {
	var up, down []string
	for _, p := range s.Peers {
		a := p.Address.String()
		switch {
		case p.State != "established":
			down = append(down, a)
		case p.BFDProblem != "":
			up = append(up, a+" without BFD")
		default:
			up = append(up, a)
		}
	}
	return s.Node + " (" + sessions(up, down) + ")", len(up) > 0
}

func sessions(up, down []string) string {
	var parts []string
	if len(up) > 0 {
		parts = append(parts, "sessions up: "+strings.Join(up, ", "))
	}
	if len(down) > 0 {
		parts = append(parts, "down: "+strings.Join(down, ", "))
	}
	if len(parts) == 0 {
		return "no BGP peer"
	}
	return strings.Join(parts, "; ")
}

func limit(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), fmt.Sprintf("and %d more", len(s)-n))
}
