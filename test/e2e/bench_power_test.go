//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

const (
	shutdownNodes = 200
	shutdownHung  = 5
	// shutdownLabel selects the Nodes of BenchmarkShutdown200 (and nothing else).
	shutdownLabel = "bench=shutdown"
)

// BenchmarkShutdown200: 200 hosts with Redfish BMCs (emulators answering after 200 ms,
// one CA), 5 of which hang once their Nodes are initialized. All hosts lose power and
// all Nodes go Ready=Unknown at once; the benchmark measures the time until every Node
// whose BMC answers carries the shutdown taint, with the packaged flags
// (manifests.LifecycleArgs: 16 lifecycle workers, a higher API QPS) and with the
// upstream defaults (one worker, 20 requests/s). Then, all Nodes Ready and powered on,
// it counts the BMC power reads per Node per minute over 60 s, and after each run the
// Redfish sessions left open once the CCM stopped.
func BenchmarkShutdown200(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cp := framework.Shared()
	client := fastClient(b, cp)
	dir := b.TempDir()

	ca, err := redfish.NewCA()
	if err != nil {
		b.Fatal(err)
	}
	caFile := filepath.Join(dir, "bmc-ca.pem")
	writeFileB(b, caFile, string(ca.PEM()))
	creds := filepath.Join(dir, "creds")
	writeFileB(b, creds, "username: admin\npassword: bench-secret\n")
	if err := os.Chmod(creds, 0o600); err != nil {
		b.Fatal(err)
	}
	bmcs := make([]*redfish.BMC, shutdownNodes)
	var inv strings.Builder
	inv.WriteString("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n")
	for i := range bmcs {
		bm := redfish.NewBMC(redfish.Options{CA: ca, Username: "admin", Password: "bench-secret"})
		if err := bm.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(bm.Close)
		bm.SetLatency(200 * time.Millisecond)
		bmcs[i] = bm
		fmt.Fprintf(&inv, "- name: sd-%03d\n  addresses: [{type: InternalIP, address: %s}]\n  bmc: {protocol: redfish, address: \"https://127.0.0.1\", port: %s, credentialsFile: %s, caFile: %s}\n",
			i, shutdownIP(i), bm.Port(), creds, caFile)
	}
	// The last shutdownHung BMCs hang once their Nodes are initialized (a sequential
	// lifecycle pass visits every Node anyway, so where they sit matters little).
	hung := func(i int) bool { return i >= shutdownNodes-shutdownHung }
	invPath := filepath.Join(dir, "inventory.yaml")
	writeFileB(b, invPath, inv.String())
	cfg := filepath.Join(dir, "cloud-config.yaml")
	writeFileB(b, cfg, fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: %s}
  credentialsDir: %s
  deletionGuard: {acknowledgeFile: %s}
bmc: {callTimeout: 10s}
`, invPath, filepath.Dir(creds), filepath.Join(dir, "ack")))

	b.Cleanup(func() {
		// After a failure: leave no Node behind for the other tests.
		_ = client.CoreV1().Nodes().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: shutdownLabel})
	})
	runs := []struct {
		name string
		args []string
	}{
		{"packaged", manifests.LifecycleArgs},
		{"default-flags", nil},
	}
	for range b.N {
		for ri, run := range runs {
			for _, bm := range bmcs {
				bm.SetHang(false)
				bm.SetPowerState(redfish.PowerOn)
			}
			ccm := framework.StartCCM(b, cp, cfg, run.args...)
			if err := ccm.WaitHealthy(ctx); err != nil {
				b.Fatal(err)
			}
			createShutdownNodes(ctx, b, client)
			waitShutdownNodes(ctx, b, client, "initialized", func(int, *v1.Node) bool {
				return true
			}, func(n *v1.Node) bool { return !framework.HasTaint(n, cloudproviderapi.TaintExternalCloudProvider) }, 5*time.Minute)
			for i, bm := range bmcs {
				if hung(i) {
					bm.SetHang(true)
				}
			}

			// At once: every host loses power and every Node goes Ready=Unknown.
			start := time.Now()
			for _, bm := range bmcs {
				bm.SetPowerState(redfish.PowerOff)
			}
			setShutdownNodesReady(ctx, b, client, v1.ConditionUnknown)
			marked := time.Since(start)
			firstHalf := time.Duration(0)
			waitShutdownNodes(ctx, b, client, "shutdown-tainted (BMC answering)", func(i int, _ *v1.Node) bool {
				return !hung(i)
			}, func(n *v1.Node) bool { return framework.HasTaint(n, cloudproviderapi.TaintNodeShutdown) }, 10*time.Minute,
				func(done int) {
					if firstHalf == 0 && done >= (shutdownNodes-shutdownHung)/2 {
						firstHalf = time.Since(start)
					}
				})
			d := time.Since(start) // from before the power and Ready changes
			b.ReportMetric(d.Seconds(), run.name+"-all-tainted-s")
			b.ReportMetric(firstHalf.Seconds(), run.name+"-half-tainted-s")
			b.Logf("%s: %d Nodes (%d BMCs hung): half shutdown-tainted after %v, all %d answering ones after %v (power off + Ready=Unknown took %v)",
				run.name, shutdownNodes, shutdownHung, firstHalf.Round(time.Millisecond), shutdownNodes-shutdownHung, d.Round(time.Millisecond), marked.Round(time.Millisecond))
			// The hung BMCs' Nodes must neither be tainted nor deleted.
			list := listShutdownNodes(ctx, b, client)
			if len(list) != shutdownNodes {
				b.Errorf("%s: %d Nodes left, want %d (a Node was deleted)", run.name, len(list), shutdownNodes)
			}
			for i := range list {
				if idx := shutdownIndex(list[i].Name); hung(idx) && framework.HasTaint(&list[i], cloudproviderapi.TaintNodeShutdown) {
					b.Errorf("%s: %s got the shutdown taint although its BMC hangs", run.name, list[i].Name)
				}
			}

			if ri == len(runs)-1 {
				steadyState(ctx, b, client, bmcs)
			}

			for _, bm := range bmcs {
				bm.SetHang(false) // answering again: the sessions kept on them can be logged out
			}
			ccm.Stop()
			var open, logins int
			for _, bm := range bmcs {
				open += bm.ActiveSessions()
				logins += bm.SessionsCreated()
			}
			b.ReportMetric(float64(open), run.name+"-sessions-left-open")
			b.Logf("%s: %d Redfish sessions left open after the CCM stopped (%d logins so far over %d BMCs)", run.name, open, logins, len(bmcs))
			deleteShutdownNodes(ctx, b, client)
		}
	}
	for _, bm := range bmcs {
		bm.SetHang(false)
	}
}

// steadyState: every BMC answering and powered on, every Node Ready and untainted;
// then counts the BMC power reads (GET of the ComputerSystem) and logins over 60 s.
func steadyState(ctx context.Context, b *testing.B, client kubernetes.Interface, bmcs []*redfish.BMC) {
	for _, bm := range bmcs {
		bm.SetHang(false)
		bm.SetPowerState(redfish.PowerOn)
	}
	setShutdownNodesReady(ctx, b, client, v1.ConditionTrue)
	waitShutdownNodes(ctx, b, client, "shutdown taint removed", func(int, *v1.Node) bool { return true },
		func(n *v1.Node) bool { return !framework.HasTaint(n, cloudproviderapi.TaintNodeShutdown) }, 5*time.Minute)
	// Let reads already under way (the Ready=Unknown period's) finish.
	time.Sleep(5 * time.Second)
	reads := func() (sys, logins int) {
		for _, bm := range bmcs {
			sys += bm.RequestCount("GET", bm.SystemPath())
			logins += bm.SessionsCreated()
		}
		return sys, logins
	}
	sys0, login0 := reads()
	const window = 60 * time.Second
	select {
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	case <-time.After(window):
	}
	sys1, login1 := reads()
	perNode := float64(sys1-sys0) / float64(len(bmcs)) / window.Minutes()
	loginsPerNode := float64(login1-login0) / float64(len(bmcs)) / window.Minutes()
	b.ReportMetric(perNode, "steady-reads/node/min")
	b.ReportMetric(loginsPerNode, "steady-logins/node/min")
	var active int
	for _, bm := range bmcs {
		active += bm.ActiveSessions()
	}
	var paths []string
	for k, v := range bmcs[0].Requests() {
		paths = append(paths, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(paths)
	b.Logf("steady state (all Ready, powered on) over %v: %d power reads (GET %s), %d logins over %d BMCs = %.3f reads and %.3f logins per Node per minute; %d sessions open; BMC 0 requests so far: %s",
		window, sys1-sys0, bmcs[0].SystemPath(), login1-login0, len(bmcs), perNode, loginsPerNode, active, strings.Join(paths, ", "))
}

func shutdownIP(i int) string { return fmt.Sprintf("10.60.%d.%d", i/250, i%250+1) }

func shutdownIndex(name string) int {
	var i int
	if _, err := fmt.Sscanf(name, "sd-%03d", &i); err != nil {
		return -1
	}
	return i
}

// createShutdownNodes creates the Nodes Ready, from 16 goroutines, as kubelet registers.
func createShutdownNodes(ctx context.Context, b *testing.B, client kubernetes.Interface) {
	ready := v1.ConditionTrue
	parallel(b, shutdownNodes, func(i int) error {
		_, err := framework.CreateNode(ctx, client, framework.NodeSpec{
			Name: fmt.Sprintf("sd-%03d", i), InternalIPs: []string{shutdownIP(i)},
			Labels: map[string]string{"bench": "shutdown"}, Ready: &ready,
		})
		return err
	})
}

func setShutdownNodesReady(ctx context.Context, b *testing.B, client kubernetes.Interface, status v1.ConditionStatus) {
	parallel(b, shutdownNodes, func(i int) error {
		return framework.SetNodeReady(ctx, client, fmt.Sprintf("sd-%03d", i), status)
	})
}

// parallel runs f(0..n-1) from 16 goroutines and fails on the first error.
func parallel(b *testing.B, n int, f func(i int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func listShutdownNodes(ctx context.Context, b *testing.B, client kubernetes.Interface) []v1.Node {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: shutdownLabel})
	if err != nil {
		b.Fatal(err)
	}
	return list.Items
}

// waitShutdownNodes waits until ok holds for every Node that want selects (by index),
// and returns the time it took from the call; progress, if given, sees the count done.
func waitShutdownNodes(ctx context.Context, b *testing.B, client kubernetes.Interface, what string,
	want func(int, *v1.Node) bool, ok func(*v1.Node) bool, timeout time.Duration, progress ...func(done int)) time.Duration {
	start := time.Now()
	var took time.Duration
	err := framework.WaitFor(ctx, timeout, "bench Nodes "+what, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: shutdownLabel, ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		wanted, done := 0, 0
		for i := range list.Items {
			n := &list.Items[i]
			if !want(shutdownIndex(n.Name), n) {
				continue
			}
			wanted++
			if ok(n) {
				done++
			}
		}
		for _, p := range progress {
			p(done)
		}
		if done < wanted || len(list.Items) != shutdownNodes {
			return false, fmt.Errorf("%d of %d (%d Nodes listed)", done, wanted, len(list.Items))
		}
		took = time.Since(start)
		return true, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return took
}

func deleteShutdownNodes(ctx context.Context, b *testing.B, client kubernetes.Interface) {
	deleteNodesByLabel(ctx, b, client, shutdownLabel)
}
