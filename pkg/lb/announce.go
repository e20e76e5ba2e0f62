package lb

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// Service annotations for announcements.
const (
	// AnnotationCommunities adds BGP communities (comma list: ASN:value or a
	// well-known name) to the Service's announcements, after its pool's.
	AnnotationCommunities = "baremetal-ccm.io/bgp-communities"
	// AnnotationLargeCommunities adds BGP large communities (comma list a:b:c).
	AnnotationLargeCommunities = "baremetal-ccm.io/bgp-large-communities"
)

// LabelExcludeFromLB is the standard label that keeps a node out of load balancers.
const LabelExcludeFromLB = "node.kubernetes.io/exclude-from-external-load-balancers"

// Announcement is one prefix to announce: with no NextHops the speaker's own address
// is the next hop; otherwise one path per next hop (ADD-PATH).
type Announcement struct {
	Prefix           netip.Prefix
	NextHops         []netip.Addr
	Communities      []string
	LargeCommunities []string
	LocalPref        *uint32
	// GracefulShutdown are next hops of draining nodes (bgp.gracefulShutdown), to be
	// announced with the GRACEFUL_SHUTDOWN community and LOCAL_PREF 0 (disjoint from
	// NextHops); SelfGracefulShutdown marks the path with next hop self so.
	GracefulShutdown     []netip.Addr
	SelfGracefulShutdown bool
	// Peers, when not nil, are the only peers (router addresses) the prefix goes
	// to (BGPAdvertisements); nil: every peer.
	Peers []netip.Addr
}

// Advertising is how an address is advertised (BGPAdvertisements, pkg/adverts):
// to Peers only when not nil (empty: to none), with these communities and local
// preference added.
type Advertising struct {
	Peers                         []netip.Addr
	Communities, LargeCommunities []string
	LocalPref                     *uint32
}

// State is what the announcements are computed from: the replica's informer caches.
type State struct {
	// Services are all Services; only those Owned with ingress IPs are announced.
	Services []*v1.Service
	// EndpointSlices returns the slices of a Service (label kubernetes.io/service-name).
	EndpointSlices func(namespace, name string) []*discoveryv1.EndpointSlice
	// Node returns a Node by name.
	Node func(name string) (*v1.Node, bool)
	// Nodes are all Nodes (for next-hop mode nodes); with SelfOnly, Self's is enough
	// (an agent caches only its own).
	Nodes []*v1.Node
	// Pool returns the pool an IP belongs to. When set, an IP in no pool (its pool
	// was removed or shrunk) is not announced.
	Pool func(netip.Addr) (*config.AddressPool, bool)
	// NextHop is config.NextHopSelf or config.NextHopNodes.
	NextHop string
	// Self is the name of the Node this replica runs on ("" when unknown): in
	// next-hop mode self, a Service with externalTrafficPolicy Local is announced only
	// when this node has a ready endpoint of it.
	Self string
	// SelfOnly announces each IP with this host (Self) as next hop, whatever NextHop
	// says, and only while Self's Node is Eligible (and, for externalTrafficPolicy
	// Local, has a ready endpoint): the per-node model of agents on worker hosts.
	SelfOnly bool
	// Healthy, when set (bgp.nodeHealthCheck), leaves out of a Service's next hops
	// (mode nodes) the nodes whose health endpoint for it fails.
	Healthy func(node *v1.Node, svc *v1.Service) bool
	// GracefulShutdown, when set (bgp.gracefulShutdown), keeps a draining node's
	// paths, marked, until its endpoints are gone and its time has passed.
	GracefulShutdown *GracefulShutdown
	// Advertise, when set, says how an address of the named pool held by svc is
	// advertised, or false when nothing says (to every peer).
	Advertise func(svc *v1.Service, pool string) (Advertising, bool)
}

// Problem is a Service whose announcement could not be computed as asked (for
// example a malformed community annotation); the rest of its announcement proceeds
// without the bad part.
type Problem struct {
	Service *v1.Service
	Err     error
}

// announcedService reports whether Desired announces svc's addresses: ours and not
// being deleted.
func announcedService(svc *v1.Service) bool {
	return Owned(svc) && svc.DeletionTimestamp == nil
}

// Desired computes every announcement, sorted by prefix. It is a pure function of s.
func Desired(s State) ([]Announcement, []Problem) {
	// Sized once, for every address of the Services announced: growing a slice of
	// 10,000 announcements by doubling allocated twice what it holds.
	n := 0
	for _, svc := range s.Services {
		if announcedService(svc) {
			n += len(svc.Status.LoadBalancer.Ingress)
		}
	}
	out := make([]Announcement, 0, n)
	var problems []Problem
	seen := make(map[netip.Prefix]int, n)
	selfEligible := false
	var selfNode *v1.Node
	if s.Node != nil {
		if n, ok := s.Node(s.Self); ok {
			selfNode = n
			selfEligible = Eligible(n)
		}
	}
	// Serving endpoints matter only while some node drains.
	gs := s.GracefulShutdown
	if gs != nil && !anyDraining(gs, s.Nodes, selfNode) {
		gs = nil
	}
	for _, svc := range s.Services {
		if !announcedService(svc) {
			continue
		}
		ips := IngressIPs(svc)
		if len(ips) == 0 {
			continue
		}
		comms, large, err := serviceCommunities(svc)
		if err != nil {
			problems = append(problems, Problem{Service: svc, Err: err})
		}
		local := svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
		var ready, serving map[string]bool
		if local || gs != nil {
			eps := s.EndpointSlices(svc.Namespace, svc.Name)
			ready = ReadyEndpointNodes(eps)
			if gs != nil {
				serving = ServingEndpointNodes(eps)
			}
		}
		for _, ip := range ips {
			a := Announcement{Prefix: netip.PrefixFrom(ip, ip.BitLen())}
			if s.Pool != nil {
				p, ok := s.Pool(ip)
				if !ok {
					// The pool was removed or shrunk: the Service keeps its status (the
					// leader reports it), but the address is no longer announced.
					problems = append(problems, Problem{Service: svc, Err: fmt.Errorf("%v is in no configured pool: not announced", ip)})
					continue
				}
				a.Communities = append(a.Communities, p.Communities...)
				a.LargeCommunities = append(a.LargeCommunities, p.LargeCommunities...)
				a.LocalPref = p.LocalPreference
				if s.Advertise != nil {
					if adv, ok := s.Advertise(svc, p.Name); ok {
						a.Peers = adv.Peers // nil: every peer
						a.Communities = appendUnique(a.Communities, adv.Communities...)
						a.LargeCommunities = appendUnique(a.LargeCommunities, adv.LargeCommunities...)
						if adv.LocalPref != nil && (a.LocalPref == nil || *adv.LocalPref > *a.LocalPref) {
							a.LocalPref = adv.LocalPref
						}
					}
				}
			}
			a.Communities = appendUnique(a.Communities, comms...)
			a.LargeCommunities = appendUnique(a.LargeCommunities, large...)
			if s.NextHop == config.NextHopNodes && !s.SelfOnly {
				a.NextHops, a.GracefulShutdown = nodeNextHops(s.Nodes, ip.Is4(), local, ready, serving, gs, func(n *v1.Node) bool { return s.Healthy == nil || s.Healthy(n, svc) })
				if len(a.NextHops)+len(a.GracefulShutdown) == 0 {
					continue // no eligible node: announcing would blackhole the traffic
				}
			} else {
				// Next hop self. An agent (SelfOnly) announces only while its Node takes
				// traffic; with a Local Service, a host announces only with a ready local
				// endpoint (its kube-proxy would drop the traffic otherwise).
				eligible := (!s.SelfOnly || selfEligible) && (!local || ready[s.Self])
				announce, gshut := gs.hop(selfNode, local, eligible, serving[s.Self])
				if !announce {
					continue // this host takes no traffic for it: another host announces it
				}
				a.SelfGracefulShutdown = gshut
			}
			if i, dup := seen[a.Prefix]; dup {
				// a shared IP: one announcement, next hops and communities merged; a path
				// one Service announces plainly is not marked for the other draining
				out[i].NextHops = appendUniqueAddr(out[i].NextHops, a.NextHops...)
				out[i].GracefulShutdown = appendUniqueAddr(out[i].GracefulShutdown, a.GracefulShutdown...)
				out[i].SelfGracefulShutdown = out[i].SelfGracefulShutdown && a.SelfGracefulShutdown
				out[i].Communities = appendUnique(out[i].Communities, a.Communities...)
				out[i].LargeCommunities = appendUnique(out[i].LargeCommunities, a.LargeCommunities...)
				if a.LocalPref != nil && (out[i].LocalPref == nil || *a.LocalPref > *out[i].LocalPref) {
					out[i].LocalPref = a.LocalPref // the highest, whatever the Services' order
				}
				if out[i].Peers != nil {
					if a.Peers == nil {
						out[i].Peers = nil // one of them goes to every peer
					} else {
						out[i].Peers = appendUniqueAddr(out[i].Peers, a.Peers...)
						slices.SortFunc(out[i].Peers, netip.Addr.Compare)
					}
				}
				continue
			}
			seen[a.Prefix] = len(out)
			out = append(out, a)
		}
	}
	for i := range out {
		if len(out[i].GracefulShutdown) > 0 {
			out[i].GracefulShutdown = slices.DeleteFunc(out[i].GracefulShutdown, func(h netip.Addr) bool { return slices.Contains(out[i].NextHops, h) })
			slices.SortFunc(out[i].GracefulShutdown, func(a, b netip.Addr) int { return a.Compare(b) })
		}
	}
	for i := range out {
		slices.SortFunc(out[i].NextHops, func(a, b netip.Addr) int { return a.Compare(b) })
	}
	sort.Slice(out, func(i, j int) bool { return prefixLess(out[i].Prefix, out[j].Prefix) })
	return out, problems
}

// ConditionPoweredOn is the power monitor's Node condition (powermon): False only
// when the host's BMC, checked to name the Node's machine, reports it off.
const ConditionPoweredOn v1.NodeConditionType = "baremetal-ccm.io/PoweredOn"

// Eligible reports whether a node may receive load-balancer traffic: Ready, not being
// deleted, not labeled node.kubernetes.io/exclude-from-external-load-balancers, and
// not reported off by its BMC (condition baremetal-ccm.io/PoweredOn False: a host
// that lost power is dropped at the BMC's reading, before its Node goes NotReady).
func Eligible(n *v1.Node) bool {
	if n.DeletionTimestamp != nil {
		return false
	}
	if _, excluded := n.Labels[LabelExcludeFromLB]; excluded {
		return false
	}
	ready := false
	for _, c := range n.Status.Conditions {
		switch c.Type {
		case v1.NodeReady:
			ready = c.Status == v1.ConditionTrue
		case ConditionPoweredOn:
			if c.Status == v1.ConditionFalse {
				return false
			}
		}
	}
	return ready
}

// nodeNextHops returns the next hops of a Service's IP in mode nodes: plain ones, and
// those of draining nodes to mark with GRACEFUL_SHUTDOWN (gs.hop).
func nodeNextHops(nodes []*v1.Node, v4, local bool, ready, serving map[string]bool, gs *GracefulShutdown, healthy func(*v1.Node) bool) (hops, gshut []netip.Addr) {
	for _, n := range nodes {
		if !Eligible(n) || !healthy(n) {
			continue
		}
		announce, marked := gs.hop(n, local, !local || ready[n.Name], serving[n.Name])
		if !announce {
			continue
		}
		if ip, ok := InternalIP(n, v4); ok {
			if marked {
				gshut = append(gshut, ip)
			} else {
				hops = append(hops, ip)
			}
		}
	}
	return hops, gshut
}

// anyDraining reports whether a node of nodes, or self, drains.
func anyDraining(gs *GracefulShutdown, nodes []*v1.Node, self *v1.Node) bool {
	if self != nil {
		if _, ok := gs.Draining(self); ok {
			return true
		}
	}
	for _, n := range nodes {
		if _, ok := gs.Draining(n); ok {
			return true
		}
	}
	return false
}

// InternalIP returns the Node's first InternalIP of the family.
func InternalIP(n *v1.Node, v4 bool) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Unmap().Is4() == v4 {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// ReadyEndpointNodes returns the nodes that host a ready endpoint in the slices.
func ReadyEndpointNodes(slices []*discoveryv1.EndpointSlice) map[string]bool {
	nodes := map[string]bool{}
	for _, sl := range slices {
		for _, ep := range sl.Endpoints {
			if ep.NodeName == nil || ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			nodes[*ep.NodeName] = true
		}
	}
	return nodes
}

func serviceCommunities(svc *v1.Service) (comms, large []string, err error) {
	var errs []string
	if v, ok := svc.Annotations[AnnotationCommunities]; ok {
		for _, c := range splitList(v) {
			if _, e := config.ParseCommunity(c); e != nil {
				errs = append(errs, fmt.Sprintf("annotation %s: %v", AnnotationCommunities, e))
				continue
			}
			comms = append(comms, c)
		}
	}
	if v, ok := svc.Annotations[AnnotationLargeCommunities]; ok {
		for _, c := range splitList(v) {
			if _, e := config.ParseLargeCommunity(c); e != nil {
				errs = append(errs, fmt.Sprintf("annotation %s: %v", AnnotationLargeCommunities, e))
				continue
			}
			large = append(large, c)
		}
	}
	if len(errs) > 0 {
		err = fmt.Errorf("%s (announced without them)", strings.Join(errs, "; "))
	}
	return comms, large, err
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func appendUnique(dst []string, vs ...string) []string {
	for _, v := range vs {
		if !slices.Contains(dst, v) {
			dst = append(dst, v)
		}
	}
	return dst
}

func appendUniqueAddr(dst []netip.Addr, vs ...netip.Addr) []netip.Addr {
	for _, v := range vs {
		if !slices.Contains(dst, v) {
			dst = append(dst, v)
		}
	}
	return dst
}

func prefixLess(a, b netip.Prefix) bool {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c < 0
	}
	return a.Bits() < b.Bits()
}
