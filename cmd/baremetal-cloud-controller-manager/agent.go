package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/klog/v2"

	"github.com/spf13/pflag"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/agent"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp"
	bmconfig "github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/provider"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/routes"
)

// agentFlags are the flags of the replica-local agent.
type agentFlags struct {
	nodeName string
}

func (f *agentFlags) addTo(fs *pflag.FlagSet) {
	def := os.Getenv("NODE_NAME")
	if def == "" {
		def, _ = os.Hostname()
	}
	fs.StringVar(&f.nodeName, "node-name", def,
		"Name of the Node of the host this process runs on (default: $NODE_NAME, else the host name). The agent uses it to find the host's rack peers and router ID in the inventory, to skip routes to itself, and for externalTrafficPolicy: Local in next-hop mode self.")
}

// startAgent runs the replica-local agent (BGP announcements, route mirror) on every
// replica, leader or not, when the CloudConfig asks for any of it. The returned
// channel closes when the agent has stopped and withdrawn its routes.
func startAgent(ctx context.Context, c *config.CompletedConfig, cloud *provider.Cloud, f *agentFlags) (<-chan struct{}, error) {
	cfg := cloud.Config()
	if cfg.BGP == nil && cfg.Routes == nil {
		done := make(chan struct{})
		close(done)
		return done, nil
	}
	return runAgent(ctx, c.ClientBuilder.ClientOrDie("baremetal-ccm-agent"), c.SharedInformers, cloud, f.nodeName)
}

// runAgent starts the agent with client and factory (which it starts) and returns a
// channel closed when it has stopped. An agent that cannot run exits the process.
func runAgent(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory, cloud *provider.Cloud, nodeName string) (<-chan struct{}, error) {
	done := make(chan struct{})
	cfg := cloud.Config()
	logger := klog.FromContext(ctx).WithName("agent")
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: provider.EventSource})

	// The inventory supplies this host's rack peers and router ID; on the leader the
	// same store also serves the controllers (Start is idempotent).
	cloud.Start(ctx)
	opts := agent.Options{
		Config:    cfg,
		Self:      nodeName,
		Informers: factory,
		Inventory: cloud.Store(),
		Events:    recorder,
	}
	if k := cloud.Kernel(); k != nil && cfg.Routes.MirrorEnabled() {
		opts.Mirror = routes.NewMirror(k, routes.MirrorOptions{NodeName: nodeName})
		if d := cfg.Routes.ResyncInterval; d != nil {
			opts.ResyncInterval = d.Duration
		}
	}
	if b := cloud.Balancer(); b != nil {
		opts.Pool = b.Allocator().PoolOf
	}
	// With the metallb announcer, MetalLB's speakers peer with the routers from every
	// node: the embedded speaker stays off so a host never has two sessions.
	if cfg.BGP != nil && (cfg.LoadBalancer == nil || cfg.LoadBalancer.Announcer != bmconfig.AnnouncerMetalLB) {
		opts.NewSpeaker = func(id agent.Identity) (agent.Speaker, error) {
			return bgp.New(speakerConfig(cfg.BGP, id))
		}
	}
	a, err := agent.New(opts)
	if err != nil {
		return nil, err
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
	return done, nil
}

func speakerConfig(b *bmconfig.BGPConfig, id agent.Identity) bgp.Config {
	return bgp.Config{
		LocalASN: b.LocalASN, RouterID: id.RouterID, ListenPort: b.ListenPort,
		Peers: b.Peers, Communities: b.Communities, LargeCommunities: b.LargeCommunities,
		IPv4NextHop: id.IPv4, IPv6NextHop: id.IPv6,
	}
}

// agentShutdownTimeout bounds how long the process waits for the agent to withdraw
// its routes after SIGTERM.
const agentShutdownTimeout = 8 * time.Second
