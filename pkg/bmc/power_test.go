package bmc

import (
	"strings"
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

// TestCredentialsSecretInInventory: a bmc block names exactly one of credentialsFile
// and credentialsSecret; a valid Secret reference reaches the Target.
func TestCredentialsSecretInInventory(t *testing.T) {
	const head = "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: a\n  bmc: "
	v, err := inventory.Parse([]byte(head + "{protocol: redfish, address: 10.1.0.1, credentialsSecret: {namespace: baremetal-ccm, name: rack-1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := v.Host("a")
	tgt, ok := TargetFor(h, "")
	if !ok || tgt.SecretNamespace != "baremetal-ccm" || tgt.SecretName != "rack-1" || tgt.CredentialsFile != "" {
		t.Errorf("TargetFor = %+v, %v", tgt, ok)
	}
	for bmcBlock, want := range map[string]string{
		"{protocol: redfish, address: x, credentialsFile: /c, credentialsSecret: {namespace: ns, name: s}}": "hosts[0].bmc.credentialsSecret: Invalid value",
		"{protocol: redfish, address: x}":                                              "hosts[0].bmc.credentialsFile: Required value",
		"{protocol: redfish, address: x, credentialsSecret: {name: s}}":                "hosts[0].bmc.credentialsSecret.namespace: Required value",
		"{protocol: redfish, address: x, credentialsSecret: {namespace: ns}}":          "hosts[0].bmc.credentialsSecret.name: Required value",
		"{protocol: redfish, address: x, credentialsSecret: {namespace: N_, name: s}}": "hosts[0].bmc.credentialsSecret.namespace: Invalid value",
	} {
		_, err := inventory.Parse([]byte(head + bmcBlock + "\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", bmcBlock, err, want)
		}
	}
}
