package config

import "k8s.io/apimachinery/pkg/util/validation/field"

func setRoutesDefaults(r *RoutesConfig) {}

// validateRoutesFields checks table, protocol and intervals.
func validateRoutesFields(r *RoutesConfig, p *field.Path) field.ErrorList {
	return nil
}
