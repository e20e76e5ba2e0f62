package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Announcers of LoadBalancer IPs.
const (
	// AnnouncerBGP announces through the embedded BGP speaker (the default).
	AnnouncerBGP = "bgp"
	// AnnouncerMetalLB writes metallb.io objects for existing MetalLB speakers.
	AnnouncerMetalLB = "metallb"
	// AnnouncerNone only assigns IPs; something else announces them.
	AnnouncerNone = "none"
)

// LoadBalancerConfig enables LoadBalancer Services: IPs from Pools, announced by
// Announcer. Absent: the provider implements no LoadBalancer.
type LoadBalancerConfig struct {
	// Announcer is bgp (default), metallb or none.
	Announcer string `json:"announcer,omitempty"`
	// Pools are the address pools. A Service gets its IPs from one pool per family.
	Pools []AddressPool `json:"pools"`
	// MetalLB configures the metallb announcer.
	MetalLB MetalLBConfig `json:"metallb,omitempty"`
}

// MetalLB BGP modes.
const (
	MetalLBModeFRR    = "frr"
	MetalLBModeNative = "native"
)

// MetalLBConfig says where the existing MetalLB installation lives and how its
// speakers speak BGP (which decides the peer settings that can be expressed).
type MetalLBConfig struct {
	// Namespace is MetalLB's namespace. Default: metallb-system.
	Namespace string `json:"namespace,omitempty"`
	// BGPMode is frr (default) or native.
	BGPMode string `json:"bgpMode,omitempty"`
}

// AddressPool is a set of addresses Services may get, following MetalLB's
// IPAddressPool semantics.
type AddressPool struct {
	// Name is the pool's name (DNS-1123 label), as used in the
	// baremetal-ccm.io/address-pool annotation.
	Name string `json:"name"`
	// Addresses are CIDRs (10.0.0.0/24, 2001:db8::/120) or first-last ranges
	// (10.0.0.10-10.0.0.20), IPv4 and IPv6 mixed.
	Addresses []string `json:"addresses"`
	// AutoAssign: when false, only Services that name this pool or ask for one of its
	// IPs get addresses from it. Default: true.
	AutoAssign *bool `json:"autoAssign,omitempty"`
	// AvoidBuggyIPs skips IPv4 addresses ending in .0 and .255.
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`
	// Priority orders auto-assignment among the pools a Service may use: lower first.
	// Pools of equal priority are used in name order. Default: 0.
	Priority int32 `json:"priority,omitempty"`
	// Namespaces, when set, restricts the pool to Services in these namespaces.
	Namespaces []string `json:"namespaces,omitempty"`
	// ServiceSelector, when set, restricts the pool to Services whose labels match.
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector,omitempty"`
	// Communities (ASN:value, or no-export, no-advertise, ...) and LargeCommunities
	// (ASN:value:value) are attached to the pool's announcements.
	Communities      []string `json:"communities,omitempty"`
	LargeCommunities []string `json:"largeCommunities,omitempty"`
	// LocalPreference is set on the pool's announcements to iBGP peers.
	LocalPreference *uint32 `json:"localPreference,omitempty"`
}

// AutoAssignEnabled reports the defaulted AutoAssign.
func (p *AddressPool) AutoAssignEnabled() bool { return p.AutoAssign == nil || *p.AutoAssign }

func setLoadBalancerDefaults(lb *LoadBalancerConfig) {
	if lb == nil {
		return
	}
	if lb.Announcer == "" {
		lb.Announcer = AnnouncerBGP
	}
	if lb.MetalLB.Namespace == "" {
		lb.MetalLB.Namespace = "metallb-system"
	}
	if lb.MetalLB.BGPMode == "" {
		lb.MetalLB.BGPMode = MetalLBModeFRR
	}
	for i := range lb.Pools {
		if lb.Pools[i].AutoAssign == nil {
			t := true
			lb.Pools[i].AutoAssign = &t
		}
	}
}

func validateLoadBalancer(lb *LoadBalancerConfig, p *field.Path) field.ErrorList {
	if lb == nil {
		return nil
	}
	var errs field.ErrorList
	switch lb.Announcer {
	case AnnouncerBGP, AnnouncerMetalLB, AnnouncerNone:
	default:
		errs = append(errs, field.NotSupported(p.Child("announcer"), lb.Announcer, []string{AnnouncerBGP, AnnouncerMetalLB, AnnouncerNone}))
	}
	errs = append(errs, validatePools(lb.Pools, p.Child("pools"))...)
	for _, msg := range validation.IsDNS1123Label(lb.MetalLB.Namespace) {
		errs = append(errs, field.Invalid(p.Child("metallb", "namespace"), lb.MetalLB.Namespace, msg))
	}
	if m := lb.MetalLB.BGPMode; m != MetalLBModeFRR && m != MetalLBModeNative {
		errs = append(errs, field.NotSupported(p.Child("metallb", "bgpMode"), m, []string{MetalLBModeFRR, MetalLBModeNative}))
	}
	return errs
}
