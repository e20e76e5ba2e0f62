//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
	"github.com/baremetal-ccm/baremetal-ccm/test/monitoring"
)

// needsFeature lists the metrics the shipped rules and dashboard read that this
// test's CCM cannot serve, each with the reason. Nothing else may be missing.
var needsFeature = map[string]string{
	"baremetal_ccm_lb_service_ips_outside_pools": "a series exists only for a Service that holds an IP no pool contains any more, " +
		"which takes a pool change under a Service that keeps its IP (TestLoadBalancerBGP provokes it); this test's pools do not change",
}

// TestMonitoringMetricsExist: one CCM with every feature the shipped alerts and
// dashboard (packaging/monitoring) watch — leader election, an inventory of hosts
// behind emulated Redfish BMCs (one of them unreachable), load-balancer pools (one
// exhausted, so a Service waits), BGP with BFD to BIRD over IPv4 and IPv6, next-hop
// mode nodes with node health checks (one node healthy, two failing), and pod-CIDR
// routes programmed by the route controller and the mirror — serves every metric the
// rules and the dashboard read, with every label they match or group by. The values
// the alerts judge are checked where this setup fixes them.
//
// The CCM runs in the root network namespace, as lbLab's do; its routes go to a
// routing table of its own, which no rule looks up and the test flushes.
func TestMonitoringMetricsExist(t *testing.T) {
	r := bird.Start(t, bird.Options{Speakers: make([]bird.Speaker, 1), BFD: &bird.BFD{BGP: true}})
	l := newLBLabWith(t, birdTor(r, 1))
	l.router = r
	suffix := l.lease[len(l.lease)-4:]

	// Three hosts behind Redfish emulators, their Nodes on the router's subnet.
	const n = 3
	bmcs, inv := redfishHosts(t, "mon-"+suffix, "10.97.97", n, nil)
	var names []string
	for i := range n {
		inv = strings.Replace(inv, fmt.Sprintf("address: 10.97.97.%d}", i+1), fmt.Sprintf("address: %s}", r.NodeAddr(i, false)), 1)
		names = append(names, fmt.Sprintf("mon-%s-%d", suffix, i))
	}
	l.setInventory(inv)

	// Node 0 answers health checks on its address (on this host's end of the router
	// link); nodes 1 and 2 answer nothing. Nodes 1 and 2 have pod CIDRs.
	kubeProxyPort, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.AddAddress(l.ctx, r.HostInterface, netip.PrefixFrom(r.NodeAddr(0, false), 32)); err != nil {
		t.Fatal(err)
	}
	serveHealth(t, r.NodeAddr(0, false), kubeProxyPort, "/healthz")
	for i, name := range names {
		cidr := ""
		if i > 0 {
			cidr = fmt.Sprintf("10.244.%d.0/24", 200+i)
		}
		l.nodes = append(l.nodes, name)
		if err := createNodeWithPodCIDR(l.ctx, l, name, r.NodeAddr(i, false), cidr); err != nil {
			t.Fatal(err)
		}
	}

	table := 20000 + rand.IntN(10000)
	t.Cleanup(func() { // after the CCM has stopped (cleanups run last-in first-out)
		if out, err := exec.Command("ip", "route", "flush", "table", fmt.Sprint(table)).CombinedOutput(); err != nil {
			t.Logf("flushing routing table %d: %v: %s", table, err, out)
		}
	})
	cfg := filepath.Join(l.dir, "cloud-config-monitoring.yaml")
	peer := func(router, source netip.Addr) string {
		return fmt.Sprintf(`  - {address: "%s", asn: %d, sourceAddress: "%s", holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s, bfd: {}}`, router, r.ASN, source)
	}
	writeFile(t, cfg, fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: %s, pollInterval: 1s}
  credentialsDir: %s
  deletionGuard: {acknowledgeFile: %s}
bmc: {readyInterval: 2s, notReadyInterval: 1s, callTimeout: 2s, cacheTTL: 500ms}
loadBalancer:
%sbgp:
  localASN: 65000
  routerID: %s
  nextHop: nodes
  nodeHealthCheck: {period: 500ms, timeout: 300ms, failureThreshold: 2, kubeProxyPort: %d}
  peers:
%s
%s
routes:
  table: %d
  resyncInterval: 2s
`, l.inventory, os.TempDir(), l.ack, l.pools, r.SpeakerV4(0), kubeProxyPort,
		peer(r.RouterV4, r.SpeakerV4(0)), peer(r.RouterV6, r.SpeakerV6(0)), table))

	c := framework.StartCCM(t, l.cp, cfg,
		"--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller,node-route-controller",
		"--configure-cloud-routes=true", "--cluster-cidr=10.244.0.0/16", "--route-reconciliation-period=2s",
		"--node-monitor-period=1s",
		"--leader-elect=true", "--leader-elect-resource-name="+l.lease,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s",
		"--node-name=cp-0")
	if err := c.WaitHealthy(l.ctx); err != nil {
		t.Fatal(err)
	}
	l.ccms = []*framework.CCM{c}
	for _, name := range names {
		l.waitInitialized(name)
	}

	// A Service from pool public; pool tiny (two addresses) exhausted by three.
	l.createService("web", nil)
	l.waitIPs("web", 1)
	for _, name := range []string{"tiny-1", "tiny-2", "tiny-3"} {
		l.createService(name, func(s *v1.Service) { s.Annotations = map[string]string{"baremetal-ccm.io/address-pool": "tiny"} })
	}
	l.waitIPs("tiny-1", 1)
	l.waitIPs("tiny-2", 1)
	l.waitEvent(l.ns, "Service", "tiny-3", "AddressPoolExhausted")

	// The BMCs answered; then host 2's BMC goes away.
	waitValue(t, l, c, "baremetal_ccm_bmc_requests_total", map[string]string{"protocol": "redfish", "result": "success"}, atLeast(1))
	bmcs[2].Close()

	// A datagram that is no BFD packet, from the router's side of the link.
	if out, err := exec.CommandContext(l.ctx, "ip", "netns", "exec", r.Namespace, "bash", "-c",
		fmt.Sprintf("printf not-bfd >/dev/udp/%s/3784", r.SpeakerV4(0))).CombinedOutput(); err != nil {
		t.Fatalf("sending a malformed BFD packet: %v: %s", err, out)
	}

	for _, w := range []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
	}{
		{"leader_election_master_status", map[string]string{"name": l.lease}, equal(1)},
		{"baremetal_ccm_bgp_session_up", map[string]string{"peer": r.RouterV4.String()}, equal(1)},
		{"baremetal_ccm_bgp_session_up", map[string]string{"peer": r.RouterV6.String()}, equal(1)},
		{"baremetal_ccm_bfd_session_up", map[string]string{"peer": r.RouterV4.String()}, equal(1)},
		{"baremetal_ccm_bfd_session_up", map[string]string{"peer": r.RouterV6.String()}, equal(1)},
		{"baremetal_ccm_bfd_received_packets_dropped_total", map[string]string{"reason": "malformed"}, atLeast(1)},
		{"baremetal_ccm_lb_pool_addresses", map[string]string{"pool": "tiny", "family": "IPv4"}, equal(2)},
		{"baremetal_ccm_lb_pool_addresses_in_use", map[string]string{"pool": "tiny", "family": "IPv4"}, equal(2)},
		{"baremetal_ccm_lb_pool_addresses", map[string]string{"pool": "public", "family": "IPv4"}, equal(16)},
		{"baremetal_ccm_lb_services_pending", nil, equal(1)},
		{"baremetal_ccm_lb_oldest_pending_service_seconds", nil, atLeast(1)},
		{"baremetal_ccm_bmc_unreachable", nil, equal(1)},
		{"baremetal_ccm_node_health_unhealthy_targets", nil, equal(2)},
		{"baremetal_ccm_routes_programmed", nil, equal(2)},
		{"baremetal_ccm_routes_operations_total", map[string]string{"operation": "add", "result": "success"}, atLeast(1)},
		{"baremetal_ccm_inventory_hosts", map[string]string{"state": "active"}, equal(n)},
		{"baremetal_ccm_inventory_last_reload_failed", nil, equal(0)},
		{"baremetal_ccm_inventory_deletion_guard_tripped", nil, equal(0)},
		{"baremetal_ccm_power_budget_waiting_hosts", nil, equal(0)},
	} {
		waitValue(t, l, c, w.name, w.labels, w.ok)
	}

	// Every metric and label the rules and the dashboard read is served.
	root, err := framework.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	refs, err := monitoring.Shipped(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, why := range needsFeature {
		if refs.Uses[name] == nil {
			t.Errorf("needsFeature lists %s (%s), which the rules and the dashboard no longer read", name, why)
		}
	}
	text, err := c.Metrics(l.ctx)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := monitoring.ParseExposition(text)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range exp.Check(refs, needsFeature) {
		t.Error(p)
	}
	checked := 0
	for _, name := range refs.Names() {
		if _, ok := exp[name]; ok {
			checked++
		}
	}
	t.Logf("%d of the %d metrics the rules and the dashboard read are served; not by this CCM: %v (Prometheus's own: %v)",
		checked, len(refs.Uses), needsFeature, monitoring.Synthetic)
}

// createNodeWithPodCIDR registers a Node as kubelet does (uninitialized taint,
// InternalIP, Ready) with spec.podCIDR set when cidr is not empty, as the node IPAM
// controller would.
func createNodeWithPodCIDR(ctx context.Context, l *lbLab, name string, ip netip.Addr, cidr string) error {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Spec: v1.NodeSpec{Taints: []v1.Taint{{
			Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule,
		}}},
		Status: v1.NodeStatus{
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip.String()}},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue,
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
		},
	}
	if cidr != "" {
		node.Spec.PodCIDR, node.Spec.PodCIDRs = cidr, []string{cidr}
	}
	_, err := l.cp.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	return err
}

func equal(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

func atLeast(want float64) func(float64) bool { return func(v float64) bool { return v >= want } }

// waitValue waits until c serves a sample of name whose labels include labels and
// whose value satisfies ok.
func waitValue(t *testing.T, l *lbLab, c *framework.CCM, name string, labels map[string]string, ok func(float64) bool) {
	t.Helper()
	var last []string
	err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("%s%v", name, labels), func(ctx context.Context) (bool, error) {
		text, err := c.Metrics(ctx)
		if err != nil {
			return false, err
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			return false, err
		}
		last = nil
		for _, m := range fams[name].GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			v := sampleValue(m)
			last = append(last, fmt.Sprint(v))
			if ok(v) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v; values seen: %v", err, last)
	}
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
			found++
		}
	}
	return found == len(want)
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}
