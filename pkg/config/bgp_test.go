package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const bgpBase = `
apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: /etc/baremetal-ccm/inventory.yaml}
`

func TestParseBGPDefaults(t *testing.T) {
	cfg, err := Parse([]byte(bgpBase + `
bgp:
  localASN: 65000
  routerID: 10.0.0.1
  communities: ["65000:1", no-export]
  largeCommunities: ["65000:1:2"]
  peers:
  - {address: 10.0.0.254, asn: 65001}
  - {address: "fd00::fe", asn: 65001, holdTime: 6s, sourceAddress: "fd00::1", passwordFile: /etc/baremetal-ccm/bgp-pw, gracefulRestart: 2m}
  gracefulShutdown: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.BGP
	if b.NextHop != NextHopSelf {
		t.Errorf("nextHop = %q", b.NextHop)
	}
	if g := b.GracefulShutdown; g == nil || g.Time.Duration != DefaultGracefulShutdownTime || g.OnCordon {
		t.Errorf("gracefulShutdown defaults = %+v", g)
	}
	p := b.Peers[0]
	if p.Port != 179 || p.HoldTime.Duration != 90*time.Second || p.KeepaliveTime.Duration != 30*time.Second || p.ConnectRetry.Duration != 5*time.Second {
		t.Errorf("peer defaults = %+v", p)
	}
	if k := b.Peers[1].KeepaliveTime.Duration; k != 2*time.Second {
		t.Errorf("keepalive for holdTime 6s = %v, want a third", k)
	}
}

func TestSetBGPPeerDefaultsKeepsExplicit(t *testing.T) {
	p := BGPPeer{Port: 1179, HoldTime: &metav1.Duration{}, KeepaliveTime: &metav1.Duration{Duration: time.Second}}
	SetBGPPeerDefaults(&p)
	if p.Port != 1179 || p.HoldTime.Duration != 0 || p.KeepaliveTime.Duration != time.Second {
		t.Errorf("explicit values changed: %+v", p)
	}
	SetBGPPeerDefaults(nil) // no panic
}

func TestValidateBGP(t *testing.T) {
	d := func(s string) *metav1.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Duration{Duration: v}
	}
	valid := func() *BGPConfig {
		b := &BGPConfig{LocalASN: 65000, RouterID: "10.0.0.1", Peers: []BGPPeer{{Address: "10.0.0.254", ASN: 65001}}}
		setBGPDefaults(b)
		return b
	}
	if errs := validateBGPSpeaker(valid(), field.NewPath("bgp")); len(errs) != 0 {
		t.Fatalf("valid config: %v", errs)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*BGPConfig)
		field  string
		hint   string
	}{
		{"asn missing", func(b *BGPConfig) { b.LocalASN = 0 }, "bgp.localASN", "required"},
		{"asn reserved", func(b *BGPConfig) { b.LocalASN = 4294967295 }, "bgp.localASN", "4294967294"},
		{"router id v6", func(b *BGPConfig) { b.RouterID = "fd00::1" }, "bgp.routerID", "IPv4"},
		{"router id junk", func(b *BGPConfig) { b.RouterID = "router1" }, "bgp.routerID", "IPv4"},
		{"listen port", func(b *BGPConfig) { b.ListenPort = 70000 }, "bgp.listenPort", "1-65535"},
		{"next hop", func(b *BGPConfig) { b.NextHop = "router" }, "bgp.nextHop", "self"},
		{"graceful shutdown time", func(b *BGPConfig) { b.GracefulShutdown = &GracefulShutdown{Time: d("-1s")} }, "bgp.gracefulShutdown.time", "0s-1h"},
		{"peer address", func(b *BGPConfig) { b.Peers[0].Address = "10.0.0" }, "bgp.peers[0].address", "IPv4 or IPv6"},
		{"peer address empty", func(b *BGPConfig) { b.Peers[0].Address = "" }, "bgp.peers[0].address", "Required"},
		{"peer address zone", func(b *BGPConfig) { b.Peers[0].Address = "fe80::1%eth0" }, "bgp.peers[0].address", "without zone"},
		{"peer unspecified", func(b *BGPConfig) { b.Peers[0].Address = "0.0.0.0" }, "bgp.peers[0].address", "unicast"},
		{"peer asn", func(b *BGPConfig) { b.Peers[0].ASN = 0 }, "bgp.peers[0].asn", "required"},
		{"peer port", func(b *BGPConfig) { b.Peers[0].Port = -1 }, "bgp.peers[0].port", "1-65535"},
		{"source family", func(b *BGPConfig) { b.Peers[0].SourceAddress = "fd00::1" }, "bgp.peers[0].sourceAddress", "same address family"},
		{"source junk", func(b *BGPConfig) { b.Peers[0].SourceAddress = "eth0" }, "bgp.peers[0].sourceAddress", "local IPv4 or IPv6"},
		{"password relative", func(b *BGPConfig) { b.Peers[0].PasswordFile = "pw" }, "bgp.peers[0].passwordFile", "absolute"},
		{"multihop", func(b *BGPConfig) { b.Peers[0].EBGPMultihop = 256 }, "bgp.peers[0].ebgpMultihop", "1-255"},
		{"hold too short", func(b *BGPConfig) { b.Peers[0].HoldTime = d("2s"); b.Peers[0].KeepaliveTime = d("1s") }, "bgp.peers[0].holdTime", "3s"},
		{"hold fraction", func(b *BGPConfig) { b.Peers[0].HoldTime = d("3500ms"); b.Peers[0].KeepaliveTime = d("1s") }, "bgp.peers[0].holdTime", "whole seconds"},
		{"keepalive >= hold", func(b *BGPConfig) { b.Peers[0].KeepaliveTime = d("90s") }, "bgp.peers[0].keepaliveTime", "shorter than holdTime"},
		{"keepalive negative", func(b *BGPConfig) { b.Peers[0].KeepaliveTime = d("-1s") }, "bgp.peers[0].keepaliveTime", "positive"},
		{"connect retry", func(b *BGPConfig) { b.Peers[0].ConnectRetry = d("0s") }, "bgp.peers[0].connectRetry", "positive"},
		{"graceful restart", func(b *BGPConfig) { b.Peers[0].GracefulRestart = d("2h") }, "bgp.peers[0].gracefulRestart", "4095s"},
		{"duplicate peer", func(b *BGPConfig) {
			b.Peers = append(b.Peers, BGPPeer{Address: "::ffff:10.0.0.254", ASN: 65002})
			SetBGPPeerDefaults(&b.Peers[1])
		}, "bgp.peers[1].address", "peers[0]"},
		{"community range", func(b *BGPConfig) { b.Communities = []string{"65536:1"} }, "bgp.communities[0]", "0-65535"},
		{"community form", func(b *BGPConfig) { b.Communities = []string{"no-exports"} }, "bgp.communities[0]", "well-known"},
		{"large community", func(b *BGPConfig) { b.LargeCommunities = []string{"1:2"} }, "bgp.largeCommunities[0]", "three numbers"},
		{"large community range", func(b *BGPConfig) { b.LargeCommunities = []string{"1:2:4294967296"} }, "bgp.largeCommunities[0]", "0-4294967295"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := valid()
			tc.mutate(b)
			errs := validateBGPSpeaker(b, field.NewPath("bgp"))
			if len(errs) != 1 {
				t.Fatalf("errors = %v, want exactly one", errs)
			}
			if errs[0].Field != tc.field || !strings.Contains(errs[0].Error(), tc.hint) {
				t.Errorf("error = %q (field %s), want field %s mentioning %q", errs[0].Error(), errs[0].Field, tc.field, tc.hint)
			}
		})
	}
	// Hold time 0 would mean "no hold timer" in BGP, but GoBGP treats it as unset
	// (90s): it is refused rather than silently changed.
	b := valid()
	b.Peers[0].HoldTime = d("0s")
	if errs := validateBGPSpeaker(b, field.NewPath("bgp")); len(errs) != 1 || !strings.Contains(errs[0].Error(), "cannot turn the hold timer off") {
		t.Errorf("holdTime 0: %v, want one error saying the hold timer cannot be off", errs)
	}
}

func TestParseBGPErrorsWrapErrInvalid(t *testing.T) {
	_, err := Parse([]byte(bgpBase + `
bgp:
  localASN: 0
  peers:
  - {address: 10.0.0.254, asn: 65001, port: 0, keepaliveTime: 2m}
`))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	for _, want := range []string{"bgp.localASN", "bgp.peers[0].keepaliveTime"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestParseCommunity(t *testing.T) {
	for in, want := range map[string]uint32{
		"0:0": 0, "65535:65535": 0xFFFFFFFF, "65000:100": 65000<<16 | 100,
		"no-export": 0xFFFFFF01, "NO-ADVERTISE": 0xFFFFFF02, "no-export-subconfed": 0xFFFFFF03,
		"no-peer": 0xFFFFFF04, "blackhole": 0xFFFF029A, "graceful-shutdown": 0xFFFF0000,
	} {
		if got, err := ParseCommunity(in); err != nil || got != want {
			t.Errorf("ParseCommunity(%q) = %#x, %v; want %#x", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1", "1:2:3", "-1:2", "a:b", "1:65536", " 1:2"} {
		if _, err := ParseCommunity(in); err == nil {
			t.Errorf("ParseCommunity(%q) accepted", in)
		}
	}
	if got, err := ParseLargeCommunity("4294967294:0:4294967295"); err != nil || got != [3]uint32{4294967294, 0, 4294967295} {
		t.Errorf("ParseLargeCommunity = %v, %v", got, err)
	}
	// The speaker's scope tags use global administrator 4294967295.
	if _, err := ParseLargeCommunity("4294967295:0:1"); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("ParseLargeCommunity(4294967295:0:1) = %v, want reserved", err)
	}
}

func TestLoadAgent(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noInventory := write("agent.yaml", `apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
bgp: {localASN: 65000, announcePodCIDRs: true}
routes: {}
`)
	cfg, err := LoadAgent(noInventory)
	if err != nil {
		t.Fatalf("LoadAgent without an inventory: %v", err)
	}
	if cfg.BGP.NextHop != NextHopSelf {
		t.Errorf("defaults not applied: %+v", cfg.BGP)
	}
	if _, err := Load(noInventory); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "inventory") {
		t.Errorf("Load (the CCM's) without an inventory = %v, want an error naming inventory", err)
	}
	shared := write("shared.yaml", `apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
bgp: {localASN: 65000, routerID: 10.0.0.1}
`)
	if _, err := LoadAgent(shared); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "bgp.routerID: Forbidden") || !strings.Contains(err.Error(), "--bgp-router-id") {
		t.Errorf("LoadAgent with bgp.routerID = %v, want it refused with the fix", err)
	}
	badInventory := write("bad.yaml", `apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory: {file: {path: relative}}
bgp: {localASN: 65000}
`)
	if _, err := LoadAgent(badInventory); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "inventory.file.path") {
		t.Errorf("LoadAgent with a malformed inventory section = %v, want it reported", err)
	}
}
