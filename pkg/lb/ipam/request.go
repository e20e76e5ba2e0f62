package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Annotations a Service uses to steer its load-balancer IPs.
const (
	// AnnotationAddressPool names the pool to take addresses from.
	AnnotationAddressPool = "baremetal-ccm.io/address-pool"
	// AnnotationLoadBalancerIPs asks for exact IPs: a comma list, at most one per family.
	AnnotationLoadBalancerIPs = "baremetal-ccm.io/load-balancer-ips"
	// AnnotationAllowSharedIP is the sharing key: Services with the same key may share
	// an IP when their ports do not clash and their traffic policies are compatible.
	AnnotationAllowSharedIP = "baremetal-ccm.io/allow-shared-ip"
)

// Errors. Every error returned by this package wraps exactly one of them (errors.Is)
// and names the Service, pool, IP and cause, and how to fix it.
var (
	// ErrBadAnnotation: an annotation or spec field of the Service cannot be used.
	ErrBadAnnotation = errors.New("bad load-balancer annotation or field")
	// ErrUnknownPool: the named pool is not configured.
	ErrUnknownPool = errors.New("unknown address pool")
	// ErrPoolExhausted: every candidate pool of a needed family is full.
	ErrPoolExhausted = errors.New("address pool exhausted")
	// ErrNotInPool: a requested IP belongs to no pool (or not to the named pool).
	ErrNotInPool = errors.New("requested IP is not in an address pool")
	// ErrIPInUse: a requested IP is held by another Service that does not share it.
	ErrIPInUse = errors.New("IP already in use")
	// ErrHeldElsewhere: the IP a Service holds in its status is held by another
	// Service as far as the allocator knows. The Service keeps its status; nothing
	// moves (the allocator's view or the other Service's status is stale).
	ErrHeldElsewhere = errors.New("IP in the Service's status is held by another Service")
	// ErrSharingConflict: the sharing keys match but ports clash or the traffic
	// policies (externalTrafficPolicy, and for Local the selector) differ.
	ErrSharingConflict = errors.New("IP sharing conflict")
	// ErrNotAllowed: the pool is restricted (namespaces, serviceSelector) and does not
	// admit the Service, or no auto-assign pool admits it.
	ErrNotAllowed = errors.New("address pool not allowed for service")
	// ErrFamilyUnavailable: no pool the Service may use offers a required IP family.
	ErrFamilyUnavailable = errors.New("IP family unavailable")
)

// Port is one port of a Service; two Services sharing an IP must not both use the
// same Protocol and Port.
type Port struct {
	Protocol v1.Protocol
	Port     int32
}

func (p Port) String() string { return fmt.Sprintf("%s/%d", p.Protocol, p.Port) }

// Request is what a Service asks for, parsed from its spec and annotations by
// ParseService. Selector and Labels alias the Service's maps: do not modify them.
type Request struct {
	// Pool is baremetal-ccm.io/address-pool; "" allows any auto-assign pool the
	// Service is admitted to.
	Pool string
	// IPs are the exact IPs asked for by baremetal-ccm.io/load-balancer-ips or
	// spec.loadBalancerIP, at most one per family, each of a family in Families.
	IPs []netip.Addr
	// Families to assign, in order (spec.ipFamilies and spec.ipFamilyPolicy).
	Families []v1.IPFamily
	// RequireAll (RequireDualStack): every family or fail. Otherwise
	// (PreferDualStack) as many families as available, at least one.
	RequireAll bool
	// SharingKey is baremetal-ccm.io/allow-shared-ip; "" never shares.
	SharingKey string
	// Ports are spec.ports' protocols and ports.
	Ports []Port
	// Local is externalTrafficPolicy: Local.
	Local bool
	// Selector is spec.selector: Local Services share only with the same selector.
	Selector map[string]string
	// Namespace and Labels decide which restricted pools admit the Service.
	Namespace string
	Labels    map[string]string
}

// ParseService builds the Request of svc. On error it still returns every field it
// could parse (so a caller can prime the allocator with the Service's current IPs),
// and the error joins one error per problem, each wrapping ErrBadAnnotation and
// naming the annotation or field, the bad value and the expected form.
//
// Families: ipFamilyPolicy SingleStack (or unset) gives spec.ipFamilies[0] (when
// ipFamilies is empty: the family of the requested IP, else IPv4); PreferDualStack
// gives spec.ipFamilies (both when empty); RequireDualStack gives both, in
// spec.ipFamilies' order, and sets RequireAll.
func ParseService(svc *v1.Service) (Request, error) {
	req := Request{
		Namespace:  svc.Namespace,
		Labels:     svc.Labels,
		Selector:   svc.Spec.Selector,
		Local:      svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal,
		SharingKey: svc.Annotations[AnnotationAllowSharedIP],
		Pool:       svc.Annotations[AnnotationAddressPool],
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadAnnotation}, args...)...))
	}
	if len(svc.Spec.Ports) > 0 {
		req.Ports = make([]Port, 0, len(svc.Spec.Ports))
		for _, p := range svc.Spec.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = v1.ProtocolTCP
			}
			req.Ports = append(req.Ports, Port{Protocol: proto, Port: p.Port})
		}
	}
	if req.Pool != "" {
		if msgs := validation.IsDNS1123Label(req.Pool); len(msgs) > 0 {
			bad("annotation %s: %q is not a pool name (%s): use the name of a pool in the cloud config's loadBalancer.pools", AnnotationAddressPool, req.Pool, strings.Join(msgs, "; "))
			req.Pool = ""
		}
	}
	if k := req.SharingKey; len(k) > 253 || strings.ContainsAny(k, "\x00\n") {
		bad("annotation %s: the sharing key must be at most 253 characters on one line", AnnotationAllowSharedIP)
		req.SharingKey = ""
	}

	// Requested IPs.
	ann, hasAnn := svc.Annotations[AnnotationLoadBalancerIPs]
	var ipSource string
	switch {
	case hasAnn && strings.TrimSpace(ann) != "" && svc.Spec.LoadBalancerIP != "":
		bad("both annotation %s (%q) and spec.loadBalancerIP (%q) are set: keep only the annotation", AnnotationLoadBalancerIPs, ann, svc.Spec.LoadBalancerIP)
	case hasAnn && strings.TrimSpace(ann) != "":
		ipSource = "annotation " + AnnotationLoadBalancerIPs
		for _, s := range strings.Split(ann, ",") {
			ip, err := parseIP(strings.TrimSpace(s))
			if err != nil {
				bad("%s: %q %v; use a comma list with at most one IPv4 and one IPv6 address, as in 192.0.2.10,2001:db8::10", ipSource, s, err)
				continue
			}
			req.IPs = append(req.IPs, ip)
		}
	case svc.Spec.LoadBalancerIP != "":
		ipSource = "spec.loadBalancerIP"
		ip, err := parseIP(strings.TrimSpace(svc.Spec.LoadBalancerIP))
		if err != nil {
			bad("spec.loadBalancerIP: %q %v; use one IP address, or the annotation %s for dual stack", svc.Spec.LoadBalancerIP, err, AnnotationLoadBalancerIPs)
		} else {
			req.IPs = append(req.IPs, ip)
		}
	}
	if len(req.IPs) == 2 && req.IPs[0].Is4() == req.IPs[1].Is4() {
		bad("%s: %s and %s are of the same family: give at most one IPv4 and one IPv6 address", ipSource, req.IPs[0], req.IPs[1])
		req.IPs = req.IPs[:1]
	} else if len(req.IPs) > 2 {
		bad("%s: %d addresses: give at most one IPv4 and one IPv6 address", ipSource, len(req.IPs))
		req.IPs = req.IPs[:0]
	}

	// Families.
	var specFamilies []v1.IPFamily
	for i, f := range svc.Spec.IPFamilies {
		switch {
		case f != v1.IPv4Protocol && f != v1.IPv6Protocol:
			bad("spec.ipFamilies[%d]: %q is not IPv4 or IPv6", i, f)
		case containsFamily(specFamilies, f):
			bad("spec.ipFamilies[%d]: %s is listed twice", i, f)
		default:
			specFamilies = append(specFamilies, f)
		}
	}
	policy := v1.IPFamilyPolicySingleStack
	if svc.Spec.IPFamilyPolicy != nil {
		policy = *svc.Spec.IPFamilyPolicy
	}
	switch policy {
	case v1.IPFamilyPolicySingleStack:
		switch {
		case len(specFamilies) > 0:
			req.Families = specFamilies[:1]
		case len(req.IPs) == 1 && req.IPs[0].Is6():
			req.Families = []v1.IPFamily{v1.IPv6Protocol}
		default:
			req.Families = []v1.IPFamily{v1.IPv4Protocol}
		}
	case v1.IPFamilyPolicyPreferDualStack:
		req.Families = specFamilies
		if len(req.Families) == 0 {
			req.Families = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		}
	case v1.IPFamilyPolicyRequireDualStack:
		req.RequireAll = true
		req.Families = specFamilies
		switch len(req.Families) {
		case 0:
			req.Families = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		case 1:
			req.Families = []v1.IPFamily{req.Families[0], otherFamily(req.Families[0])}
		}
	default:
		bad("spec.ipFamilyPolicy: %q is not SingleStack, PreferDualStack or RequireDualStack", policy)
		req.Families = []v1.IPFamily{v1.IPv4Protocol}
	}
	kept := req.IPs[:0]
	for _, ip := range req.IPs {
		if f := familyOf(ip); !containsFamily(req.Families, f) {
			bad("%s: %s is %s but the Service's families are %v (spec.ipFamilies, spec.ipFamilyPolicy): ask for an address of those families or change the Service's families", ipSource, ip, f, req.Families)
			continue
		}
		kept = append(kept, ip)
	}
	req.IPs = kept
	if len(req.IPs) == 0 {
		req.IPs = nil
	}
	if len(errs) > 0 {
		return req, fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, errors.Join(errs...))
	}
	return req, nil
}

// parseIP parses a plain IP address; IPv4-mapped IPv6 addresses become IPv4.
func parseIP(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, errors.New("is not an IP address")
	}
	if ip.Zone() != "" {
		return netip.Addr{}, errors.New("has an IPv6 zone")
	}
	return ip.Unmap(), nil
}

func familyOf(ip netip.Addr) v1.IPFamily {
	if ip.Is4() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

func otherFamily(f v1.IPFamily) v1.IPFamily {
	if f == v1.IPv4Protocol {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

func containsFamily(fs []v1.IPFamily, f v1.IPFamily) bool {
	for _, x := range fs {
		if x == f {
			return true
		}
	}
	return false
}
