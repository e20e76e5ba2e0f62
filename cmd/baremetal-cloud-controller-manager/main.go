// Command baremetal-cloud-controller-manager is the Kubernetes cloud-controller-manager
// for on-prem bare metal. It is the upstream CCM command (k8s.io/cloud-provider/app:
// its flags, leader election, secure serving with /healthz and /metrics) with the
// "baremetal" provider registered and selected by default.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/apimachinery/pkg/util/wait"
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

	"github.com/baremetal-ccm/baremetal-ccm/internal/sdnotify"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/provider"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/version"
)

const program = "baremetal-cloud-controller-manager"

func main() {
	if wantsVersion(os.Args[1:]) {
		fmt.Println(version.String(program))
		return
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
	// before the process can exit), then stop closes, the command returns, flushing
	// queued events, and the process exits 0. A second signal exits at once.
	notifier := sdnotify.New()
	stop := stopOnSignal(notifier)
	ctx := wait.ContextForChannel(stop)
	initCloud := func(c *config.CompletedConfig) cloudprovider.Interface {
		cloud := newCloud(c)
		go notifyWhenServing(ctx, c, notifier)
		return cloud
	}
	cmd := app.NewCloudControllerManagerCommand(opts, initCloud, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
	cmd.Use = program
	cmd.Long = program + " runs the Kubernetes cloud controllers (node, node-lifecycle, service, route) for on-prem bare metal: Nodes are initialized from a server inventory."
	os.Exit(cli.Run(cmd))
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
		fmt.Fprintf(os.Stderr, "%s: --cloud-config is required (the path of a CloudConfig file, see the README)\n", program)
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
	return cloud
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
