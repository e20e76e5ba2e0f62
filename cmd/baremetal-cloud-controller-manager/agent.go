package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/klog/v2"

	"github.com/spf13/pflag"

	"github.com/baremetal-ccm/baremetal-ccm/internal/eventrec"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/adverts"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/agent"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp"
	bmconfig "github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	bmccminformers "github.com/baremetal-ccm/baremetal-ccm/pkg/generated/informers/externalversions"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/kick"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/peers"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/pools"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/provider"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/routes"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/speakerstatus"
)

// agentFlags are the flags of the replica-local agent.
type agentFlags struct {
	nodeName string
	routerID string
}

func (f *agentFlags) addTo(fs *pflag.FlagSet) {
	def := os.Getenv("NODE_NAME")
	if def == "" {
		def, _ = os.Hostname()
	}
	fs.StringVar(&f.nodeName, "node-name", def,
		"Name of the Node of the host this process runs on (default: $NODE_NAME, else the host name). The agent uses it to find the host's rack peers and router ID in the inventory, to skip routes to itself, and for externalTrafficPolicy: Local in next-hop mode self.")
	fs.StringVar(&f.routerID, "bgp-router-id", "",
		"BGP router ID of this host (IPv4). Default: bgp.routerID, else the host's bgpRouterID in the inventory, else its first IPv4 InternalIP. Use it instead of bgp.routerID when replicas share one CloudConfig.")
}

// agentDeps are what the agent uses besides the API: the CCM passes its provider's,
// agent mode builds its own without any inventory.
type agentDeps struct {
	cfg    *bmconfig.CloudConfig
	kernel *routes.Kernel
	poolOf func(netip.Addr) (*bmconfig.AddressPool, bool)
	// store is the inventory (CCM replicas); nil in agent mode, where the host's
	// rack peers and router ID come from its Node.
	store *inventory.Store
	// start starts the inventory (idempotent); nil without one.
	start     func(context.Context)
	selfOnly  bool
	routerID  netip.Addr
	passwords agent.Passwords
	// sessions publishes this host's BGP session states (nil: not published);
	// speaker is their spec.speaker.
	sessions versioned.Interface
	speaker  string
	// pools, when set, is waited for (bounded) before the agent starts announcing.
	pools *pools.Watcher
}

// mirrors reports whether the agent keeps this host's kernel routes equal to every
// Node's pod CIDR (routes.Mirror): the one thing an agent needs all Nodes for.
func (d agentDeps) mirrors() bool {
	return d.kernel != nil && d.cfg.Routes.MirrorEnabled()
}

// startAgent runs the replica-local agent (BGP announcements, route mirror) on every
// replica, leader or not, when the CloudConfig asks for any of it (else the agent
// is nil). The returned channel closes when the agent has stopped and withdrawn its
// routes.
func startAgent(ctx context.Context, c *config.CompletedConfig, cloud *provider.Cloud, f *agentFlags, pw *pools.Watcher) (*agent.Agent, <-chan struct{}, error) {
	cfg := cloud.Config()
	if cfg.BGP == nil && cfg.Routes == nil {
		done := make(chan struct{})
		close(done)
		return nil, done, nil
	}
	var err error
	d := agentDeps{cfg: cfg, kernel: cloud.Kernel(), store: cloud.Store(), start: cloud.Start, pools: pw}
	if b := cloud.Balancer(); b != nil {
		d.poolOf = b.Allocator().PoolOf
	}
	if f.routerID != "" {
		if d.routerID, err = parseRouterID(f.routerID); err != nil {
			return nil, nil, err
		}
	} else if cfg.BGP != nil && cfg.BGP.RouterID != "" && c.ComponentConfig.Generic.LeaderElection.LeaderElect {
		klog.InfoS("Warning: bgp.routerID is set in the CloudConfig and leader election is on: replicas that share this file share the router ID, which routers treat as one speaker; give each host its own (inventory hosts[].bgpRouterID, or --bgp-router-id)", "routerID", cfg.BGP.RouterID)
	}
	client := c.ClientBuilder.ClientOrDie("baremetal-ccm-agent")
	if d.sessions, err = speakerstatus.NewClient(c.ClientBuilder.ConfigOrDie("baremetal-ccm-agent")); err != nil {
		return nil, nil, err
	}
	d.speaker = v1alpha1.SpeakerReplica
	return runAgent(ctx, client, c.SharedInformers, d, f.nodeName)
}

// startPools keeps this replica's pools equal to the CloudConfig's plus the IPPools
// the leader accepted, for the process's life (every replica, leader or not): the
// allocator (the leader allocates from it) and the agent (its pools' communities;
// resync is called after a change). It returns the watcher (nil without a
// loadBalancer section), whose Synced the agent waits for before announcing.
func startPools(ctx context.Context, c *config.CompletedConfig, cloud *provider.Cloud, resync func()) *pools.Watcher {
	b := cloud.Balancer()
	if b == nil {
		return nil
	}
	objects, err := speakerstatus.NewClient(c.ClientBuilder.ConfigOrDie("baremetal-ccm-pools"))
	if err != nil {
		klog.ErrorS(err, "IPPools are not watched: only the CloudConfig's pools are in force")
		return nil
	}
	w := &pools.Watcher{File: cloud.Config().LoadBalancer.Pools, Synced: kick.NewGate(), Apply: func(_ context.Context, ps []bmconfig.AddressPool) error {
		if err := b.SetPools(ps); err != nil {
			return err
		}
		resync()
		return nil
	}}
	go w.Run(klog.NewContext(ctx, klog.FromContext(ctx).WithName("pools")), bmccminformers.NewSharedInformerFactory(objects, 0))
	return w
}

// poolsSyncTimeout bounds how long a speaker waits for the IPPools and for the
// BGPPeers before its first announcements (then it announces the CloudConfig's pools
// to the CloudConfig's peers, and the objects' once they are read).
const poolsSyncTimeout = 10 * time.Second

func parseRouterID(s string) (netip.Addr, error) {
	rid, err := netip.ParseAddr(s)
	if err != nil || !rid.Is4() || rid.IsUnspecified() {
		return netip.Addr{}, fmt.Errorf("--bgp-router-id=%s: must be an IPv4 address such as 10.0.0.1", s)
	}
	return rid, nil
}

// runAgent starts the agent with client and factory (which it starts) and returns it
// and a channel closed when it has stopped. An agent that cannot run exits the
// process.
func runAgent(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory, d agentDeps, nodeName string) (*agent.Agent, <-chan struct{}, error) {
	done := make(chan struct{})
	cfg := d.cfg
	logger := klog.FromContext(ctx).WithName("agent")
	broadcaster := eventrec.NewBroadcaster(ctx)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: provider.EventSource})

	// On a CCM replica the inventory supplies this host's rack peers and router ID;
	// on the leader the same store also serves the controllers (start is idempotent).
	if d.start != nil {
		d.start(ctx)
	}
	opts := agent.Options{
		Config:    cfg,
		Self:      nodeName,
		Informers: factory,
		Events:    recorder,
		Pool:      d.poolOf,
		SelfOnly:  d.selfOnly,
		RouterID:  d.routerID,
		Passwords: d.passwords,
	}
	if d.store != nil {
		opts.Inventory = d.store
	}
	if d.mirrors() {
		opts.Mirror = routes.NewMirror(d.kernel, routes.MirrorOptions{NodeName: nodeName})
		if r := cfg.Routes.ResyncInterval; r != nil {
			opts.ResyncInterval = r.Duration
		}
	}
	// With the metallb announcer, MetalLB's speakers peer with the routers from every
	// node: the embedded speaker stays off so a host never has two sessions.
	if cfg.BGP != nil && (cfg.LoadBalancer == nil || cfg.LoadBalancer.Announcer != bmconfig.AnnouncerMetalLB) {
		opts.NewSpeaker = func(id agent.Identity) (agent.Speaker, error) {
			return bgp.New(speakerConfig(cfg.BGP, id))
		}
	}
	// The cluster's BGPPeers, for the process's life: a change reaches the speaker
	// at once (PeersChanged), without a restart.
	// The cluster's BGPAdvertisements likewise: a change is a full pass.
	var peerWatcher *peers.Watcher
	var advWatcher *adverts.Watcher
	if d.sessions != nil && opts.NewSpeaker != nil {
		peerWatcher = &peers.Watcher{File: cfg.BGP.Peers, Synced: kick.NewGate()}
		opts.ClusterPeers = func(self *v1.Node, rack []bmconfig.BGPPeer) []bmconfig.BGPPeer {
			return peers.For(peerWatcher.Current(), self, rack)
		}
		if cfg.LoadBalancer != nil {
			advWatcher = &adverts.Watcher{Synced: kick.NewGate()}
			opts.Advertise = func(svc *v1.Service, pool string) (lb.Advertising, bool) {
				return adverts.For(advWatcher.Current(), svc, pool)
			}
		}
	}
	a, err := agent.New(opts)
	if err != nil {
		return nil, nil, err
	}
	if peerWatcher != nil {
		peerWatcher.Changed = a.PeersChanged
		go peerWatcher.Run(klog.NewContext(ctx, logger), bmccminformers.NewSharedInformerFactory(d.sessions, 0))
	}
	if advWatcher != nil {
		advWatcher.Changed = a.Resync
		go advWatcher.Run(klog.NewContext(ctx, logger), bmccminformers.NewSharedInformerFactory(d.sessions, 0))
	}
	deadline := time.Now().Add(poolsSyncTimeout) // one wait for both
	if d.pools != nil && !d.pools.Synced.Wait(ctx, time.Until(deadline)) {
		logger.Info("Warning: the IPPools were not read in time; announcing the CloudConfig's pools until they are", "waited", poolsSyncTimeout)
	}
	if peerWatcher != nil && !peerWatcher.Synced.Wait(ctx, max(time.Until(deadline), 0)) {
		logger.Info("Warning: the BGPPeers were not read in time; peering with the CloudConfig's and the racks' peers until they are", "waited", poolsSyncTimeout)
	}
	if advWatcher != nil && !advWatcher.Synced.Wait(ctx, max(time.Until(deadline), 0)) {
		logger.Info("Warning: the BGPAdvertisements were not read in time; announcing every address to every peer until they are", "waited", poolsSyncTimeout)
	}
	go func() {
		defer close(done)
		defer broadcaster.Shutdown()
		if err := a.Run(klog.NewContext(ctx, logger)); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error(err, "Agent stopped")
			fmt.Fprintf(os.Stderr, "%s: agent: %v\n", program, err)
			os.Exit(1)
		}
	}()
	if d.sessions != nil && cfg.BGP != nil && nodeName != "" && opts.NewSpeaker != nil {
		// Who speaks, to whom, in what state: the leader's Announced condition,
		// explain and kubectl get bgpsessionstates read these.
		pub := &speakerstatus.Publisher{Client: d.sessions, Node: nodeName, Speaker: d.speaker, Read: func() (speakerstatus.Status, bool) {
			return a.SpeakerStatus()
		}, NodeUID: func(ctx context.Context) (types.UID, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return "", err
			}
			return n.UID, nil
		}}
		published := make(chan struct{})
		go func() {
			defer close(published)
			pub.Run(klog.NewContext(ctx, logger))
		}()
		// Stopped once the agent has withdrawn its routes and the publisher has
		// marked this host's sessions stopped.
		agentDone := done
		all := make(chan struct{})
		go func() { <-agentDone; <-published; close(all) }()
		return a, all, nil
	}
	return a, done, nil
}

func speakerConfig(b *bmconfig.BGPConfig, id agent.Identity) bgp.Config {
	return bgp.Config{
		LocalASN: b.LocalASN, RouterID: id.RouterID, ListenPort: b.ListenPort,
		Peers: b.Peers, Communities: b.Communities, LargeCommunities: b.LargeCommunities,
		IPv4NextHop: id.IPv4, IPv6NextHop: id.IPv6,
		OnStop: b.OnStop, DeferSessions: true,
	}
}

// agentShutdownTimeout bounds how long the process waits for the agent to withdraw
// its routes after SIGTERM.
const agentShutdownTimeout = 8 * time.Second
