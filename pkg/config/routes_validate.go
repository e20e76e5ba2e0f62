package config

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Routes defaults.
const (
	// DefaultRoutesTable is the main table (RT_TABLE_MAIN), where the kernel looks
	// without any policy rule, so pod traffic follows our routes with no extra setup.
	DefaultRoutesTable = 254
	// DefaultRoutesProtocol marks kernel routes as ours. 196 is assigned by neither
	// the kernel's rtnetlink.h (RTPROT_*) nor iproute2's rt_protos, and no common
	// routing daemon or CNI uses it (see reservedRouteProtocols); it sits in the
	// unassigned 193-255 band above EIGRP (192).
	DefaultRoutesProtocol = 196
	// DefaultRoutesResyncInterval is how often the mirror re-reads the kernel to
	// repair drift (a route deleted by hand).
	DefaultRoutesResyncInterval = time.Minute
)

// reservedRouteTables are the kernel's special tables (linux/rtnetlink.h).
var reservedRouteTables = map[int64]string{
	0:   "unspec: means no table and would make the kernel pick main",
	252: "compat: the kernel reports tables above 255 as 252 in the 8-bit header field",
	253: "default: reserved for the kernel's default table",
	255: "local: the kernel's table of local and broadcast addresses",
}

// reservedRouteProtocols are protocol numbers used by the kernel (0-3), by
// administrators (4, static) and by routing daemons or CNIs (linux/rtnetlink.h,
// iproute2's rt_protos, and Calico's felix which marks its routes with 80).
var reservedRouteProtocols = map[int32]string{
	0: "unspec", 1: "redirect", 2: "kernel", 3: "boot", 4: "static",
	8: "gated", 9: "ra", 10: "mrt", 11: "zebra", 12: "bird", 13: "dnrouted",
	14: "xorp", 15: "ntk", 16: "dhcp", 17: "mrouted", 18: "keepalived",
	42: "babel", 80: "calico", 84: "ovn", 99: "openr",
	186: "bgp", 187: "isis", 188: "ospf", 189: "rip", 192: "eigrp",
}

// routeProtocolHint names the allowed values in every protocol error.
const routeProtocolHint = "use a number in 5-255 that no routing daemon uses, such as 193-255 (default 196); the kernel owns 0-3, 4 is static (administrator routes) and gated, ra, mrt, zebra, bird, dnrouted, xorp, ntk, dhcp, mrouted, keepalived, babel, calico, ovn, openr, bgp, isis, ospf, rip and eigrp own 8-18, 42, 80, 84, 99, 186-189 and 192"

func setRoutesDefaults(r *RoutesConfig) {
	if r == nil {
		return
	}
	if r.Table == 0 {
		r.Table = DefaultRoutesTable
	}
	if r.Protocol == 0 {
		r.Protocol = DefaultRoutesProtocol
	}
	if r.Mirror == nil {
		v := true
		r.Mirror = &v
	}
	if r.ResyncInterval == nil {
		r.ResyncInterval = &metav1.Duration{Duration: DefaultRoutesResyncInterval}
	}
}

// validateRoutesFields checks table, protocol and intervals of a defaulted
// RoutesConfig; every problem is reported, each with its path and how to fix it.
func validateRoutesFields(r *RoutesConfig, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	table := int64(r.Table)
	switch why, reserved := reservedRouteTables[table]; {
	case table < 1 || table > 1<<32-1:
		errs = append(errs, field.Invalid(p.Child("table"), r.Table,
			"must be a routing table number in 1-4294967295 (default 254, main)"))
	case reserved:
		errs = append(errs, field.Invalid(p.Child("table"), r.Table,
			fmt.Sprintf("table %d is reserved (%s); use 254 (main, the default) or a table of your own such as 100 with an `ip rule` that looks it up", table, why)))
	}
	switch name, reserved := reservedRouteProtocols[r.Protocol]; {
	case r.Protocol < 0 || r.Protocol > 255:
		errs = append(errs, field.Invalid(p.Child("protocol"), r.Protocol,
			"must fit the kernel's 8-bit route protocol field: "+routeProtocolHint))
	case reserved:
		errs = append(errs, field.Invalid(p.Child("protocol"), r.Protocol,
			fmt.Sprintf("protocol %d is %q, used by the kernel or another routing daemon, and routes marked with it would be taken for theirs: %s", r.Protocol, name, routeProtocolHint)))
	}
	errs = append(errs, validatePositive(r.ResyncInterval, p.Child("resyncInterval"))...)
	return errs
}
