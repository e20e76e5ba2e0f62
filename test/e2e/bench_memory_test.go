//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

const (
	memBenchNodes    = 5000
	memBenchServices = 10000
	memBenchLabel    = "bench=memory"
)

// BenchmarkMemory5000Nodes10000Services measures the CCM's resident memory (DESIGN
// target: under 150 MiB) with 5000 Ready Nodes and 10,000 LoadBalancer Services, each
// with its IP assigned and its /32 announced to BIRD: the node, lifecycle and service
// controllers and the agent all hold their informer caches.
func BenchmarkMemory5000Nodes10000Services(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cp := framework.Shared()
	client := fastClient(b, cp)
	router := bird.Start(b, bird.Options{RouteTimes: true})

	cfg := lbBenchConfig(b, router, "198.18.0.0/18")

	b.Cleanup(func() { deleteNodesByLabel(context.Background(), b, client, memBenchLabel) })
	parallel(b, memBenchNodes, func(i int) error {
		n := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-mem-%05d", i), Labels: map[string]string{"bench": "memory"}},
			Status: v1.NodeStatus{
				Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: fmt.Sprintf("10.60.%d.%d", i/250, i%250+1)}},
				Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			},
		}
		_, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		return err
	})

	for range b.N {
		ns := "bench-mem-" + rand.String(6)
		if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		// BAREMETAL_CCM_BENCH_CCM_ENV: extra environment for the CCM only (GOGC=25, to
		// measure an operator's tuning).
		ccm := framework.StartCCMEnv(b, cp, strings.Fields(os.Getenv("BAREMETAL_CCM_BENCH_CCM_ENV")), cfg,
			"--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller",
			"--concurrent-service-syncs=10", "--kube-api-qps=500", "--kube-api-burst=1000", "--v=1", "--node-name=bench-mem-cp")
		if err := ccm.WaitHealthy(ctx); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		profiled := make(chan struct{})
		if dir := os.Getenv("BAREMETAL_CCM_BENCH_PROFILES"); dir != "" {
			// Where the CCM's CPU goes during the burst (the first minute).
			go func() {
				defer close(profiled)
				data, err := ccm.CPUProfile(ctx, time.Minute)
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, "memory-5000-nodes-10000-services.cpu.pb.gz"), data, 0o644)
				}
				if err != nil {
					b.Errorf("CPU profile: %v", err)
				}
			}()
		} else {
			close(profiled)
		}
		created := make([]time.Time, memBenchServices) // when each Create returned
		parallel(b, memBenchServices, func(i int) error {
			svc := lbBenchService(i)
			svc.Spec.AllocateLoadBalancerNodePorts = ptr.To(false) // 10,000 > the NodePort range
			_, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
			created[i] = time.Now()
			return err
		})
		createdAll := time.Since(start)
		if err := framework.WaitFor(ctx, 15*time.Minute, "every Service's /32 in BIRD", func(ctx context.Context) (bool, error) {
			n, err := router.CountRoutes(ctx)
			return n >= memBenchServices, err
		}); err != nil {
			b.Fatal(err)
		}
		all := time.Since(start)
		reportCreateToBIRD(ctx, b, client, router, ns, created, createdAll, all)
		// The burst ends with the leader's last Announced condition (rate-limited
		// writes that outlast the routes); the minute is counted from there.
		waitAnnouncedConditions(ctx, b, client, ns, memBenchServices)
		conditions := time.Since(start)
		b.ReportMetric(conditions.Seconds(), "all-conditions-s")
		<-profiled
		time.Sleep(5 * time.Second) // let the last writes and events settle
		rss5, err := ccm.RSS()
		if err != nil {
			b.Fatal(err)
		}
		// What the idle minute costs: CPU time and collections (gctune's idle mode
		// collects more often to hold less).
		cpuIdle0, _ := framework.ProcCPUTime(ccm.PID())
		gcs0 := ccmGCs(ctx, ccm)
		changes := watchChanges(ctx, b, client, ns)
		if dir := os.Getenv("BAREMETAL_CCM_BENCH_PROFILES"); dir != "" {
			// What the idle minute allocates: go tool pprof -sample_index=alloc_space
			// -base this the last one. No forced collection: it would change what the
			// minute's RSS measures.
			saveHeapProfile(ctx, b, ccm, filepath.Join(dir, "memory-5000-nodes-10000-services.heap-idle-start.pb.gz"), false)
		}
		// Steady state: the Go runtime returns freed pages to the OS over tens of
		// seconds after the burst of 10,000 creations.
		time.Sleep(55 * time.Second)
		rss, err := ccm.RSS()
		if err != nil {
			b.Fatal(err)
		}
		cpuIdle1, _ := framework.ProcCPUTime(ccm.PID())
		b.ReportMetric((cpuIdle1 - cpuIdle0).Seconds(), "cpu-idle-minute-s")
		b.ReportMetric(ccmGCs(ctx, ccm)-gcs0, "gcs-idle-minute")
		// What the idle minute writes (each write comes back to every informer).
		svcWrites, nodeWrites, events := changes()
		b.ReportMetric(float64(svcWrites), "service-writes-idle-minute")
		b.ReportMetric(float64(nodeWrites), "node-writes-idle-minute")
		b.ReportMetric(float64(events), "events-idle-minute")
		logGCModes(b, ccm.LogPath())
		b.ReportMetric(mib(rss5), "rss-after-5s-MiB")
		if anon, file, err := framework.ProcRSSParts(ccm.PID()); err == nil {
			b.ReportMetric(mib(anon), "rss-anon-MiB")
			b.ReportMetric(mib(file), "rss-file-MiB")
		}
		if m, err := ccm.Metrics(ctx); err == nil {
			b.Logf("Go memory: heap in use %.1f MiB, idle %.1f MiB (released to the OS %.1f MiB), stacks %.1f MiB, obtained from the OS %.1f MiB",
				mib(int64(metricValue(m, "go_memstats_heap_inuse_bytes"))), mib(int64(metricValue(m, "go_memstats_heap_idle_bytes"))),
				mib(int64(metricValue(m, "go_memstats_heap_released_bytes"))), mib(int64(metricValue(m, "go_memstats_stack_inuse_bytes"))),
				mib(int64(metricValue(m, "go_memstats_sys_bytes"))))
		}
		b.ReportMetric(mib(rss), "rss-MiB")
		b.ReportMetric(all.Seconds(), "all-announced-s")
		if m, err := ccm.Metrics(ctx); err == nil {
			b.ReportMetric(mib(int64(metricValue(m, "go_memstats_heap_inuse_bytes"))), "heap-inuse-MiB")
		}
		if dir := os.Getenv("BAREMETAL_CCM_BENCH_PROFILES"); dir != "" {
			saveHeapProfile(ctx, b, ccm, filepath.Join(dir, "memory-5000-nodes-10000-services.heap.pb.gz"), true)
		}
		b.Logf("%d Nodes, %d Services with IPs announced after %v, every Announced condition written after %v: CCM RSS %.1f MiB 5 s later, %.1f MiB a minute later (target < 150 MiB); load average %s",
			memBenchNodes, memBenchServices, all.Round(time.Second), conditions.Round(time.Second), mib(rss5), mib(rss), loadAvg())
		// Clean up without a per-Service deletion pass: stop the CCM, drop its
		// finalizer, delete the namespace.
		ccm.Stop()
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		parallel(b, memBenchServices, func(i int) error {
			_, err := client.CoreV1().Services(ns).Patch(ctx, lbBenchName(i), types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		})
		deleteNamespace(ctx, b, client, ns, memBenchServices)
	}
}

// deleteNamespace deletes the benchmark's Services of ns (lbBenchName), then ns: this control plane runs no
// namespace controller, so the Services (and the addresses they hold) would outlive
// their namespace, and the next benchmark's CCM would find its pool taken.
func deleteNamespace(ctx context.Context, b *testing.B, client kubernetes.Interface, ns string, services int) {
	b.Helper()
	parallel(b, services, func(i int) error {
		err := client.CoreV1().Services(ns).Delete(ctx, lbBenchName(i), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
}

// waitAnnouncedConditions waits until each of the n Services of ns shows the
// leader's Announced condition True: a Service's first condition may be written
// before the speakers announce it, and rewritten after.
func waitAnnouncedConditions(ctx context.Context, b *testing.B, client kubernetes.Interface, ns string, n int) {
	b.Helper()
	if err := framework.WaitForInterval(ctx, 15*time.Minute, 2*time.Second, "every Service's Announced condition", func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range l.Items {
			if !meta.IsStatusConditionTrue(l.Items[i].Status.Conditions, lb.ConditionAnnounced) {
				return false, nil
			}
		}
		return len(l.Items) == n, nil
	}); err != nil {
		b.Fatal(err)
	}
}

// reportCreateToBIRD reports how long each Service's /32 took from its creation (its
// Create call returned) to BIRD's table, by BIRD's timestamps, and the time creating
// them all took (what bounds the whole burst).
func reportCreateToBIRD(ctx context.Context, b *testing.B, client kubernetes.Interface, router *bird.Router, ns string, created []time.Time, createdAll, all time.Duration) {
	b.Helper()
	since, err := router.RouteSince(ctx)
	if err != nil {
		b.Fatal(err)
	}
	list, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	index := make(map[string]int, len(created))
	for i := range created {
		index[lbBenchName(i)] = i
	}
	var lat []time.Duration
	for _, svc := range list.Items {
		i, ok := index[svc.Name]
		if !ok || len(svc.Status.LoadBalancer.Ingress) == 0 {
			continue
		}
		ip, err := netip.ParseAddr(svc.Status.LoadBalancer.Ingress[0].IP)
		if err != nil {
			continue
		}
		if t, ok := since[netip.PrefixFrom(ip, ip.BitLen())]; ok {
			lat = append(lat, t.Sub(created[i]))
		}
	}
	if len(lat) != len(created) {
		b.Fatalf("%d of %d Services matched to a route in BIRD", len(lat), len(created))
	}
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	b.ReportMetric(q(0.5).Seconds(), "create-to-bird-p50-s")
	b.ReportMetric(q(0.99).Seconds(), "create-to-bird-p99-s")
	b.ReportMetric(lat[len(lat)-1].Seconds(), "create-to-bird-max-s")
	b.ReportMetric(createdAll.Seconds(), "created-all-s")
	b.Logf("creating the %d Services took %v; each Service's /32 in BIRD after its creation (BIRD's timestamps): median %v, p99 %v, max %v; all in BIRD %v after the first creation",
		len(created), createdAll.Round(time.Millisecond), q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), all.Round(time.Second))
}

// saveHeapProfile writes the CCM's heap profile (GET /debug/pprof/heap, after a
// collection when gc) to path, for `go tool pprof`.
func saveHeapProfile(ctx context.Context, b *testing.B, ccm *framework.CCM, path string, gc bool) {
	b.Helper()
	url := "/debug/pprof/heap"
	if gc {
		url += "?gc=1"
	}
	data, err := ccm.Fetch(ctx, url)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		b.Errorf("heap profile: %v", err)
		return
	}
	b.Logf("heap profile in %s", path)
}

// watchChanges counts, from now until the returned function is called, the changes
// to the Services of ns and to Nodes, and the Events of any namespace written
// (created, updated or deleted, by any component). A watch that ends early fails the
// benchmark: its count would read as a real one.
func watchChanges(ctx context.Context, b *testing.B, client kubernetes.Interface, ns string) func() (svcs, nodes, events int) {
	b.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var counts [3]atomic.Int64
	var ended [3]atomic.Bool
	type lister func() (watch.Interface, error)
	from := func(list func(context.Context, metav1.ListOptions) (string, error), w func(context.Context, metav1.ListOptions) (watch.Interface, error)) lister {
		return func() (watch.Interface, error) {
			// Watched from a list's resourceVersion: no synthetic events for what exists.
			rv, err := list(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				return nil, err
			}
			return w(ctx, metav1.ListOptions{ResourceVersion: rv})
		}
	}
	watches := []lister{
		from(func(ctx context.Context, o metav1.ListOptions) (string, error) {
			l, err := client.CoreV1().Services(ns).List(ctx, o)
			if err != nil {
				return "", err
			}
			return l.ResourceVersion, nil
		}, client.CoreV1().Services(ns).Watch),
		from(func(ctx context.Context, o metav1.ListOptions) (string, error) {
			l, err := client.CoreV1().Nodes().List(ctx, o)
			if err != nil {
				return "", err
			}
			return l.ResourceVersion, nil
		}, client.CoreV1().Nodes().Watch),
		from(func(ctx context.Context, o metav1.ListOptions) (string, error) {
			l, err := client.CoreV1().Events("").List(ctx, o)
			if err != nil {
				return "", err
			}
			return l.ResourceVersion, nil
		}, client.CoreV1().Events("").Watch),
	}
	var wg sync.WaitGroup
	for i, start := range watches {
		w, err := start()
		if err != nil {
			b.Errorf("watching for writes: %v", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok || ev.Type == watch.Error {
						ended[i].Store(ctx.Err() == nil)
						return
					}
					if ev.Type != watch.Bookmark {
						counts[i].Add(1)
					}
				}
			}
		}()
	}
	stop := sync.OnceFunc(func() { cancel(); wg.Wait() })
	b.Cleanup(stop) // a benchmark that fails before counting
	return func() (int, int, int) {
		stop()
		for i, what := range []string{"Services", "Nodes", "Events"} {
			if ended[i].Load() {
				b.Errorf("the watch of %s ended early: its count of writes is short", what)
			}
		}
		return int(counts[0].Load()), int(counts[1].Load()), int(counts[2].Load())
	}
}

// logGCModes logs the garbage collector mode changes and releases (gctune, logged at
// -v=1) from a CCM's or agent's log.
func logGCModes(b *testing.B, logPath string) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "Garbage collector mode changed") || strings.Contains(line, "Returned free heap memory") {
			b.Log(line)
		}
	}
}

// metricValue returns the value of an unlabelled metric in Prometheus text, or 0.
// ccmGCs is how many collections the CCM's runtime has completed (its metrics).
func ccmGCs(ctx context.Context, ccm *framework.CCM) float64 {
	m, err := ccm.Metrics(ctx)
	if err != nil {
		return 0
	}
	return metricValue(m, "go_gc_duration_seconds_count")
}

func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
