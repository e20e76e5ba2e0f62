package bmc

import "testing"

func TestNormalize(t *testing.T) {
	for raw, want := range map[string]PowerState{
		"Chassis Power is on":   PowerOn,
		"Chassis Power is off":  PowerOff,
		"Chassis Power is on\n": PowerOn,
		"On":                    PowerOn,
		"Off":                   PowerOff,
		"PoweringOn":            PowerTransitioning,
		"PoweringOff":           PowerTransitioning,
		"on":                    PowerOn,
		"OFF":                   PowerOff,
		"Paused":                PowerUnknown,
		"":                      PowerUnknown,
		"Chassis Power is ???":  PowerUnknown,
		"<html>error</html>":    PowerUnknown,
	} {
		if got := Normalize(raw); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", raw, got, want)
		}
	}
}
