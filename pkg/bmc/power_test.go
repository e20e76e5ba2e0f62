package bmc

import (
	"testing"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

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

func TestTargetForDefaultCA(t *testing.T) {
	v, err := inventory.Parse([]byte(`apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
hosts:
- name: own
  bmc: {protocol: redfish, address: 10.1.0.1, credentialsFile: /c, caFile: /own.pem}
- name: global
  bmc: {protocol: redfish, address: 10.1.0.2, credentialsFile: /c}
- name: ipmi
  bmc: {protocol: ipmi, address: 10.1.0.3, credentialsFile: /c}
- name: none
`))
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{"own": "/own.pem", "global": "/global.pem", "ipmi": ""} {
		h, _ := v.Host(host)
		tgt, ok := TargetFor(h, "/global.pem")
		if !ok || tgt.CAFile != want {
			t.Errorf("%s: CAFile = %q, %v; want %q", host, tgt.CAFile, ok, want)
		}
	}
	h, _ := v.Host("none")
	if _, ok := TargetFor(h, "/global.pem"); ok {
		t.Error("a host without a bmc block got a target")
	}
}
