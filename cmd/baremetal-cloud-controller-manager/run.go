package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	v1core "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	configv1alpha "k8s.io/cloud-provider/config/v1alpha1"
	"k8s.io/component-base/configz"
	"k8s.io/component-base/metrics/prometheus/slis"
	"k8s.io/component-base/version"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/pkg/clientbuilder"
	controllerhealthz "k8s.io/controller-manager/pkg/healthz"
	"k8s.io/controller-manager/pkg/leadermigration"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/testhook"
	bmconfig "github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/informerscope"
	lbcontroller "github.com/baremetal-ccm/baremetal-ccm/pkg/lb/controller"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/provider"
)

// Leadership, as this command runs it (app.Run does otherwise):
//
//   - A clean stop (SIGTERM) stops the controllers, then releases the Lease
//     (ReleaseOnCancel), so a standby takes over at once instead of waiting for
//     the Lease to expire (15 s by default).
//   - Standbys watch the Lease: when its holder releases it, they try to acquire it
//     at once rather than at their next retry (--leader-elect-retry-period).
//   - A leader that cannot renew (the API server or etcd is unreachable) stops its
//     controllers, like the upstream command, but does not exit: the agent keeps
//     announcing what the API last said, and the replica contends again and
//     starts the controllers anew when it wins. Upstream exits, and a CCM with
//     one replica then withdrew every LoadBalancer path for as long as the API was
//     down.
//
// Controllers run in terms: each acquisition starts them with a context that ends
// when the Lease is lost or the process stops. A term owns what it starts and ends all
// of it before the next term starts (see terms):
//
//   - process (every replica): the secure port, the shared informers (the root
//     informerscope.Scope), the agent, the inventory's reload loop and View, and the
//     provider's process parts (package provider);
//   - term (the leader): the upstream controllers and ours, which get the term's
//     informer scope (their event handlers are removed at the term's end) and the
//     term's context, and the provider's term parts (Initialize, SetInformers),
//     joined by WaitTermEnd.

// controllerStopGrace bounds how long a stopping leader waits for its controllers
// before it releases the Lease.
const controllerStopGrace = 2 * time.Second

// termStopTimeout bounds how long the end of a term waits for its parts (event
// handlers finishing a notification, BMC logouts, writes under way) before the
// replica contends again.
const termStopTimeout = 30 * time.Second

// run serves the secure port (/healthz, /readyz, /metrics, /configz) and runs the
// controllers while this replica leads, until ctx ends; it returns once the
// controllers stopped and the Lease is released.
func run(ctx context.Context, c *config.CompletedConfig, cloud cloudprovider.Interface, constructors map[string]app.ControllerInitFuncConstructor, p *process) error {
	logger := klog.FromContext(ctx)
	logger.Info("Version", "kubernetes", version.Get().GitVersion)
	for _, hook := range testhook.Active() {
		logger.Info("Warning: a test hook is on; it is for the e2e suite only, unset it", "hook", hook)
	}
	if leadermigration.Enabled(&c.ComponentConfig.Generic) {
		return errors.New("--enable-leader-migration is not supported: there is no in-tree bare-metal provider to migrate from")
	}
	c.EventBroadcaster.StartStructuredLogging(0)
	c.EventBroadcaster.StartRecordingToSink(&v1core.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
	defer c.EventBroadcaster.Shutdown()

	external := &configv1alpha.CloudControllerManagerConfiguration{}
	if err := configv1alpha.Convert_config_CloudControllerManagerConfiguration_To_v1alpha1_CloudControllerManagerConfiguration(&c.ComponentConfig, external, nil); err != nil {
		return fmt.Errorf("unable to convert configz: %w", err)
	}
	external.SetGroupVersionKind(configv1alpha.SchemeGroupVersion.WithKind("CloudControllerManagerConfiguration"))
	if cz, err := configz.New(app.ConfigzName); err != nil {
		return fmt.Errorf("unable to register configz: %w", err)
	} else if err := cz.Set(external); err != nil {
		return fmt.Errorf("unable to set configz: %w", err)
	}

	var checks []healthz.HealthChecker
	var election *leaderelection.HealthzAdaptor
	if c.ComponentConfig.Generic.LeaderElection.LeaderElect {
		election = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
		checks = append(checks, election)
	}
	health := controllerhealthz.NewMutableHealthzHandler(checks...)
	if c.SecureServing != nil {
		mux := genericcontrollermanager.NewBaseHandler(&c.ComponentConfig.Generic.Debugging, health)
		slis.SLIMetricsWithReset{}.Install(mux)
		mux.HandleFunc("/readyz", readyzHandler(c, p))
		handler := genericcontrollermanager.BuildHandlerChain(mux, &c.Authorization, &c.Authentication)
		if _, _, err := c.SecureServing.Serve(handler, 0, ctx.Done()); err != nil {
			return err
		}
	}
	// The informers serve the agent as well as the controllers: they run for the
	// process's life, not one leadership term.
	root := p.informers
	if root == nil {
		root = informerscope.New(c.SharedInformers)
	}
	root.Start(ctx.Done())
	if bc, ok := cloud.(*provider.Cloud); ok {
		if c.ComponentConfig.Generic.LeaderElection.LeaderElect {
			bc.SetFence(leaseFence(c))
		}
		cfg := bc.Config()
		speaks := cfg.BGP != nil && p.nodeName != "" && (cfg.LoadBalancer == nil || cfg.LoadBalancer.Announcer != bmconfig.AnnouncerMetalLB)
		p.setPreflight(newPreflight(c, cfg.LoadBalancer != nil, speaks, cfg.Instances.OutOfServiceAfter != nil, p.nodeName, p.notifier))
		go p.preflightMonitor().Run(ctx)
	}

	t := &terms{process: ctx, c: c, cloud: cloud, constructors: constructors, health: health, informers: root}
	if !c.ComponentConfig.Generic.LeaderElection.LeaderElect {
		t.run(ctx)
		return nil
	}
	return elect(ctx, c, election, p.apiBack, t.run)
}

// terms starts the controllers once per leadership term, and ends everything a term
// started before the next one starts.
type terms struct {
	process      context.Context // the informers run as long as it
	c            *config.CompletedConfig
	cloud        cloudprovider.Interface
	constructors map[string]app.ControllerInitFuncConstructor
	health       *controllerhealthz.MutableHealthzHandler
	informers    *informerscope.Scope // the process's
	n            int
}

// termWaiter is a provider whose term parts the end of a term joins (provider.Cloud).
type termWaiter interface {
	WaitTermEnd(ctx context.Context) error
}

// run starts the controllers and returns when ctx (the term) ends, or at once if a
// controller cannot start, once the term's parts have stopped: its event handlers
// removed, the provider's term joined (at most termStopTimeout).
func (t *terms) run(ctx context.Context) {
	t.n++
	logger := klog.FromContext(ctx).WithValues("term", t.n)
	ctx = klog.NewContext(ctx, logger)
	term, end := context.WithCancelCause(ctx)
	scope := t.informers.Child()
	if t.start(term, scope) {
		<-term.Done()
		logger.Info("Controllers stopped", "reason", context.Cause(term))
	}
	end(errors.New("the term ended"))
	t.stop(logger, scope)
}

// start starts the term's controllers, with scope as their informers; false when the
// term ended first or a controller could not start.
func (t *terms) start(ctx context.Context, scope *informerscope.Scope) bool {
	logger := klog.FromContext(ctx)
	c := t.c
	builder := clientbuilder.SimpleControllerClientBuilder{ClientConfig: c.Kubeconfig}
	var cc genericcontrollermanager.ControllerContext
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		var err error
		cc, err = app.CreateControllerContext(c, builder, ctx.Done())
		if err != nil {
			logger.Error(err, "Building the controller context; retrying")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return false // the term ended first
	}
	t.cloud.Initialize(c.ClientBuilder, ctx.Done())
	if iu, ok := t.cloud.(cloudprovider.InformerUser); ok {
		iu.SetInformers(scope)
	}
	var started []healthz.HealthChecker
	for name, initFn := range app.ConstructControllerInitializers(t.constructors, termConfig(c, scope), t.cloud) {
		if !genericcontrollermanager.IsControllerEnabled(name, app.ControllersDisabledByDefault, c.ComponentConfig.Generic.Controllers) {
			logger.Info("Controller disabled", "controller", name)
			continue
		}
		_, ok, err := initFn(ctx, cc)
		if err != nil {
			logger.Error(err, "Starting a controller failed; ending this term", "controller", name)
			return false
		}
		if !ok {
			logger.Info("Controller skipped", "controller", name)
			continue
		}
		started = append(started, controllerhealthz.NamedPingChecker(name))
		logger.Info("Started controller", "controller", name)
	}
	if t.n == 1 {
		t.health.AddHealthChecker(started...)
	}
	t.informers.Start(t.process.Done()) // any informer a controller asked for: shared, they outlive the term
	// Upstream's per-term factory: no controller here asks it for an informer (all use
	// the term's scope over the shared informers, behind the API gate), so this starts
	// nothing today.
	cc.InformerFactory.Start(cc.Stop)
	return true
}

// stop ends what the term started, once its context has ended: the event handlers its
// controllers added to the process's informers are removed, and the provider's term
// parts are joined.
func (t *terms) stop(logger klog.Logger, scope *informerscope.Scope) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.process), termStopTimeout)
	defer cancel()
	removed, err := scope.Close(ctx)
	if err != nil {
		logger.Error(err, "Warning: removing the term's event handlers")
	}
	if w, ok := t.cloud.(termWaiter); ok {
		if err := w.WaitTermEnd(ctx); err != nil {
			logger.Error(err, "Warning: the term's parts did not all stop in time")
		}
	}
	logger.Info("Term ended", "eventHandlersRemoved", removed, "eventHandlers", t.informers.Handlers(), "goroutines", runtime.NumGoroutine())
}

// termConfig returns c with scope as its shared informers, for the controllers of one
// term: the upstream ones add event handlers to the Node informer every time they are
// built and never remove them.
func termConfig(c *config.CompletedConfig, scope informers.SharedInformerFactory) *config.CompletedConfig {
	cfg := *c.Config
	cfg.SharedInformers = scope
	return cfg.Complete()
}

// leaseFence makes a fence over the leader-election Lease for each term (provider
// fences the deletion guard's writes and grants with it).
func leaseFence(c *config.CompletedConfig) func() provider.Fence {
	le := c.ComponentConfig.Generic.LeaderElection
	client := c.ClientBuilder.ClientOrDie("baremetal-cloud-provider")
	return func() provider.Fence {
		return &lbcontroller.LeaseFence{Client: client, Namespace: le.ResourceNamespace, Name: le.ResourceName}
	}
}

// elect runs leader election until ctx ends: lead runs the controllers for one
// term and returns when the term's context ends. A lost Lease ends the term and
// starts the election again; ctx's end stops the controllers, then releases the
// Lease. A replica that does not lead contends at once, instead of at its next retry
// (up to 2.2 retry periods away), when the Lease is released and when apiBack's
// channel closes: the API server answers again after an outage.
func elect(ctx context.Context, c *config.CompletedConfig, checker *leaderelection.HealthzAdaptor, apiBack func() <-chan struct{}, lead func(context.Context)) error {
	logger := klog.FromContext(ctx).WithName("leader-election")
	le := c.ComponentConfig.Generic.LeaderElection
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.NewFromKubeconfig(le.ResourceLock, le.ResourceNamespace, le.ResourceName,
		resourcelock.ResourceLockConfig{Identity: id, EventRecorder: c.EventRecorder}, c.Kubeconfig, le.RenewDeadline.Duration)
	if err != nil {
		return fmt.Errorf("creating the leader-election lock: %w", err)
	}
	released := make(chan struct{}, 1)
	// An informer too: through the informers' client, it sees a release as soon as the
	// API server answers again after an outage.
	go watchRelease(ctx, c.VersionedClient, le.ResourceNamespace, le.ResourceName, released)
	var back <-chan struct{} // nil: never
	if apiBack != nil {
		back = apiBack()
	}

	for ctx.Err() == nil {
		// The attempt's context outlives ctx until the controllers have stopped, so
		// the Lease is released only after them (ReleaseOnCancel).
		attempt, cancelAttempt := context.WithCancel(context.WithoutCancel(ctx))
		var (
			mu         sync.Mutex
			leading    bool
			cancelTerm context.CancelFunc
			termDone   = make(chan struct{})
		)
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   le.LeaseDuration.Duration,
			RenewDeadline:   le.RenewDeadline.Duration,
			RetryPeriod:     le.RetryPeriod.Duration,
			ReleaseOnCancel: true,
			WatchDog:        checker,
			Name:            le.ResourceName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(leCtx context.Context) {
					term, cancel := context.WithCancelCause(leCtx)
					mu.Lock()
					leading, cancelTerm = true, func() { cancel(errors.New("stopping")) }
					mu.Unlock()
					defer close(termDone)
					logger.Info("Leading: starting the controllers", "identity", id)
					lead(term)
					if leCtx.Err() == nil && ctx.Err() == nil {
						// A controller could not start: leading without it helps no
						// one. Give the Lease up (released) and contend again.
						logger.Info("Warning: the controllers did not start; releasing the Lease", "identity", id)
						cancelAttempt()
					}
				},
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			cancelAttempt()
			return fmt.Errorf("leader election: %w", err)
		}
		if checker != nil {
			checker.SetLeaderElection(elector)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			elector.Run(attempt)
		}()
		stopping := false
	wait:
		for {
			select {
			case <-done:
				break wait
			case <-released:
				mu.Lock()
				l := leading
				mu.Unlock()
				if !l {
					cancelAttempt() // try again now: the holder released the Lease
				}
			case <-back:
				back = apiBack()
				mu.Lock()
				l := leading
				mu.Unlock()
				if !l {
					cancelAttempt() // try again now: the API server answers again
				}
			case <-ctx.Done():
				stopping = true
				mu.Lock()
				l, stop := leading, cancelTerm
				mu.Unlock()
				if l {
					stop()
					select {
					case <-termDone:
					case <-time.After(controllerStopGrace):
						logger.Info("Warning: the controllers did not stop in time; releasing the Lease anyway")
					}
				}
				cancelAttempt() // the elector releases the Lease as it returns
				<-done
				break wait
			}
		}
		cancelAttempt()
		mu.Lock()
		l := leading
		mu.Unlock()
		switch {
		case stopping && l:
			logger.Info("Stopped leading: the Lease is released", "identity", id)
		case l:
			<-termDone
			logger.Info("Warning: lost the Lease (it could not be renewed): the controllers stopped; the agent keeps announcing what the API last said; contending again", "identity", id)
			select { // no tight loop if terms keep failing
			case <-ctx.Done():
			case <-back:
				back = apiBack()
			case <-time.After(le.RetryPeriod.Duration):
			}
		}
	}
	return nil
}

// watchRelease signals on released (without blocking) every time the Lease is
// seen released (no holder) or deleted.
func watchRelease(ctx context.Context, client kubernetes.Interface, namespace, name string, released chan<- struct{}) {
	logger := klog.FromContext(ctx).WithName("leader-election")
	lw := cache.NewListWatchFromClient(client.CoordinationV1().RESTClient(), "leases", namespace, fields.OneTermEqualSelector("metadata.name", name))
	notify := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if holder != "" {
			return
		}
		select {
		case released <- struct{}{}:
		default:
		}
	}
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &coordinationv1.Lease{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    notify,
			UpdateFunc: func(_, obj any) { notify(obj) },
			DeleteFunc: func(any) {
				select {
				case released <- struct{}{}:
				default:
				}
			},
		},
	})
	logger.V(2).Info("Watching the Lease for releases", "namespace", namespace, "name", name)
	ctrl.RunWithContext(ctx)
}

// readyzHandler answers /readyz: 200 once the informers synced, the agent applies
// everything (its BGP sessions up with this host's paths at the routers, see
// agent.Agent.Ready) and the preflight check passed (the CCM's namespace and
// permissions, see newPreflight), else 503 with the reason.
func readyzHandler(c *config.CompletedConfig, p *process) http.HandlerFunc {
	nodes := c.SharedInformers.Core().V1().Nodes().Informer()
	return func(w http.ResponseWriter, r *http.Request) {
		ok, why := readiness(r.Context(), nodes.HasSynced, p)
		if m := p.preflightMonitor(); ok && m != nil {
			ok, why = m.Ready()
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", why)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// readiness is /readyz's answer.
func readiness(ctx context.Context, synced func() bool, p *process) (bool, string) {
	if !synced() {
		return false, "informers not synced"
	}
	if p.agent != nil {
		return p.agent.Ready(ctx)
	}
	return true, ""
}
