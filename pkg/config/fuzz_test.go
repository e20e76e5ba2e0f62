package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// fuzzSeeds are documents from the tests, valid and not, besides the shipped examples.
var fuzzSeeds = []string{
	minimal,
	minimal + "  credentialsDir: /srv/creds/\n  allowInsecureSkipVerify: true\n  deletionGuard: {window: 1m, settleTime: 0s}\ninstances: {deleteAfter: 5m, outOfServiceAfter: 1m, powerOffBudget: {maxHosts: 0, window: 1m}}\n",
	minimal + "  credentialsDir: x\n  deletionGuard: {window: 1s, settleTime: 2h}\ninstances: {deleteAfter: 1m, outOfServiceAfter: 1s, powerOffBudget: {maxHosts: -5, window: 1s}}\n",
	minimal + "bmc: {caFile: /etc/ca.pem, callTimeout: 3s, cacheTTL: 0s, maxConcurrent: 8, failureThreshold: 2, backoffInitial: 1s, backoffMax: 1m}\neventsNamespace: baremetal-ccm\n",
	"apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory:\n  http:\n    url: https://inventory.example/hosts\n    caFile: /etc/ca.pem\n    timeout: 3s\n  deletionGuard:\n    maxRemovedHosts: 0\n    maxRemovedPercent: 100\n",
	`{"apiVersion":"baremetal-ccm.io/v1alpha1","kind":"CloudConfig","inventory":{"http":{"url":"https://x/y","clientCertFile":"/c","clientKeyFile":"/k","maxBodyBytes":1024}}}`,
	"apiVersion: v1\nkind: Config\neventsNamespace: Bad_NS\ninventory:\n  file: {path: relative.yaml, pollInterval: 0s}\n  http: {url: \"ftp://x/y\", timeout: -1s, clientCertFile: /c}\n  deletionGuard: {maxRemovedHosts: -1, maxRemovedPercent: 101, acknowledgeFile: ack}\n",
	"apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\nkind: CloudConfig\ninventory: {file: {path: /x}}\n",
	"inventory: [",
	bgpBase + "bgp:\n  localASN: 65000\n  routerID: 10.0.0.1\n  communities: [\"65000:1\", no-export]\n  largeCommunities: [\"65000:1:2\"]\n  peers:\n  - {address: 10.0.0.254, asn: 65001}\n  - {address: \"fd00::fe\", asn: 65001, holdTime: 6s, sourceAddress: \"fd00::1\", passwordFile: /etc/baremetal-ccm/bgp-pw, gracefulRestart: 2m}\n",
	minimal + "loadBalancer:\n  announcer: none\n  pools:\n  - name: default\n    addresses: [192.0.2.0/28, \"2001:db8::/120\"]\n  - name: manual\n    addresses: [198.51.100.1-198.51.100.9]\n    autoAssign: false\n    priority: -1\n",
	minimal + "loadBalancer:\n  announcer: metallb\n  metallb: {namespace: metallb-system, bgpMode: native}\n  pools: [{name: p, addresses: [10.0.0.0/24], avoidBuggyIPs: true}]\n",
	minimal + "loadBalancer: {pools: [{name: p, addresses: [10.0.0.0/24]}]}\nbgp: {localASN: 65000, nextHop: nodes, announcePodCIDRs: true, peers: [{address: 10.0.0.1, asn: 65001}]}\nroutes: {}\n",
	routesDocHead + "routes: {table: 100, protocol: 250, mirror: false, resyncInterval: 30s}\n",
	// Values whose YAML form is ambiguous or whose duration form is not canonical.
	"apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory:\n  file: {path: \"/x: y #z\", pollInterval: 1.5h}\n  credentialsDir: \"/yes\"\n" +
		"  deletionGuard: {acknowledgeFile: \"/null\", window: 9223372036854775807ns, settleTime: -0s, maxRemovedHosts: 2147483647}\n" +
		"instances: {deleteAfter: 1000s, powerOffBudget: {maxHosts: 2147483647, window: 60000000000ns}}\n",
}

// FuzzParse: Parse never panics. A document it accepts is valid, fully defaulted
// (defaulting it again changes nothing), and, written back out with sigs.k8s.io/yaml,
// parses to an equal config; a document it refuses yields an error wrapping
// ErrInvalid.
func FuzzParse(f *testing.F) {
	examples, err := filepath.Glob("../../packaging/examples/cloud-config*.yaml")
	if err != nil || len(examples) == 0 {
		f.Fatalf("no example configs: %v", err)
	}
	for _, m := range examples {
		data, err := os.ReadFile(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			if cfg != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse = %v, %v; want nil and an error wrapping ErrInvalid", cfg, err)
			}
			return
		}
		if errs := Validate(cfg); len(errs) > 0 {
			t.Fatalf("Parse accepted an invalid config: %v", errs.ToAggregate())
		}
		again, err := Parse(data)
		if err != nil {
			t.Fatalf("Parse is not deterministic: %v", err)
		}
		SetDefaults(again)
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("defaulting an accepted config again changed it:\n%+v\n%+v", cfg, again)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("the accepted config, written out, does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(cfg, back) {
			t.Fatalf("round trip changed the config:\n%s", out)
		}
	})
}
