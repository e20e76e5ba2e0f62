//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/hostinfo"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/speakerstatus"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// agentUUID is worker 0's systemUUID (inventory and Node).
const agentUUID = "4c4c4544-0000-4000-8000-0000000000a0"

// TestAgentLeastPrivilege: two worker hosts (network namespaces) run the agent alone
// under the agent role (a per-node client certificate, see TestAgentRBAC for what the
// role allows), with a CloudConfig that has no inventory section and no inventory,
// BMC or inventory credential on the host. The CCM (leader) initializes their Nodes
// from the inventory and publishes each host's rack peers and router ID on its Node.
// Each agent peers with the rack's BIRD using its own host's TCP-MD5 password, and
// announces only itself: its own pod CIDR, a Cluster Service's IP via itself, and a
// Local Service's IP only where the Service has an endpoint. A rotated password
// (router and file) is applied without a restart. A draining worker's path is
// marked GRACEFUL_SHUTDOWN, then withdrawn, and restored on uncordon. A kubelet that
// claims worker 0's providerID with another systemUUID gets none of its BGP settings.
// An IPPool added in the cluster is announced by the agents without a restart. Each
// agent publishes its session (kubectl get bgpsessionstates), the Announced
// condition names the agents that announce a Service, and worker 1's credentials
// cannot write worker 0's session. A BGPPeer picks the agents that peer with its
// router by their Nodes' labels, applied without a restart.
func TestAgentLeastPrivilege(t *testing.T) {
	l := newLabNoCCM(t)
	ctx := l.ctx
	if err := framework.ApplyAgentRBAC(ctx, l.cp); err != nil {
		t.Fatal(err)
	}
	workers := []*framework.Host{framework.NewHost(t, l.cp), framework.NewHost(t, l.cp)}
	passwords := []string{"w0-" + rand.String(8), "w1-" + rand.String(8)}
	r := bird.Start(t, bird.Options{
		Speakers:         []bird.Speaker{{Password: passwords[0]}, {Password: passwords[1]}},
		SpeakerNetnsEach: []string{workers[0].Name, workers[1].Name},
	})
	suffix := rand.String(4)
	names := []string{"ag-0-" + suffix, "ag-1-" + suffix}
	ns := "agent-" + suffix
	if _, err := l.cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = l.cp.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})

	// The inventory, on the CCM's side only: the rack's router with a password file
	// (the CCM's copy, never sent to workers).
	ccmPassword := filepath.Join(l.dir, "tor-password")
	writeFile(t, ccmPassword, "ccm-side-copy\n")
	l.setInventory(fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
racks:
- name: r1
  bgpPeers:
  - {address: %s, asn: %d, passwordFile: %s, holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s}
hosts:
- {name: %s, rack: r1, systemUUID: %s, addresses: [{type: InternalIP, address: %s}]}
- {name: %s, rack: r1, bgpRouterID: 10.77.0.2, addresses: [{type: InternalIP, address: %s}]}
`, r.RouterV4, r.ASN, ccmPassword, names[0], agentUUID, r.SpeakerV4(0), names[1], r.SpeakerV4(1)))
	pools := `loadBalancer:
  pools:
  - name: agents
    addresses: [192.0.2.64/28]
`
	l.writeConfig("", pools+"bgp: {localASN: 65000, nextHop: nodes, announcePodCIDRs: true}\n")
	l.ccm = framework.StartCCM(t, l.cp, l.config, "--node-monitor-period=1s",
		"--controllers=cloud-node-controller,service-lb-controller", "--bgp-router-id=10.77.0.100")
	if err := l.ccm.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	// The kubelets register the Nodes; the CCM initializes them and publishes.
	for i, name := range names {
		uuid := ""
		if i == 0 {
			uuid = agentUUID
		}
		l.createNode(framework.NodeSpec{Name: name, SystemUUID: uuid, InternalIPs: []string{r.SpeakerV4(i).String()}, Ready: ready(v1.ConditionTrue)})
		cidr := fmt.Sprintf("10.244.%d.0/24", 60+i)
		patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, cidr, cidr)
		if _, err := l.cp.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range names {
		n := l.waitInitialized(name)
		var info hostinfo.Info
		err := framework.WaitFor(ctx, 60*time.Second, "the host's BGP settings on "+name, func(ctx context.Context) (bool, error) {
			n, err := l.node(name)
			if err != nil {
				return false, err
			}
			var ok bool
			info, ok, err = hostinfo.FromNode(n)
			return ok, err
		})
		if err != nil {
			t.Fatalf("%v; node annotations: %v", err, n.Annotations)
		}
		wantRID := []string{r.SpeakerV4(0).String(), "10.77.0.2"}[i]
		if info.Host != name || info.Rack != "r1" || info.RouterID != wantRID || len(info.Peers) != 1 || !info.Peers[0].Password || info.Peers[0].Address != r.RouterV4.String() {
			t.Errorf("published on %s: %+v; want host %s, rack r1, router ID %s, the router as the one peer expecting a password", name, info, name, wantRID)
		}
		raw := n.Annotations[hostinfo.Annotation]
		if strings.Contains(raw, ccmPassword) || strings.Contains(raw, "ccm-side-copy") {
			t.Errorf("the annotation on %s names the CCM's password file: %s", name, raw)
		}
	}

	// A kubelet that registers with worker 0's providerID but reports another machine
	// gets none of worker 0's BGP settings: not while uninitialized (the CCM does not
	// initialize it: the identities contradict), nor once its taint is removed by hand.
	imp := "ag-imp-" + suffix
	l.createNode(framework.NodeSpec{Name: imp, ProviderID: "baremetal://" + names[0], SystemUUID: "4c4c4544-0000-4000-8000-0000000000ff",
		InternalIPs: []string{"10.77.9.9"}, Ready: ready(v1.ConditionTrue)})
	time.Sleep(3 * time.Second) // the publisher's passes
	if n, err := l.node(imp); err != nil || n.Annotations[hostinfo.Annotation] != "" {
		t.Fatalf("a Node claiming %s's providerID with another systemUUID: %v, annotation %q", names[0], err, n.Annotations[hostinfo.Annotation])
	}
	if n, err := l.node(imp); err == nil {
		n.Spec.Taints = nil
		if _, err := l.cp.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	if n, err := l.node(imp); err != nil || n.Annotations[hostinfo.Annotation] != "" {
		t.Fatalf("the impostor Node, its taint removed by hand: %v, annotation %q", err, n.Annotations[hostinfo.Annotation])
	}

	// The workers: agent identity, a CloudConfig without inventory, their own password.
	agentCfg := filepath.Join(l.dir, "agent-cloud-config.yaml")
	writeFile(t, agentCfg, "apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\n"+pools+"bgp: {localASN: 65000, nextHop: nodes, announcePodCIDRs: true, gracefulShutdown: {time: 5s}}\n")
	if data, _ := os.ReadFile(agentCfg); strings.Contains(string(data), "inventory") || strings.Contains(string(data), "bmc") {
		t.Fatalf("the worker's CloudConfig mentions the inventory or BMCs:\n%s", data)
	}
	// The agents' session states go after the agents stop (registered first, so it
	// runs last); in a cluster the garbage collector deletes them with their Nodes.
	t.Cleanup(func() {
		c := versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig)).BaremetalCCMV1alpha1().BGPSessionStates()
		for _, name := range names {
			_ = c.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: v1alpha1.LabelNode + "=" + name})
		}
	})
	pwFiles := make([]string, 2)
	var agents []*framework.Agent
	for i, name := range names {
		pwFiles[i] = filepath.Join(l.dir, fmt.Sprintf("bgp-password-%d", i))
		writeFile(t, pwFiles[i], passwords[i]+"\n")
		kc := framework.AgentKubeconfig(t, l.cp, workers[i], name)
		agents = append(agents, framework.StartAgentIn(t, workers[i], agentCfg, name, "--kubeconfig="+kc, "--bgp-password-file="+pwFiles[i]))
	}
	waitSession := func(i int, what string) {
		t.Helper()
		err := framework.WaitFor(ctx, 60*time.Second, what, func(ctx context.Context) (bool, error) {
			st, err := r.ProtocolState(ctx, r.Protocol(i, false))
			return err == nil && st.Established(), nil
		})
		if err != nil {
			t.Fatalf("%v\nbird.log:\n%s", err, r.Log())
		}
	}
	waitSession(0, "worker 0's MD5 session with its own password")
	waitSession(1, "worker 1's MD5 session with its own password")

	// waitFrom waits until BIRD holds prefix exactly from the given workers, each with
	// its own address as next hop.
	waitFrom := func(prefix netip.Prefix, workers ...int) {
		t.Helper()
		var got []bird.Route
		err := framework.WaitFor(ctx, 60*time.Second, fmt.Sprintf("%s from workers %v only", prefix, workers), func(ctx context.Context) (bool, error) {
			routes, err := r.RoutesFor(ctx, prefix)
			if err != nil {
				return false, nil
			}
			got = routes
			var have, want []string
			for _, rt := range routes {
				have = append(have, fmt.Sprintf("%s via %v", rt.Protocol, rt.BGPNextHop[0]))
			}
			for _, w := range workers {
				want = append(want, fmt.Sprintf("%s via %v", r.Protocol(w, false), r.SpeakerV4(w)))
			}
			slices.Sort(have)
			slices.Sort(want)
			return slices.Equal(have, want), nil
		})
		if err != nil {
			t.Fatalf("%v; last seen: %+v", err, got)
		}
	}
	waitFrom(netip.MustParsePrefix("10.244.60.0/24"), 0)
	waitFrom(netip.MustParsePrefix("10.244.61.0/24"), 1)

	// What a worker's agent serves on its loopback (the default --serving-address):
	// ready (once its paths are acknowledged; BIRD may show them a moment earlier), and
	// metrics that show its session and its one pod-CIDR path.
	for i, w := range workers {
		get := func(ctx context.Context, path string) (string, error) {
			// -w appends the status code: a 503 keeps its body (the reason).
			out, err := w.Exec(ctx, "curl", "-sS", "--max-time", "10", "-w", " HTTP %{http_code}", "http://127.0.0.1:10268"+path)
			return strings.TrimSpace(out), err
		}
		var last string
		if err := framework.WaitFor(ctx, 30*time.Second, fmt.Sprintf("worker %d's agent /readyz", i), func(ctx context.Context) (bool, error) {
			var err error
			last, err = get(ctx, "/readyz")
			return err == nil && last == "ok HTTP 200", nil
		}); err != nil {
			t.Fatalf("%v; last answer: %q", err, last)
		}
		want := []string{
			fmt.Sprintf("baremetal_ccm_bgp_session_up{peer=%q} 1", r.RouterV4.String()),
			fmt.Sprintf("baremetal_ccm_bgp_prefixes_announced{family=\"ipv4\",peer=%q} 1", r.RouterV4.String()),
			`baremetal_ccm_bgp_paths{source="podcidr"} 1`,
		}
		var missing []string
		if err := framework.WaitFor(ctx, 30*time.Second, fmt.Sprintf("worker %d's agent /metrics", i), func(ctx context.Context) (bool, error) {
			out, err := get(ctx, "/metrics")
			if err != nil || !strings.HasSuffix(out, " HTTP 200") {
				missing = []string{fmt.Sprintf("the scrape: %v %.200s", err, out)}
				return false, nil
			}
			lines := strings.Split(out, "\n")
			missing = slices.DeleteFunc(slices.Clone(want), func(l string) bool { return slices.Contains(lines, l) })
			return len(missing) == 0, nil
		}); err != nil {
			t.Errorf("%v; missing: %q", err, missing)
		}
	}

	// A Cluster Service: both workers take its traffic. A Local one with its only
	// endpoint on worker 0: worker 0 alone.
	createSvc := func(name string, policy v1.ServiceExternalTrafficPolicy) netip.Addr {
		t.Helper()
		s := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: policy, Selector: map[string]string{"app": name},
				Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}}},
		}
		if _, err := l.cp.Client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var ip netip.Addr
		err := framework.WaitFor(ctx, 60*time.Second, "an IP for "+name, func(ctx context.Context) (bool, error) {
			s, err := l.cp.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
				return false, err
			}
			ip = netip.MustParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return ip
	}
	clusterIP := createSvc("cluster", v1.ServiceExternalTrafficPolicyCluster)
	localIP := createSvc("local", v1.ServiceExternalTrafficPolicyLocal)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "local-1", Labels: map[string]string{discoveryv1.LabelServiceName: "local"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.60.5"}, NodeName: ptr.To(names[0]), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](80)}},
	}
	if _, err := l.cp.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFrom(netip.PrefixFrom(clusterIP, 32), 0, 1)
	waitFrom(netip.PrefixFrom(localIP, 32), 0)

	// An IPPool added in the cluster: the agents (which allocate nothing but announce
	// only addresses of a pool in force) announce its Service without a restart.
	poolName := "agents-" + suffix
	ippools := versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig)).BaremetalCCMV1alpha1().IPPools()
	if _, err := ippools.Create(ctx, &v1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: v1alpha1.IPPoolSpec{Addresses: []string{"192.0.2.200/30"}, Communities: []string{"65000:777"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { framework.DeleteIPPool(l.cp, poolName) })
	pooled := func() netip.Addr {
		s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pooled", Annotations: map[string]string{"baremetal-ccm.io/address-pool": poolName}},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "pooled"}, Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}}}}
		if _, err := l.cp.Client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var ip netip.Addr
		if err := framework.WaitFor(ctx, 60*time.Second, "an IP for pooled", func(ctx context.Context) (bool, error) {
			s, err := l.cp.Client.CoreV1().Services(ns).Get(ctx, "pooled", metav1.GetOptions{})
			if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
				return false, err
			}
			ip = netip.MustParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		return ip
	}()
	if !netip.MustParsePrefix("192.0.2.200/30").Contains(pooled) {
		t.Fatalf("pooled got %s, not an address of IPPool %s", pooled, poolName)
	}
	waitFrom(netip.PrefixFrom(pooled, 32), 0, 1)
	if routes, err := r.RoutesFor(ctx, netip.PrefixFrom(pooled, 32)); err != nil || len(routes) == 0 || !slices.Contains(routes[0].Communities, "65000:777") {
		t.Errorf("pooled's paths: %+v, %v; want the IPPool's community 65000:777", routes, err)
	}
	if err := l.cp.Client.CoreV1().Services(ns).Delete(ctx, "pooled", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Each agent publishes its session as a BGPSessionState of its own node; kubectl
	// lists them; the leader's Announced condition names the agents that announce.
	sessions := versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig)).BaremetalCCMV1alpha1().BGPSessionStates()
	for _, name := range names {
		obj := speakerstatus.ObjectName(name, r.RouterV4)
		var last *v1alpha1.BGPSessionState
		err := framework.WaitFor(ctx, 30*time.Second, "worker's BGPSessionState "+obj, func(ctx context.Context) (bool, error) {
			o, err := sessions.Get(ctx, obj, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			last = o
			return err == nil && o.Spec.Node == name && o.Spec.Speaker == v1alpha1.SpeakerAgent && o.Spec.Peer == r.RouterV4.String() &&
				o.Status.BGPState == "established" && o.Status.Ready && o.Status.PrefixesSent >= 1 && o.Status.Since != nil &&
				len(o.OwnerReferences) == 1 && o.OwnerReferences[0].Kind == "Node" && o.OwnerReferences[0].Name == name, err
		})
		if err != nil {
			t.Fatalf("%v; last: %+v", err, last)
		}
	}
	out, err := framework.Kubectl(ctx, l.cp, "get", "bgpsessionstates")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(speakerstatus.ObjectName(name, r.RouterV4)) + `\s+` + regexp.QuoteMeta(name) + `\s+Agent\s+` +
			regexp.QuoteMeta(r.RouterV4.String()) + `\s+established\s+[1-9]\d*\s`).MatchString(out) {
			t.Errorf("kubectl get bgpsessionstates does not list %s's established session with its prefixes:\n%s", name, out)
		}
	}
	var announced *metav1.Condition
	err = framework.WaitFor(ctx, 30*time.Second, "the Announced condition to name the announcing agent", func(ctx context.Context) (bool, error) {
		s, err := l.cp.Client.CoreV1().Services(ns).Get(ctx, "local", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		announced = meta.FindStatusCondition(s.Status.Conditions, "baremetal-ccm.io/Announced")
		return announced != nil && announced.Status == metav1.ConditionTrue &&
			strings.Contains(announced.Message, "by 1 of 2 worker agents: "+names[0]+" (sessions up: "+r.RouterV4.String()+")") &&
			strings.Contains(announced.Message, "not by agents "+names[1]+" (no ready local endpoint)"), nil
	})
	if err != nil {
		t.Fatalf("%v; last: %+v", err, announced)
	}
	// Worker 1's credentials cannot write worker 0's session: the API server refuses.
	agent1Cfg, err := clientcmd.BuildConfigFromFlags("", framework.AgentKubeconfig(t, l.cp, nil, names[1]))
	if err != nil {
		t.Fatal(err)
	}
	w0, err := sessions.Get(ctx, speakerstatus.ObjectName(names[0], r.RouterV4), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := w0.DeepCopy()
	forged.Status.BGPState = "idle"
	forged.Status.LastError = "forged by worker 1"
	_, err = versioned.NewForConfigOrDie(jsonConfig(agent1Cfg)).BaremetalCCMV1alpha1().BGPSessionStates().Update(ctx, forged, metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may write only its own node") {
		t.Errorf("worker 1's agent updating worker 0's BGPSessionState: %v; want Forbidden by the policy", err)
	}
	if o, err := sessions.Get(ctx, w0.Name, metav1.GetOptions{}); err != nil || o.Status.BGPState != "established" {
		t.Errorf("worker 0's session after the forgery: %+v, %v", o, err)
	}

	// Rotation: the router and worker 0's file change to a new password; the agent
	// re-reads the file and re-creates the session, without a restart.
	rotated := "w0-rotated-" + rand.String(8)
	var all []bird.Route
	if err := r.SetPassword(ctx, 0, rotated); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(ctx, 60*time.Second, "worker 0's session down with the old password", func(ctx context.Context) (bool, error) {
		st, err := r.ProtocolState(ctx, r.Protocol(0, false))
		return err == nil && !st.Established(), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, pwFiles[0], rotated+"\n")
	waitSession(0, "worker 0's session with the rotated password")
	waitFrom(netip.PrefixFrom(localIP, 32), 0)
	waitFrom(netip.MustParsePrefix("10.244.60.0/24"), 0)

	// Worker 1 drains (bgp.gracefulShutdown): its agent re-announces its path of the
	// Cluster Service with GRACEFUL_SHUTDOWN, which BIRD's import filter turns into
	// LOCAL_PREF 0, so worker 0's path is the best; with no endpoint on worker 1 the path
	// goes after gracefulShutdown.time; uncordoned, it comes back plain.
	cluster := netip.PrefixFrom(clusterIP, 32)
	drain := func(on bool) {
		t.Helper()
		n, err := l.node(names[1])
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Unschedulable = on
		if _, err := l.cp.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		st := map[bool]v1.ConditionStatus{true: v1.ConditionTrue, false: v1.ConditionFalse}[on]
		if err := framework.SetNodeCondition(ctx, l.cp.Client, names[1], v1.NodeCondition{Type: v1.NodeDrainInProgress, Status: st, Reason: "Test"}); err != nil {
			t.Fatal(err)
		}
	}
	drain(true)
	err = framework.WaitFor(ctx, 30*time.Second, "worker 1's path marked and worker 0's the best", func(ctx context.Context) (bool, error) {
		routes, err := r.RoutesFor(ctx, cluster)
		if err != nil || len(routes) != 2 {
			return false, nil
		}
		for _, rt := range routes {
			marked := slices.Contains(rt.Communities, "65535:0") && rt.LocalPref != nil && *rt.LocalPref == 0
			if rt.Protocol == r.Protocol(1, false) && (!marked || rt.Primary) || rt.Protocol == r.Protocol(0, false) && (marked || !rt.Primary) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFrom(cluster, 0)
	drain(false)
	waitFrom(cluster, 0, 1)
	if routes, err := r.RoutesFor(ctx, cluster); err != nil || slices.ContainsFunc(routes, func(rt bird.Route) bool { return slices.Contains(rt.Communities, "65535:0") }) {
		t.Errorf("after uncordon: %+v, %v; want both paths plain", routes, err)
	}

	// What the agents announce, per prefix, is O(1) per host: BIRD holds one path per
	// (prefix, announcing host) and nothing more.
	all, err = r.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 {
		b, _ := json.MarshalIndent(all, "", " ")
		t.Errorf("BIRD holds %d paths, want 5 (2 pod CIDRs, the Cluster IP via 2 hosts, the Local IP via 1):\n%s", len(all), b)
	}

	// A BGPPeer picks worker agents by their Nodes' labels: a second router, peered
	// with by no worker until worker 0's Node gets the label, then by worker 0 only,
	// until the BGPPeer is deleted; no agent restarts.
	r2 := bird.Start(t, bird.Options{Speakers: make([]bird.Speaker, 2), SpeakerNetnsEach: []string{workers[0].Name, workers[1].Name}, EventLog: true})
	peerLabel := "e2e.baremetal-ccm.io/peer-" + suffix
	bgpPeers := versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig)).BaremetalCCMV1alpha1().BGPPeers()
	peerObj := &v1alpha1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "e2e-agents-" + suffix}, Spec: v1alpha1.BGPPeerSpec{
		Address: r2.RouterV4.String(), ASN: int64(r2.ASN), HoldTime: &metav1.Duration{Duration: 9 * time.Second},
		KeepaliveTime: &metav1.Duration{Duration: 3 * time.Second}, ConnectRetry: &metav1.Duration{Duration: time.Second},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{peerLabel: "yes"}}}}
	if _, err := bgpPeers.Create(ctx, peerObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bgpPeers.Delete(context.Background(), peerObj.Name, metav1.DeleteOptions{}) })
	if err := framework.WaitFor(ctx, 30*time.Second, "the agents' BGPPeer accepted", func(ctx context.Context) (bool, error) {
		p, err := bgpPeers.Get(ctx, peerObj.Name, metav1.GetOptions{})
		return err == nil && meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.PoolConditionAccepted), nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // a worker that peered without the label would have by now
	for i := range 2 {
		if st, err := r2.ProtocolState(ctx, r2.Protocol(i, false)); err != nil || st.Established() {
			t.Errorf("worker %d peers with the second router before any Node has the label: %+v, %v", i, st, err)
		}
	}
	start := time.Now()
	labelPatch := fmt.Sprintf(`{"metadata":{"labels":{%q:"yes"}}}`, peerLabel)
	if _, err := l.cp.Client.CoreV1().Nodes().Patch(ctx, names[0], types.MergePatchType, []byte(labelPatch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "worker 0's session with the second router", func(ctx context.Context) (bool, error) {
		st, err := r2.ProtocolState(ctx, r2.Protocol(0, false))
		return err == nil && st.Established(), nil
	}); err != nil {
		t.Fatalf("%v\nbird.log:\n%s", err, r2.Log())
	}
	if evs, err := r2.LogEvents(start); err == nil {
		for _, e := range evs {
			if e.Kind == bird.EventProtocolState && e.Protocol == r2.Protocol(0, false) && e.To == "up" {
				t.Logf("TIMING Node label set to the worker agent's session up at the BGPPeer's router: %s (BIRD's timestamp)", e.Time.Sub(start).Round(time.Millisecond))
				break
			}
		}
	}
	// The agent publishes the new session too (kubectl get bgpsessionstates).
	if err := framework.WaitFor(ctx, 30*time.Second, "worker 0's session state for the second router", func(ctx context.Context) (bool, error) {
		o, err := sessions.Get(ctx, speakerstatus.ObjectName(names[0], r2.RouterV4), metav1.GetOptions{})
		return err == nil && o.Status.BGPState == "established" && o.Spec.Speaker == v1alpha1.SpeakerAgent, nil
	}); err != nil {
		t.Fatal(err)
	}
	if st, err := r2.ProtocolState(ctx, r2.Protocol(1, false)); err != nil || st.Established() {
		t.Errorf("worker 1, without the label, peers with the second router: %+v, %v", st, err)
	}
	if err := bgpPeers.Delete(ctx, peerObj.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 30*time.Second, "worker 0's session with the second router ended", func(ctx context.Context) (bool, error) {
		st, err := r2.ProtocolState(ctx, r2.Protocol(0, false))
		return err == nil && !st.Established(), nil
	}); err != nil {
		t.Fatal(err)
	}
	waitSession(0, "worker 0's session with the rack's router, untouched")

	// A stopped agent says so at once, not only once its objects turn stale.
	if err := agents[1].Stop(); err != nil {
		t.Errorf("worker 1's agent: %v", err)
	}
	if o, err := sessions.Get(ctx, speakerstatus.ObjectName(names[1], r.RouterV4), metav1.GetOptions{}); err != nil || o.Status.BGPState != speakerstatus.StoppedState {
		t.Errorf("worker 1's session after its agent stopped: %+v, %v; want %s", o, err, speakerstatus.StoppedState)
	}
}
