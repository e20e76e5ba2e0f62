// Package agent is the replica-local half of the provider: it runs in every CCM
// replica, leader or not (and alone on worker hosts), watches Services, EndpointSlices
// and Nodes, and applies host-local state: it announces LoadBalancer IPs and pod CIDRs
// over the embedded BGP speaker, and mirrors pod-CIDR routes into this host's kernel.
//
// It only applies what the API says; decisions (which IP a Service gets, which Nodes
// exist) are made by the leader's controllers. Every replica announces, so routers see
// ECMP across the control-plane hosts and a leader change withdraws nothing.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/cachelist"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/bfd"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/hostinfo"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/nodehealth"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/routes"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/speakerstatus"
)

// ReasonAnnouncementProblem is the event reason for a Service the agent cannot
// announce as asked (a malformed community annotation, an IP in no pool).
const ReasonAnnouncementProblem = "AnnouncementProblem"

// Announcement sources, as given to the speaker.
const (
	SourceLoadBalancers = "lb"
	SourcePodCIDRs      = "podcidr"
)

// Speaker is the BGP speaker the agent feeds (bgp.Speaker).
type Speaker interface {
	Run(ctx context.Context) error
	Announce(source string, paths []bgp.Path)
	// Update replaces a source's paths of the given prefixes only.
	Update(source string, prefixes []netip.Prefix, paths []bgp.Path)
	SetPeers(peers []config.BGPPeer) error
	// RefreshPasswords re-reads the static peers' password files.
	RefreshPasswords() error
	// Synced says every source has announced its complete state: sessions may open.
	Synced() error
	// Ready reports whether every session is up with this host's paths sent, and
	// names the peers that are not.
	Ready() (bool, []string)
	// Peers, BFDSessions and AppliedPaths describe the speaker (SpeakerStatus).
	Peers() []bgp.PeerStatus
	BFDSessions() []bfd.SessionState
	AppliedPaths() int
}

// Mirror keeps this host's kernel routes equal to the Nodes' pod CIDRs (routes.Mirror).
type Mirror interface {
	Reconcile(ctx context.Context, nodes []*v1.Node) (routes.Result, error)
}

// EventRecorder records events on objects.
type EventRecorder = lb.EventRecorder

// Options are the agent's collaborators. Only Config and Informers are required;
// without a speaker factory nothing is announced, without a Mirror no route is
// mirrored.
type Options struct {
	Config *config.CloudConfig
	// Self is the name of the Node of the host this agent runs on ("" if unknown).
	Self string
	// Informers is the shared factory whose Service, EndpointSlice and Node informers
	// the agent uses; the agent starts it.
	Informers informers.SharedInformerFactory
	// NewSpeaker builds the speaker once this host's identity is known (bgp
	// configured).
	NewSpeaker func(id Identity) (Speaker, error)
	// Mirror, when set, is reconciled on every Node change and every ResyncInterval.
	Mirror Mirror
	// Inventory, when set, supplies this host's per-rack BGP peers and router ID; its
	// View is read on every pass. Without it (agent mode on worker hosts) they come from
	// the leader's hostinfo.Annotation on this host's Node; with SelfOnly the speaker
	// starts only once that annotation is there.
	Inventory *inventory.Store
	// SelfOnly announces only this host: its own Node's pod CIDRs, and each
	// LoadBalancer IP with this host as next hop while its Node is eligible (Ready, not
	// excluded, not being deleted; for externalTrafficPolicy Local, with a ready local
	// endpoint). Agents on worker hosts run so, whatever bgp.nextHop says.
	SelfOnly bool
	// RouterID overrides the router ID of every other source (--bgp-router-id).
	RouterID netip.Addr
	// Passwords gives the TCP-MD5 password file of a published peer that needs one
	// (agent mode; see Passwords).
	Passwords Passwords
	// Pool returns the LoadBalancer pool of an IP (its communities).
	Pool func(netip.Addr) (*config.AddressPool, bool)
	// Events records problems on Services.
	Events EventRecorder
	// ResyncInterval re-applies everything (repairs route drift). Default: 1m.
	ResyncInterval time.Duration
	// ClusterPeers, when set, returns the cluster's peers (BGPPeer objects) for the
	// speaker on self (nil: its Node is not known yet), leaving out the addresses of
	// rack, this host's rack peers. See PeersChanged.
	ClusterPeers func(self *v1.Node, rack []config.BGPPeer) []config.BGPPeer
	// Advertise, when set, says how a pool's address held by a Service is
	// advertised (BGPAdvertisements); call Resync after it changes.
	Advertise func(svc *v1.Service, pool string) (lb.Advertising, bool)
	// PeerResyncInterval re-reads the peers and their password files. Default: 5s.
	PeerResyncInterval time.Duration
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time
}

// Identity is what the speaker needs to know about this host.
type Identity struct {
	// RouterID is bgp.routerID, else this host's first IPv4 InternalIP.
	RouterID netip.Addr
	// IPv4 and IPv6 are this host's first InternalIP of each family (invalid when
	// unknown): the next hop "self" of a prefix sent over a session of the other
	// family.
	IPv4, IPv6 netip.Addr
}

// Agent applies the API's state to this host.
type Agent struct {
	o          Options
	services   corelisters.ServiceLister
	sliceIndex cache.Indexer
	nodes      corelisters.NodeLister
	synced     []cache.InformerSynced
	trigger    chan struct{}

	mu       sync.Mutex
	speaker  Speaker
	problems map[string]string // service key -> last reported problem
	peersLog string            // what was last logged about the peers
	// lastRack are the rack peers last read (kept while the annotation is unreadable).
	lastRack struct {
		name       string
		peers, all []config.BGPPeer
	}
	waitLog  string     // why the speaker is not started yet, as last logged
	routerID netip.Addr // of the running speaker
	// passed: the first full pass was applied (and the speaker told so).
	passed bool
	// started is when the informers synced; readyLog what Ready last logged.
	started  time.Time
	readyLog string
	ready    bool
	// health probes the nodes' health endpoints (bgp.nodeHealthCheck, mode nodes).
	health *nodehealth.Checker
	// drains tracks the draining nodes (bgp.gracefulShutdown).
	drains drains
	// pend is what changed since the last pass; lbIdx the Services' prefixes as of
	// the last pass (Run goroutine only).
	pend  pending
	lbIdx lbIndex
	// mirrorRetry is the pending retry of a failed mirror pass (guarded by mu).
	mirrorRetry *time.Timer
}

// New registers the agent's informers on o.Informers (call before starting it, or the
// agent starts it in Run).
func New(o Options) (*Agent, error) {
	if o.Config == nil || o.Informers == nil {
		return nil, errors.New("agent: Config and Informers are required")
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = time.Minute
	}
	if o.PeerResyncInterval <= 0 {
		o.PeerResyncInterval = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	a := &Agent{o: o, trigger: make(chan struct{}, 1), problems: map[string]string{}}
	if b := o.Config.BGP; b != nil && b.NodeHealthCheck != nil && b.NextHop == config.NextHopNodes && !o.SelfOnly {
		h := b.NodeHealthCheck
		checker, err := nodehealth.New(nodehealth.Config{
			Period: h.Period.Duration, Timeout: h.Timeout.Duration, FailureThreshold: int(h.FailureThreshold),
		}, a.kickFull)
		if err != nil {
			return nil, fmt.Errorf("agent: bgp.nodeHealthCheck: %w", err)
		}
		a.health = checker
	}
	svc := o.Informers.Core().V1().Services()
	sl := o.Informers.Discovery().V1().EndpointSlices()
	nd := o.Informers.Core().V1().Nodes()
	a.services, a.nodes = cachelist.ServiceLister(svc.Informer().GetIndexer()), cachelist.NodeLister(nd.Informer().GetIndexer())
	// EndpointSlices by Service: the announcements of Local Services look them up on
	// every pass, which a label-selector list would make O(Services x slices).
	if err := sl.Informer().AddIndexers(cache.Indexers{sliceServiceIndex: sliceService}); err != nil {
		return nil, fmt.Errorf("agent: indexing EndpointSlices: %w", err)
	}
	a.sliceIndex = sl.Informer().GetIndexer()
	for inf, h := range map[cache.SharedIndexInformer]cache.ResourceEventHandler{
		svc.Informer(): a.serviceHandler(), sl.Informer(): a.sliceHandler(), nd.Informer(): a.nodeHandler(),
	} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return nil, fmt.Errorf("agent: adding event handler: %w", err)
		}
		a.synced = append(a.synced, inf.HasSynced)
	}
	return a, nil
}

func (a *Agent) kick() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// Run applies state until ctx is done. With BGP configured it starts the speaker once
// the router ID is known, and returns only after the speaker has withdrawn everything.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("agent")
	ctx = klog.NewContext(ctx, logger)
	a.o.Informers.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return ctx.Err()
	}
	logger.Info("Agent informers synced", "self", a.o.Self)
	if a.health != nil {
		go a.health.Run(ctx)
	}
	a.mu.Lock()
	a.started = a.o.Clock()
	a.mu.Unlock()

	var speakerDone chan error
	wantSpeaker := a.o.Config.BGP != nil && a.o.NewSpeaker != nil
	startSpeaker := func() error {
		id, err := a.identity()
		if err != nil {
			a.mu.Lock()
			msg, changed := err.Error(), err.Error() != a.waitLog
			a.waitLog = msg
			a.mu.Unlock()
			if changed {
				logger.Info("BGP speaker not started yet", "reason", msg)
			}
			return nil
		}
		sp, err := a.o.NewSpeaker(id)
		if err != nil {
			return fmt.Errorf("starting the BGP speaker: %w", err)
		}
		a.mu.Lock()
		a.speaker, a.routerID = sp, id.RouterID
		a.passed = false
		a.pend.full = true // the new speaker gets everything
		a.mu.Unlock()
		speakerDone = make(chan error, 1)
		go func() { speakerDone <- sp.Run(ctx) }()
		logger.Info("BGP speaker started", "routerID", id.RouterID, "ipv4", id.IPv4, "ipv6", id.IPv6, "localASN", a.o.Config.BGP.LocalASN, "selfOnly", a.o.SelfOnly)
		return nil
	}

	resync := time.NewTicker(a.o.ResyncInterval)
	defer resync.Stop()
	// Password files change without any API event: re-read them every few seconds.
	peers := time.NewTicker(a.o.PeerResyncInterval)
	defer peers.Stop()
	a.kickFull()
	for {
		select {
		case <-ctx.Done():
			a.drains.stop()
			a.stopMirrorRetry()
			if speakerDone != nil {
				if err := <-speakerDone; err != nil && !errors.Is(err, context.Canceled) {
					return err
				}
			}
			return nil
		case <-peers.C:
			a.mu.Lock()
			sp := a.speaker
			a.mu.Unlock()
			if sp != nil {
				a.syncPeers(ctx, sp)
			}
			continue
		case <-a.trigger:
		case <-resync.C:
			a.mu.Lock()
			a.pend.full = true
			a.mu.Unlock()
		}
		// Coalesce a burst of events (1000 Services created at once) into one pass.
		select {
		case <-ctx.Done():
			continue
		case <-time.After(50 * time.Millisecond):
		}
		select {
		case <-a.trigger:
		default:
		}
		if wantSpeaker && speakerDone == nil {
			if err := startSpeaker(); err != nil {
				return err
			}
		}
		a.sync(ctx, a.takePending())
		a.markSynced(ctx)
	}
}

// markSynced tells the speaker, after the first pass that applied everything, that
// its sessions may open: each router then gets every path before End-of-RIB.
func (a *Agent) markSynced(ctx context.Context) {
	a.mu.Lock()
	sp, done := a.speaker, a.passed
	if sp != nil {
		a.passed = true
	}
	if sp == nil && (a.o.Config.BGP == nil || a.o.NewSpeaker == nil) {
		a.passed = true // nothing to announce: synced once the first pass ran
	}
	a.mu.Unlock()
	if sp == nil || done {
		return
	}
	if err := sp.Synced(); err != nil {
		klog.FromContext(ctx).Error(err, "Opening the BGP sessions failed; retrying on the next pass")
		a.mu.Lock()
		a.passed = false
		a.mu.Unlock()
	}
}

// Ready reports whether this host applies everything the API says: the informers
// synced and a first full pass applied, and with BGP, every session up with this
// host's paths acknowledged by the router (bgp.Speaker.Ready). A speaker that is
// not ready bgp.readyTimeout after the informers synced is reported ready anyway
// (a router that is down must not keep a replica from serving), with the peers
// still down in the reason and a log line when that changes.
func (a *Agent) Ready(ctx context.Context) (bool, string) {
	a.mu.Lock()
	sp, passed, started := a.speaker, a.passed, a.started
	a.mu.Unlock()
	var ready bool
	var why string
	switch {
	case started.IsZero():
		why = "informers not synced yet"
	case !passed && sp == nil && a.o.Config.BGP != nil && a.o.NewSpeaker != nil:
		why = "BGP speaker not started: " + a.waitReason()
	case !passed:
		why = "first pass not applied yet"
	case sp == nil:
		ready = true
	default:
		ok, waiting := sp.Ready()
		ready = ok
		if !ok {
			why = "BGP sessions not ready: " + strings.Join(waiting, "; ")
		}
	}
	if !ready && !started.IsZero() && a.o.Config.BGP != nil {
		if t := a.o.Config.BGP.ReadyTimeout; t != nil && a.o.Clock().Sub(started) >= t.Duration {
			ready, why = true, "ready after bgp.readyTimeout "+t.Duration.String()+" although "+why
		}
	}
	a.mu.Lock()
	changed := why != a.readyLog || ready != a.ready
	a.readyLog, a.ready = why, ready
	a.mu.Unlock()
	if changed {
		logger := klog.FromContext(ctx).WithName("agent")
		switch {
		case ready && why != "":
			logger.Info("Warning: reporting ready without every BGP session", "reason", why)
		case ready && sp == nil:
			logger.Info("Ready: informers synced and the first pass applied (no BGP speaker)")
		case ready:
			logger.Info("Ready: every BGP session is up and this host's paths are at the routers")
		default:
			logger.V(2).Info("Not ready", "reason", why)
		}
	}
	return ready, why
}

// SpeakerStatus describes this host's BGP speaker for speakerstatus.Publisher; ok
// is false before the speaker started.
func (a *Agent) SpeakerStatus() (speakerstatus.Status, bool) {
	a.mu.Lock()
	sp := a.speaker
	a.mu.Unlock()
	if sp == nil {
		return speakerstatus.Status{}, false
	}
	bfdState := map[netip.Addr]string{}
	for _, b := range sp.BFDSessions() {
		bfdState[b.Peer] = b.State.String()
	}
	var st speakerstatus.Status
	for _, p := range sp.Peers() {
		st.Peers = append(st.Peers, speakerstatus.Peer{Address: p.Address, State: p.State, Ready: p.Ready, BFD: bfdState[p.Address],
			LastError: p.LastError, BFDProblem: p.BFDProblem, PrefixesSent: p.PrefixesSent, UpSince: p.UpSince})
	}
	return st, true
}

func (a *Agent) waitReason() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waitLog == "" {
		return "waiting for the first pass"
	}
	return a.waitLog
}

// sync applies from the informer caches what changed (p), or everything when p is
// full.
func (a *Agent) sync(ctx context.Context, p pending) {
	logger := klog.FromContext(ctx)
	nodes, err := a.nodes.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Listing Nodes from the cache")
		a.kickFull() // try again
		return
	}
	a.mu.Lock()
	sp := a.speaker
	a.mu.Unlock()
	if sp != nil {
		if p.full || p.nodes || p.peers {
			// Services never change the peers: a burst of them costs no peer pass
			// (each one lists the host's interfaces for the next-hop policy).
			a.syncPeers(ctx, sp)
		}
		switch {
		case p.full || p.lbAll || a.health != nil: // node health: every Service's targets, every pass
			a.syncLoadBalancers(ctx, sp, nodes)
		default:
			a.syncLoadBalancersDelta(ctx, sp, nodes, p.services)
		}
		if a.o.Config.BGP.AnnouncePodCIDRs && (p.full || p.nodes) {
			announced := nodes
			if a.o.SelfOnly {
				announced = nil
				if n, err := a.nodes.Get(a.o.Self); err == nil {
					announced = []*v1.Node{n}
				}
			}
			sp.Announce(SourcePodCIDRs, PodCIDRPaths(announced))
		}
	}
	if a.o.Mirror != nil && (p.full || p.nodes) {
		// The mirror logs and counts its own failures; a failed pass is retried soon,
		// not only at the next Node change or resync.
		if _, err := a.o.Mirror.Reconcile(ctx, nodes); err != nil {
			a.retryMirror()
		}
	}
}

func (a *Agent) announcesLoadBalancers() bool {
	return a.o.Config.LoadBalancer != nil && a.o.Config.LoadBalancer.Announcer == config.AnnouncerBGP
}

// syncLoadBalancers recomputes every Service's announcement.
func (a *Agent) syncLoadBalancers(ctx context.Context, sp Speaker, nodes []*v1.Node) {
	if !a.announcesLoadBalancers() {
		return
	}
	svcs, err := a.services.List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing Services from the cache")
		a.kickFull()
		return
	}
	want, problems, gs := a.desired(ctx, svcs, nodes)
	a.reportProblems(ctx, problems, nil)
	sp.Announce(SourceLoadBalancers, Paths(want))
	a.lbIdx.resync(svcs)
	a.wakeForDrains(gs, nodes)
}

// desired computes the announcements of svcs (lb.Desired) with this pass's Nodes.
func (a *Agent) desired(ctx context.Context, svcs []*v1.Service, nodes []*v1.Node) ([]lb.Announcement, []lb.Problem, *lb.GracefulShutdown) {
	gs := a.gracefulShutdown(ctx, nodes)
	want, problems := lb.Desired(lb.State{
		Services:       svcs,
		EndpointSlices: a.slicesOf,
		Node: func(name string) (*v1.Node, bool) {
			n, err := a.nodes.Get(name)
			return n, err == nil
		},
		Nodes:            nodes,
		Pool:             a.o.Pool,
		NextHop:          a.o.Config.BGP.NextHop,
		Self:             a.o.Self,
		SelfOnly:         a.o.SelfOnly,
		Healthy:          a.healthy(svcs, nodes),
		GracefulShutdown: gs,
		Advertise:        a.o.Advertise,
	})
	return want, problems, gs
}

// wakeForDrains schedules a full pass when the next draining node's time runs out.
func (a *Agent) wakeForDrains(gs *lb.GracefulShutdown, nodes []*v1.Node) {
	if next := gs.Next(nodes); !next.IsZero() {
		a.drains.wakeAt(next.Sub(gs.Now), a.kickFull)
	}
}

// Paths turns announcements into the speaker's paths: the next hops of draining
// nodes (and a draining host's own path) get the GRACEFUL_SHUTDOWN community and
// LOCAL_PREF 0 (RFC 8326; iBGP peers only receive LOCAL_PREF).
func Paths(want []lb.Announcement) []bgp.Path {
	paths := make([]bgp.Path, 0, len(want))
	for _, w := range want {
		plain := bgp.Path{Prefix: w.Prefix, NextHops: w.NextHops, Communities: w.Communities, LargeCommunities: w.LargeCommunities, LocalPref: w.LocalPref, Peers: w.Peers}
		marked := plain
		marked.NextHops = w.GracefulShutdown
		marked.Communities = append(slices.Clip(w.Communities), lb.CommunityGracefulShutdown)
		marked.LocalPref = new(uint32)
		switch {
		case w.SelfGracefulShutdown:
			paths = append(paths, marked)
		case len(w.NextHops) == 0 && len(w.GracefulShutdown) == 0:
			paths = append(paths, plain) // next hop self
		default:
			if len(w.NextHops) > 0 {
				paths = append(paths, plain)
			}
			if len(w.GracefulShutdown) > 0 {
				paths = append(paths, marked)
			}
		}
	}
	return paths
}

// healthy sets the node health checker's targets for this pass (every eligible
// node's kube-proxy, every Local Service's healthCheckNodePort on its endpoint
// nodes) and returns the verdict for lb.State.Healthy; nil without the checker.
func (a *Agent) healthy(svcs []*v1.Service, nodes []*v1.Node) func(*v1.Node, *v1.Service) bool {
	if a.health == nil {
		return nil
	}
	h := a.o.Config.BGP.NodeHealthCheck
	target := func(n *v1.Node, port int32, path string) (nodehealth.Target, bool) {
		ip, ok := lb.InternalIP(n, true)
		if !ok {
			ip, ok = lb.InternalIP(n, false)
		}
		return nodehealth.Target{Node: n.Name, Addr: ip, Port: port, Path: path}, ok
	}
	var targets []nodehealth.Target
	byName := make(map[string]*v1.Node, len(nodes))
	for _, n := range nodes {
		if !lb.Eligible(n) {
			continue
		}
		byName[n.Name] = n
		if t, ok := target(n, h.KubeProxyPort, "/healthz"); ok {
			targets = append(targets, t)
		}
	}
	for _, svc := range svcs {
		p := localHealthPort(svc)
		if p == 0 || len(lb.IngressIPs(svc)) == 0 {
			continue
		}
		for name := range lb.ReadyEndpointNodes(a.slicesOf(svc.Namespace, svc.Name)) {
			if n, ok := byName[name]; ok {
				if t, ok := target(n, p, "/"); ok {
					targets = append(targets, t)
				}
			}
		}
	}
	a.health.Set(targets)
	return func(n *v1.Node, svc *v1.Service) bool {
		port, path := h.KubeProxyPort, "/healthz"
		if p := localHealthPort(svc); p > 0 {
			port, path = p, "/"
		}
		t, ok := target(n, port, path)
		return !ok || a.health.Healthy(t)
	}
}

// slicesOf returns a Service's EndpointSlices from the cache.
func (a *Agent) slicesOf(namespace, name string) []*discoveryv1.EndpointSlice {
	objs, _ := a.sliceIndex.ByIndex(sliceServiceIndex, namespace+"/"+name)
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, sl)
		}
	}
	return out
}

// localHealthPort is a Local LoadBalancer Service's healthCheckNodePort (0 if none).
func localHealthPort(svc *v1.Service) int32 {
	if svc.Spec.Type != v1.ServiceTypeLoadBalancer || svc.Spec.ExternalTrafficPolicy != v1.ServiceExternalTrafficPolicyLocal {
		return 0
	}
	return svc.Spec.HealthCheckNodePort
}

// reportProblems logs each Service's problems (joined, in order) and records an
// event when they change. scope names the Services that were computed (nil: all);
// a Service in scope without a problem has its record cleared.
func (a *Agent) reportProblems(ctx context.Context, problems []lb.Problem, scope map[string]bool) {
	msgs := map[string][]string{}
	svcs := map[string]*v1.Service{}
	var order []string
	for _, p := range problems {
		k := p.Service.Namespace + "/" + p.Service.Name
		if _, ok := msgs[k]; !ok {
			order = append(order, k)
		}
		msgs[k] = append(msgs[k], p.Err.Error())
		svcs[k] = p.Service
	}
	for _, k := range order {
		msg := strings.Join(msgs[k], "; ")
		a.mu.Lock()
		changed := a.problems[k] != msg
		a.problems[k] = msg
		a.mu.Unlock()
		if changed {
			klog.FromContext(ctx).Info("Service announcement problem", "service", k, "err", msg)
			if a.o.Events != nil {
				a.o.Events.Eventf(svcs[k], v1.EventTypeWarning, ReasonAnnouncementProblem, "%s", msg)
			}
		}
	}
	a.mu.Lock()
	for k := range a.problems {
		if _, ok := msgs[k]; !ok && (scope == nil || scope[k]) {
			delete(a.problems, k)
		}
	}
	a.mu.Unlock()
}

const sliceServiceIndex = "service"

// sliceService indexes an EndpointSlice by the namespace/name of its Service.
func sliceService(obj any) ([]string, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	name := sl.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{sl.Namespace + "/" + name}, nil
}

// PodCIDRPaths announces each Node's pod CIDRs with the Node's InternalIP of the
// CIDR's family as next hop; a Node without such an address is skipped.
func PodCIDRPaths(nodes []*v1.Node) []bgp.Path {
	var paths []bgp.Path
	for _, n := range nodes {
		if n.DeletionTimestamp != nil {
			continue
		}
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				continue
			}
			if hop, ok := lb.InternalIP(n, p.Addr().Is4()); ok {
				paths = append(paths, bgp.Path{Prefix: p.Masked(), NextHops: []netip.Addr{hop}})
			}
		}
	}
	return paths
}

// syncPeers gives the speaker this host's rack peers (from the inventory, else from
// its Node's annotation) and the cluster's BGPPeers for its Node (on every pass
// after a Node or BGPPeer change, every full pass and every PeerResyncInterval),
// and has it re-read the password files: a
// changed peer or password re-creates that session, an unchanged one is left alone.
// What it logs, it logs once per change.
func (a *Agent) syncPeers(ctx context.Context, sp Speaker) {
	logger := klog.FromContext(ctx)
	rack, peers, all, err := a.rackPeers()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	a.mu.Lock()
	if errors.Is(err, hostinfo.ErrInvalid) {
		// An unreadable annotation keeps the rack peers as they were; the cluster's
		// peers still apply.
		rack, peers, all = a.lastRack.name, a.lastRack.peers, a.lastRack.all
	} else {
		a.lastRack.name, a.lastRack.peers, a.lastRack.all = rack, peers, all
	}
	a.mu.Unlock()
	peers = slices.Clip(peers) // the inventory's slice: never appended to in place
	if a.o.ClusterPeers != nil {
		var self *v1.Node
		if n, err := a.nodes.Get(a.o.Self); err == nil {
			self = n
		}
		// Every rack peer wins its address, even one left out here (no password file).
		peers = append(peers, a.o.ClusterPeers(self, all)...)
	}
	if err := sp.SetPeers(peers); err != nil {
		errs = append(errs, err)
	}
	if err := sp.RefreshPasswords(); err != nil {
		errs = append(errs, err)
	}
	key, _ := json.Marshal(peers) // the settings (no password), not pointer addresses
	msg := rack + " " + string(key)
	if err := errors.Join(errs...); err != nil {
		msg += " " + err.Error()
	}
	a.mu.Lock()
	changed := msg != a.peersLog
	a.peersLog = msg
	a.mu.Unlock()
	if !changed {
		return
	}
	if err := errors.Join(errs...); err != nil {
		logger.Error(err, "Setting this host's BGP peers; the rest is applied", "rack", rack, "peers", len(peers))
		return
	}
	logger.Info("BGP peers set", "rack", rack, "peers", len(peers))
}

// rackPeers returns this host's rack and its BGP peers: from the inventory when the
// agent has one, else from the Node's published annotation (passwords mapped to this
// host's password files); all are every rack peer, also those left out (no password
// file here).
func (a *Agent) rackPeers() (rack string, peers, all []config.BGPPeer, err error) {
	if a.o.Inventory != nil {
		host := a.selfHost()
		if host == nil || host.Rack == "" {
			return "", nil, nil, nil
		}
		view, _ := a.o.Inventory.View()
		if r, ok := view.Rack(host.Rack); ok {
			return r.Name, r.BGPPeers, r.BGPPeers, nil
		}
		return host.Rack, nil, nil, nil
	}
	info, ok, err := a.published()
	if err != nil || !ok {
		return "", nil, nil, err
	}
	for _, p := range info.Peers {
		all = append(all, p.BGPPeer)
	}
	peers = make([]config.BGPPeer, 0, len(info.Peers))
	var errs []error
	for _, p := range info.Peers {
		c := p.BGPPeer
		if p.Password {
			file, ok := a.o.Passwords.For(c.Address)
			if !ok {
				errs = append(errs, fmt.Errorf("rack %q peer %s expects a TCP-MD5 password, and this host has no password file for it: pass --bgp-password-file=FILE (every peer) or --bgp-password-file=%s=FILE", info.Rack, c.Address, c.Address))
				continue
			}
			c.PasswordFile = file
		}
		peers = append(peers, c)
	}
	return info.Rack, peers, all, errors.Join(errs...)
}

// published returns the hostinfo annotation of this host's Node.
func (a *Agent) published() (hostinfo.Info, bool, error) {
	if a.o.Self == "" {
		return hostinfo.Info{}, false, nil
	}
	n, err := a.nodes.Get(a.o.Self)
	if err != nil {
		return hostinfo.Info{}, false, nil
	}
	info, ok, err := hostinfo.FromNode(n)
	if err != nil {
		return hostinfo.Info{}, false, fmt.Errorf("node %s: %w", a.o.Self, err)
	}
	return info, ok, nil
}

// selfHost finds this host in the inventory by its Node (or name).
func (a *Agent) selfHost() *inventory.Host {
	if a.o.Inventory == nil || a.o.Self == "" {
		return nil
	}
	view, err := a.o.Inventory.View()
	if err != nil || view == nil {
		return nil
	}
	if n, err := a.nodes.Get(a.o.Self); err == nil {
		if h, _, err := view.Match(n); err == nil && h != nil {
			return h
		}
	}
	if h, ok := view.Host(a.o.Self); ok {
		return h
	}
	return nil
}

// identity is this host's router ID and addresses. The router ID is, in order:
// Options.RouterID, bgp.routerID, the host's bgpRouterID (inventory or published),
// its first IPv4 InternalIP. Without an inventory it waits for the published
// annotation, which also carries the rack's peers.
func (a *Agent) identity() (Identity, error) {
	var id Identity
	var addrs []netip.Addr
	var routerID string
	if h := a.selfHost(); h != nil {
		routerID = h.BGPRouterID
		for _, ad := range h.Addresses {
			if ip, err := netip.ParseAddr(ad.Address); err == nil && ad.Type == v1.NodeInternalIP {
				addrs = append(addrs, ip.Unmap())
			}
		}
	}
	if a.o.Inventory == nil {
		info, ok, err := a.published()
		if err != nil {
			return id, err
		}
		if !ok && a.o.SelfOnly {
			return id, fmt.Errorf("waiting for the CCM's leader to publish annotation %s on Node %q (it does once the Node is initialized from the inventory)", hostinfo.Annotation, a.o.Self)
		}
		routerID = info.RouterID
	}
	if len(addrs) == 0 && a.o.Self != "" {
		if n, err := a.nodes.Get(a.o.Self); err == nil {
			for _, v4 := range []bool{true, false} {
				if ip, ok := lb.InternalIP(n, v4); ok {
					addrs = append(addrs, ip)
				}
			}
		}
	}
	for _, ip := range addrs {
		if ip.Is4() && !id.IPv4.IsValid() {
			id.IPv4 = ip
		}
		if ip.Is6() && !id.IPv6.IsValid() {
			id.IPv6 = ip
		}
	}
	id.RouterID = id.IPv4
	if routerID != "" {
		if rid, err := netip.ParseAddr(routerID); err == nil {
			id.RouterID = rid
		}
	}
	if s := a.o.Config.BGP.RouterID; s != "" {
		rid, err := netip.ParseAddr(s)
		if err != nil {
			return id, fmt.Errorf("bgp.routerID: %w", err)
		}
		id.RouterID = rid
	}
	if a.o.RouterID.IsValid() {
		id.RouterID = a.o.RouterID
	}
	if !id.RouterID.IsValid() {
		return id, fmt.Errorf("no router ID for this host (node %q): the inventory gives it no bgpRouterID and no IPv4 InternalIP, and its Node has none; set bgpRouterID on the host in the inventory or pass --bgp-router-id", a.o.Self)
	}
	return id, nil
}
