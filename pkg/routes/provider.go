package routes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
)

// ProviderOptions configure a Provider.
type ProviderOptions struct {
	// NodeName is the name of the Node this process runs on, if any. Routes to it
	// are never programmed (its pods are local); Nodes whose InternalIP is an
	// address of this host are recognized as it too.
	NodeName string
	// OffLinkViaFabric makes CreateRoute succeed without a kernel route when the
	// node's InternalIP is not on a subnet connected to this host: set it when the
	// BGP speaker exports pod CIDRs, so the fabric routes the node's pod traffic.
	// Unset, such a route is an error naming the node (see the package doc).
	OffLinkViaFabric bool
	// NodesSynced, if set, is the Node informer's HasSynced: ListRoutes fails until
	// it is true, because an empty lister would make every route look orphaned
	// (Blackhole) and the route controller would delete them all.
	NodesSynced func() bool
}

// Provider implements cloudprovider.Routes on the kernel of the host it runs on
// (the route controller runs on the leader only). It is safe for concurrent use
// (the route controller calls it from many goroutines). The cluster name is not
// used: the table and protocol are the cluster's.
type Provider struct {
	k     *Kernel
	nodes corelisters.NodeLister
	opts  ProviderOptions

	mu sync.Mutex
	// fabric holds the routes CreateRoute accepted without a kernel route because
	// the gateway is off-link (OffLinkViaFabric), so ListRoutes reports them. It is
	// memory only: after a restart the route controller re-creates them.
	fabric map[netip.Prefix]fabricRoute
}

type fabricRoute struct {
	node types.NodeName
	gw   netip.Addr
}

var _ cloudprovider.Routes = (*Provider)(nil)

// ErrNodesNotSynced: ListRoutes was called before the Node informer synced.
var ErrNodesNotSynced = errors.New("routes: the Node informer has not synced yet")

// NewProvider returns the cloudprovider.Routes of this host. nodes is the Node
// lister of the controller's informer factory (the provider's SetInformers); it
// maps gateways back to Nodes in ListRoutes and supplies addresses when the route
// controller passes none.
func NewProvider(k *Kernel, nodes corelisters.NodeLister, opts ProviderOptions) *Provider {
	RegisterMetrics()
	return &Provider{k: k, nodes: nodes, opts: opts, fabric: map[netip.Prefix]fabricRoute{}}
}

// ListRoutes returns our routes in the kernel (our table and protocol only). Each
// has TargetNode recovered from its gateway (the Node whose InternalIP it is), or
// Blackhole set when no Node has that InternalIP, so the route controller deletes
// it. TargetNodeAddresses carries the Node's addresses when the gateway is still
// the Node's InternalIP of that family, and only the gateway otherwise, so the route
// controller replaces a route whose Node changed address. Routes to this host and
// routes accepted as fabric-routed are listed without a kernel route.
func (p *Provider) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	if p.opts.NodesSynced != nil && !p.opts.NodesSynced() {
		return nil, ErrNodesNotSynced
	}
	ours, _, err := p.k.List(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := p.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("routes: list Nodes: %w", err)
	}
	local, err := p.k.LocalAddrs(ctx)
	if err != nil {
		return nil, err
	}
	byIP := make(map[netip.Addr]*v1.Node, len(nodes))
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != v1.NodeInternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				if _, dup := byIP[ip.Unmap()]; !dup {
					byIP[ip.Unmap()] = n
				}
			}
		}
	}
	out := make([]*cloudprovider.Route, 0, len(ours))
	inKernel := make(map[netip.Prefix]bool, len(ours))
	for _, r := range ours {
		inKernel[r.Dst] = true
		route := &cloudprovider.Route{DestinationCIDR: r.Dst.String()}
		n, ok := byIP[r.Gw]
		if !r.Gw.IsValid() || !ok {
			route.Name = RouteName("", r.Dst, gwString(r.Gw))
			route.Blackhole = true
			out = append(out, route)
			continue
		}
		route.Name = RouteName(types.NodeName(n.Name), r.Dst, r.Gw.String())
		route.TargetNode = types.NodeName(n.Name)
		route.EnableNodeAddresses = true
		if cur, ok := nodeGateway(n.Status.Addresses, r.Dst); ok && cur == r.Gw {
			route.TargetNodeAddresses = n.Status.Addresses
		} else {
			route.TargetNodeAddresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: r.Gw.String()}}
		}
		out = append(out, route)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range nodes {
		for _, c := range n.Spec.PodCIDRs {
			dst, err := parseCIDR(c)
			if err != nil || inKernel[dst] {
				continue
			}
			gw, ok := nodeGateway(n.Status.Addresses, dst)
			if !ok && n.Name != p.opts.NodeName {
				continue
			}
			via := ""
			switch f, isFabric := p.fabric[dst]; {
			case n.Name == p.opts.NodeName || (ok && local[gw]):
				via = viaLocal
			case isFabric && f.node == types.NodeName(n.Name) && f.gw == gw:
				via = viaFabric
			default:
				continue
			}
			out = append(out, &cloudprovider.Route{
				Name:                RouteName(types.NodeName(n.Name), dst, via),
				TargetNode:          types.NodeName(n.Name),
				EnableNodeAddresses: true,
				TargetNodeAddresses: n.Status.Addresses,
				DestinationCIDR:     dst.String(),
			})
		}
	}
	return out, nil
}

// CreateRoute makes route.DestinationCIDR go via the target Node's InternalIP of
// that family (from route.TargetNodeAddresses, which the route controller fills,
// or else from the Node lister). It is idempotent, replaces a route of ours with an
// old gateway, refuses to replace a foreign route (ErrForeignRoute), and returns
// an error naming the node and CIDR when the Node has no InternalIP of the family
// (ErrNoNodeAddress). A route to this host succeeds without a kernel route. nameHint
// (the Node's UID) is not needed: names are derived from node and CIDR.
func (p *Provider) CreateRoute(ctx context.Context, clusterName string, nameHint string, route *cloudprovider.Route) error {
	logger := klog.FromContext(ctx).WithValues("node", route.TargetNode, "cidr", route.DestinationCIDR)
	dst, err := parseCIDR(route.DestinationCIDR)
	if err != nil {
		return err
	}
	if p.opts.NodeName != "" && string(route.TargetNode) == p.opts.NodeName {
		logger.V(2).Info("Route to this host's own pod CIDR: nothing to program")
		return nil
	}
	addrs := route.TargetNodeAddresses
	if len(addrs) == 0 {
		n, err := p.nodes.Get(string(route.TargetNode))
		if err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("routes: create %s for node %q: the Node does not exist", dst, route.TargetNode)
			}
			return fmt.Errorf("routes: create %s for node %q: %w", dst, route.TargetNode, err)
		}
		addrs = n.Status.Addresses
	}
	gw, ok := nodeGateway(addrs, dst)
	if !ok {
		return fmt.Errorf("routes: create %s for node %q: %w: it has no %s InternalIP in status.addresses (check kubelet's --node-ip)", dst, route.TargetNode, ErrNoNodeAddress, familyName(dst))
	}
	local, err := p.k.LocalAddrs(ctx)
	if err != nil {
		return err
	}
	if local[gw] {
		logger.V(2).Info("Route via an address of this host: nothing to program", "gateway", gw)
		return nil
	}
	changed, err := p.k.Ensure(ctx, dst, gw)
	p.mu.Lock()
	defer p.mu.Unlock()
	if errors.Is(err, ErrGatewayNotOnLink) {
		if p.opts.OffLinkViaFabric {
			p.fabric[dst] = fabricRoute{node: route.TargetNode, gw: gw}
			logger.V(2).Info("Gateway not on a connected subnet: the fabric routes this pod CIDR (BGP export)", "gateway", gw)
			return nil
		}
		return fmt.Errorf("node %q pod CIDR %s: %w; nodes on other subnets need the fabric to route pod CIDRs (enable the BGP export and routes' off-link fabric mode) or an InternalIP on a subnet of this host", route.TargetNode, dst, err)
	}
	if err != nil {
		return fmt.Errorf("node %q pod CIDR %s: %w", route.TargetNode, dst, err)
	}
	delete(p.fabric, dst)
	if changed {
		logger.Info("Programmed route", "gateway", gw, "table", p.k.Table())
	}
	return nil
}

// DeleteRoute removes the route as returned by ListRoutes: exactly our route to
// its destination via the gateway its name records. A route already gone, and a
// route without a kernel route (local, fabric), is success.
func (p *Provider) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	dst, err := parseCIDR(route.DestinationCIDR)
	if err != nil {
		return err
	}
	var gw netip.Addr
	if _, via, ok := parseRouteName(route.Name); ok {
		switch via {
		case viaLocal:
			return nil
		case viaFabric:
			p.mu.Lock()
			delete(p.fabric, dst)
			p.mu.Unlock()
			return nil
		default:
			gw, _ = netip.ParseAddr(via) // "none": any gateway of ours
		}
	}
	deleted, err := p.k.Delete(ctx, dst, gw)
	if err != nil {
		return fmt.Errorf("node %q pod CIDR %s: %w", route.TargetNode, dst, err)
	}
	if deleted {
		klog.FromContext(ctx).Info("Deleted route", "node", route.TargetNode, "cidr", dst, "gateway", gwString(gw), "table", p.k.Table())
	}
	return nil
}

func gwString(gw netip.Addr) string {
	if !gw.IsValid() {
		return "none"
	}
	return gw.String()
}
