//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
	"github.com/baremetal-ccm/baremetal-ccm/test/frr"
)

// routerPath is what a router holds for a prefix through one BGP next hop (over
// either session: an IPv4 prefix comes over the IPv6 session too).
type routerPath struct {
	// preferred: the router forwards over this next hop (a best path, or ECMP with it).
	preferred bool
	// gshut and lp0: every path through it carries 65535:0, and LOCAL_PREF 0.
	gshut, lp0 bool
	// communities as the router shows them
	communities []string
}

// add merges one path through the next hop into p (first: p is the zero value).
func (p routerPath) add(first, preferred, gshut bool, lp *uint32, communities []string) routerPath {
	lp0 := lp != nil && *lp == 0
	if first {
		return routerPath{preferred: preferred, gshut: gshut, lp0: lp0, communities: communities}
	}
	p.preferred = p.preferred || preferred
	p.gshut, p.lp0 = p.gshut && gshut, p.lp0 && lp0
	return p
}

func (p routerPath) String() string {
	return fmt.Sprintf("{preferred %v gshut %v localPref0 %v communities %v}", p.preferred, p.gshut, p.lp0, p.communities)
}

// drainRouter is what TestGracefulShutdownDrain reads at a router.
type drainRouter struct {
	nodeAddr func(i int) netip.Addr
	paths    func(ctx context.Context, prefix netip.Prefix) (map[netip.Addr]routerPath, error)
	// preferredAt is the router's own timestamp (its log) of the first change at or
	// after since that left prefix forwarded over only, the next hop that does not
	// drain (zero if none was logged yet).
	preferredAt func(prefix netip.Prefix, since time.Time, only netip.Addr) (time.Time, error)
	// dump shows the router's view of prefix, for a failure.
	dump func(prefix netip.Prefix) string
}

func birdDrainRouter(r *bird.Router) drainRouter {
	return drainRouter{
		dump: func(p netip.Prefix) string {
			out, err := r.Birdc(context.Background(), "show", "route", p.String(), "all")
			return fmt.Sprintf("%s%v", out, err)
		},
		nodeAddr: func(i int) netip.Addr { return r.NodeAddr(i, false) },
		paths: func(ctx context.Context, p netip.Prefix) (map[netip.Addr]routerPath, error) {
			rs, err := r.RoutesFor(ctx, p)
			if err != nil {
				return nil, err
			}
			out := map[netip.Addr]routerPath{}
			var best *uint32
			for _, rt := range rs {
				if rt.Primary {
					best = rt.LocalPref
				}
			}
			for _, rt := range rs {
				if len(rt.BGPNextHop) == 0 {
					continue
				}
				// BIRD's kernel protocol merges the paths as good as the best one
				// (merge paths): the same LOCAL_PREF as the primary.
				preferred := rt.Primary || best != nil && rt.LocalPref != nil && *rt.LocalPref == *best
				h := rt.BGPNextHop[0]
				p, seen := out[h]
				out[h] = p.add(!seen, preferred, slices.Contains(rt.Communities, "65535:0"), rt.LocalPref, rt.Communities)
			}
			return out, nil
		},
		preferredAt: func(p netip.Prefix, since time.Time, _ netip.Addr) (time.Time, error) {
			// The marked path's import (the old path replaced): from then on BIRD's best
			// path is the other one, and the kernel gets only it.
			evs, err := r.LogEvents(since)
			if err != nil {
				return time.Time{}, err
			}
			for _, e := range evs {
				if (e.Kind == bird.EventRouteAdded || e.Kind == bird.EventRouteRemoved) && e.Prefix == p && e.Protocol != "k4" && e.Protocol != "k6" {
					return e.Time, nil
				}
			}
			return time.Time{}, nil
		},
	}
}

func frrDrainRouter(r *frr.Router) drainRouter {
	return drainRouter{
		dump: func(p netip.Prefix) string {
			out, err := r.Vtysh(context.Background(), "show bgp ipv4 unicast "+p.String(), "show ip route "+p.String())
			return fmt.Sprintf("%s%v", out, err)
		},
		nodeAddr: func(i int) netip.Addr { return r.NodeAddr(i, false) },
		paths: func(ctx context.Context, p netip.Prefix) (map[netip.Addr]routerPath, error) {
			rs, err := r.RoutesFor(ctx, p)
			if err != nil {
				return nil, err
			}
			out := map[netip.Addr]routerPath{}
			for _, rt := range rs {
				if len(rt.NextHops) == 0 {
					continue
				}
				h := rt.NextHops[0]
				p, seen := out[h]
				out[h] = p.add(!seen, rt.Best || rt.Multipath, slices.Contains(rt.Communities, "gracefulShutdown"), rt.LocalPref, rt.Communities)
			}
			return out, nil
		},
		preferredAt: func(p netip.Prefix, since time.Time, only netip.Addr) (time.Time, error) {
			// bgpd gives zebra the prefix with the draining next hop gone.
			evs, err := r.LogEvents(since)
			if err != nil {
				return time.Time{}, err
			}
			for _, e := range evs {
				if e.Kind == frr.EventRouteInstall && e.Prefix == p && slices.Equal(e.NextHops, []netip.Addr{only}) {
					return e.Time, nil
				}
			}
			return time.Time{}, nil
		},
	}
}

// TestGracefulShutdownDrain: bgp.gracefulShutdown, next-hop mode nodes, a Local
// Service with one endpoint on each of two nodes and a Cluster Service. The test
// plays the drain tool and the EndpointSlice controller: it cordons node 0 and sets
// DrainInProgress True, marks node 0's endpoint terminating (the eviction), and
// removes it 2 s later (the pod gone). At the router (BIRD and FRR, each with the
// documented policy: GRACEFUL_SHUTDOWN sets LOCAL_PREF 0), ten trials each:
//   - node 0's path carries 65535:0 with LOCAL_PREF 0 and the router forwards over
//     node 1 only, by the router's own log timestamp, before the endpoint is removed;
//   - node 0's path stays (marked) until the endpoint is removed, then is withdrawn;
//   - uncordoning restores the plain path and ECMP over both nodes.
//
// In the first trial the Cluster Service, with no endpoints, keeps node 0's path
// marked for gracefulShutdown.time (3 s) and withdraws it after.
func TestGracefulShutdownDrain(t *testing.T) {
	t.Run("BIRD", func(t *testing.T) {
		r := bird.Start(t, bird.Options{Speakers: make([]bird.Speaker, 1), EventLog: true})
		l := newLBLabWith(t, birdTor(r, 1))
		l.router = r
		gracefulDrain(t, l, birdDrainRouter(r))
	})
	t.Run("FRR", func(t *testing.T) {
		r := frr.Start(t, frr.Options{Speakers: make([]frr.Speaker, 1)})
		gracefulDrain(t, newLBLabWith(t, frrTor(r, 1)), frrDrainRouter(r))
	})
}

func gracefulDrain(t *testing.T, l *lbLab, r drainRouter) {
	const (
		trials    = 10
		grace     = 2 * time.Second // the evicted pod's termination
		shutdown  = 3 * time.Second // bgp.gracefulShutdown.time
		pollEvery = 20 * time.Millisecond
	)
	var names []string
	addrs := []netip.Addr{r.nodeAddr(0), r.nodeAddr(1)}
	for i := range 2 {
		name := fmt.Sprintf("gs-%d-%s", i, l.lease[len(l.lease)-4:])
		names = append(names, name)
		l.nodes = append(l.nodes, name)
		if _, err := framework.CreateNode(l.ctx, l.cp.Client, framework.NodeSpec{Name: name, InternalIPs: []string{addrs[i].String()}, Ready: ready(v1.ConditionTrue), Labels: map[string]string{}}); err != nil {
			t.Fatal(err)
		}
	}
	l.bgpExtra = fmt.Sprintf("  gracefulShutdown: {time: %s}\n", shutdown)
	l.start(0, "nodes")
	l.createService("local", func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal })
	l.createService("web", nil)
	local := netip.PrefixFrom(l.waitIPs("local", 1)[0], 32)
	web := netip.PrefixFrom(l.waitIPs("web", 1)[0], 32)
	l.createEndpoints("local", names...)
	plain := func(ps map[netip.Addr]routerPath) bool {
		for _, a := range addrs {
			p, ok := ps[a]
			if !ok || p.gshut || !p.preferred || p.lp0 {
				return false
			}
		}
		return len(ps) == 2
	}
	waitRouter := func(prefix netip.Prefix, what string, cond func(map[netip.Addr]routerPath) bool) time.Time {
		t.Helper()
		var at time.Time
		var last map[netip.Addr]routerPath
		err := framework.WaitForInterval(l.ctx, 60*time.Second, pollEvery, what, func(ctx context.Context) (bool, error) {
			ps, err := r.paths(ctx, prefix)
			if err == nil && cond(ps) {
				at = time.Now()
				return true, nil
			}
			if err == nil {
				last = ps
			}
			return false, err
		})
		if err != nil {
			t.Fatalf("%v; the router's paths for %s last: %+v\n%s", err, prefix, last, r.dump(prefix))
		}
		return at
	}
	marked := func(ps map[netip.Addr]routerPath) bool {
		p, ok := ps[addrs[0]]
		o, other := ps[addrs[1]]
		return ok && other && p.gshut && p.lp0 && !p.preferred && o.preferred
	}
	waitRouter(local, "both next hops plain for the Local Service", plain)
	waitRouter(web, "both next hops plain for the Cluster Service", plain)

	var leads, reacts []time.Duration
	for trial := range trials {
		start := time.Now()
		// The drain tool: cordon, then DrainInProgress True.
		setUnschedulable(t, l, names[0], true)
		if err := framework.SetNodeCondition(l.ctx, l.cp.Client, names[0], v1.NodeCondition{Type: v1.NodeDrainInProgress, Status: v1.ConditionTrue, Reason: "Draining"}); err != nil {
			t.Fatal(err)
		}
		drainAt := time.Now()
		// The eviction: node 0's endpoint is terminating but still serving.
		setEndpoints(t, l, "local", names, discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)})
		waitRouter(local, "node 0's path marked and node 1 preferred", marked)
		// Until the pod is gone, node 0's path stays (marked).
		for time.Since(drainAt) < grace {
			ps, err := r.paths(l.ctx, local)
			if err != nil {
				t.Fatal(err)
			}
			if !marked(ps) {
				t.Fatalf("trial %d: %v after the drain began, before the endpoint was removed, the router holds %+v: want node 0's path kept with LOCAL_PREF 0", trial, time.Since(drainAt), ps)
			}
			if trial == 0 && time.Since(drainAt) > shutdown/2 {
				if ps, err := r.paths(l.ctx, web); err != nil || !marked(ps) {
					t.Fatalf("the Cluster Service's path through node 0 at %v of %v: %+v, %v; want kept marked", time.Since(drainAt), shutdown, ps, err)
				}
			}
			time.Sleep(pollEvery)
		}
		removedAt := time.Now()
		setEndpoints(t, l, "local", names[1:], discoveryv1.EndpointConditions{Ready: ptr.To(true)})
		waitRouter(local, "node 0's path withdrawn after its endpoint was removed", func(ps map[netip.Addr]routerPath) bool {
			_, ok := ps[addrs[0]]
			return !ok && len(ps) == 1
		})
		if trial == 0 {
			waitRouter(web, "the Cluster Service's path through node 0 withdrawn after gracefulShutdown.time", func(ps map[netip.Addr]routerPath) bool {
				_, ok := ps[addrs[0]]
				return !ok && len(ps) == 1
			})
		}
		at, err := r.preferredAt(local, start, addrs[1])
		if err != nil {
			t.Fatal(err)
		}
		if at.IsZero() || !at.Before(removedAt) {
			t.Fatalf("trial %d: the router logged the move to node 1 at %v, the endpoint was removed at %v: want the move first", trial, at, removedAt)
		}
		leads = append(leads, removedAt.Sub(at))
		reacts = append(reacts, at.Sub(drainAt))

		// Uncordon: the plain paths come back.
		if err := framework.SetNodeCondition(l.ctx, l.cp.Client, names[0], v1.NodeCondition{Type: v1.NodeDrainInProgress, Status: v1.ConditionFalse, Reason: "Done"}); err != nil {
			t.Fatal(err)
		}
		setUnschedulable(t, l, names[0], false)
		setEndpoints(t, l, "local", names, discoveryv1.EndpointConditions{Ready: ptr.To(true)})
		waitRouter(local, "both next hops plain again after uncordon", plain)
		waitRouter(web, "both next hops plain again for the Cluster Service", plain)
	}
	t.Logf("DrainInProgress written to the router's move to node 1 (its log): %v", reacts)
	t.Logf("the router moved traffic to node 1 this long before the endpoint on node 0 was removed (router log vs API write): %v", leads)
}

func setUnschedulable(t *testing.T, l *lbLab, name string, on bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := l.cp.Client.CoreV1().Nodes().Get(l.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Unschedulable = on
		_, err = l.cp.Client.CoreV1().Nodes().Update(l.ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setEndpoints replaces the Service's EndpointSlice (createEndpoints') with one
// endpoint per node: the first with conditions c, the others ready.
func setEndpoints(t *testing.T, l *lbLab, svc string, nodes []string, c discoveryv1.EndpointConditions) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sl, err := l.cp.Client.DiscoveryV1().EndpointSlices(l.ns).Get(l.ctx, svc+"-e2e", metav1.GetOptions{})
		if err != nil {
			return err
		}
		sl.Endpoints = nil
		for i, n := range nodes {
			ec := discoveryv1.EndpointConditions{Ready: ptr.To(true)}
			if i == 0 {
				ec = c
			}
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.10", i)}, NodeName: ptr.To(n), Conditions: ec})
		}
		_, err = l.cp.Client.DiscoveryV1().EndpointSlices(l.ns).Update(l.ctx, sl, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
