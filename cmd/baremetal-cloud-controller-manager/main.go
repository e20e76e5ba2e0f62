// Command baremetal-cloud-controller-manager is the Kubernetes cloud-controller-manager
// for on-prem bare metal. It is the upstream CCM command (k8s.io/cloud-provider/app:
// its flags, leader election, secure serving with /healthz and /metrics) with the
// "baremetal" provider registered and selected by default.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics on /metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // build info metric
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/ctl"
	"github.com/baremetal-ccm/baremetal-ccm/internal/gctune"
	"github.com/baremetal-ccm/baremetal-ccm/internal/sdnotify"
	"github.com/baremetal-ccm/baremetal-ccm/internal/trim"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/agent"
	bmconfig "github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/informerscope"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/provider"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/version"
)

const program = "baremetal-cloud-controller-manager"

func main() {
	// Run as baremetal-ccmctl (the image links that name to this file, so operators of
	// a static pod have the tool where the CCM runs without a second binary).
	if ctlName(os.Args[0]) {
		os.Exit(ctl.Run(os.Args[1:], os.Stdout, os.Stderr))
	}
	gctune.Apply() // GOGC=50 unless the environment says otherwise (see internal/gctune)
	if !gctune.Operator() {
		// A lower GC percent and the free heap back to the OS while idle, for the
		// process's life.
		idle := gctune.CCMIdle
		if len(os.Args) > 1 && os.Args[1] == "agent" {
			idle = gctune.AgentIdle
		}
		go gctune.Tune(context.Background(), idle)
	}
	if wantsVersion(os.Args[1:]) {
		fmt.Println(version.String(program))
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		os.Exit(runAgentMode(os.Args[2:], os.Stderr))
	}
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
		os.Exit(1)
	}
	opts.KubeCloudShared.CloudProvider.Name = provider.Name
	provider.Register()
	version.RegisterMetrics()

	// SIGTERM or SIGINT: systemd is told STOPPING=1 first (synchronously, so it is sent
	// before the process can exit), then stop closes: the leader stops its
	// controllers and releases its Lease, the agent withdraws (or, with bgp.onStop
	// retain, leaves its paths to the routers' graceful restart), the command
	// returns, flushing queued events, and the process exits 0. A second signal
	// exits at once.
	notifier := sdnotify.New()
	stop := stopOnSignal(notifier)
	ctx := wait.ContextForChannel(stop)
	// The delegated authentication's informer (the client CA ConfigMap that the secure
	// port reads) waits for the API server as the shared informers do (newGate).
	opts.Authentication.CustomRoundTripperFn = newGate(ctx).Wrap
	p := &process{ctx: ctx, notifier: notifier}
	var (
		flags     agentFlags
		agentDone <-chan struct{}
		bareCloud *provider.Cloud
	)
	extra := cliflag.NamedFlagSets{}
	flags.addTo(extra.FlagSet("baremetal agent"))
	initCloud := func(c *config.CompletedConfig) cloudprovider.Interface {
		// Nothing has used the shared informer factory yet: replace it by one that
		// trims what no controller reads before caching (internal/trim), over a client
		// that catches up at once when the API server answers again (informerClient).
		client, gate, err := informerClient(ctx, rest.AddUserAgent(rest.CopyConfig(c.Kubeconfig), "shared-informers"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
			os.Exit(1)
		}
		c.VersionedClient, p.apiBack = client, gate.Reopened
		// The root informer scope counts every event handler, so one a leadership term
		// leaves behind shows (baremetal_ccm_informer_event_handlers).
		p.informers = informerscope.New(informers.NewSharedInformerFactoryWithOptions(c.VersionedClient, app.ResyncPeriod(c)(),
			informers.WithTransform(trim.Object)))
		c.SharedInformers = p.informers
		cloud := newCloud(c)
		bareCloud = cloud.(*provider.Cloud)
		p.nodeName = flags.nodeName
		// The inventory is loaded and reloaded for the process's life: the agent
		// reads the host's rack peers from it, every leadership term its hosts.
		bareCloud.Start(ctx)
		// The agent runs on every replica, leader or not: it starts before leader
		// election and uses the same informer factory as the controllers.
		// The IPPools are read before the agent's first announcements.
		var started atomic.Pointer[agent.Agent]
		poolWatcher := startPools(ctx, c, bareCloud, func() {
			if a := started.Load(); a != nil {
				a.Resync()
			}
		})
		a, done, err := startAgent(ctx, c, bareCloud, &flags, poolWatcher)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
			os.Exit(1)
		}
		if a != nil {
			p.agent = a
			started.Store(a)
		}
		agentDone = done
		go notifyWhenServing(ctx, c, p)
		return cloud
	}
	cmd := newCommand(opts, initCloud, controllerConstructors(), names.CCMControllerAliases(), extra, p)
	cmd.Long = program + " runs the Kubernetes cloud controllers (node, node-lifecycle, service, route) for on-prem bare metal: Nodes are initialized from a server inventory, LoadBalancer Services get IPs from the datacenter's pools, announced over BGP by every replica, and pod-CIDR routes are programmed into the kernel."
	code := cli.Run(cmd)
	// Stopping: the agent is already withdrawing its BGP routes (its context is done);
	// meanwhile the BMC sessions are logged out. Both are bounded.
	deadline := time.After(agentShutdownTimeout)
	if bareCloud != nil {
		bareCloud.Shutdown(5 * time.Second)
	}
	if agentDone != nil {
		select {
		case <-agentDone:
		case <-deadline:
			klog.Warning("The agent did not stop in time; exiting without waiting for its withdrawals")
		}
	}
	os.Exit(code)
}

// newCloud builds the provider from --cloud-provider and --cloud-config, or exits with
// a message that names the problem.
func newCloud(c *config.CompletedConfig) cloudprovider.Interface {
	cp := c.ComponentConfig.KubeCloudShared.CloudProvider
	if cp.Name != provider.Name {
		fmt.Fprintf(os.Stderr, "%s: --cloud-provider=%q is not supported; use %q\n", program, cp.Name, provider.Name)
		os.Exit(1)
	}
	if cp.CloudConfigFile == "" {
		fmt.Fprintf(os.Stderr, "%s: --cloud-config is required (the path of a CloudConfig file, see docs/configuration.md)\n", program)
		os.Exit(1)
	}
	if _, err := os.Stat(cp.CloudConfigFile); err != nil {
		fmt.Fprintf(os.Stderr, "%s: --cloud-config: %v\n", program, err)
		os.Exit(1)
	}
	klog.InfoS("Starting", "program", program, "version", version.Version, "commit", version.Commit)
	cloud, err := cloudprovider.InitCloudProvider(cp.Name, cp.CloudConfigFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
		os.Exit(1)
	}
	if err := checkRouteFlags(c, cloud.(*provider.Cloud).Config()); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
		os.Exit(1)
	}
	return cloud
}

// checkRouteFlags fails fast when the CloudConfig enables routes but the route
// controller would not run or would not know the pod network.
func checkRouteFlags(c *config.CompletedConfig, cfg *bmconfig.CloudConfig) error {
	shared := c.ComponentConfig.KubeCloudShared
	if cfg.Routes == nil || !shared.ConfigureCloudRoutes {
		return nil
	}
	if shared.ClusterCIDR == "" {
		return fmt.Errorf("the CloudConfig has a routes section and --configure-cloud-routes is on (the default), but --cluster-cidr is not set: set --cluster-cidr to the cluster's pod network (for example --cluster-cidr=10.244.0.0/16,fd00:10:244::/56), or --configure-cloud-routes=false to only mirror routes")
	}
	return nil
}

// ctlName reports whether the program runs under baremetal-ccmctl's name (or as the
// kubectl plugin kubectl-baremetal).
func ctlName(argv0 string) bool {
	switch filepath.Base(argv0) {
	case "baremetal-ccmctl", "kubectl-baremetal":
		return true
	}
	return false
}

// wantsVersion reports whether the arguments ask for --version (the upstream flag
// prints the Kubernetes library version under the name "Kubernetes").
func wantsVersion(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--version" || a == "--version=true" || a == "--version=raw" {
			return true
		}
	}
	return false
}

// stopOnSignal returns a channel closed on the first SIGTERM or SIGINT, after telling
// systemd STOPPING=1; a second signal exits with status 1.
func stopOnSignal(n *sdnotify.Notifier) <-chan struct{} {
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sigs
		_ = n.Stopping()
		close(stop)
		<-sigs
		os.Exit(1)
	}()
	return stop
}
