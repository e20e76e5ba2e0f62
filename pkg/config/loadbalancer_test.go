package config

import (
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestParseAddressRange(t *testing.T) {
	tests := []struct {
		in          string
		first, last string
		wantErr     string
	}{
		{in: "192.0.2.0/24", first: "192.0.2.0", last: "192.0.2.255"},
		{in: " 192.0.2.7/24 ", first: "192.0.2.0", last: "192.0.2.255"},
		{in: "192.0.2.9/32", first: "192.0.2.9", last: "192.0.2.9"},
		{in: "2001:db8::/120", first: "2001:db8::", last: "2001:db8::ff"},
		{in: "2001:db8::/64", first: "2001:db8::", last: "2001:db8::ffff:ffff:ffff:ffff"},
		{in: "2001:db8::/63", first: "2001:db8::", last: "2001:db8:0:1:ffff:ffff:ffff:ffff"},
		{in: "10.0.0.10-10.0.0.20", first: "10.0.0.10", last: "10.0.0.20"},
		{in: "10.0.0.10 - 10.0.0.10", first: "10.0.0.10", last: "10.0.0.10"},
		{in: "2001:db8::10-2001:db8::1:0", first: "2001:db8::10", last: "2001:db8::1:0"},
		{in: "", wantErr: "empty"},
		{in: "10.0.0.0/33", wantErr: "not a CIDR"},
		{in: "10.0.0.0", wantErr: "neither a CIDR nor a range"},
		{in: "10.0.0.20-10.0.0.10", wantErr: "swap them"},
		{in: "10.0.0.1-2001:db8::1", wantErr: "mixes IPv4 and IPv6"},
		{in: "10.0.0.1-x", wantErr: "plain IP addresses"},
		{in: "fe80::1%eth0-fe80::2%eth0", wantErr: "zone"},
		{in: "::ffff:10.0.0.0/120", wantErr: "IPv4-mapped"},
		{in: "::ffff:10.0.0.1-::ffff:10.0.0.2", wantErr: "IPv4-mapped"},
	}
	for _, tt := range tests {
		first, last, err := ParseAddressRange(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseAddressRange(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || first != netip.MustParseAddr(tt.first) || last != netip.MustParseAddr(tt.last) {
			t.Errorf("ParseAddressRange(%q) = %v, %v, %v; want %s, %s", tt.in, first, last, err, tt.first, tt.last)
		}
	}
}

func TestValidatePools(t *testing.T) {
	p := field.NewPath("loadBalancer", "pools")
	ok := AddressPool{Name: "default", Addresses: []string{"192.0.2.0/24", "2001:db8::/64"}}
	tests := []struct {
		name  string
		pools []AddressPool
		want  []string // each must appear in the aggregated error; nil: valid
	}{
		{name: "valid", pools: []AddressPool{ok, {
			Name: "edge", Addresses: []string{"198.51.100.10-198.51.100.20", "2001:db8:1::/120"},
			Namespaces: []string{"kube-system", "web"}, ServiceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}},
			Communities:      []string{"65000:100", "no-export", "no-advertise", "no-export-subconfed", "no-peer", "blackhole", "graceful-shutdown"},
			LargeCommunities: []string{"4200000000:1:2"},
		}}},
		{name: "adjacent ranges are fine", pools: []AddressPool{
			{Name: "a", Addresses: []string{"10.0.0.0/25", "10.0.0.128-10.0.0.200"}},
			{Name: "b", Addresses: []string{"10.0.0.201-10.0.0.255", "0.0.0.0/32", "::/128"}},
		}},
		{name: "no pools: IPPool objects only", pools: nil},
		{name: "names", pools: []AddressPool{
			{Addresses: []string{"10.0.0.0/30"}},
			{Name: "Bad_Name", Addresses: []string{"10.0.1.0/30"}},
			{Name: "dup", Addresses: []string{"10.0.2.0/30"}},
			{Name: "dup", Addresses: []string{"10.0.3.0/30"}},
		}, want: []string{
			"loadBalancer.pools[0].name: Required value",
			`loadBalancer.pools[1].name: Invalid value: "Bad_Name"`,
			"loadBalancer.pools[3].name: Duplicate value", "also the name of pools[2]",
		}},
		{name: "addresses", pools: []AddressPool{
			{Name: "empty"},
			{Name: "bad", Addresses: []string{"10.0.0.0/33", "10.0.0.9-10.0.0.1", "nonsense"}},
		}, want: []string{
			"loadBalancer.pools[0].addresses: Required value",
			"loadBalancer.pools[1].addresses[0]: Invalid value", "not a CIDR",
			"loadBalancer.pools[1].addresses[1]", "swap them",
			"loadBalancer.pools[1].addresses[2]", "neither a CIDR nor a range",
		}},
		{name: "overlap between pools", pools: []AddressPool{
			{Name: "a", Addresses: []string{"10.0.0.0/24"}},
			{Name: "b", Addresses: []string{"10.0.0.200-10.0.1.5"}},
		}, want: []string{"loadBalancer.pools[1].addresses[0]", "overlaps loadBalancer.pools[0].addresses[0] (10.0.0.0/24)", "shrink or remove"}},
		{name: "overlap inside one pool, IPv6", pools: []AddressPool{
			{Name: "a", Addresses: []string{"2001:db8::/64", "2001:db8::ffff-2001:db8::1:0"}},
		}, want: []string{"loadBalancer.pools[0].addresses[1]", "overlaps loadBalancer.pools[0].addresses[0]"}},
		{name: "overlap hidden behind a long range", pools: []AddressPool{
			{Name: "a", Addresses: []string{"10.0.0.0/16", "10.0.1.0/24", "10.0.200.0/24"}},
		}, want: []string{"pools[0].addresses[1]: Invalid value", "pools[0].addresses[2]: Invalid value"}},
		{name: "restrictions", pools: []AddressPool{{
			Name: "a", Addresses: []string{"10.0.0.0/30"}, Namespaces: []string{"ok", "Not OK"},
			ServiceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Sometimes"}}},
		}}, want: []string{"loadBalancer.pools[0].namespaces[1]", "loadBalancer.pools[0].serviceSelector", "fix the label selector"}},
		{name: "communities", pools: []AddressPool{{
			Name: "a", Addresses: []string{"10.0.0.0/30"},
			Communities:      []string{"65536:1", "1:2:3", "no-such-name", "x:1"},
			LargeCommunities: []string{"1:2", "4294967296:0:0", "a:b:c"},
		}}, want: []string{
			"loadBalancer.pools[0].communities[0]", "loadBalancer.pools[0].communities[1]",
			"loadBalancer.pools[0].communities[2]", "loadBalancer.pools[0].communities[3]",
			"loadBalancer.pools[0].largeCommunities[0]", "loadBalancer.pools[0].largeCommunities[1]",
			"loadBalancer.pools[0].largeCommunities[2]", "0-65535",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := validatePools(tt.pools, p)
			if tt.want == nil {
				if len(errs) > 0 {
					t.Fatalf("unexpected errors: %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatal("no errors")
			}
			msg := errs.ToAggregate().Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("errors do not mention %q:\n%s", w, msg)
				}
			}
		})
	}
}

func TestParseLoadBalancer(t *testing.T) {
	base := `apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory: {file: {path: /etc/baremetal-ccm/inventory.yaml}}
`
	cfg, err := Parse([]byte(base + `loadBalancer:
  announcer: none
  pools:
  - name: default
    addresses: [192.0.2.0/28, "2001:db8::/120"]
  - name: manual
    addresses: [198.51.100.1-198.51.100.9]
    autoAssign: false
    priority: -1
`))
	if err != nil {
		t.Fatal(err)
	}
	pools := cfg.LoadBalancer.Pools
	if !pools[0].AutoAssignEnabled() || pools[1].AutoAssignEnabled() || pools[1].Priority != -1 {
		t.Errorf("pools = %+v", pools)
	}
	_, err = Parse([]byte(base + `loadBalancer:
  announcer: none
  pools:
  - name: a
    addresses: [192.0.2.0/24]
  - name: b
    addresses: [192.0.2.128/25]
    communities: [no-exprt]
`))
	for _, w := range []string{"loadBalancer.pools[1].addresses[0]", "overlaps", "loadBalancer.pools[1].communities[0]"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error does not mention %q: %v", w, err)
		}
	}
}
