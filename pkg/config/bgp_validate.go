package config

import (
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// BGP defaults.
const (
	DefaultBGPPort          = 179
	DefaultBGPHoldTime      = 90 * time.Second
	DefaultBGPKeepaliveTime = 30 * time.Second
	DefaultBGPConnectRetry  = 5 * time.Second
	// MaxBGPGracefulRestart is the largest restart time the 12-bit field of the
	// graceful-restart capability (RFC 4724) can carry.
	MaxBGPGracefulRestart = 4095 * time.Second
)

// WellKnownCommunities maps the names accepted in communities to their values
// (RFC 1997, RFC 3765, RFC 7999, RFC 8326).
var WellKnownCommunities = map[string]uint32{
	"graceful-shutdown":   0xFFFF0000,
	"blackhole":           0xFFFF029A,
	"no-export":           0xFFFFFF01,
	"no-advertise":        0xFFFFFF02,
	"no-export-subconfed": 0xFFFFFF03,
	"no-peer":             0xFFFFFF04,
}

// ParseCommunity parses a standard community: "asn:value" with two 16-bit decimal
// numbers, or one of the names in WellKnownCommunities.
func ParseCommunity(s string) (uint32, error) {
	if v, ok := WellKnownCommunities[strings.ToLower(s)]; ok {
		return v, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) != 2 {
		return 0, fmt.Errorf("community %q: want <0-65535>:<0-65535> or a well-known name (no-export, no-advertise, no-export-subconfed, no-peer, blackhole, graceful-shutdown)", s)
	}
	var v uint32
	for _, p := range parts {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("community %q: each half must be a number 0-65535", s)
		}
		v = v<<16 | uint32(n)
	}
	return v, nil
}

// ParseLargeCommunity parses a large community (RFC 8092): "global:local1:local2",
// three 32-bit decimal numbers.
func ParseLargeCommunity(s string) ([3]uint32, error) {
	var v [3]uint32
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return v, fmt.Errorf("large community %q: want <asn>:<value>:<value>, three numbers 0-4294967295", s)
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return v, fmt.Errorf("large community %q: each part must be a number 0-4294967295", s)
		}
		v[i] = uint32(n)
	}
	if v[0] == math.MaxUint32 {
		return v, fmt.Errorf("large community %q: global administrator 4294967295 is reserved (the last ASN, RFC 7300; the speaker tags paths with it internally)", s)
	}
	return v, nil
}

// SetBGPPeerDefaults fills a peer's unset optional fields (also used for the
// inventory's per-rack peers): port 179, hold time 90s, keepalive 30s (a third of an
// explicit hold time when only that is set), connect retry 5s.
func SetBGPPeerDefaults(p *BGPPeer) {
	if p == nil {
		return
	}
	if p.Port == 0 {
		p.Port = DefaultBGPPort
	}
	if p.HoldTime == nil {
		p.HoldTime = &metav1.Duration{Duration: DefaultBGPHoldTime}
	}
	if p.KeepaliveTime == nil {
		ka := DefaultBGPKeepaliveTime
		if h := p.HoldTime.Duration; h > 0 && h != DefaultBGPHoldTime {
			ka = (h / 3).Truncate(time.Second)
			if ka < time.Second {
				ka = time.Second
			}
		}
		p.KeepaliveTime = &metav1.Duration{Duration: ka}
	}
	if p.ConnectRetry == nil {
		p.ConnectRetry = &metav1.Duration{Duration: DefaultBGPConnectRetry}
	}
	if b := p.BFD; b != nil {
		if b.MinTx == nil {
			b.MinTx = &metav1.Duration{Duration: DefaultBFDInterval}
		}
		if b.MinRx == nil {
			b.MinRx = &metav1.Duration{Duration: DefaultBFDInterval}
		}
		if b.Multiplier == 0 {
			b.Multiplier = DefaultBFDMultiplier
		}
	}
}

// validateBGPSpeaker checks the speaker settings and peers.
func validateBGPSpeaker(b *BGPConfig, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if b.LocalASN == 0 || b.LocalASN == math.MaxUint32 {
		errs = append(errs, field.Invalid(p.Child("localASN"), b.LocalASN, "required: this speaker's AS number, 1-4294967294 (private: 64512-65534 or 4200000000-4294967294)"))
	}
	if b.RouterID != "" {
		if a, err := netip.ParseAddr(b.RouterID); err != nil || !a.Is4() {
			errs = append(errs, field.Invalid(p.Child("routerID"), b.RouterID, "must be an IPv4 address such as 10.0.0.1 (leave empty to use the host's first IPv4 InternalIP)"))
		}
	}
	if b.ListenPort < 0 || b.ListenPort > 65535 {
		errs = append(errs, field.Invalid(p.Child("listenPort"), b.ListenPort, "must be 0 (outbound connections only) or a port 1-65535"))
	}
	if b.NextHop != NextHopSelf && b.NextHop != NextHopNodes {
		errs = append(errs, field.NotSupported(p.Child("nextHop"), b.NextHop, []string{NextHopSelf, NextHopNodes}))
	}
	if b.OnStop != StopWithdraw && b.OnStop != StopRetain {
		errs = append(errs, field.NotSupported(p.Child("onStop"), b.OnStop, []string{StopWithdraw, StopRetain}))
	}
	if r := b.ReadyTimeout; r != nil && r.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("readyTimeout"), r.Duration.String(), "must be 0 (report ready without waiting for sessions) or positive"))
	}
	if h := b.NodeHealthCheck; h != nil {
		hp := p.Child("nodeHealthCheck")
		if b.NextHop != NextHopNodes {
			errs = append(errs, field.Forbidden(hp, "only used with nextHop: nodes (with next hop self, traffic goes to the announcing host, not to the nodes)"))
		}
		errs = append(errs, validatePositive(h.Period, hp.Child("period"))...)
		errs = append(errs, validatePositive(h.Timeout, hp.Child("timeout"))...)
		if h.Period != nil && h.Timeout != nil && h.Timeout.Duration > h.Period.Duration {
			errs = append(errs, field.Invalid(hp.Child("timeout"), h.Timeout.Duration.String(), "must not be longer than period "+h.Period.Duration.String()))
		}
		if h.FailureThreshold < 1 || h.FailureThreshold > 100 {
			errs = append(errs, field.Invalid(hp.Child("failureThreshold"), h.FailureThreshold, "must be 1-100"))
		}
		if h.KubeProxyPort < 1 || h.KubeProxyPort > 65535 {
			errs = append(errs, field.Invalid(hp.Child("kubeProxyPort"), h.KubeProxyPort, "must be a port 1-65535 (kube-proxy's --healthz-bind-address port, default 10256)"))
		}
	}
	if g := b.GracefulShutdown; g != nil && g.Time != nil && (g.Time.Duration < 0 || g.Time.Duration > time.Hour) {
		errs = append(errs, field.Invalid(p.Child("gracefulShutdown", "time"), g.Time.Duration.String(), "must be 0s-1h: how long a draining node's paths stay announced with GRACEFUL_SHUTDOWN at least (0s: withdrawn once its endpoints are gone)"))
	}
	seen := map[netip.Addr]int{}
	for i := range b.Peers {
		pp := p.Child("peers").Index(i)
		errs = append(errs, ValidateBGPPeer(&b.Peers[i], pp)...)
		if a, err := netip.ParseAddr(b.Peers[i].Address); err == nil {
			a = a.Unmap()
			if j, dup := seen[a]; dup {
				errs = append(errs, field.Duplicate(pp.Child("address"), fmt.Sprintf("%s (also peers[%d]); configure each neighbor once", b.Peers[i].Address, j)))
			} else {
				seen[a] = i
			}
		}
	}
	errs = append(errs, ValidateCommunities(b.Communities, p.Child("communities"))...)
	errs = append(errs, ValidateLargeCommunities(b.LargeCommunities, p.Child("largeCommunities"))...)
	return errs
}

// ValidateCommunities checks a list of standard communities (see ParseCommunity).
func ValidateCommunities(cs []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, c := range cs {
		if _, err := ParseCommunity(c); err != nil {
			errs = append(errs, field.Invalid(p.Index(i), c, err.Error()))
		}
	}
	return errs
}

// ValidateLargeCommunities checks a list of large communities (see
// ParseLargeCommunity).
func ValidateLargeCommunities(cs []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, c := range cs {
		if _, err := ParseLargeCommunity(c); err != nil {
			errs = append(errs, field.Invalid(p.Index(i), c, err.Error()))
		}
	}
	return errs
}

// ValidateBGPPeer checks one defaulted peer (also used for the inventory's per-rack
// peers).
func ValidateBGPPeer(peer *BGPPeer, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	addr, err := netip.ParseAddr(peer.Address)
	switch {
	case peer.Address == "":
		errs = append(errs, field.Required(p.Child("address"), "the neighbor's IPv4 or IPv6 address"))
	case err != nil || addr.Zone() != "":
		errs = append(errs, field.Invalid(p.Child("address"), peer.Address, "must be an IPv4 or IPv6 address without zone, such as 10.0.0.1 or fd00::1"))
	case addr.IsUnspecified() || addr.IsMulticast():
		errs = append(errs, field.Invalid(p.Child("address"), peer.Address, "must be a unicast address of the neighbor"))
	}
	if peer.ASN == 0 || peer.ASN == math.MaxUint32 {
		errs = append(errs, field.Invalid(p.Child("asn"), peer.ASN, "required: the neighbor's AS number, 1-4294967294"))
	}
	if peer.Port < 1 || peer.Port > 65535 {
		errs = append(errs, field.Invalid(p.Child("port"), peer.Port, "must be a port 1-65535 (default 179)"))
	}
	if peer.SourceAddress != "" {
		src, serr := netip.ParseAddr(peer.SourceAddress)
		switch {
		case serr != nil || src.Zone() != "":
			errs = append(errs, field.Invalid(p.Child("sourceAddress"), peer.SourceAddress, "must be a local IPv4 or IPv6 address without zone"))
		case err == nil && src.Unmap().Is4() != addr.Unmap().Is4():
			errs = append(errs, field.Invalid(p.Child("sourceAddress"), peer.SourceAddress, "must be of the same address family as address "+peer.Address))
		}
	}
	if peer.PasswordFile != "" && !filepath.IsAbs(peer.PasswordFile) {
		errs = append(errs, field.Invalid(p.Child("passwordFile"), peer.PasswordFile, "must be an absolute path to a file holding the TCP MD5 password"))
	}
	if peer.EBGPMultihop < 0 || peer.EBGPMultihop > 255 {
		errs = append(errs, field.Invalid(p.Child("ebgpMultihop"), peer.EBGPMultihop, "must be 0 (directly connected) or a TTL 1-255"))
	}
	if h := peer.HoldTime; h != nil {
		if h.Duration < 3*time.Second || h.Duration > 65535*time.Second {
			errs = append(errs, field.Invalid(p.Child("holdTime"), h.Duration.String(), "must be between 3s and 65535s (the embedded speaker cannot turn the hold timer off; 0 would silently mean 90s)"))
		} else if h.Duration%time.Second != 0 {
			errs = append(errs, field.Invalid(p.Child("holdTime"), h.Duration.String(), "must be whole seconds"))
		}
	}
	errs = append(errs, validatePositive(peer.KeepaliveTime, p.Child("keepaliveTime"))...)
	errs = append(errs, validatePositive(peer.ConnectRetry, p.Child("connectRetry"))...)
	if k, h := peer.KeepaliveTime, peer.HoldTime; k != nil && h != nil && h.Duration > 0 && k.Duration >= h.Duration {
		errs = append(errs, field.Invalid(p.Child("keepaliveTime"), k.Duration.String(), "must be shorter than holdTime "+h.Duration.String()+" (usually a third of it)"))
	}
	if g := peer.GracefulRestart; g != nil {
		if g.Duration <= 0 || g.Duration > MaxBGPGracefulRestart {
			errs = append(errs, field.Invalid(p.Child("gracefulRestart"), g.Duration.String(), "must be a restart time between 1s and 4095s (omit to disable graceful restart)"))
		}
	}
	if b := peer.BFD; b != nil {
		bp := p.Child("bfd")
		for _, d := range []struct {
			name string
			v    *metav1.Duration
		}{{"minTx", b.MinTx}, {"minRx", b.MinRx}} {
			if d.v != nil && (d.v.Duration < MinBFDInterval || d.v.Duration > time.Minute) {
				errs = append(errs, field.Invalid(bp.Child(d.name), d.v.Duration.String(), "must be between 10ms and 1m (300ms with multiplier 3 detects a failure in under a second)"))
			}
		}
		if b.Multiplier < 1 || b.Multiplier > 255 {
			errs = append(errs, field.Invalid(bp.Child("multiplier"), b.Multiplier, "must be 1-255 (default 3)"))
		}
		if peer.EBGPMultihop > 1 {
			errs = append(errs, field.Forbidden(bp, "single-hop BFD (RFC 5881) only: not with ebgpMultihop"))
		}
	}
	return errs
}
