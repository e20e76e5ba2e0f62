package lb

import (
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// CommunityGracefulShutdown is the GRACEFUL_SHUTDOWN well-known community (RFC 8326,
// 65535:0) put on the paths of a draining node.
const CommunityGracefulShutdown = "graceful-shutdown"

// Draining reports whether node is being drained or shut down (bgp.gracefulShutdown)
// and since when: GracefulNodeShutdownInProgress True (since its lastTransitionTime),
// or cordoned (spec.unschedulable) with DrainInProgress True (since that condition's
// lastTransitionTime), or, with onCordon, cordoned at all (since is zero: the API
// keeps no time for a cordon, and the caller supplies when it first saw it). The
// conditions are the Node lifecycle conditions of Kubernetes 1.37 (KEP-5683), set by
// drain tools and the kubelet.
func Draining(node *v1.Node, onCordon bool) (since time.Time, ok bool) {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeGracefulNodeShutdownInProgress && c.Status == v1.ConditionTrue {
			return c.LastTransitionTime.Time, true
		}
	}
	if !node.Spec.Unschedulable {
		return time.Time{}, false
	}
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeDrainInProgress && c.Status == v1.ConditionTrue {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, onCordon
}

// GracefulShutdown is the part of State that drains nodes' paths (RFC 8326).
type GracefulShutdown struct {
	// Draining says whether a node is draining and since when (see Draining; a zero
	// time counts as "long ago").
	Draining func(*v1.Node) (since time.Time, ok bool)
	// Time is the least time a draining node's paths stay announced.
	Time time.Duration
	// Now is the time of this computation.
	Now time.Time
}

// hop says how the path through node (a next hop, or this host in mode self) is
// announced for a Service: announce false leaves it out; gshut marks it with
// GRACEFUL_SHUTDOWN. eligible is whether the node takes the Service's traffic when
// not draining (Eligible, healthy and, for a Local Service, a ready endpoint);
// serving whether it still has a serving endpoint of the Service (ready, or
// terminating but serving). A draining node's path is kept, marked, while it is
// eligible or serving, until Time has passed since the drain began and no serving
// endpoint is left; for a Local Service only while a serving endpoint is left (its
// kube-proxy drops the traffic once none is).
func (g *GracefulShutdown) hop(node *v1.Node, local, eligible, serving bool) (announce, gshut bool) {
	if g == nil || node == nil {
		return eligible, false
	}
	since, draining := g.Draining(node)
	if !draining {
		return eligible, false
	}
	if !Eligible(node) {
		return false, false // NotReady, excluded, powered off: gone at once as always
	}
	if local {
		return serving, true
	}
	return serving || g.Now.Before(since.Add(g.Time)), true
}

// Next returns the earliest time after Now at which a draining node's Time runs out
// (zero if none): the caller recomputes the announcements then.
func (g *GracefulShutdown) Next(nodes []*v1.Node) time.Time {
	var next time.Time
	if g == nil {
		return next
	}
	for _, n := range nodes {
		since, ok := g.Draining(n)
		if !ok {
			continue
		}
		if end := since.Add(g.Time); end.After(g.Now) && (next.IsZero() || end.Before(next)) {
			next = end
		}
	}
	return next
}

// ServingEndpointNodes returns the nodes that host a serving endpoint in the slices:
// ready, or terminating but still serving (a pod being evicted that still answers).
func ServingEndpointNodes(slices []*discoveryv1.EndpointSlice) map[string]bool {
	nodes := map[string]bool{}
	for _, sl := range slices {
		for _, ep := range sl.Endpoints {
			if ep.NodeName == nil {
				continue
			}
			c := ep.Conditions
			ready := c.Ready == nil || *c.Ready
			serving := c.Serving != nil && *c.Serving
			if ready || serving {
				nodes[*ep.NodeName] = true
			}
		}
	}
	return nodes
}
