package inventory

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// Rack returns the settings of the named rack.
func (v *View) Rack(name string) (*Rack, bool) {
	r, ok := v.racks[name]
	return r, ok
}

// validateRacks checks rack names (unique DNS-1123 labels) and their BGP peers, and
// fills the peers' defaults.
func validateRacks(racks []Rack, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]int{}
	for i := range racks {
		r := &racks[i]
		rp := p.Index(i)
		for _, msg := range validation.IsDNS1123Label(r.Name) {
			errs = append(errs, field.Invalid(rp.Child("name"), r.Name, msg))
		}
		if j, dup := seen[r.Name]; dup {
			errs = append(errs, field.Duplicate(rp.Child("name"), fmt.Sprintf("rack %q is already defined at %s", r.Name, p.Index(j))))
		}
		seen[r.Name] = i
		for j := range r.BGPPeers {
			config.SetBGPPeerDefaults(&r.BGPPeers[j])
			errs = append(errs, config.ValidateBGPPeer(&r.BGPPeers[j], rp.Child("bgpPeers").Index(j))...)
		}
	}
	return errs
}
