package routes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

const benchRoutes = 5000

// benchNodes returns n Nodes with pod CIDRs 10.x.y.0/24 via InternalIPs in
// 172.16.0.0/16, which is on-link in the test namespace.
func benchNodes(n int) []*v1.Node {
	nodes := make([]*v1.Node, n)
	for i := range nodes {
		gw := i + 2
		nodes[i] = node(fmt.Sprintf("node-%05d", i), []string{fmt.Sprintf("10.%d.%d.0/24", i>>8, i&255)}, fmt.Sprintf("172.16.%d.%d", gw>>8, gw&255))
	}
	return nodes
}

func (n *testNS) flushOurs(b *testing.B) {
	n.ip(b, "route", "flush", "table", "254", "proto", "196")
}

func (n *testNS) countOurs(b *testing.B) int {
	out := strings.TrimSpace(n.ip(b, "route", "show", "table", "254", "proto", "196"))
	if out == "" {
		return 0
	}
	return len(strings.Split(out, "\n"))
}

// BenchmarkProgram5000 programs 5000 pod-CIDR routes into an empty table with
// Mirror.Reconcile and, in the same iteration, the same routes with
// `ip -n <ns> -batch` (process start included), and reports both and their ratio.
func BenchmarkProgram5000(b *testing.B) {
	n := newTestNS(b)
	ctx := klog.NewContext(b.Context(), klog.Background().V(10)) // quiet: no per-route logs at V(0)
	nodes := benchNodes(benchRoutes)
	batch := filepath.Join(b.TempDir(), "routes.batch")
	var sb strings.Builder
	for _, nd := range nodes {
		fmt.Fprintf(&sb, "route add %s via %s proto 196 table 254\n", nd.Spec.PodCIDRs[0], nd.Status.Addresses[1].Address)
	}
	if err := os.WriteFile(batch, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	k, _ := NewKernel(n.h, 254, 196)
	m := NewMirror(k, MirrorOptions{})
	var rec, ipb time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		n.flushOurs(b)
		b.StartTimer()
		t0 := time.Now()
		res, err := m.Reconcile(ctx, nodes)
		rec += time.Since(t0)
		b.StopTimer()
		if err != nil || res.Added != benchRoutes {
			b.Fatalf("reconcile: %+v, %v", res, err)
		}
		if c := n.countOurs(b); c != benchRoutes {
			b.Fatalf("reconcile left %d routes", c)
		}
		n.flushOurs(b)
		t1 := time.Now()
		if out, err := exec.Command("ip", "-n", n.name, "-batch", batch).CombinedOutput(); err != nil {
			b.Fatalf("ip -batch: %v: %s", err, out)
		}
		ipb += time.Since(t1)
		if c := n.countOurs(b); c != benchRoutes {
			b.Fatalf("ip -batch left %d routes", c)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(rec.Microseconds())/1000/float64(b.N), "reconcile-ms/op")
	b.ReportMetric(float64(ipb.Microseconds())/1000/float64(b.N), "ip-batch-ms/op")
	b.ReportMetric(float64(rec)/float64(ipb), "ratio")
}

// BenchmarkListRoutes5000 is Provider.ListRoutes with 5000 routes and Nodes.
func BenchmarkListRoutes5000(b *testing.B) {
	n := newTestNS(b)
	ctx := klog.NewContext(b.Context(), klog.Background().V(10))
	nodes := benchNodes(benchRoutes)
	k, _ := NewKernel(n.h, 254, 196)
	if _, err := NewMirror(k, MirrorOptions{}).Reconcile(ctx, nodes); err != nil {
		b.Fatal(err)
	}
	p := NewProvider(k, lister(b, nodes...), ProviderOptions{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		list, err := p.ListRoutes(ctx, "c")
		if err != nil || len(list) != benchRoutes {
			b.Fatalf("%d routes, %v", len(list), err)
		}
	}
}

// BenchmarkReconcileUnchanged5000 is a resync that finds nothing to change.
func BenchmarkReconcileUnchanged5000(b *testing.B) {
	n := newTestNS(b)
	ctx := klog.NewContext(b.Context(), klog.Background().V(10))
	nodes := benchNodes(benchRoutes)
	k, _ := NewKernel(n.h, 254, 196)
	m := NewMirror(k, MirrorOptions{})
	if _, err := m.Reconcile(ctx, nodes); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := m.Reconcile(ctx, nodes)
		if err != nil || res.Changed() || res.Unchanged != benchRoutes {
			b.Fatalf("%+v, %v", res, err)
		}
	}
}
