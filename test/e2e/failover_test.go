//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
	"github.com/baremetal-ccm/baremetal-ccm/test/frr"
)

// Failover, as the routers see it: a leader's clean stop hands over at once, a
// rolling restart that waits for readiness never leaves a prefix without a path,
// and a stalled API server or etcd withdraws nothing.

// The upstream leader-election timings (the CCM's defaults): a Lease that is not
// released is taken over only after it expires, 15 s after its last renewal.
var defaultLeaseArgs = []string{"--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s"}

// gapWatch polls the router every 50 ms and records every poll in which a watched
// prefix had no path.
type gapWatch struct {
	mu     sync.Mutex
	gaps   []string
	polls  int
	cancel context.CancelFunc
	done   chan struct{}
}

func watchGaps(ctx context.Context, paths func(context.Context, netip.Prefix) (int, error), prefixes []netip.Prefix) *gapWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &gapWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			for _, p := range prefixes {
				n, err := paths(ctx, p)
				if ctx.Err() != nil {
					return
				}
				w.mu.Lock()
				w.polls++
				if err == nil && n == 0 {
					w.gaps = append(w.gaps, time.Now().Format("15:04:05.000")+" "+p.String())
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *gapWatch) stop() ([]string, int) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gaps, w.polls
}

// startArgs is lbLab.start with other flags (a flag replaces start's default).
func (l *lbLab) startArgs(i int, nextHop string, extra ...string) *framework.CCM {
	l.t.Helper()
	args := append([]string{
		"--controllers=service-lb-controller",
		"--leader-elect=true", "--leader-elect-resource-name=" + l.lease,
		fmt.Sprintf("--node-name=cp-%d", i),
	}, extra...)
	c := framework.StartCCM(l.t, l.cp, l.config(i, nextHop), args...)
	if err := c.WaitHealthy(l.ctx); err != nil {
		l.t.Fatal(err)
	}
	for len(l.ccms) <= i {
		l.ccms = append(l.ccms, nil)
	}
	l.ccms[i] = c
	return c
}

// holder returns the Lease's holder identity ("" when released or absent).
func (l *lbLab) holder(ctx context.Context) string {
	lease, err := l.cp.Client.CoordinationV1().Leases("kube-system").Get(ctx, l.lease, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// leaderIndex waits for a holder of the Lease that runs its controllers and returns
// its index in l.ccms.
func (l *lbLab) leaderIndex() int {
	l.t.Helper()
	idx := -1
	err := framework.WaitFor(l.ctx, 60*time.Second, "a leader", func(ctx context.Context) (bool, error) {
		h := l.holder(ctx)
		if h == "" {
			return false, nil
		}
		for i, c := range l.ccms {
			if c != nil && strings.Contains(c.Log(), `"Leading: starting the controllers" logger="leader-election" identity="`+h+`"`) {
				idx = i
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		l.t.Fatal(err)
	}
	return idx
}

// waitAnnounced waits until BIRD holds a path for ip over speaker i's session of
// ip's family.
func (l *lbLab) waitAnnounced(ip netip.Addr, i int) {
	l.t.Helper()
	prefix := netip.PrefixFrom(ip, ip.BitLen())
	err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("%s to hold %s from speaker %d", l.tor.name, prefix, i), func(ctx context.Context) (bool, error) {
		from, err := l.tor.fromSpeakers(ctx, prefix)
		return slices.Contains(from, i), err
	})
	if err != nil {
		l.t.Fatal(err)
	}
}

// newLBLabFRR is newLBLab with FRR as the router.
func newLBLabFRR(t *testing.T, speakers int) *lbLab {
	t.Helper()
	r := frr.Start(t, frr.Options{Speakers: make([]frr.Speaker, speakers)})
	return newLBLabWith(t, frrTor(r, speakers))
}

// pathCount is how many paths the router holds for prefix.
func (l *lbLab) pathCount(ctx context.Context, p netip.Prefix) (int, error) {
	from, err := l.tor.fromSpeakers(ctx, p)
	return len(from), err
}

// TestLeaderStopHandsOver: with the upstream default Lease timings (15 s), a leader
// that is stopped (SIGTERM) releases its Lease after stopping its controllers, and
// the standby, which watches the Lease, takes over at once: a Service created right
// after the SIGTERM gets its IP from the new leader long before the Lease would
// have expired. Three hand-overs; the latencies are logged (docs/development.md: Benchmarks).
func TestLeaderStopHandsOver(t *testing.T) {
	l := newLBLab(t, 2)
	l.startArgs(0, "self", defaultLeaseArgs...)
	if i := l.leaderIndex(); i != 0 {
		t.Fatalf("leader %d, want the first replica", i)
	}
	l.startArgs(1, "self", defaultLeaseArgs...)
	l.createService("warm", nil)
	l.waitIPs("warm", 1)
	var latencies []time.Duration
	for round := range 3 {
		leader := l.leaderIndex()
		old := l.holder(l.ctx)
		c := l.ccms[leader]
		start := time.Now()
		c.Signal(syscall.SIGTERM)
		name := fmt.Sprintf("after-%d", round)
		l.createService(name, nil)
		l.waitIPs(name, 1)
		took := time.Since(start)
		latencies = append(latencies, took)
		if h := l.holder(l.ctx); h == old || h == "" {
			t.Errorf("round %d: the Lease is held by %q after the IP was assigned, want the standby", round, h)
		}
		if took >= 15*time.Second {
			t.Errorf("round %d: the new leader assigned an IP %v after the SIGTERM, not before the Lease would have expired (15 s): the Lease was not released", round, took)
		}
		select {
		case <-c.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the stopped leader did not exit", round)
		}
		if err := c.ExitErr(); err != nil {
			t.Errorf("round %d: the stopped leader exited with %v", round, err)
		}
		if !strings.Contains(c.Log(), "Stopped leading: the Lease is released") {
			t.Errorf("round %d: the stopped leader did not say it released the Lease", round)
		}
		l.startArgs(leader, "self", defaultLeaseArgs...) // back, as the standby
	}
	t.Logf("SIGTERM of the leader to the next IP assigned by the new leader: %v (Lease duration 15 s, retry period 2 s)", latencies)
}

// TestRollingRestartKeepsPaths: three replicas announce every Service's IP (ECMP);
// each in turn is stopped (SIGTERM) and started again, and the next is stopped only
// once the new process reports ready (/readyz, the static pod's readiness probe;
// READY=1 under systemd). BIRD, polled every 50 ms, never lacks a path for any
// prefix, and at the moment a replica reports ready its own paths are at BIRD. The
// same against FRR.
func TestRollingRestartKeepsPaths(t *testing.T) {
	t.Run("BIRD", func(t *testing.T) { rollingRestart(t, newLBLab(t, 3)) })
	t.Run("FRR", func(t *testing.T) { rollingRestart(t, newLBLabFRR(t, 3)) })
}

func rollingRestart(t *testing.T, l *lbLab) {
	for i := range 3 {
		l.start(i, "self")
	}
	var prefixes []netip.Prefix
	for i := range 3 {
		name := fmt.Sprintf("web-%d", i)
		l.createService(name, nil)
		ip := l.waitIPs(name, 1)[0]
		for i := range 3 {
			l.waitAnnounced(ip, i)
		}
		prefixes = append(prefixes, netip.PrefixFrom(ip, 32))
	}
	w := watchGaps(l.ctx, l.pathCount, prefixes)
	for round := range 2 {
		for i := range 3 {
			l.ccms[i].Stop()
			if err := l.ccms[i].ExitErr(); err != nil {
				t.Errorf("replica %d after SIGTERM: %v", i, err)
			}
			c := l.start(i, "self")
			if err := c.WaitReady(l.ctx, 90*time.Second); err != nil {
				t.Fatalf("round %d, replica %d: %v", round, i, err)
			}
			for _, p := range prefixes {
				from, err := l.tor.fromSpeakers(l.ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(from, i) {
					t.Errorf("round %d: replica %d reported ready before %s had its path for %s (paths from speakers %v)", round, i, l.tor.name, p, from)
				}
			}
		}
	}
	gaps, polls := w.stop()
	if len(gaps) > 0 {
		t.Errorf("%d of %d polls found a prefix without any path: %v", len(gaps), polls, gaps[:min(len(gaps), 20)])
	}
	t.Logf("%s: two rolling restarts of 3 replicas: %d polls of %d prefixes every 50 ms, %d without a path", l.tor.name, polls, len(prefixes), len(gaps))
}

// TestControlPlaneStallKeepsPaths: one replica; the API server, then etcd, stalls
// for 30 s (SIGSTOP), longer than the Lease's renew deadline. The leader stops its
// controllers but does not exit, and keeps announcing what the API last said: BIRD,
// polled every 50 ms, never lacks a path. Once the control plane is back the
// replica leads again and its controllers assign the next IP. Against BIRD and FRR.
func TestControlPlaneStallKeepsPaths(t *testing.T) {
	t.Run("BIRD", func(t *testing.T) { controlPlaneStall(t, newLBLab(t, 1)) })
	t.Run("FRR", func(t *testing.T) { controlPlaneStall(t, newLBLabFRR(t, 1)) })
}

func controlPlaneStall(t *testing.T, l *lbLab) {
	c := l.startArgs(0, "self", defaultLeaseArgs...)
	var prefixes []netip.Prefix
	for i := range 2 {
		name := fmt.Sprintf("web-%d", i)
		l.createService(name, nil)
		ip := l.waitIPs(name, 1)[0]
		l.waitAnnounced(ip, 0)
		prefixes = append(prefixes, netip.PrefixFrom(ip, 32))
	}
	for round, component := range []string{framework.APIServer, framework.Etcd} {
		leading := strings.Count(c.Log(), "Leading: starting the controllers")
		lost := strings.Count(c.Log(), "lost the Lease")
		w := watchGaps(l.ctx, l.pathCount, prefixes)
		resume, err := l.cp.Stall(component)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		if err := resume(); err != nil {
			t.Fatal(err)
		}
		err = framework.WaitFor(l.ctx, 90*time.Second, "the replica to lead again", func(context.Context) (bool, error) {
			return strings.Count(c.Log(), "Leading: starting the controllers") > leading, nil
		})
		if err != nil {
			t.Fatalf("%s stall: %v", component, err)
		}
		name := fmt.Sprintf("after-%s", component)
		l.createService(name, nil)
		ip := l.waitIPs(name, 1)[0]
		l.waitAnnounced(ip, 0)
		gaps, polls := w.stop()
		if len(gaps) > 0 {
			t.Errorf("%s stalled 30 s: %d of %d polls found a prefix without a path: %v", component, len(gaps), polls, gaps[:min(len(gaps), 20)])
		}
		if n := strings.Count(c.Log(), "lost the Lease"); n <= lost {
			t.Errorf("%s stalled 30 s: the leader did not lose its Lease (the stall did not test anything)", component)
		}
		select {
		case <-c.Done():
			t.Fatalf("the replica exited: %v", c.ExitErr())
		default:
		}
		t.Logf("%s: round %d, %s stalled 30 s: Lease lost, %d polls, %d without a path; leading again, next IP %v assigned", l.tor.name, round, component, polls, len(gaps), ip)
		prefixes = append(prefixes, netip.PrefixFrom(ip, 32))
	}
}

// hopsOf returns the BGP next hops BIRD holds for prefix over speaker 0's session
// of the prefix's family, sorted.
func (l *lbLab) hopsOf(ctx context.Context, prefix netip.Prefix) ([]netip.Addr, error) {
	rs, err := l.router.RoutesFor(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var hops []netip.Addr
	for _, r := range rs {
		if r.Protocol == l.router.Protocol(0, prefix.Addr().Is6()) {
			hops = append(hops, r.BGPNextHop[0])
		}
	}
	slices.SortFunc(hops, netip.Addr.Compare)
	return hops, nil
}

// TestPowerOffWithdrawsNextHops: next-hop mode nodes, three hosts behind emulated
// Redfish BMCs. A host loses power while its Node is still Ready (as it stays for
// ~40 s): the power monitor's next reading of its BMC says off, and its next hop
// leaves BIRD at once, not when the Node goes NotReady. Measured from the BMC's
// answer to BIRD's table (polled every 20 ms), three times.
func TestPowerOffWithdrawsNextHops(t *testing.T) {
	l := newLBLab(t, 1)
	const n = 3
	bmcs, inv := redfishHosts(t, "po", "10.99.99", n, nil)
	for i := range n {
		inv = strings.Replace(inv, fmt.Sprintf("address: 10.99.99.%d}", i+1), fmt.Sprintf("address: %s}", l.router.NodeAddr(i, false)), 1)
	}
	l.setInventory(inv)
	l.invExtra = "  credentialsDir: " + os.TempDir() + "\n"
	l.extra = "bmc: {readyInterval: 2s, notReadyInterval: 1s, callTimeout: 3s, cacheTTL: 500ms}\n"
	var names []string
	for i := range n {
		name := fmt.Sprintf("po-%d", i)
		names = append(names, name)
		l.createNode(framework.NodeSpec{Name: name, InternalIPs: []string{l.router.NodeAddr(i, false).String()}, Ready: ready(v1.ConditionTrue)})
	}
	l.startArgs(0, "nodes", "--controllers=cloud-node-controller,service-lb-controller")
	for _, name := range names {
		l.waitInitialized(name)
	}
	l.createService("web", nil)
	ip := l.waitIPs("web", 1)[0]
	prefix := netip.PrefixFrom(ip, 32)
	all := []netip.Addr{l.router.NodeAddr(0, false), l.router.NodeAddr(1, false), l.router.NodeAddr(2, false)}
	l.waitPaths(ip, nil, all)

	var latencies []time.Duration
	for round := range 3 {
		victim := round % n
		since := len(bmcs[victim].PowerReads())
		off := time.Now()
		bmcs[victim].SetPowerState(redfish.PowerOff)
		want := slices.DeleteFunc(slices.Clone(all), func(a netip.Addr) bool { return a == l.router.NodeAddr(victim, false) })
		var gone time.Time
		err := framework.WaitForInterval(l.ctx, 60*time.Second, 20*time.Millisecond, "the powered-off host's next hop withdrawn", func(ctx context.Context) (bool, error) {
			hops, err := l.hopsOf(ctx, prefix)
			if err == nil && slices.Equal(hops, want) {
				gone = time.Now()
				return true, nil
			}
			return false, err
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var read time.Time
		for _, r := range bmcs[victim].PowerReads()[since:] {
			if r.State == redfish.PowerOff && r.At.After(off) {
				read = r.At
				break
			}
		}
		if read.IsZero() {
			t.Fatalf("round %d: next hop withdrawn without a BMC reading that said off", round)
		}
		latencies = append(latencies, gone.Sub(read))
		if n, err := l.node(names[victim]); err != nil || !isReady(n) {
			t.Fatalf("round %d: the Node is not Ready any more (%v): the test did not measure the BMC path", round, err)
		}
		bmcs[victim].SetPowerState(redfish.PowerOn)
		l.waitPaths(ip, nil, all)
	}
	t.Logf("BMC reading 'off' to the next hop gone from BIRD (polled every 20 ms): %v", latencies)
	for i, d := range latencies {
		if d > 3*time.Second {
			t.Errorf("round %d: %v from the BMC reading to the withdrawal, target 3 s", i, d)
		}
	}
}

// TestNodeHealthCheckWithdraws: next-hop mode nodes with bgp.nodeHealthCheck. Each
// node's health endpoints are served on its own address (a stand-in for kube-proxy's
// /healthz server and for a Local Service's healthCheckNodePort, answering as
// kube-proxy does: 200, or 503 without local endpoints). A node whose kube-proxy
// stops answering leaves a Cluster Service's next hops after failureThreshold
// probes and comes back when it answers; a Local Service keeps only the endpoint
// nodes whose healthCheckNodePort answers 200.
func TestNodeHealthCheckWithdraws(t *testing.T) {
	l := newLBLab(t, 1)
	const n = 3
	kpPort, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var addrs []netip.Addr
	for i := range n {
		name := fmt.Sprintf("hc-%d-%s", i, l.lease[len(l.lease)-4:])
		names = append(names, name)
		a := l.router.NodeAddr(i, false)
		addrs = append(addrs, a)
		l.nodes = append(l.nodes, name)
		if _, err := framework.CreateNode(l.ctx, l.cp.Client, framework.NodeSpec{Name: name, InternalIPs: []string{a.String()}, Ready: ready(v1.ConditionTrue), Labels: map[string]string{}}); err != nil {
			t.Fatal(err)
		}
		// The node's address, on this host's end of the router link: the CCM reaches
		// it, and BIRD resolves it as a next hop on its subnet.
		if err := framework.AddAddress(l.ctx, l.router.HostInterface, netip.PrefixFrom(a, 32)); err != nil {
			t.Fatal(err)
		}
	}
	kube := make([]*healthServer, n)
	for i := range n {
		kube[i] = serveHealth(t, addrs[i], kpPort, "/healthz")
	}
	l.bgpExtra = fmt.Sprintf("  nodeHealthCheck: {period: 500ms, timeout: 300ms, failureThreshold: 2, kubeProxyPort: %d}\n", kpPort)
	l.start(0, "nodes")

	l.createService("web", nil)
	web := netip.PrefixFrom(l.waitIPs("web", 1)[0], 32)
	l.waitPaths(web.Addr(), nil, addrs)
	kube[1].set(0) // kube-proxy on node 1 stops: connection refused
	l.waitPaths(web.Addr(), nil, []netip.Addr{addrs[0], addrs[2]})
	kube[1].set(http.StatusServiceUnavailable) // answers, not healthy
	time.Sleep(2 * time.Second)
	if hops, _ := l.hopsOf(l.ctx, web); !slices.Equal(hops, []netip.Addr{addrs[0], addrs[2]}) {
		t.Errorf("a kube-proxy answering 503 is healthy again: next hops %v", hops)
	}
	kube[1].set(http.StatusOK)
	l.waitPaths(web.Addr(), nil, addrs)

	// A Local Service with endpoints on nodes 0 and 2; node 2's kube-proxy says it has
	// no local endpoint (503) although the EndpointSlice says ready.
	l.createService("local", func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal })
	local := netip.PrefixFrom(l.waitIPs("local", 1)[0], 32)
	svc, err := l.cp.Client.CoreV1().Services(l.ns).Get(l.ctx, "local", metav1.GetOptions{})
	if err != nil || svc.Spec.HealthCheckNodePort == 0 {
		t.Fatalf("the Local Service has no healthCheckNodePort: %v", err)
	}
	hc := []*healthServer{serveHealth(t, addrs[0], int(svc.Spec.HealthCheckNodePort), "/"), nil, serveHealth(t, addrs[2], int(svc.Spec.HealthCheckNodePort), "/")}
	hc[2].set(http.StatusServiceUnavailable)
	l.createEndpoints("local", names[0], names[2])
	l.waitPaths(local.Addr(), nil, []netip.Addr{addrs[0]})
	hc[2].set(http.StatusOK)
	l.waitPaths(local.Addr(), nil, []netip.Addr{addrs[0], addrs[2]})
}

func isReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// healthServer stands in for a node's kube-proxy health endpoint (or a Local
// Service's healthCheckNodePort): it answers GETs of its path with the status set
// (200 by default), or is closed (status 0: connection refused).
type healthServer struct {
	t      *testing.T
	addr   string
	path   string
	status atomic.Int32
	mu     sync.Mutex
	srv    *http.Server
}

func serveHealth(t *testing.T, a netip.Addr, port int, path string) *healthServer {
	h := &healthServer{t: t, addr: net.JoinHostPort(a.String(), strconv.Itoa(port)), path: path}
	h.status.Store(http.StatusOK)
	h.start()
	t.Cleanup(func() { h.set(0) })
	return h
}

func (h *healthServer) start() {
	l, err := net.Listen("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != h.path && h.path != "/" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(h.status.Load()))
	})}
	go func() { _ = srv.Serve(l) }()
	h.mu.Lock()
	h.srv = srv
	h.mu.Unlock()
}

// set changes the answer; 0 closes the listener, anything else (re)opens it.
func (h *healthServer) set(status int) {
	h.mu.Lock()
	srv := h.srv
	h.mu.Unlock()
	h.status.Store(int32(status))
	switch {
	case status == 0 && srv != nil:
		_ = srv.Close()
		h.mu.Lock()
		h.srv = nil
		h.mu.Unlock()
	case status != 0 && srv == nil:
		h.start()
	}
}

// createEndpoints gives Service name an EndpointSlice with one ready endpoint on
// each of nodes.
func (l *lbLab) createEndpoints(name string, nodes ...string) {
	l.t.Helper()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: name + "-e2e", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "e2e.baremetal-ccm.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for i, n := range nodes {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.244.%d.10", i)}, NodeName: ptr.To(n), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	if _, err := l.cp.Client.DiscoveryV1().EndpointSlices(l.ns).Create(l.ctx, slice, metav1.CreateOptions{}); err != nil {
		l.t.Fatal(err)
	}
}
