//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/internal/gctune"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/hostinfo"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

const agentBenchLabel = "bench=agent"

// defaultAgentAddr is agent mode's default --serving-address.
const defaultAgentAddr = "127.0.0.1:10268"

// BenchmarkAgent5000Nodes10000Services measures one worker agent (agent mode, the
// agent role, no inventory) in a cluster of 5000 Ready Nodes and 10,000 LoadBalancer
// Services of policy Cluster: it announces its own pod CIDR and every IP via itself
// to its rack's BIRD. Reported: the agent's RSS and CPU time from the first Service
// created to all 10,000 /32s in BIRD (all-announced-s); its CPU time over the burst's
// tail, until the leader has written every Service's Announced condition
// (all-conditions-s) and gctune.QuietWindow and one gctune.Interval more (the idle mode's entry); and its CPU time over the
// idle minute after (one full resync included) and its RSS then.
func BenchmarkAgent5000Nodes10000Services(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cp := framework.Shared()
	client := fastClient(b, cp)
	if err := framework.ApplyAgentRBAC(ctx, cp); err != nil {
		b.Fatal(err)
	}
	worker := framework.NewHost(b, cp)
	router := bird.Start(b, bird.Options{SpeakerNetns: worker.Name})
	self := "bench-agent-00000"
	published := hostinfo.Encode(hostinfo.Info{Host: self, Rack: "r1", RouterID: router.SpeakerV4(0).String(), Peers: []hostinfo.Peer{{BGPPeer: config.BGPPeer{
		Address: router.RouterV4.String(), ASN: router.ASN, SourceAddress: router.SpeakerV4(0).String(),
		HoldTime: &metav1.Duration{Duration: 9 * time.Second}, KeepaliveTime: &metav1.Duration{Duration: 3 * time.Second}, ConnectRetry: &metav1.Duration{Duration: time.Second},
	}}}})
	b.Cleanup(func() { deleteNodesByLabel(context.Background(), b, client, agentBenchLabel) })
	parallel(b, memBenchNodes, func(i int) error {
		n := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-agent-%05d", i), Labels: map[string]string{"bench": "agent"}},
			Spec:       v1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256)},
			Status: v1.NodeStatus{
				Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: fmt.Sprintf("10.61.%d.%d", i/250, i%250+1)}},
				Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			},
		}
		if i == 0 {
			// This worker: its address on the rack's subnet, and what the leader
			// publishes for it (this cluster's hosts are not in any inventory).
			n.Status.Addresses[0].Address = router.SpeakerV4(0).String()
			n.Annotations = map[string]string{hostinfo.Annotation: published}
		}
		n.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
		_, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		return err
	})

	dir := b.TempDir()
	pools := "loadBalancer:\n  pools:\n  - name: bench\n    addresses: [198.18.64.0/18]\n"
	inv := filepath.Join(dir, "inventory.yaml")
	writeFileB(b, inv, "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts: []\n")
	ccmCfg := filepath.Join(dir, "cloud-config.yaml")
	writeFileB(b, ccmCfg, fmt.Sprintf("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory:\n  file: {path: %s}\n  deletionGuard: {acknowledgeFile: %s}\n%sbgp: {localASN: 65000}\n",
		inv, filepath.Join(dir, "ack"), pools))
	agentCfg := filepath.Join(dir, "agent-cloud-config.yaml")
	writeFileB(b, agentCfg, "apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\n"+pools+"bgp: {localASN: 65000, announcePodCIDRs: true}\n")

	for range b.N {
		ns := "bench-agent-" + rand.String(6)
		if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		ccm := framework.StartCCM(b, cp, ccmCfg, "--controllers=service-lb-controller",
			"--concurrent-service-syncs=10", "--kube-api-qps=500", "--kube-api-burst=1000", "--v=1", "--bgp-router-id=10.77.0.1")
		if err := ccm.WaitHealthy(ctx); err != nil {
			b.Fatal(err)
		}
		profiles := os.Getenv("BAREMETAL_CCM_BENCH_PROFILES")
		args := []string{"--kubeconfig=" + framework.AgentKubeconfig(b, cp, worker, self), "--v=1"}
		if profiles != "" {
			args = append(args, "--profiling")
		}
		// BAREMETAL_CCM_BENCH_AGENT_ENV: extra environment for the agent only.
		agent := framework.StartAgentInEnv(b, worker, strings.Fields(os.Getenv("BAREMETAL_CCM_BENCH_AGENT_ENV")), agentCfg, self, args...)
		if err := framework.WaitFor(ctx, 5*time.Minute, "the agent's pod CIDR in BIRD", func(ctx context.Context) (bool, error) {
			n, err := router.CountRoutes(ctx)
			return n >= 1, err
		}); err != nil {
			b.Fatal(err)
		}
		rssSynced, _ := framework.ProcRSS(agent.PID())
		cpu0, err := framework.ProcCPUTime(agent.PID())
		if err != nil {
			b.Fatal(err)
		}
		gcs0 := agentGCs(ctx, b, worker)
		// What the burst allocates: the allocation profile (cumulative since the
		// agent started) before and after it, for pprof -diff_base.
		allocs := func(name string) {
			if profiles == "" {
				return
			}
			out := filepath.Join(profiles, "agent-5000-nodes-10000-services-"+name+".allocs.pb.gz")
			if msg, err := exec.CommandContext(ctx, "ip", "netns", "exec", worker.Name, "curl", "-sSf", "-o", out,
				"http://"+defaultAgentAddr+"/debug/pprof/allocs").CombinedOutput(); err != nil {
				b.Errorf("agent allocation profile: %v: %s", err, msg)
			}
		}
		allocs("before-burst")
		start := time.Now()
		burstProfile := make(chan struct{})
		if profiles != "" {
			// The burst's first minutes (the profile's length is fixed in advance).
			go func() {
				defer close(burstProfile)
				out := filepath.Join(profiles, "agent-5000-nodes-10000-services-burst.cpu.pb.gz")
				if msg, err := exec.CommandContext(ctx, "ip", "netns", "exec", worker.Name, "curl", "-sSf", "-o", out,
					"http://"+defaultAgentAddr+"/debug/pprof/profile?seconds=150").CombinedOutput(); err != nil && ctx.Err() == nil {
					b.Errorf("agent burst CPU profile: %v: %s", err, msg)
				}
			}()
		} else {
			close(burstProfile)
		}
		changes := watchChanges(ctx, b, client, ns)
		parallel(b, memBenchServices, func(i int) error {
			svc := lbBenchService(i)
			svc.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
			_, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
			return err
		})
		if err := framework.WaitFor(ctx, 15*time.Minute, "every Service's /32 in BIRD via the agent", func(ctx context.Context) (bool, error) {
			n, err := router.CountRoutes(ctx)
			return n >= memBenchServices+1, err
		}); err != nil {
			b.Fatal(err)
		}
		all := time.Since(start)
		cpu1, _ := framework.ProcCPUTime(agent.PID())
		svcWrites, nodeWrites, _ := changes()
		allocs("burst")
		rssBurst, _ := framework.ProcRSS(agent.PID())
		gcs1 := agentGCs(ctx, b, worker)
		<-burstProfile
		// The burst's tail: the leader writes every Service's Announced condition
		// (each a Service update every agent decodes), and the agent gives its free
		// heap back once quiet. The idle minute starts after both.
		waitAnnouncedConditions(ctx, b, client, ns, memBenchServices)
		conditions := time.Since(start)
		time.Sleep(gctune.QuietWindow + gctune.Interval + 5*time.Second)
		cpuTail, _ := framework.ProcCPUTime(agent.PID())
		if profiles != "" {
			// Where the idle minute's CPU goes: the agent serves its profiler on
			// loopback in the host's namespace.
			out := filepath.Join(profiles, "agent-5000-nodes-10000-services-idle.cpu.pb.gz")
			if msg, err := exec.CommandContext(ctx, "ip", "netns", "exec", worker.Name, "curl", "-sSf", "-o", out,
				"http://"+defaultAgentAddr+"/debug/pprof/profile?seconds=60").CombinedOutput(); err != nil {
				b.Errorf("agent CPU profile: %v: %s", err, msg)
			}
			time.Sleep(5 * time.Second)
		} else {
			time.Sleep(65 * time.Second) // a full resync (1m) included
		}
		cpu2, _ := framework.ProcCPUTime(agent.PID())
		rss, _ := framework.ProcRSS(agent.PID())
		gcs2 := agentGCs(ctx, b, worker)
		logGCModes(b, agent.LogPath())
		burst, tail, idle := cpu1-cpu0, cpuTail-cpu1, cpu2-cpuTail
		b.ReportMetric(mib(rssSynced), "rss-synced-MiB")
		b.ReportMetric(mib(rssBurst), "rss-all-announced-MiB")
		b.ReportMetric(mib(rss), "rss-MiB")
		b.ReportMetric(all.Seconds(), "all-announced-s")
		b.ReportMetric(conditions.Seconds(), "all-conditions-s")
		b.ReportMetric(burst.Seconds(), "cpu-burst-s")
		b.ReportMetric(tail.Seconds(), "cpu-tail-s")
		b.ReportMetric(idle.Seconds(), "cpu-idle-minute-s")
		b.ReportMetric(gcs1-gcs0, "gcs-burst")
		b.ReportMetric(gcs2-gcs1, "gcs-tail-and-idle")
		// What the agent's informers decode in the burst: each creation and write.
		b.ReportMetric(float64(svcWrites), "service-changes-burst")
		b.ReportMetric(float64(nodeWrites), "node-changes-burst")
		b.Logf("agent with %d Nodes and %d Services: RSS %.1f MiB after the first sync, %.1f MiB when all were announced (%v), %.1f MiB after the idle minute; CPU %.2f s for the burst, %.2f s for its tail (every Announced condition written %v after the first creation, then %v), %.2f s over the idle minute; load average %s",
			memBenchNodes, memBenchServices, mib(rssSynced), mib(rssBurst), all.Round(time.Second), mib(rss), burst.Seconds(), tail.Seconds(),
			conditions.Round(time.Second), gctune.QuietWindow+gctune.Interval+5*time.Second, idle.Seconds(), loadAvg())
		_ = agent.Stop()
		ccm.Stop()
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		parallel(b, memBenchServices, func(i int) error {
			_, err := client.CoreV1().Services(ns).Patch(ctx, lbBenchName(i), types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		})
		deleteNamespace(ctx, b, client, ns, memBenchServices)
	}
}

// agentGCs is how many collections the agent's runtime has completed (its metrics,
// served on loopback in the host's network namespace).
func agentGCs(ctx context.Context, b *testing.B, h *framework.Host) float64 {
	b.Helper()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", h.Name, "curl", "-sSf", "http://"+defaultAgentAddr+"/metrics").Output()
	if err != nil {
		b.Errorf("reading the agent's metrics: %v", err)
		return 0
	}
	return metricValue(string(out), "go_gc_duration_seconds_count")
}
