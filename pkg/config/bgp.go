package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Next-hop modes of LoadBalancer announcements.
const (
	// NextHopSelf announces LB IPs with the announcing host as next hop (default).
	NextHopSelf = "self"
	// NextHopNodes announces one ADD-PATH path per eligible node, next hop the node.
	NextHopNodes = "nodes"
)

// BGPConfig enables the embedded BGP speaker that runs in every replica (and in the
// agent). Absent: no BGP.
type BGPConfig struct {
	// LocalASN is this speaker's AS number.
	LocalASN uint32 `json:"localASN"`
	// RouterID is the BGP router ID (an IPv4 address). Default: the first IPv4
	// InternalIP of this host in the inventory.
	RouterID string `json:"routerID,omitempty"`
	// ListenPort is the port accepting BGP sessions; 0 (default) makes outbound
	// connections only.
	ListenPort int32 `json:"listenPort,omitempty"`
	// NextHop is self (default) or nodes.
	NextHop string `json:"nextHop,omitempty"`
	// Peers are the routers every replica peers with. Per-rack peers come from the
	// inventory's racks.
	Peers []BGPPeer `json:"peers,omitempty"`
	// Communities and LargeCommunities are attached to every announcement.
	Communities      []string `json:"communities,omitempty"`
	LargeCommunities []string `json:"largeCommunities,omitempty"`
	// AnnouncePodCIDRs announces each Node's pod CIDRs with the Node's InternalIP as
	// next hop. Default: false.
	AnnouncePodCIDRs bool `json:"announcePodCIDRs,omitempty"`
}

// BGPPeer is one BGP neighbor.
type BGPPeer struct {
	// Address of the neighbor (IPv4 or IPv6).
	Address string `json:"address"`
	// ASN of the neighbor.
	ASN uint32 `json:"asn"`
	// Port of the neighbor. Default: 179.
	Port int32 `json:"port,omitempty"`
	// SourceAddress is the local address to connect from. Default: chosen by the kernel.
	SourceAddress string `json:"sourceAddress,omitempty"`
	// PasswordFile holds the TCP MD5 password (never inline).
	PasswordFile string `json:"passwordFile,omitempty"`
	// EBGPMultihop is the TTL for eBGP sessions to non-adjacent peers; 0 = directly
	// connected.
	EBGPMultihop int32 `json:"ebgpMultihop,omitempty"`
	// HoldTime and KeepaliveTime. Defaults: 90s and 30s.
	HoldTime      *metav1.Duration `json:"holdTime,omitempty"`
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`
	// ConnectRetry is the time between connection attempts. Default: 5s.
	ConnectRetry *metav1.Duration `json:"connectRetry,omitempty"`
	// GracefulRestart enables graceful restart (RFC 4724) with this restart time.
	GracefulRestart *metav1.Duration `json:"gracefulRestart,omitempty"`
}

func setBGPDefaults(b *BGPConfig) {
	if b == nil {
		return
	}
	if b.NextHop == "" {
		b.NextHop = NextHopSelf
	}
	for i := range b.Peers {
		SetBGPPeerDefaults(&b.Peers[i])
	}
}

func validateBGP(b *BGPConfig, p *field.Path) field.ErrorList {
	if b == nil {
		return nil
	}
	return validateBGPSpeaker(b, p)
}
