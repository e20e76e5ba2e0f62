package config

import (
	"strings"
	"testing"
	"time"
)

const minimal = "apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory:\n  file: {path: /etc/baremetal-ccm/inventory.yaml}\n"

// TestGuardAndPowerDefaults pins the defaults of the issue, not just the constants.
func TestGuardAndPowerDefaults(t *testing.T) {
	cfg, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	g, pb := cfg.Inventory.DeletionGuard, cfg.Instances.PowerOffBudget
	if g.Window.Duration != time.Hour {
		t.Errorf("deletionGuard.window = %v, want 1h", g.Window.Duration)
	}
	if g.SettleTime.Duration != 30*time.Second {
		t.Errorf("deletionGuard.settleTime = %v, want 30s", g.SettleTime.Duration)
	}
	if cfg.Inventory.CredentialsDir != "/etc/baremetal-ccm/bmc" {
		t.Errorf("credentialsDir = %q", cfg.Inventory.CredentialsDir)
	}
	if cfg.Inventory.AllowInsecureSkipVerify {
		t.Error("allowInsecureSkipVerify must default to false")
	}
	if *pb.MaxHosts != 5 || pb.Window.Duration != time.Hour {
		t.Errorf("powerOffBudget = %d/%v, want 5/1h", *pb.MaxHosts, pb.Window.Duration)
	}
	if cfg.Instances.DeleteAfter != nil || cfg.Instances.OutOfServiceAfter != nil {
		t.Error("power-off policies must stay off by default")
	}
}

// TestGuardAndPowerExplicitValues: explicit values, including the zero values that
// mean something (maxHosts 0, settleTime 0s) and the bounds themselves, survive
// defaulting and pass validation.
func TestGuardAndPowerExplicitValues(t *testing.T) {
	doc := minimal + `  credentialsDir: /srv/creds/
  allowInsecureSkipVerify: true
  deletionGuard: {window: 1m, settleTime: 0s}
instances:
  deleteAfter: 5m
  outOfServiceAfter: 1m
  powerOffBudget: {maxHosts: 0, window: 1m}
`
	cfg, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	inv, in := cfg.Inventory, cfg.Instances
	if inv.CredentialsDir != "/srv/creds/" || !inv.AllowInsecureSkipVerify {
		t.Errorf("inventory = %q/%v", inv.CredentialsDir, inv.AllowInsecureSkipVerify)
	}
	if inv.DeletionGuard.Window.Duration != time.Minute || inv.DeletionGuard.SettleTime.Duration != 0 {
		t.Errorf("deletionGuard = %v/%v", inv.DeletionGuard.Window.Duration, inv.DeletionGuard.SettleTime.Duration)
	}
	if in.DeleteAfter.Duration != MinDeleteAfter || in.OutOfServiceAfter.Duration != MinOutOfServiceAfter {
		t.Errorf("instances = %v/%v", in.DeleteAfter.Duration, in.OutOfServiceAfter.Duration)
	}
	if *in.PowerOffBudget.MaxHosts != 0 || in.PowerOffBudget.Window.Duration != time.Minute {
		t.Errorf("powerOffBudget = %d/%v", *in.PowerOffBudget.MaxHosts, in.PowerOffBudget.Window.Duration)
	}
	if _, err := Parse([]byte(minimal + "  deletionGuard: {settleTime: 1h}\n")); err != nil {
		t.Errorf("settleTime 1h: %v", err)
	}
}

// TestMaxUnhealthyValues: a percent or a count; stormCooldown defaults to 5m only
// with maxUnhealthy, and 0 is allowed.
func TestMaxUnhealthyValues(t *testing.T) {
	for doc, want := range map[string]string{
		"instances: {maxUnhealthy: 30%}":                  "30%/5m0s",
		"instances: {maxUnhealthy: \"0%\"}":               "0%/5m0s",
		"instances: {maxUnhealthy: 3, stormCooldown: 0s}": "3/0s",
		"instances: {}": "<nil>/<nil>",
	} {
		cfg, err := Parse([]byte(minimal + doc + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		in := cfg.Instances
		got := "<nil>/<nil>"
		if in.MaxUnhealthy != nil {
			got = in.MaxUnhealthy.String() + "/" + in.StormCooldown.Duration.String()
		}
		if got != want {
			t.Errorf("%s: %s, want %s", doc, got, want)
		}
	}
}

// TestGuardAndPowerValidation: each bound of the new fields is an error with its field
// path, the offending value, the bound and how to fix it.
func TestGuardAndPowerValidation(t *testing.T) {
	tests := []struct {
		name, extra string
		want        []string
	}{
		{"deleteAfter below 5m", "instances: {deleteAfter: 4m59s}",
			[]string{`instances.deleteAfter: Invalid value: "4m59s": must be at least 5m0s`, "BMC firmware update keeps a host off for minutes", "leave it unset"}},
		{"deleteAfter negative", "instances: {deleteAfter: -1h}", []string{`instances.deleteAfter: Invalid value: "-1h0m0s": must be at least 5m0s`}},
		{"outOfServiceAfter below 1m", "instances: {outOfServiceAfter: 3s}",
			[]string{`instances.outOfServiceAfter: Invalid value: "3s": must be at least 1m0s`, "a reboot", "volumes"}},
		{"outOfServiceAfter zero", "instances: {outOfServiceAfter: 0s}", []string{`instances.outOfServiceAfter: Invalid value: "0s"`}},
		{"negative power-off budget", "instances: {powerOffBudget: {maxHosts: -1}}",
			[]string{"instances.powerOffBudget.maxHosts: Invalid value: -1: must be 0 (every power-based action needs an acknowledgement) or more"}},
		{"short power-off window", "instances: {powerOffBudget: {window: 59s}}",
			[]string{`instances.powerOffBudget.window: Invalid value: "59s": must be at least 1m0s`, "use 1h (the default) or more"}},
		{"maxUnhealthy over 100%", "instances: {maxUnhealthy: 120%}",
			[]string{`instances.maxUnhealthy: Invalid value: "120%": must be a count of Nodes (0 or more, such as 3) or a percent from 0% to 100%`}},
		{"maxUnhealthy not a percent", "instances: {maxUnhealthy: half}", []string{`instances.maxUnhealthy: Invalid value: "half"`}},
		{"maxUnhealthy negative", "instances: {maxUnhealthy: -2}", []string{`instances.maxUnhealthy: Invalid value: "-2"`}},
		{"negative stormCooldown", "instances: {maxUnhealthy: 3, stormCooldown: -1m}", []string{`instances.stormCooldown: Invalid value: "-1m0s": must be 0 or more`}},
		{"short guard window", "  deletionGuard: {window: 30s}",
			[]string{`inventory.deletionGuard.window: Invalid value: "30s": must be at least 1m0s`, "use 1h (the default) or more"}},
		{"zero guard window", "  deletionGuard: {window: 0s}", []string{`inventory.deletionGuard.window: Invalid value: "0s"`}},
		{"negative settleTime", "  deletionGuard: {settleTime: -1s}",
			[]string{`inventory.deletionGuard.settleTime: Invalid value: "-1s": must be between 0s`, "and 1h0m0s"}},
		{"settleTime over an hour", "  deletionGuard: {settleTime: 1h0m1s}", []string{`inventory.deletionGuard.settleTime: Invalid value: "1h0m1s"`}},
		{"relative credentialsDir", "  credentialsDir: etc/creds",
			[]string{`inventory.credentialsDir: Invalid value: "etc/creds": must be the absolute path of a directory other than /`, "default /etc/baremetal-ccm/bmc"}},
		{"credentialsDir /", "  credentialsDir: /", []string{`inventory.credentialsDir: Invalid value: "/"`}},
		{"credentialsDir / in disguise", "  credentialsDir: /etc/..", []string{`inventory.credentialsDir: Invalid value: "/etc/.."`}},
		{"every problem at once", "  credentialsDir: x\n  deletionGuard: {window: 1s, settleTime: 2h}\ninstances: {deleteAfter: 1m, outOfServiceAfter: 1s, powerOffBudget: {maxHosts: -5, window: 1s}}",
			[]string{"inventory.credentialsDir", "inventory.deletionGuard.window", "inventory.deletionGuard.settleTime", "instances.deleteAfter",
				"instances.outOfServiceAfter", "instances.powerOffBudget.maxHosts", "instances.powerOffBudget.window"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(minimal + tt.extra + "\n"))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestNewFieldsAreStrict: the new fields are decoded strictly like every other one.
func TestNewFieldsAreStrict(t *testing.T) {
	for name, extra := range map[string]string{
		"misspelt settle time":  "  deletionGuard: {settletime: 1m}",
		"misspelt budget field": "instances: {powerOffBudget: {maxHost: 3}}",
		"budget of wrong type":  "instances: {powerOffBudget: 3}",
		"window not a duration": "  deletionGuard: {window: soon}",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(minimal + extra + "\n")); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
