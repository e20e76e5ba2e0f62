package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/hostinfo"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/speakerstatus"
)

// canonical renders paths as sorted strings, for comparing path sets.
func canonical(paths []bgp.Path) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		hops := slices.Clone(p.NextHops)
		slices.SortFunc(hops, func(a, b netip.Addr) int { return a.Compare(b) })
		comms := slices.Sorted(slices.Values(p.Communities))
		lp := "-"
		if p.LocalPref != nil {
			lp = fmt.Sprint(*p.LocalPref)
		}
		out = append(out, fmt.Sprintf("%v via %v comms %v lp %s", p.Prefix, hops, comms, lp))
	}
	slices.Sort(out)
	return out
}

// TestIncrementalPassesMatchFull makes random changes to Services, EndpointSlices
// (shared IPs, Local and Cluster policies, bad annotations, IP moves, deletions) and
// Nodes, and checks after each batch that the paths the agent converged to by
// incremental passes are exactly what a full computation gives, in the three
// next-hop models. The full resync is an hour away: only incremental passes (and
// the full passes a Node change asks for) can make them equal.
func TestIncrementalPassesMatchFull(t *testing.T) {
	for _, tc := range []struct {
		name     string
		nextHop  string
		selfOnly bool
	}{
		{"self", config.NextHopSelf, false},
		{"agent", config.NextHopSelf, true},
		{"nodes", config.NextHopNodes, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rnd := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			node := func(name, ip string, ready bool) *v1.Node {
				st := v1.ConditionFalse
				if ready {
					st = v1.ConditionTrue
				}
				n := &v1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Status: v1.NodeStatus{
						Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}},
						Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: st}},
					},
				}
				if name == "self" && tc.selfOnly {
					// What the leader publishes for an agent's host (its router ID).
					n.Annotations = map[string]string{hostinfo.Annotation: `{"host":"self","routerID":"10.0.0.1"}`}
				}
				return n
			}
			nodes := []string{"self", "n2", "n3"}
			client := fake.NewClientset(node("self", "10.0.0.1", true), node("n2", "10.0.0.2", true), node("n3", "10.0.0.3", true))
			factory := informers.NewSharedInformerFactory(client, 0)
			sp := newFakeSpeaker()
			cfg := &config.CloudConfig{
				BGP:          &config.BGPConfig{LocalASN: 65000, RouterID: "10.0.0.1", NextHop: tc.nextHop},
				LoadBalancer: &config.LoadBalancerConfig{Announcer: config.AnnouncerBGP},
			}
			a, err := New(Options{
				Config: cfg, Self: "self", SelfOnly: tc.selfOnly, Informers: factory, ResyncInterval: time.Hour,
				NewSpeaker: func(Identity) (Speaker, error) { return sp, nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = a.Run(ctx) }()

			ips := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5", "2001:db8::1"}
			randomService := func(name string) *v1.Service {
				svc := &v1.Service{
					ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
					Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
				}
				if rnd.IntN(2) == 0 {
					svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				}
				if rnd.IntN(8) == 0 {
					svc.Spec.Type = v1.ServiceTypeClusterIP
				}
				switch rnd.IntN(6) {
				case 0:
					svc.Annotations = map[string]string{lb.AnnotationCommunities: "65000:" + fmt.Sprint(rnd.IntN(3))}
				case 1:
					svc.Annotations = map[string]string{lb.AnnotationCommunities: "not-a-community"}
				}
				for range rnd.IntN(3) {
					svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ips[rnd.IntN(len(ips))]})
				}
				return svc
			}
			randomSlice := func(svc string) *discoveryv1.EndpointSlice {
				sl := &discoveryv1.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: svc + "-slice", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
					AddressType: discoveryv1.AddressTypeIPv4,
				}
				for _, n := range nodes {
					if rnd.IntN(2) == 0 {
						sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.0.1"}, NodeName: ptr.To(n), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(rnd.IntN(3) > 0)}})
					}
				}
				return sl
			}
			expected := func() []string {
				svcs, _ := a.services.List(labels.Everything())
				all, _ := a.nodes.List(labels.Everything())
				want, _ := lb.Desired(lb.State{
					Services: svcs, EndpointSlices: a.slicesOf, Nodes: all, NextHop: tc.nextHop, Self: "self", SelfOnly: tc.selfOnly,
					Node: func(name string) (*v1.Node, bool) { n, err := a.nodes.Get(name); return n, err == nil },
				})
				return canonical(Paths(want))
			}
			got := func() []string {
				sp.mu.Lock()
				defer sp.mu.Unlock()
				return canonical(sp.paths[SourceLoadBalancers])
			}
			svcs := client.CoreV1().Services("default")
			eps := client.DiscoveryV1().EndpointSlices("default")
			exists := map[string]bool{}
			for batch := range 40 {
				for range 8 {
					name := fmt.Sprintf("svc-%d", rnd.IntN(12))
					var err error
					switch op := rnd.IntN(10); {
					case op < 5:
						svc := randomService(name)
						if exists[name] {
							_, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
						} else {
							_, err = svcs.Create(ctx, svc, metav1.CreateOptions{})
						}
						exists[name] = true
					case op < 6:
						if exists[name] {
							err = svcs.Delete(ctx, name, metav1.DeleteOptions{})
							delete(exists, name)
						}
					case op < 9:
						if _, gerr := eps.Get(ctx, name+"-slice", metav1.GetOptions{}); gerr == nil {
							if rnd.IntN(4) == 0 {
								err = eps.Delete(ctx, name+"-slice", metav1.DeleteOptions{})
							} else {
								_, err = eps.Update(ctx, randomSlice(name), metav1.UpdateOptions{})
							}
						} else {
							_, err = eps.Create(ctx, randomSlice(name), metav1.CreateOptions{})
						}
					default:
						i := rnd.IntN(len(nodes))
						_, err = client.CoreV1().Nodes().Update(ctx, node(nodes[i], fmt.Sprintf("10.0.0.%d", i+1), rnd.IntN(3) > 0), metav1.UpdateOptions{})
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				deadline := time.Now().Add(10 * time.Second)
				for {
					want, have := expected(), got()
					if slices.Equal(want, have) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("batch %d: the agent's paths\n  %s\ndiffer from a full computation's\n  %s", batch, strings.Join(have, "\n  "), strings.Join(want, "\n  "))
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			sp.mu.Lock()
			defer sp.mu.Unlock()
			if sp.updates == 0 {
				t.Error("no incremental update was made")
			}
			if tc.nextHop == config.NextHopSelf && sp.announces > 20 {
				// Only the first pass and the passes after a change of this host's Node are full.
				t.Errorf("%d full passes for %d incremental ones", sp.announces, sp.updates)
			}
			t.Logf("%d full passes, %d incremental", sp.announces, sp.updates)
		})
	}
}

func TestNodeMatters(t *testing.T) {
	base := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "1", Labels: map[string]string{"a": "b"}},
		Spec:       v1.NodeSpec{PodCIDRs: []string{"10.244.0.0/24"}},
		Status: v1.NodeStatus{
			Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Unix(1, 0)}},
		},
	}
	for _, tc := range []struct {
		name   string
		change func(*v1.Node)
		want   bool
	}{
		{"heartbeat only", func(n *v1.Node) {
			n.ResourceVersion = "2"
			n.Status.Conditions[0].LastHeartbeatTime = metav1.Unix(2, 0)
			n.Status.Conditions[0].Message = "kubelet is posting ready status"
			n.Status.Images = []v1.ContainerImage{{Names: []string{"x"}}}
		}, false},
		{"speaker status rewritten", func(n *v1.Node) {
			n.Annotations = map[string]string{speakerstatus.Annotation: `{"paths":10}`}
		}, false},
		{"Ready flips", func(n *v1.Node) { n.Status.Conditions[0].Status = v1.ConditionFalse }, true},
		{"condition added", func(n *v1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: lb.ConditionPoweredOn, Status: v1.ConditionFalse})
		}, true},
		{"excluded by label", func(n *v1.Node) { n.Labels[lb.LabelExcludeFromLB] = "" }, true},
		{"cordoned", func(n *v1.Node) { n.Spec.Unschedulable = true }, true},
		{"address", func(n *v1.Node) { n.Status.Addresses[0].Address = "10.0.0.2" }, true},
		{"annotation", func(n *v1.Node) { n.Annotations = map[string]string{hostinfo.Annotation: "{}"} }, true},
		{"deleted", func(n *v1.Node) { n.DeletionTimestamp = ptr.To(metav1.Now()) }, true},
	} {
		n := base.DeepCopy()
		tc.change(n)
		if got := nodeMatters(base, n); got != tc.want {
			t.Errorf("%s: nodeMatters = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestServiceMatters(t *testing.T) {
	base := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "1", Labels: map[string]string{"a": "b"}},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster},
		Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "198.18.0.1"}}},
			Conditions: []metav1.Condition{{Type: lb.ConditionAnnounced, Status: metav1.ConditionFalse}}},
	}
	for _, tc := range []struct {
		name   string
		change func(*v1.Service)
		want   bool
	}{
		{"Announced condition written", func(s *v1.Service) {
			s.ResourceVersion = "2"
			s.Status.Conditions[0].Status, s.Status.Conditions[0].Message = metav1.ConditionTrue, "announced over BGP"
		}, false},
		{"condition added", func(s *v1.Service) {
			s.ResourceVersion = "2"
			s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: "Other", Status: metav1.ConditionTrue})
		}, false},
		{"resync (same version)", func(*v1.Service) {}, true},
		{"address changed", func(s *v1.Service) {
			s.ResourceVersion = "2"
			s.Status.LoadBalancer.Ingress[0].IP = "198.18.0.2"
		}, true},
		{"policy changed with a condition", func(s *v1.Service) {
			s.ResourceVersion = "2"
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Status.Conditions = nil
		}, true},
		{"label", func(s *v1.Service) { s.ResourceVersion = "2"; s.Labels["a"] = "c" }, true},
		{"annotation", func(s *v1.Service) { s.ResourceVersion = "2"; s.Annotations = map[string]string{"k": "v"} }, true},
		{"deleted", func(s *v1.Service) { s.ResourceVersion = "2"; s.DeletionTimestamp = ptr.To(metav1.Now()) }, true},
		{"finalizer", func(s *v1.Service) { s.ResourceVersion = "2"; s.Finalizers = []string{"f"} }, true},
		{"owner", func(s *v1.Service) {
			s.ResourceVersion = "2"
			s.OwnerReferences = []metav1.OwnerReference{{Kind: "K", Name: "o", Controller: ptr.To(true)}}
		}, true},
		{"managed fields and version only", func(s *v1.Service) {
			s.ResourceVersion = "2"
			s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
		}, false},
		{"ingress mode", func(s *v1.Service) {
			s.ResourceVersion = "2"
			s.Status.LoadBalancer.Ingress[0].IPMode = ptr.To(v1.LoadBalancerIPModeProxy)
		}, true},
		{"class", func(s *v1.Service) { s.ResourceVersion = "2"; s.Spec.LoadBalancerClass = ptr.To("c") }, true},
		{"port", func(s *v1.Service) {
			s.ResourceVersion = "2"
			s.Spec.Ports = []v1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}
		}, true},
		{"selector", func(s *v1.Service) { s.ResourceVersion = "2"; s.Spec.Selector = map[string]string{"a": "b"} }, true},
		{"ingress port error", func(s *v1.Service) {
			s.ResourceVersion = "2"
			s.Status.LoadBalancer.Ingress[0].Ports = []v1.PortStatus{{Port: 80, Error: ptr.To("x")}}
		}, true},
		{"empty slices and maps for nil", func(s *v1.Service) {
			s.ResourceVersion = "2"
			s.Annotations, s.Finalizers, s.Spec.Ports, s.Spec.Selector = map[string]string{}, []string{}, []v1.ServicePort{}, map[string]string{}
		}, false},
	} {
		n := base.DeepCopy()
		tc.change(n)
		before := n.DeepCopy()
		if got := serviceMatters(base, n); got != tc.want {
			t.Errorf("%s: serviceMatters = %v, want %v", tc.name, got, tc.want)
		}
		if !equality.Semantic.DeepEqual(n, before) {
			t.Errorf("%s: serviceMatters changed the new object", tc.name)
		}
	}
}

// A failed mirror pass is retried without waiting for a Node change or the resync.
func TestMirrorFailureRetried(t *testing.T) {
	old := mirrorRetryDelay
	mirrorRetryDelay = 100 * time.Millisecond
	defer func() { mirrorRetryDelay = old }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1.NodeSpec{PodCIDR: "10.244.1.0/24"}}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(n), 0)
	mirror := &fakeMirror{fail: 2}
	a, err := New(Options{Config: &config.CloudConfig{}, Self: "n1", Informers: factory, Mirror: mirror, ResyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitUntil(t, "the mirror to succeed after two failures", func() bool {
		mirror.mu.Lock()
		defer mirror.mu.Unlock()
		return mirror.calls == 3 && mirror.fail == 0
	})
	time.Sleep(300 * time.Millisecond)
	mirror.mu.Lock()
	calls := mirror.calls
	mirror.mu.Unlock()
	if calls != 3 {
		t.Errorf("%d mirror passes, want 3: no retry after a success", calls)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A Service with several problems gets one event with all of them, once.
func TestProblemsJoinedPerService(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	a := &Agent{o: Options{Events: rec}, problems: map[string]string{}}
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	problems := []lb.Problem{
		{Service: svc, Err: errors.New("bad community")},
		{Service: svc, Err: errors.New("192.0.2.9 is in no configured pool: not announced")},
	}
	ctx := context.Background()
	a.reportProblems(ctx, problems, nil)
	a.reportProblems(ctx, problems, map[string]bool{"ns/web": true})
	if len(rec.Events) != 1 {
		t.Fatalf("%d events, want 1", len(rec.Events))
	}
	if e := <-rec.Events; !strings.Contains(e, "bad community; 192.0.2.9 is in no configured pool") {
		t.Errorf("event %q, want both problems", e)
	}
	a.reportProblems(ctx, nil, map[string]bool{"other/svc": true})
	if a.problems["ns/web"] == "" {
		t.Error("a pass that did not compute the Service cleared its problem")
	}
	a.reportProblems(ctx, nil, map[string]bool{"ns/web": true})
	if _, ok := a.problems["ns/web"]; ok {
		t.Error("the Service's problem is still recorded after a pass found none")
	}
}

// A pass for Services leaves the peers alone (they never depend on a Service); a
// BGPPeer change (PeersChanged) and a Node change apply them.
func TestPeersOnlyWhenTheyMayChange(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	self := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "self"}, Status: v1.NodeStatus{
		Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}},
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
	}}
	client := fake.NewClientset(self)
	factory := informers.NewSharedInformerFactory(client, 0)
	sp := newFakeSpeaker()
	a, err := New(Options{
		Config: &config.CloudConfig{
			BGP:          &config.BGPConfig{LocalASN: 65000, RouterID: "10.0.0.1"},
			LoadBalancer: &config.LoadBalancerConfig{Announcer: config.AnnouncerBGP},
		},
		Self: "self", Informers: factory, ResyncInterval: time.Hour, PeerResyncInterval: time.Hour,
		NewSpeaker: func(Identity) (Speaker, error) { return sp, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.Run(ctx) }()
	refreshes := func() int { sp.mu.Lock(); defer sp.mu.Unlock(); return sp.refresh }
	announced := func() int { sp.mu.Lock(); defer sp.mu.Unlock(); return sp.announces + sp.updates }
	waitUntil(t, "the first pass", func() bool { return refreshes() >= 1 && announced() > 0 })
	time.Sleep(200 * time.Millisecond) // a late notification of the Node's add settles
	first := refreshes()

	for i := range 3 {
		before := announced()
		svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("s", i)}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
			Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: fmt.Sprint("192.0.2.", i+1)}}}}}
		if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the Service's pass", func() bool { return announced() > before })
	}
	if n := refreshes(); n != first {
		t.Errorf("Service passes applied the peers: %d peer passes, want %d (before the Services)", n, first)
	}
	a.PeersChanged()
	waitUntil(t, "the peers applied after PeersChanged", func() bool { return refreshes() == first+1 })
	self.Labels = map[string]string{"rack": "r2"}
	if _, err := client.CoreV1().Nodes().Update(ctx, self, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the peers applied after the Node changed", func() bool { return refreshes() == first+2 })
}

// serviceMatters compares field by field: a field added by a Kubernetes upgrade must
// be compared there (or named here as ignored) before this passes.
func TestServiceMattersCoversFields(t *testing.T) {
	for typ, known := range map[reflect.Type][]string{
		reflect.TypeFor[metav1.ObjectMeta](): {"Name", "GenerateName", "Namespace", "SelfLink", "UID",
			"ResourceVersion", "Generation", "CreationTimestamp", "DeletionTimestamp",
			"DeletionGracePeriodSeconds", "Labels", "Annotations", "OwnerReferences", "Finalizers", "ManagedFields"},
		reflect.TypeFor[metav1.OwnerReference](): {"APIVersion", "Kind", "Name", "UID", "Controller", "BlockOwnerDeletion"},
		reflect.TypeFor[v1.ServiceSpec](): {"Ports", "Selector", "ClusterIP", "ClusterIPs", "Type", "ExternalIPs",
			"SessionAffinity", "LoadBalancerIP", "LoadBalancerSourceRanges", "ExternalName", "ExternalTrafficPolicy",
			"HealthCheckNodePort", "PublishNotReadyAddresses", "SessionAffinityConfig", "IPFamilies", "IPFamilyPolicy",
			"AllocateLoadBalancerNodePorts", "LoadBalancerClass", "InternalTrafficPolicy", "TrafficDistribution"},
		reflect.TypeFor[v1.ServicePort]():         {"Name", "Protocol", "AppProtocol", "Port", "TargetPort", "NodePort"},
		reflect.TypeFor[v1.ServiceStatus]():       {"LoadBalancer", "Conditions"},
		reflect.TypeFor[v1.LoadBalancerStatus]():  {"Ingress"},
		reflect.TypeFor[v1.LoadBalancerIngress](): {"IP", "Hostname", "IPMode", "Ports"},
		reflect.TypeFor[v1.PortStatus]():          {"Port", "Protocol", "Error"},
		reflect.TypeFor[v1.Service]():             {"TypeMeta", "ObjectMeta", "Spec", "Status"},
	} {
		var got []string
		for f := range typ.Fields() {
			got = append(got, f.Name)
		}
		if !slices.Equal(got, known) {
			t.Errorf("%s has fields %v, serviceMatters knows %v: compare the new ones (metaEqual, specEqual, ingressEqual)", typ, got, known)
		}
	}
}

// BenchmarkServiceMatters: the leader's Announced condition written on a Service, the
// update the agent sees for every Service after a burst.
func BenchmarkServiceMatters(b *testing.B) {
	o := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "svc-1234", UID: "0f6c1c2e-8d0f-4a55-9d89-1f1b8f0d2c11", ResourceVersion: "1",
			CreationTimestamp: metav1.Now(), Labels: map[string]string{"app": "svc-1234", "tier": "web"},
			Annotations: map[string]string{"baremetal-ccm.io/pool": "default"}, Finalizers: []string{"service.kubernetes.io/load-balancer-cleanup"}},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster,
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol}, IPFamilyPolicy: ptr.To(v1.IPFamilyPolicySingleStack),
			InternalTrafficPolicy: ptr.To(v1.ServiceInternalTrafficPolicyCluster), AllocateLoadBalancerNodePorts: ptr.To(true)},
		Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "198.18.4.210", IPMode: ptr.To(v1.LoadBalancerIPModeVIP)}}}},
	}
	n := o.DeepCopy()
	n.ResourceVersion = "2"
	n.Status.Conditions = []metav1.Condition{{Type: lb.ConditionAnnounced, Status: metav1.ConditionTrue, Reason: "Announced", Message: "announced over BGP"}}
	b.ReportAllocs()
	for b.Loop() {
		if serviceMatters(o, n) {
			b.Fatal("a condition-only update matters")
		}
	}
}
