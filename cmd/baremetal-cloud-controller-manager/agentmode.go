package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/sdnotify"
	"github.com/baremetal-ccm/baremetal-ccm/internal/trim"
	bmconfig "github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/provider"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/version"
)

const agentUsage = `usage: baremetal-cloud-controller-manager agent --cloud-config=FILE [--kubeconfig=FILE] [--node-name=NAME] [--v=N]

Runs only the host-local agent, for worker hosts: it mirrors every Node's pod-CIDR
routes into this host's kernel (routes section) and, with a bgp section, announces
what the CloudConfig asks for from this host. No controller runs and no leader is
elected. Without --kubeconfig it uses the in-cluster configuration.
`

// runAgentMode runs the agent alone until SIGTERM or SIGINT and returns the exit code.
func runAgentMode(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, agentUsage); fs.PrintDefaults() }
	cloudConfig := fs.String("cloud-config", "", "path of the CloudConfig (the same file as the CCM's)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the agent's identity (default: in-cluster)")
	def := os.Getenv("NODE_NAME")
	if def == "" {
		def, _ = os.Hostname()
	}
	nodeName := fs.String("node-name", def, "name of this host's Node (default: $NODE_NAME, else the host name)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "log verbosity")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s agent: %v\n", program, err)
		return 1
	}
	if *cloudConfig == "" {
		return fail(errors.New("--cloud-config is required (the same CloudConfig file as the CCM's)"))
	}
	cfg, err := bmconfig.Load(*cloudConfig)
	if err != nil {
		return fail(err)
	}
	if cfg.BGP == nil && cfg.Routes == nil {
		return fail(errors.New("the CloudConfig has neither a routes nor a bgp section: the agent would have nothing to do"))
	}
	rest, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fail(fmt.Errorf("--kubeconfig: %w", err))
	}
	rest.UserAgent = program + "-agent/" + version.Version
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return fail(err)
	}
	cloud, err := provider.New(cfg)
	if err != nil {
		return fail(err)
	}
	klog.InfoS("Starting the agent", "program", program, "version", version.Version, "node", *nodeName)

	notifier := sdnotify.New()
	stop := stopOnSignal(notifier)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trim.Object))
	nodes := factory.Core().V1().Nodes().Informer()
	done, err := runAgent(ctx, client, factory, cloud, *nodeName)
	if err != nil {
		return fail(err)
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
			klog.InfoS("Agent serving: informers synced", "event", "serving")
			_ = notifier.Ready()
		}
	}()
	<-ctx.Done()
	select {
	case <-done:
	case <-time.After(agentShutdownTimeout):
		klog.Warning("The agent did not stop in time; exiting without waiting for its withdrawals")
	}
	klog.Flush()
	return 0
}
