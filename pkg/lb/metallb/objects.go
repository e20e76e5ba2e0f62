package metallb

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	metallbv1beta1 "go.universe.tf/metallb/api/v1beta1"
	metallbv1beta2 "go.universe.tf/metallb/api/v1beta2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// Names, labels and modes.
const (
	// DefaultNamespace is where MetalLB runs and reads its configuration.
	DefaultNamespace = "metallb-system"
	// LabelManagedBy marks the objects this package owns (value ManagedBy).
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is the value of LabelManagedBy on our objects.
	ManagedBy = "baremetal-ccm"
	// NamePrefix starts the name of every object we generate.
	NamePrefix = "baremetal-ccm-"

	// BGPModeFRR is MetalLB's FRR (and frr-k8s) BGP implementation, the default of
	// MetalLB's Helm chart and manifests.
	BGPModeFRR = "frr"
	// BGPModeNative is MetalLB's in-process BGP implementation (METALLB_BGP_TYPE=native):
	// no keepalive, connect time or graceful restart settings, no IPv6 pools or peers,
	// no large communities.
	BGPModeNative = "native"
)

// ErrUnsupported is wrapped by Objects when the configuration cannot be expressed as
// MetalLB objects that MetalLB would accept in the selected BGP mode. MetalLB refuses
// its whole configuration when one object is invalid, so nothing is generated then.
var ErrUnsupported = errors.New("cannot be expressed as MetalLB configuration")

// Options are the MetalLB-specific settings of the announcer.
type Options struct {
	// Namespace is MetalLB's namespace, where the objects are written. Default:
	// DefaultNamespace.
	Namespace string
	// BGPMode is the BGP implementation of the MetalLB speakers: BGPModeFRR (default)
	// or BGPModeNative. It decides which peer settings may be written.
	BGPMode string
	// ReadFile reads BGP peers' password files. Default: os.ReadFile.
	ReadFile func(path string) ([]byte, error)
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.BGPMode == "" {
		o.BGPMode = BGPModeFRR
	}
	if o.ReadFile == nil {
		o.ReadFile = os.ReadFile
	}
	return o
}

// Set is the generated configuration. Each slice is sorted by name. Secrets hold BGP
// passwords: never log or print a Set's Secrets.
type Set struct {
	Secrets        []*corev1.Secret
	Pools          []*metallbv1beta1.IPAddressPool
	Peers          []*metallbv1beta2.BGPPeer
	Advertisements []*metallbv1beta1.BGPAdvertisement
}

// PoolName returns the IPAddressPool (and BGPAdvertisement) name of a CCM pool.
func PoolName(pool string) string { return NamePrefix + pool }

// PeerName returns the BGPPeer (and password Secret) name of a bgp.peers entry;
// RackPeerName that of a router listed in the inventory's racks.
func PeerName(addr netip.Addr) string     { return NamePrefix + "peer-" + addrName(addr) }
func RackPeerName(addr netip.Addr) string { return NamePrefix + "rack-peer-" + addrName(addr) }

// addrName spells an address as a DNS label fragment, injectively: dots and colons
// become dashes, and a trailing dash (an IPv6 address ending in ::) gets a 0.
func addrName(a netip.Addr) string {
	s := strings.NewReplacer(".", "-", ":", "-").Replace(a.Unmap().String())
	if strings.HasSuffix(s, "-") {
		s += "0"
	}
	return s
}

// Objects computes the MetalLB objects that announce cfg's pools:
//
//   - one IPAddressPool per CCM pool, named PoolName(pool), with the pool's addresses,
//     avoidBuggyIPs, and autoAssign: false. Per pool rather than per allocation: the
//     CCM already pins every Service's IPs (metallb.io/loadBalancerIPs), so per
//     allocation objects would add nothing but churn (one object per Service, and
//     MetalLB reloads its whole configuration on every change), while a pool object
//     changes only when the CloudConfig does. autoAssign: false keeps MetalLB's own
//     controller, if it runs, from ever choosing an IP from them. The pools carry no
//     namespace or Service selectors: the CCM has already enforced them when it
//     allocated, and a second opinion could only disagree.
//   - one BGPAdvertisement per pool, same name, for that pool only, with aggregation
//     lengths 32 and 128, the pool's local preference, and bgp.communities followed by
//     the pool's communities and large communities (numeric forms). It names no peers,
//     so it applies to every BGPPeer, including ones the operator writes.
//   - one BGPPeer per bgp.peers entry for every node, named PeerName(address), and one
//     per router in the inventory's racks, named RackPeerName(address), selecting the
//     Nodes labelled baremetal-ccm.io/rack in the racks that list it (a router listed
//     by several racks with identical settings is one object). Racks are found through
//     the hosts that name them.
//   - for each peer with a passwordFile, a kubernetes.io/basic-auth Secret of the
//     peer's name holding the file's content (trailing newlines removed), referenced
//     by passwordSecret: the password never appears in a metallb.io object.
//
// Every object is labelled LabelManagedBy=ManagedBy and lives in opts.Namespace.
// Without cfg.LoadBalancer, or with another announcer than metallb, the Set is empty
// (so a Sync with such a config removes all our objects). inv may be nil (no rack
// peers).
//
// It reads password files and nothing else; for the same inputs and files it returns
// the same Set. It returns an error wrapping ErrUnsupported, and no Set, when MetalLB
// would refuse the result; all such problems are reported at once.
func Objects(cfg *config.CloudConfig, inv *inventory.View, opts Options) (*Set, error) {
	opts = opts.withDefaults()
	if opts.BGPMode != BGPModeFRR && opts.BGPMode != BGPModeNative {
		return nil, fmt.Errorf("metallb BGP mode %q: want %q or %q", opts.BGPMode, BGPModeFRR, BGPModeNative)
	}
	set := &Set{}
	if cfg == nil || cfg.LoadBalancer == nil || cfg.LoadBalancer.Announcer != config.AnnouncerMetalLB {
		return set, nil
	}
	g := &generator{opts: opts, cfg: cfg, set: set}
	for i := range cfg.LoadBalancer.Pools {
		g.pool(&cfg.LoadBalancer.Pools[i])
	}
	g.peers(inv)
	if len(g.errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, errors.Join(g.errs...))
	}
	sort.Slice(set.Secrets, func(i, j int) bool { return set.Secrets[i].Name < set.Secrets[j].Name })
	sort.Slice(set.Pools, func(i, j int) bool { return set.Pools[i].Name < set.Pools[j].Name })
	sort.Slice(set.Peers, func(i, j int) bool { return set.Peers[i].Name < set.Peers[j].Name })
	sort.Slice(set.Advertisements, func(i, j int) bool { return set.Advertisements[i].Name < set.Advertisements[j].Name })
	return set, nil
}

type generator struct {
	opts Options
	cfg  *config.CloudConfig
	set  *Set
	errs []error
}

func (g *generator) errorf(format string, args ...any) {
	g.errs = append(g.errs, fmt.Errorf(format, args...))
}

func (g *generator) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:      name,
		Namespace: g.opts.Namespace,
		Labels:    map[string]string{LabelManagedBy: ManagedBy},
	}
}

func (g *generator) pool(p *config.AddressPool) {
	name := PoolName(p.Name)
	addrs := make([]string, 0, len(p.Addresses))
	for _, s := range p.Addresses {
		first, last, err := config.ParseAddressRange(s)
		if err != nil {
			g.errorf("loadBalancer.pools %s: %w", p.Name, err)
			continue
		}
		if g.opts.BGPMode == BGPModeNative && first.Is6() {
			g.errorf("loadBalancer.pools %s: IPv6 addresses %q: MetalLB's native BGP mode does not announce IPv6; run MetalLB in FRR mode", p.Name, s)
		}
		addrs = append(addrs, normalizeRange(s, first, last))
	}
	g.set.Pools = append(g.set.Pools, &metallbv1beta1.IPAddressPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: metallbv1beta1.GroupVersion.String(), Kind: "IPAddressPool"},
		ObjectMeta: g.meta(name),
		Spec: metallbv1beta1.IPAddressPoolSpec{
			Addresses:     addrs,
			AutoAssign:    new(false),
			AvoidBuggyIPs: p.AvoidBuggyIPs,
		},
	})

	var comms []string
	var global, globalLarge []string
	if g.cfg.BGP != nil {
		global, globalLarge = g.cfg.BGP.Communities, g.cfg.BGP.LargeCommunities
	}
	for _, c := range slices.Concat(global, p.Communities) {
		v, err := config.ParseCommunity(c)
		if err != nil {
			g.errorf("loadBalancer.pools %s: %w", p.Name, err)
			continue
		}
		comms = appendUnique(comms, fmt.Sprintf("%d:%d", v>>16, v&0xffff))
	}
	for _, c := range slices.Concat(globalLarge, p.LargeCommunities) {
		v, err := config.ParseLargeCommunity(c)
		if err != nil {
			g.errorf("loadBalancer.pools %s: %w", p.Name, err)
			continue
		}
		if g.opts.BGPMode == BGPModeNative {
			g.errorf("loadBalancer.pools %s: large community %q: MetalLB's native BGP mode supports standard communities only; run MetalLB in FRR mode", p.Name, c)
			continue
		}
		comms = appendUnique(comms, fmt.Sprintf("large:%d:%d:%d", v[0], v[1], v[2]))
	}
	adv := &metallbv1beta1.BGPAdvertisement{
		TypeMeta:   metav1.TypeMeta{APIVersion: metallbv1beta1.GroupVersion.String(), Kind: "BGPAdvertisement"},
		ObjectMeta: g.meta(name),
		Spec: metallbv1beta1.BGPAdvertisementSpec{
			AggregationLength:   new(int32(32)),
			AggregationLengthV6: new(int32(128)),
			Communities:         comms,
			IPAddressPools:      []string{name},
		},
	}
	if p.LocalPreference != nil {
		adv.Spec.LocalPref = *p.LocalPreference
	}
	g.set.Advertisements = append(g.set.Advertisements, adv)
}

// normalizeRange writes a pool entry the way MetalLB parses it: a masked CIDR, or
// first-last without spaces.
func normalizeRange(s string, first, last netip.Addr) string {
	if strings.Contains(s, "/") {
		return netip.MustParsePrefix(strings.TrimSpace(s)).Masked().String()
	}
	return first.String() + "-" + last.String()
}

func appendUnique(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// rackPeer is one router of the inventory's racks and the racks listing it.
type rackPeer struct {
	peer  config.BGPPeer
	racks []string
}

func (g *generator) peers(inv *inventory.View) {
	global := map[netip.Addr]bool{}
	if g.cfg.BGP != nil {
		for i := range g.cfg.BGP.Peers {
			p := &g.cfg.BGP.Peers[i]
			addr, err := netip.ParseAddr(p.Address)
			if err != nil {
				g.errorf("bgp.peers[%d]: address %q: %w", i, p.Address, err)
				continue
			}
			addr = addr.Unmap()
			global[addr] = true
			g.peer(PeerName(addr), fmt.Sprintf("bgp.peers[%d]", i), addr, p, nil)
		}
	}
	if inv == nil {
		return
	}
	var racks []string
	seen := map[string]bool{}
	inv.Hosts(func(h *inventory.Host) {
		if h.Rack != "" && !seen[h.Rack] {
			seen[h.Rack] = true
			racks = append(racks, h.Rack)
		}
	})
	sort.Strings(racks)
	byAddr := map[netip.Addr]*rackPeer{}
	var order []netip.Addr
	for _, name := range racks {
		rack, ok := inv.Rack(name)
		if !ok {
			continue
		}
		for i := range rack.BGPPeers {
			p := rack.BGPPeers[i]
			addr, err := netip.ParseAddr(p.Address)
			if err != nil {
				g.errorf("inventory rack %s bgpPeers[%d]: address %q: %w", name, i, p.Address, err)
				continue
			}
			addr = addr.Unmap()
			switch rp := byAddr[addr]; {
			case global[addr]:
				g.errorf("inventory rack %s bgpPeers[%d]: %s is also in the CloudConfig's bgp.peers; MetalLB would open two sessions to it from the rack's nodes: list it in one place", name, i, addr)
			case rp == nil:
				byAddr[addr] = &rackPeer{peer: p, racks: []string{name}}
				order = append(order, addr)
			case !reflect.DeepEqual(rp.peer, p):
				g.errorf("inventory rack %s bgpPeers[%d]: router %s is also listed by rack %s with different settings; one router needs one set of settings", name, i, addr, rp.racks[0])
			default:
				rp.racks = append(rp.racks, name)
			}
		}
	}
	for _, addr := range order {
		rp := byAddr[addr]
		sel := []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: inventory.LabelRack, Operator: metav1.LabelSelectorOpIn, Values: rp.racks,
		}}}}
		g.peer(RackPeerName(addr), fmt.Sprintf("inventory rack %s peer %s", rp.racks[0], addr), addr, &rp.peer, sel)
	}
}

// maxMetalLBPort is the largest peerPort MetalLB's BGPPeer CRD accepts.
const maxMetalLBPort = 16384

func (g *generator) peer(name, where string, addr netip.Addr, p *config.BGPPeer, nodeSelectors []metav1.LabelSelector) {
	if g.cfg.BGP == nil || g.cfg.BGP.LocalASN == 0 {
		g.errorf("%s: MetalLB needs the local AS number: set bgp.localASN in the CloudConfig", where)
		return
	}
	native := g.opts.BGPMode == BGPModeNative
	spec := metallbv1beta2.BGPPeerSpec{
		MyASN:         g.cfg.BGP.LocalASN,
		ASN:           p.ASN,
		Address:       addr.String(),
		NodeSelectors: nodeSelectors,
		HoldTime:      p.HoldTime,
	}
	port := p.Port
	if port == 0 {
		port = config.DefaultBGPPort
	}
	if port < 1 || port > maxMetalLBPort {
		g.errorf("%s: port %d: MetalLB accepts peer ports 1-%d", where, port, maxMetalLBPort)
	}
	spec.Port = uint16(min(max(port, 0), maxMetalLBPort))
	if native && addr.Is6() {
		// v0.15.3's native speaker dials "addr:port" without brackets and fails with
		// "too many colons in address" (seen running the real speaker).
		g.errorf("%s: IPv6 peer %s: MetalLB's native BGP mode cannot connect to IPv6 peers; run MetalLB in FRR mode", where, addr)
	}
	if p.SourceAddress != "" {
		g.errorf("%s: sourceAddress %s: MetalLB peers are configured for many nodes at once and every node would bind this one address; remove it (the kernel picks each node's own)", where, p.SourceAddress)
	}
	if p.EBGPMultihop > 0 && p.ASN != g.cfg.BGP.LocalASN {
		spec.EBGPMultiHop = true
	}
	if !native {
		spec.KeepaliveTime = p.KeepaliveTime
		if c := p.ConnectRetry; c != nil {
			if c.Duration < time.Second || c.Duration > 65535*time.Second || c.Duration%time.Second != 0 {
				g.errorf("%s: connectRetry %s: MetalLB accepts whole seconds between 1s and 65535s", where, c.Duration)
			}
			spec.ConnectTime = c
		}
		spec.EnableGracefulRestart = p.GracefulRestart != nil
	} else if p.GracefulRestart != nil {
		g.errorf("%s: gracefulRestart: MetalLB's native BGP mode has no graceful restart; remove it or run MetalLB in FRR mode", where)
	}
	if p.PasswordFile != "" {
		data, err := g.opts.ReadFile(p.PasswordFile)
		if err != nil {
			// The error names the file, never its content.
			g.errorf("%s: reading passwordFile: %w", where, err)
			return
		}
		password := strings.TrimRight(string(data), "\r\n")
		if password == "" {
			g.errorf("%s: passwordFile %s is empty", where, p.PasswordFile)
			return
		}
		g.set.Secrets = append(g.set.Secrets, &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: g.meta(name),
			Type:       corev1.SecretTypeBasicAuth,
			Data:       map[string][]byte{corev1.BasicAuthPasswordKey: []byte(password)},
		})
		spec.PasswordSecret = corev1.SecretReference{Name: name, Namespace: g.opts.Namespace}
	}
	g.set.Peers = append(g.set.Peers, &metallbv1beta2.BGPPeer{
		TypeMeta:   metav1.TypeMeta{APIVersion: metallbv1beta2.GroupVersion.String(), Kind: "BGPPeer"},
		ObjectMeta: g.meta(name),
		Spec:       spec,
	})
}

// Unstructured returns the Set's objects in apply order (Secrets, pools, peers,
// advertisements), without status and creationTimestamp.
func (s *Set) Unstructured() ([]*unstructured.Unstructured, error) {
	var objs []runtime.Object
	for _, o := range s.Secrets {
		objs = append(objs, o)
	}
	for _, o := range s.Pools {
		objs = append(objs, o)
	}
	for _, o := range s.Peers {
		objs = append(objs, o)
	}
	for _, o := range s.Advertisements {
		objs = append(objs, o)
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		u, err := toUnstructured(o)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

func toUnstructured(o runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", o, err)
	}
	u := &unstructured.Unstructured{Object: m}
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	// BGPPeerSpec.PasswordSecret is a struct, not a pointer: drop it when unset.
	if ref, ok, _ := unstructured.NestedMap(u.Object, "spec", "passwordSecret"); ok && len(ref) == 0 {
		unstructured.RemoveNestedField(u.Object, "spec", "passwordSecret")
	}
	return u, nil
}
