//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestPodCIDRRoutes: the CCM runs in a network namespace standing for a control-plane
// host whose uplink is on the router's subnet. Nodes with pod CIDRs get routes in that
// host's kernel (none to the host itself), NetworkUnavailable=False, and their pod
// CIDRs in BIRD's table with the Node as next hop; a route deleted by hand comes back;
// a worker host running the agent alone mirrors the routes too; a deleted Node's
// routes go everywhere.
func TestPodCIDRRoutes(t *testing.T) {
	l := newLabNoCCM(t)
	h := framework.NewHost(t, l.cp)
	r := bird.Start(t, bird.Options{SpeakerNetns: h.Name})

	suffix := rand.String(4)
	var nodes []string
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("rt-%d-%s", i, suffix)
		nodes = append(nodes, name)
		l.nodes = append(l.nodes, name)
		n := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1.NodeSpec{PodCIDR: fmt.Sprintf("10.244.%d.0/24", i), PodCIDRs: []string{fmt.Sprintf("10.244.%d.0/24", i)}},
			Status: v1.NodeStatus{
				Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: r.NodeAddr(i, false).String()}},
				Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			},
		}
		if _, err := l.cp.Client.CoreV1().Nodes().Create(l.ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	cfg := filepath.Join(l.dir, "cloud-config-routes.yaml")
	writeFile(t, cfg, fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: %s, pollInterval: 1s}
  deletionGuard: {acknowledgeFile: %s}
routes:
  resyncInterval: 2s
bgp:
  localASN: 65000
  routerID: %s
  announcePodCIDRs: true
  peers:
  - {address: %s, asn: %d, sourceAddress: %s, holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s}
`, l.inventory, l.ack, r.SpeakerV4(0), r.RouterV4, r.ASN, r.SpeakerV4(0)))

	// Routes enabled without --cluster-cidr: the CCM refuses to start and says which
	// flag to set.
	bad := framework.StartCCMIn(t, l.cp, h, cfg, "--controllers=node-route-controller", "--configure-cloud-routes=true")
	select {
	case <-bad.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the CCM kept running with routes enabled and no --cluster-cidr")
	}
	if !strings.Contains(bad.Log(), "--cluster-cidr is not set") {
		t.Fatalf("the CCM's exit message does not name --cluster-cidr:\n%s", bad.Log())
	}

	ccm := framework.StartCCMIn(t, l.cp, h, cfg,
		"--controllers=node-route-controller", "--configure-cloud-routes=true",
		"--cluster-cidr=10.244.0.0/16", "--route-reconciliation-period=2s", "--node-name="+nodes[0])
	if err := ccm.WaitHealthy(l.ctx); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{
		"10.244.1.0/24": r.NodeAddr(1, false).String(),
		"10.244.2.0/24": r.NodeAddr(2, false).String(),
	}
	waitKernelOf := func(h *framework.Host, what string, want map[string]string, absent ...string) {
		t.Helper()
		err := framework.WaitFor(l.ctx, 60*time.Second, what, func(ctx context.Context) (bool, error) {
			out, err := h.Exec(ctx, "ip", "route", "show", "proto", "196")
			if err != nil {
				return false, err
			}
			for cidr, via := range want {
				if !strings.Contains(out, cidr+" via "+via) {
					return false, nil
				}
			}
			for _, cidr := range absent {
				if strings.Contains(out, cidr) {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			out, _ := h.Exec(context.Background(), "ip", "route")
			t.Fatalf("%v; the host's routes:\n%s", err, out)
		}
	}
	waitKernel := func(what string, want map[string]string, absent ...string) {
		t.Helper()
		waitKernelOf(h, what, want, absent...)
	}
	waitKernel("pod-CIDR routes in the host's kernel (none to itself)", want, "10.244.0.0/24")

	for _, n := range nodes {
		l.waitCondition(n, v1.NodeNetworkUnavailable, v1.ConditionFalse)
	}

	waitBird := func(cidr string, hop netip.Addr, present bool) {
		t.Helper()
		prefix := netip.MustParsePrefix(cidr)
		err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("%s in BIRD: %v", cidr, present), func(ctx context.Context) (bool, error) {
			routes, err := r.RoutesFor(ctx, prefix)
			if err != nil {
				return false, err
			}
			if !present {
				return len(routes) == 0, nil
			}
			for _, rt := range routes {
				if len(rt.BGPNextHop) > 0 && rt.BGPNextHop[0] == hop {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		waitBird(fmt.Sprintf("10.244.%d.0/24", i), r.NodeAddr(i, false), true)
	}

	// Drift: a route deleted by hand is put back.
	if _, err := h.Exec(l.ctx, "ip", "route", "del", "10.244.1.0/24", "proto", "196"); err != nil {
		t.Fatal(err)
	}
	waitKernel("the deleted route restored", want)

	// A worker host runs the agent alone (routes only, no BGP): its kernel gets every
	// other Node's routes. An interface on the router's subnet (one end of a veth pair
	// inside the worker) makes the node addresses on-link there.
	w := framework.NewHost(t, l.cp)
	for _, args := range [][]string{
		{"ip", "link", "add", "fabric0", "type", "veth", "peer", "name", "fabric1"},
		{"ip", "addr", "add", r.NodeAddr(1, false).String() + "/24", "dev", "fabric0"},
		{"ip", "link", "set", "fabric1", "up"},
		{"ip", "link", "set", "fabric0", "up"},
	} {
		if _, err := w.Exec(l.ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	agentCfg := filepath.Join(l.dir, "cloud-config-agent.yaml")
	writeFile(t, agentCfg, fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: %s, pollInterval: 1s}
  deletionGuard: {acknowledgeFile: %s}
routes:
  resyncInterval: 2s
`, l.inventory, l.ack))
	agent := framework.StartAgentIn(t, w, agentCfg, nodes[1])
	workerWant := map[string]string{
		"10.244.0.0/24": r.NodeAddr(0, false).String(),
		"10.244.2.0/24": r.NodeAddr(2, false).String(),
	}
	waitKernelOf(w, "the worker's kernel mirroring the other Nodes' routes", workerWant, "10.244.1.0/24")

	// A foreign route in the same table is never touched.
	if _, err := h.Exec(l.ctx, "ip", "route", "add", "10.244.200.0/24", "via", r.NodeAddr(5, false).String(), "proto", "static"); err != nil {
		t.Fatal(err)
	}

	// The Node goes: its routes go from the kernel and from the router.
	if err := framework.DeleteNodes(l.ctx, l.cp.Client, nodes[2]); err != nil {
		t.Fatal(err)
	}
	delete(want, "10.244.2.0/24")
	waitKernel("the deleted Node's route removed", want, "10.244.2.0/24")
	delete(workerWant, "10.244.2.0/24")
	waitKernelOf(w, "the deleted Node's route removed from the worker", workerWant, "10.244.2.0/24")
	if err := agent.Stop(); err != nil {
		t.Errorf("agent after SIGTERM: %v, want a clean exit", err)
	}
	waitBird("10.244.2.0/24", netip.Addr{}, false)
	if out, err := h.Exec(l.ctx, "ip", "route", "show", "10.244.200.0/24"); err != nil || !strings.Contains(out, "proto static") {
		t.Errorf("the foreign static route was touched: %q, %v", out, err)
	}
}
