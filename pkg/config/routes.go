package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RoutesConfig enables pod-CIDR routes: cloudprovider.Routes on the leader and the
// route mirror in every replica's agent. Absent: the provider implements no Routes.
type RoutesConfig struct {
	// Table is the kernel routing table our routes live in. Default: 254 (main).
	Table int32 `json:"table,omitempty"`
	// Protocol is the route protocol number that marks routes as ours. Default: 196.
	Protocol int32 `json:"protocol,omitempty"`
	// Mirror keeps this host's kernel in sync with every Node's pod CIDRs. Default: true.
	Mirror *bool `json:"mirror,omitempty"`
	// ResyncInterval repairs drift (a route deleted by hand). Default: 1m.
	ResyncInterval *metav1.Duration `json:"resyncInterval,omitempty"`
}

func validateRoutes(r *RoutesConfig, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	return validateRoutesFields(r, p)
}

// MirrorEnabled reports the defaulted Mirror.
func (r *RoutesConfig) MirrorEnabled() bool { return r.Mirror == nil || *r.Mirror }
