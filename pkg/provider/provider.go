// Package provider is the "baremetal" cloudprovider.Interface: a thin composition of
// the inventory store, the BMC power service and the Instances implementation
// (InstancesV2), the load balancer IPAM (LoadBalancer, with a loadBalancer section)
// and the kernel routes (Routes, with a routes section). It answers nil, false for
// the legacy Instances, Zones and Clusters.
//
// Lifetimes. One process lives through many leadership terms (a replica that loses
// the Lease keeps running and may lead again), so what the provider holds lives either
// for the process or for one term:
//
//   - the process (every replica, from New to Shutdown): the CloudConfig, the
//     inventory Store with its reload loop and the View it serves (Start: the agent
//     reads its host's rack peers from it on every replica), the BMC service (cache,
//     breaker, call limits) with the per-BMC failed-login budgets, the credentials
//     cache, the API client and event recorder (made at the first Initialize), the
//     load balancer's allocator (re-primed each term) and the kernel route table;
//   - a term (the leader, from Initialize to the close of its stop channel): BMC
//     sessions (logged out at the end), the deletion guard's decisions, state writes
//     and power grants (inventory.Store.Lead), the power monitor, the host-info
//     publisher, the Announced condition, the pool status and the MetalLB objects,
//     and every event handler they add through the informer factory SetInformers
//     gets (a term-scoped view: see package informerscope). WaitTermEnd joins them;
//     the next Initialize builds them anew.
package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/cachelist"
	"github.com/baremetal-ccm/baremetal-ccm/internal/eventrec"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/adverts"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/announcestatus"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/bmc"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	bmccminformers "github.com/baremetal-ccm/baremetal-ccm/pkg/generated/informers/externalversions"
	v1alpha1listers "github.com/baremetal-ccm/baremetal-ccm/pkg/generated/listers/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/hostinfo"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/instances"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/kick"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/metallb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/peers"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/pools"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/powermon"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/routes"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/speakerstatus"
)

// Name is the provider's name, as given to --cloud-provider.
const Name = "baremetal"

// GuardStateNamespace holds the deletion guard's state ConfigMap
// (inventory.StateConfigMapName); the packaged RBAC lets the CCM keep it there only.
const GuardStateNamespace = "baremetal-ccm"

// EventSource is the component name on every event the provider records.
const EventSource = "baremetal-cloud-controller-manager"

// Register makes the provider available to cloudprovider.InitCloudProvider under Name.
func Register() {
	cloudprovider.RegisterCloudProvider(Name, Factory)
}

// Factory builds the provider from the --cloud-config document.
func Factory(r io.Reader) (cloudprovider.Interface, error) {
	if r == nil {
		return nil, errors.New("the baremetal provider needs --cloud-config=<path to a CloudConfig file>")
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading --cloud-config: %w", err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("--cloud-config: %w", err)
	}
	return New(cfg)
}

// Cloud is the baremetal cloud provider.
type Cloud struct {
	cfg       *config.CloudConfig
	store     *inventory.Store
	power     *bmc.Service
	creds     *bmc.Secrets  // BMC credentials from files or Secrets
	sessions  *bmc.Sessions // kept Redfish sessions
	instances *instances.Instances
	lb        *lb.LoadBalancer // nil without loadBalancer in the CloudConfig
	kernel    *routes.Kernel   // nil without routes in the CloudConfig
	routes    atomic.Pointer[routes.Provider]
	nodeName  string
	recorder  *lazyRecorder
	newFence  func() Fence // set before the first term; nil: no fence

	// made by the first Initialize (the leader's), for the process
	client kubernetes.Interface
	// clientQPS and clientBurst are the client's limits (--kube-api-qps, --kube-api-burst).
	clientQPS     float32
	clientBurst   int
	objects       versioned.Interface // baremetal-ccm.io objects
	eventRecorder record.EventRecorder

	initOnce  sync.Once
	startOnce sync.Once

	mu    sync.Mutex
	term  *term // the current or last leadership term; nil before the first
	terms int
}

var _ cloudprovider.Interface = (*Cloud)(nil)
var _ cloudprovider.InformerUser = (*Cloud)(nil)

// New builds the provider from a validated config. It fails when the inventory source
// cannot be set up (for example an unreadable CA file); it does not load the
// inventory, which Initialize starts.
func New(cfg *config.CloudConfig) (*Cloud, error) {
	src, err := inventory.NewSource(&cfg.Inventory)
	if err != nil {
		return nil, err
	}
	g := cfg.Inventory.DeletionGuard
	rec := &lazyRecorder{}
	inventoryRef := &v1.ObjectReference{
		APIVersion: inventory.APIVersion, Kind: inventory.Kind,
		Name: "inventory", Namespace: cfg.EventsNamespace,
	}
	pb := cfg.Instances.PowerOffBudget
	parseOpts := inventory.ParseOptionsFor(cfg)
	store := inventory.NewStore(src, inventory.Guard{
		MaxHosts: int(*g.MaxRemovedHosts), MaxPercent: int(*g.MaxRemovedPercent), AckFile: g.AcknowledgeFile,
		Window: g.Window.Duration, SettleTime: g.SettleTime.Duration,
		PowerMaxHosts: int(*pb.MaxHosts), PowerWindow: pb.Window.Duration,
		MaxUnhealthy: cfg.Instances.MaxUnhealthy, StormCooldown: durationOf(cfg.Instances.StormCooldown),
		Parse: func(data []byte) (*inventory.View, error) { return inventory.ParseWith(data, parseOpts) },
	}, refSink{rec: rec, ref: inventoryRef}, nil)
	b := cfg.BMC
	creds := bmc.NewSecrets(nil, time.Minute, nil) // its client comes with Initialize
	sessions := bmc.NewSessions(creds, bmc.DefaultSessionIdle)
	sessions.SetLoginBudget(int(b.FailedLogins.MaxFailures), b.FailedLogins.Window.Duration)
	power := bmc.NewService(sessions, bmc.Config{
		CallTimeout: b.CallTimeout.Duration, CacheTTL: b.CacheTTL.Duration, MaxConcurrent: int(b.MaxConcurrent),
		FailureThreshold: int(b.FailureThreshold), BackoffBase: b.BackoffInitial.Duration, BackoffMax: b.BackoffMax.Duration,
	}, nil)
	policy := instances.Policy{DeleteAfter: durationOf(cfg.Instances.DeleteAfter), DefaultCA: cfg.BMC.CAFile,
		ShutdownMaxAge: 2 * b.NotReadyInterval.Duration, // the monitor re-reads NotReady Nodes every notReadyInterval
		MaxUnobserved:  powermon.MaxUnobserved(b.NotReadyInterval.Duration)}
	var balancer *lb.LoadBalancer
	if cfg.LoadBalancer != nil {
		if balancer, err = lb.New(cfg.LoadBalancer, rec); err != nil {
			return nil, fmt.Errorf("loadBalancer: %w", err)
		}
	}
	var kernel *routes.Kernel
	if r := cfg.Routes; r != nil {
		if kernel, err = routes.Open(int(r.Table), int(r.Protocol)); err != nil {
			return nil, fmt.Errorf("routes: %w", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := kernel.CheckAccess(ctx); err != nil {
			return nil, fmt.Errorf("routes: %w", err)
		}
	}
	return &Cloud{
		cfg:       cfg,
		lb:        balancer,
		kernel:    kernel,
		store:     store,
		power:     power,
		creds:     creds,
		sessions:  sessions,
		instances: instances.New(store, power, rec, policy),
		recorder:  rec,
	}, nil
}

// Config returns the validated CloudConfig (immutable).
func (c *Cloud) Config() *config.CloudConfig { return c.cfg }

// Balancer returns the LoadBalancer implementation, nil when not configured.
func (c *Cloud) Balancer() *lb.LoadBalancer { return c.lb }

// Shutdown logs out the BMC sessions the provider keeps, waiting at most timeout, and
// refuses BMC calls from then on. The process calls it once the controllers have
// stopped, before it exits.
func (c *Cloud) Shutdown(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c.sessions.Close(ctx, timeout)
}

// Kernel returns this host's route table access, nil when routes are not configured.
func (c *Cloud) Kernel() *routes.Kernel { return c.kernel }

// SetNodeName tells the provider the name of the Node of the host it runs on (routes
// to it are not programmed). Call it before the controllers start.
func (c *Cloud) SetNodeName(name string) { c.nodeName = name }

// Store returns the inventory store.
func (c *Cloud) Store() *inventory.Store { return c.store }

// Initialize starts a leadership term, which lasts until stop closes: the framework
// calls it on the elected leader before any controller runs, once per term. The first
// call makes the API client and the event recorder (for the process); every call
// re-primes the allocator and starts the term's BMC sessions, MetalLB objects and pool
// status. SetInformers starts the rest of the term.
func (c *Cloud) Initialize(clientBuilder cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	c.initOnce.Do(func() {
		client := clientBuilder.ClientOrDie("baremetal-cloud-provider")
		c.client = client
		rc := clientBuilder.ConfigOrDie("baremetal-cloud-provider")
		c.clientQPS, c.clientBurst = rc.QPS, rc.Burst
		objects, err := speakerstatus.NewClient(rc)
		if err != nil {
			klog.ErrorS(err, "No client for baremetal-ccm.io objects: the Announced condition sees no BGP speaker")
		}
		c.objects = objects
		broadcaster := eventrec.NewBroadcaster(context.Background()) // for the process's life, as its recorder
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
		c.eventRecorder = broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: EventSource})
		c.recorder.set(c.eventRecorder)
		c.creds.SetClient(client)
	})
	t := c.beginTerm(stop)
	if c.lb != nil {
		c.lb.NewTerm()
	}
	ended := c.sessions.BeginTerm(klog.NewContext(t.ctx, t.logger.WithName("bmc")), c.cfg.BMC.CallTimeout.Duration)
	t.wg.Go(func() { <-ended })
	if c.lb != nil && c.cfg.LoadBalancer.Announcer == config.AnnouncerMetalLB {
		c.startMetalLB(t, clientBuilder, c.client, c.eventRecorder)
	}
	if c.lb != nil {
		// The pools' use where kubectl sees it (baremetal-ccmctl lb pools).
		t.goRun("lb", func(ctx context.Context) { c.lb.RunPoolStatus(ctx, c.client, GuardStateNamespace, 5*time.Second) })
	}
}

// startMetalLB runs the metallb announcer on the leader: the metallb.io objects follow
// the pools, the BGP settings and the inventory's racks, and every Service carries the
// annotations MetalLB reads for exactly the IPs assigned here.
func (c *Cloud) startMetalLB(t *term, clientBuilder cloudprovider.ControllerClientBuilder, client kubernetes.Interface, recorder record.EventRecorder) {
	logger := t.logger.WithName("metallb")
	m := c.cfg.LoadBalancer.MetalLB
	opts := metallb.Options{Namespace: m.Namespace, BGPMode: m.BGPMode}
	dyn, err := dynamic.NewForConfig(clientBuilder.ConfigOrDie("baremetal-cloud-provider-metallb"))
	if err != nil {
		logger.Error(err, "Cannot build the client for metallb.io objects; the metallb announcer is off")
		return
	}
	// The announcer's writes (annotations, metallb.io objects) are fenced as the
	// service controller's are: by a fence of the term's own, which takes note of the
	// Lease just acquired.
	var fence func(context.Context) error
	if c.newFence != nil {
		f := c.newFence()
		if err := f.Check(t.ctx); err != nil {
			logger.Error(err, "Not the leader: the metallb announcer writes nothing")
		}
		fence = f.Check
	}
	services, err := metallb.NewServices(client, c.cfg.LoadBalancer, fence)
	if err != nil {
		logger.Error(err, "The metallb announcer is off")
		return
	}
	// The pools in force change with the IPPools: the objects and annotations follow.
	trigger := make(chan struct{}, 1)
	r, err := metallb.NewReconciler(metallb.ReconcilerOptions{
		Client: dyn, Config: c.cfg, Inventory: c.store.View, Options: opts, Recorder: recorder, Fence: fence,
		Trigger: trigger, Pools: c.lb.Pools,
	})
	if err != nil {
		logger.Error(err, "The metallb announcer is off")
		return
	}
	if err := services.SetPools(c.lb.Pools()); err != nil {
		logger.Error(err, "The pools in force cannot be named in MetalLB's annotations; the CloudConfig's are")
	}
	c.lb.SetAnnouncer(metallbServices{services})
	t.goRun("metallb", r.Run)
	t.goRun("", func(ctx context.Context) {
		for {
			changed := c.lb.PoolsChanged()
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			if err := services.SetPools(c.lb.Pools()); err != nil {
				logger.Error(err, "The pools in force cannot be named in MetalLB's annotations; the previous ones stay")
			}
			select {
			case trigger <- struct{}{}:
			default:
			}
		}
	})
}

// metallbServices adapts metallb.Services to lb.Announcer. After a write it advances
// svc, the service controller's own copy that it passed to the balancer, to the
// resourceVersion and annotations written: the controller's status patch, which
// follows and is conditional on svc's resourceVersion, would otherwise conflict with
// this very write (a re-prime and a retry 5 s later for every new Service). This is
// sound because the write was conditional on svc's resourceVersion: the Service stored
// is svc with these annotations. A Conflict (the Service changed since svc was read)
// asks for a retry with the new version a second later (api.RetryError).
type metallbServices struct{ s *metallb.Services }

func (m metallbServices) Ensure(ctx context.Context, svc *v1.Service, ips []netip.Addr) error {
	out, err := m.s.Ensure(ctx, svc, ips)
	advance(svc, out)
	if errors.Is(err, metallb.ErrNotAnnounceable) {
		return fmt.Errorf("%w: %w", lb.ErrNotAnnounced, err)
	}
	return retryOnConflict(err)
}

func (m metallbServices) Delete(ctx context.Context, svc *v1.Service) error {
	out, err := m.s.Delete(ctx, svc)
	advance(svc, out)
	return retryOnConflict(err)
}

// advance makes svc the version out that a write stored (nothing when none happened).
func advance(svc, out *v1.Service) {
	if out != nil && out != svc {
		svc.ResourceVersion, svc.Annotations = out.ResourceVersion, out.Annotations
	}
}

func retryOnConflict(err error) error {
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w: %w", cloudproviderapi.NewRetryError("the Service changed since it was read: retrying with its new version", time.Second), err)
	}
	return err
}

// Start loads the inventory once, synchronously (so the agent and the controllers that
// start next find it loaded; a failure is logged and retried by the loop), then runs
// the reload loop until ctx is done. The loop is the process's: call Start with the
// process's context, before the agent and the first term (main does). It is
// idempotent.
func (c *Cloud) Start(ctx context.Context) {
	c.startOnce.Do(func() {
		ctx := klog.NewContext(ctx, klog.FromContext(ctx).WithName("inventory"))
		_ = c.store.Reload(ctx)
		go c.store.Run(ctx)
	})
}

// SetInformers wires the term that Initialize started to factory (the framework calls
// it right after Initialize; give it the term's view of the informers, see package
// informerscope, so the handlers added here end with the term): the deletion guard
// decides for the term, seeing which hosts the cluster's Nodes reference; the power
// monitor (BMC conditions, events, first-seen-off annotation), the host-info publisher
// and the Announced condition run for the term. The Routes and the load balancer's
// Service lister are wired too.
func (c *Cloud) SetInformers(factory informers.SharedInformerFactory) {
	nodes := factory.Core().V1().Nodes()
	informer := nodes.Informer()
	if c.kernel != nil {
		c.routes.Store(routes.NewProvider(c.kernel, nodes.Lister(), routes.ProviderOptions{
			NodeName:         c.nodeName,
			NodesSynced:      informer.HasSynced,
			OffLinkViaFabric: c.cfg.BGP != nil && c.cfg.BGP.AnnouncePodCIDRs,
		}))
	}
	if c.lb != nil {
		svcs := factory.Core().V1().Services()
		c.lb.SetServices(svcs.Lister(), svcs.Informer().HasSynced)
		if client := c.client; client != nil {
			// Priming (at the start of leadership, and again after a conflict) reads
			// the Services from the API server, not from a cache that may lag.
			c.lb.SetLister(func(ctx context.Context) ([]*v1.Service, error) {
				list, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
				if err != nil {
					return nil, err
				}
				out := make([]*v1.Service, len(list.Items))
				for i := range list.Items {
					out[i] = &list.Items[i]
				}
				return out, nil
			})
		}
	}
	t := c.currentTerm()
	if t == nil || c.client == nil {
		return // not initialized: no term, no API client
	}
	c.leadGuard(t, nodeHosts(cachelist.NodeLister(informer.GetIndexer()), informer.HasSynced), informer.HasSynced)
	if c.cfg.BGP != nil && (c.cfg.LoadBalancer == nil || c.cfg.LoadBalancer.Announcer != config.AnnouncerMetalLB) {
		// Agents on worker hosts read their rack peers and router ID from their Node.
		pub, err := hostinfo.NewPublisher(hostinfo.PublisherOptions{
			Client: c.client, Nodes: nodes.Lister(), Informer: informer, View: c.store.View,
		})
		if err != nil {
			t.logger.Error(err, "The host-info publisher is off: agents on worker hosts get no rack peers")
		} else {
			t.goRun("", pub.Run)
		}
	}
	// The project's objects: an informer factory of the term's own (it stops with the
	// term; without a CRD its informer retries).
	var objects bmccminformers.SharedInformerFactory
	if c.objects != nil {
		objects = bmccminformers.NewSharedInformerFactory(c.objects, 0)
		if c.cfg.BGP != nil && (c.lb == nil || c.cfg.LoadBalancer.Announcer != config.AnnouncerMetalLB) {
			c.leadPeers(t, objects)
			if c.lb != nil {
				c.leadAdverts(t, objects)
			}
		}
	}
	if c.lb != nil {
		// Who announces each Service: the condition baremetal-ccm.io/Announced,
		// from the speakers' session states (without the CRD the condition says so).
		var sessions v1alpha1listers.BGPSessionStateLister
		if objects != nil {
			if c.cfg.BGP != nil && c.cfg.LoadBalancer.Announcer == config.AnnouncerBGP {
				sessions = objects.BaremetalCCM().V1alpha1().BGPSessionStates().Lister()
			}
			c.leadPools(t, objects, factory.Core().V1().Services())
		}
		ac, err := announcestatus.New(announcestatus.Options{Client: c.client, Informers: factory, Config: c.cfg, Pool: c.lb.Allocator().PoolOf, Sessions: sessions,
			ClientQPS: c.clientQPS, ClientBurst: c.clientBurst})
		if err != nil {
			t.logger.Error(err, "The Announced condition is off")
		} else {
			t.goRun("", ac.Run)
		}
	}
	if objects != nil {
		objects.Start(t.ctx.Done())
		t.wg.Go(func() { <-t.ctx.Done(); objects.Shutdown() })
	}
	b := c.cfg.BMC
	// The monitor lists every Node each second: from a listing shared until the cache
	// changes.
	monNodes := cachelist.SharedNodeLister(t.ctx, informer)
	mon := powermon.New(powermon.Config{
		ReadyInterval: b.ReadyInterval.Duration, NotReadyInterval: b.NotReadyInterval.Duration, Tick: time.Second,
		OutOfServiceAfter: durationOf(c.cfg.Instances.OutOfServiceAfter), DefaultCA: c.cfg.BMC.CAFile,
	}, c.store, c.power, monNodes, c.client, func(n *v1.Node, typ, reason, format string, args ...any) {
		c.recorder.Eventf(n, typ, reason, format, args...)
	}, nil)
	t.goRun("powermon", func(ctx context.Context) {
		if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			mon.Run(ctx)
		}
	})
}

// leadPools runs, for term t, the controller that decides which IPPools are in force
// (pkg/pools): it never takes away an address a Service's status shows.
func (c *Cloud) leadPools(t *term, objects bmccminformers.SharedInformerFactory, svcs coreinformers.ServiceInformer) {
	inf := objects.BaremetalCCM().V1alpha1().IPPools()
	wake := kick.New()
	if _, err := inf.Informer().AddEventHandler(wake.Handler()); err != nil {
		t.logger.Error(err, "The IPPool controller is off: IPPool changes are not applied")
		return
	}
	lister := svcs.Lister()
	ctl := &pools.Controller{
		Client: c.objects, Pools: inf.Lister(), Synced: []cache.InformerSynced{inf.Informer().HasSynced, svcs.Informer().HasSynced},
		File: c.cfg.LoadBalancer.Pools, Usage: c.lb.Allocator().Usage, Kick: wake,
		Holders: func() []pools.Holder {
			list, err := lister.List(labels.Everything())
			if err != nil {
				return nil
			}
			var out []pools.Holder
			for _, s := range list {
				for _, ip := range lb.IngressIPs(s) {
					out = append(out, pools.Holder{IP: ip, Known: true, Namespace: s.Namespace, Labels: s.Labels})
				}
			}
			return out
		},
		Allocated: c.lb.Allocator().Addresses,
		Apply:     c.lb.SetPoolsKeeping,
	}
	t.goRun("ip-pools", ctl.Run)
}

// leadPeers runs, for term t, the controller that decides which BGPPeers are in
// force (pkg/peers).
func (c *Cloud) leadPeers(t *term, objects bmccminformers.SharedInformerFactory) {
	inf := objects.BaremetalCCM().V1alpha1().BGPPeers()
	wake := kick.New()
	if _, err := inf.Informer().AddEventHandler(wake.Handler()); err != nil {
		t.logger.Error(err, "The BGPPeer controller is off: BGPPeer changes are not applied")
		return
	}
	ctl := &peers.Controller{
		Client: c.objects, Peers: inf.Lister(), Synced: []cache.InformerSynced{inf.Informer().HasSynced},
		File: c.cfg.BGP.Peers, Kick: wake,
	}
	t.goRun("bgp-peers", ctl.Run)
}

// leadAdverts runs, for term t, the controller that decides which
// BGPAdvertisements are in force and resolves their references (pkg/adverts).
func (c *Cloud) leadAdverts(t *term, objects bmccminformers.SharedInformerFactory) {
	v := objects.BaremetalCCM().V1alpha1()
	ads, pools, peerObjs := v.BGPAdvertisements(), v.IPPools(), v.BGPPeers()
	wake := kick.New()
	for _, inf := range []cache.SharedIndexInformer{ads.Informer(), pools.Informer(), peerObjs.Informer()} {
		if _, err := inf.AddEventHandler(wake.Handler()); err != nil {
			t.logger.Error(err, "The BGPAdvertisement controller is off: BGPAdvertisement changes are not applied")
			return
		}
	}
	var filePools []string
	for _, p := range c.cfg.LoadBalancer.Pools {
		filePools = append(filePools, p.Name)
	}
	ctl := &adverts.Controller{
		Client: c.objects, Advertisements: ads.Lister(), Pools: pools.Lister(), Peers: peerObjs.Lister(),
		Synced:    []cache.InformerSynced{ads.Informer().HasSynced, pools.Informer().HasSynced, peerObjs.Informer().HasSynced},
		FilePools: filePools, Kick: wake,
	}
	t.goRun("bgp-advertisements", ctl.Run)
}

// leadGuard makes the inventory's deletion guard decide for term t, its state in the
// cluster (so a restart or a new leader forgets nothing), and compares the inventory
// with the Nodes as soon as they are known, rather than at the next reload.
func (c *Cloud) leadGuard(t *term, hosts inventory.NodeHostsFunc, synced cache.InformerSynced) {
	l := inventory.Leadership{
		State:     &inventory.ConfigMapState{Client: c.client, Namespace: GuardStateNamespace},
		NodeHosts: hosts,
	}
	var fence Fence
	if c.newFence != nil {
		fence = c.newFence()
		l.Fence = fence.Check
	}
	c.store.Lead(t.ctx, l)
	t.goRun("inventory", func(ctx context.Context) {
		if fence != nil {
			// Take note of the Lease this replica just acquired.
			if err := fence.Check(ctx); err != nil {
				klog.FromContext(ctx).Info("Warning: the leader's Lease check failed at the start of the term", "err", err)
			}
		}
		if cache.WaitForCacheSync(ctx.Done(), synced) {
			_ = c.store.Reload(ctx)
		}
	})
}

func nodeHosts(lister corelisters.NodeLister, synced cache.InformerSynced) inventory.NodeHostsFunc {
	return func() ([]string, bool) {
		if !synced() {
			return nil, false
		}
		nodes, err := lister.List(labels.Everything())
		if err != nil {
			return nil, false
		}
		var ids []string
		for _, n := range nodes {
			if slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == cloudproviderapi.TaintExternalCloudProvider }) {
				// Never initialized (a kubelet --provider-id typo registers such a
				// Node): never reported gone, so its host is not one the guard
				// must count.
				continue
			}
			if id, ok := inventory.HostIDFromProviderID(n.Spec.ProviderID); ok {
				ids = append(ids, id)
			}
		}
		return ids, true
	}
}

// InstancesV2 returns the inventory-backed implementation.
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c.instances, true }

// LoadBalancer assigns LoadBalancer Services their IPs from the configured pools; it
// is not implemented without a loadBalancer section in the CloudConfig.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	if c.lb == nil {
		return nil, false
	}
	return c.lb, true
}

// Instances is superseded by InstancesV2.
func (c *Cloud) Instances() (cloudprovider.Instances, bool) { return nil, false }

// Zones is superseded by InstancesV2, which returns zone and region.
func (c *Cloud) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters is not implemented.
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// Routes programs pod-CIDR routes into this (the leader's) kernel; it is implemented
// once SetInformers ran with a routes section in the CloudConfig.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) {
	if p := c.routes.Load(); p != nil {
		return p, true
	}
	return nil, false
}

// ProviderName returns Name.
func (c *Cloud) ProviderName() string { return Name }

// HasClusterID returns true: a datacenter has no cluster tagging to check.
func (c *Cloud) HasClusterID() bool { return true }

// lazyRecorder drops events until Initialize gives it a recorder.
type lazyRecorder struct {
	r atomic.Pointer[record.EventRecorder]
}

func (l *lazyRecorder) set(r record.EventRecorder) { l.r.Store(&r) }

func (l *lazyRecorder) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	if r := l.r.Load(); r != nil {
		(*r).Eventf(obj, eventType, reason, format, args...)
	}
}

// refSink records inventory events on a fixed object reference.
type refSink struct {
	rec *lazyRecorder
	ref *v1.ObjectReference
}

func (s refSink) Eventf(eventType, reason, format string, args ...any) {
	s.rec.Eventf(s.ref, eventType, reason, format, args...)
}

func durationOf(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}
