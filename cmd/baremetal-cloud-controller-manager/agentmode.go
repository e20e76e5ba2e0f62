package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/sdnotify"
	"github.com/baremetal-ccm/baremetal-ccm/internal/trim"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/agent"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	bmconfig "github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	bmccminformers "github.com/baremetal-ccm/baremetal-ccm/pkg/generated/informers/externalversions"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/kick"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/pools"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/routes"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/speakerstatus"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/version"
)

const agentUsage = `usage: baremetal-cloud-controller-manager agent --cloud-config=FILE [--kubeconfig=FILE] [--node-name=NAME]
       [--bgp-password-file=[PEER=]FILE]... [--bgp-router-id=IPV4]
       [--serving-address=HOST:PORT] [--v=N]

Runs only the host-local agent, for worker hosts: it mirrors every Node's pod-CIDR
routes into this host's kernel (routes section) and, with a bgp section, announces
this host alone: its own Node's pod CIDRs and each LoadBalancer IP with itself as next
hop while its Node is Ready and, for externalTrafficPolicy Local, has a ready local
endpoint. No controller runs and no leader is elected. It reads neither the inventory
nor any BMC or inventory credential: the CCM publishes this host's rack BGP peers and
router ID on its Node (annotation baremetal-ccm.io/bgp-host), and TCP-MD5 passwords
come from this host's --bgp-password-file, re-read on every pass (a rotated password
applies without a restart). It needs only the agent role (baremetal-ccmctl manifests
agent-rbac). Without --kubeconfig it uses the in-cluster configuration. It serves
/metrics, /healthz and /readyz (with --profiling also /debug/pprof/) over plain HTTP
on --serving-address (loopback by default; empty serves nothing).
`

// agentMaxProcs is the agent's GOMAXPROCS unless the environment sets GOMAXPROCS. Its
// work is serial (informers feeding one pass loop, one BGP speaker, a few timers) and
// small; with more Ps, each of the tens of thousands of watch events of a burst hands
// off between goroutines on different threads, waking idle ones that spin and sleep
// again. One P cut the agent's CPU per Service update by a quarter on 2 cores
// (BenchmarkAgent5000Nodes10000Services). The runtime preempts a long pass every
// 10 ms, so timers keep their pace, but a received BFD packet can wait a slice or two:
// docs/configuration.md asks for GOMAXPROCS=2 with BFD detection under about 150 ms.
const agentMaxProcs = 1

// limitProcs sets agentMaxProcs unless lookup (os.LookupEnv) finds GOMAXPROCS, and
// returns the GOMAXPROCS in effect.
func limitProcs(lookup func(string) (string, bool)) int {
	if _, set := lookup("GOMAXPROCS"); set {
		return runtime.GOMAXPROCS(0)
	}
	runtime.GOMAXPROCS(agentMaxProcs)
	return agentMaxProcs
}

// runAgentMode runs the agent alone until SIGTERM or SIGINT and returns the exit code.
func runAgentMode(args []string, stderr io.Writer) int {
	procs := limitProcs(os.LookupEnv)
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
	routerID := fs.String("bgp-router-id", "", "BGP router ID of this host (default: the one the CCM publishes on its Node)")
	serving := fs.String("serving-address", defaultAgentServingAddress, "HOST:PORT to serve /metrics, /healthz and /readyz on, plain HTTP without authentication (empty: serve nothing)")
	profiling := fs.Bool("profiling", false, "serve Go's profiler on --serving-address too (/debug/pprof/), for diagnosing CPU and memory use; no authentication, as the rest")
	var passwordFiles stringList
	fs.Var(&passwordFiles, "bgp-password-file", "TCP-MD5 password file for every rack peer that expects one (FILE), or for one peer (PEER-ADDRESS=FILE); repeatable")
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
	cfg, err := bmconfig.LoadAgent(*cloudConfig)
	if err != nil {
		return fail(err)
	}
	if cfg.BGP == nil && cfg.Routes == nil {
		return fail(errors.New("the CloudConfig has neither a routes nor a bgp section: the agent would have nothing to do"))
	}
	d := agentDeps{cfg: cfg, selfOnly: true}
	if *routerID != "" {
		if d.routerID, err = parseRouterID(*routerID); err != nil {
			return fail(err)
		}
	}
	if d.passwords, err = agent.ParsePasswords(passwordFiles); err != nil {
		return fail(err)
	}
	var poolSet *ipam.Allocator
	if cfg.LoadBalancer != nil {
		// The pools' communities; the agent allocates nothing.
		if poolSet, err = ipam.New(cfg.LoadBalancer.Pools); err != nil {
			return fail(fmt.Errorf("loadBalancer: %w", err))
		}
		d.poolOf = poolSet.PoolOf
	}
	if r := cfg.Routes; r != nil {
		if d.kernel, err = routes.Open(int(r.Table), int(r.Protocol)); err != nil {
			return fail(fmt.Errorf("routes: %w", err))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = d.kernel.CheckAccess(ctx)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("routes: %w", err))
		}
	}
	// Bound before anything starts, so a taken port fails the start with its cause.
	var a *agent.Agent
	var nodes cache.SharedIndexInformer
	ready := func(ctx context.Context) (bool, string) {
		if !nodes.HasSynced() {
			return false, "informers not synced yet"
		}
		return a.Ready(ctx)
	}
	srv, err := listenAgent(*serving, ready)
	if err != nil {
		return fail(err)
	}
	if srv != nil {
		srv.profiling = *profiling
	}
	rest, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fail(fmt.Errorf("--kubeconfig: %w", err))
	}
	rest.UserAgent = program + "-agent/" + version.Version
	// Kubernetes' own objects in protobuf, as the CCM's client asks (its
	// --kube-api-content-type): decoding the watch of every Service and EndpointSlice
	// is the agent's largest cost while the leader assigns IPs, and protobuf decodes
	// several times cheaper than JSON. The client of baremetal-ccm.io objects asks
	// JSON itself (speakerstatus.NewClient).
	rest.ContentType = apiruntime.ContentTypeProtobuf
	rest.AcceptContentTypes = apiruntime.ContentTypeProtobuf + "," + apiruntime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return fail(err)
	}
	if d.sessions, err = speakerstatus.NewClient(rest); err != nil {
		return fail(err)
	}
	d.speaker = v1alpha1.SpeakerAgent
	klog.InfoS("Starting the agent", "program", program, "version", version.Version, "node", *nodeName, "gomaxprocs", procs)

	notifier := sdnotify.New()
	stop := stopOnSignal(notifier)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	// The informers catch up at once when the API server answers again (informerClient).
	informed, _, err := informerClient(ctx, rest)
	if err != nil {
		return fail(err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(informed, 0, informers.WithTransform(trim.Object))
	if !d.mirrors() {
		ownNodeOnly(factory, *nodeName)
	}
	nodes = factory.Core().V1().Nodes().Informer()
	var started atomic.Pointer[agent.Agent]
	if poolSet != nil {
		// The IPPools the leader accepted, with the CloudConfig's: read before the
		// agent's first announcements.
		d.pools = &pools.Watcher{File: cfg.LoadBalancer.Pools, Synced: kick.NewGate(), Apply: func(_ context.Context, ps []bmconfig.AddressPool) error {
			if err := poolSet.SetPools(ps); err != nil {
				return err
			}
			if a := started.Load(); a != nil {
				a.Resync()
			}
			return nil
		}}
		go d.pools.Run(ctx, bmccminformers.NewSharedInformerFactory(d.sessions, 0))
	}
	a, done, err := runAgent(ctx, client, factory, d, *nodeName)
	if err != nil {
		return fail(err)
	}
	started.Store(a)
	if srv != nil {
		go srv.Serve(ctx)
	}
	go func() {
		// READY=1 once the informers synced and the agent applies everything: its
		// BGP sessions up with this host's paths at the routers (or bgp.readyTimeout
		// passed), so a restart that waits for it leaves no prefix without a path.
		if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
			return
		}
		if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			ok, _ := ready(ctx)
			return ok, nil
		}); err != nil {
			return
		}
		klog.InfoS("Agent serving: informers synced, announcements at the routers", "event", "serving")
		_ = notifier.Ready()
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

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return fmt.Sprint([]string(*l)) }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// ownNodeOnly makes factory's Node informer list and watch only the Node named self
// (a field selector). An agent announces only via itself: without the kernel mirror
// (every Node's pod CIDR) nothing it applies depends on another Node, and caching
// them all would cost every agent memory and the decoding of every Node update in
// the cluster (O(Nodes) per agent, O(Nodes^2) in all).
func ownNodeOnly(factory informers.SharedInformerFactory, self string) {
	factory.InformerFor(&v1.Node{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredNodeInformer(c, resync, cache.Indexers{}, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", self).String()
		})
	})
}
