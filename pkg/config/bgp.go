package config

import (
	"time"

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

// What a clean stop (SIGTERM) does to this host's paths (bgp.onStop).
const (
	// StopWithdraw withdraws every path, waits until the routers have acknowledged
	// the withdrawals, then closes each session with a Cease NOTIFICATION (a Hard
	// Reset where the router negotiated RFC 8538), so no router keeps a stale path.
	StopWithdraw = "withdraw"
	// StopRetain is for planned restarts (an upgrade, a systemd restart): the
	// sessions close without a NOTIFICATION, routers that help graceful restart keep
	// the paths for the restart time, and the next start refreshes them and sends
	// End-of-RIB once it has announced everything.
	StopRetain = "retain"
)

// Defaults of the speaker's readiness, BFD and node health checks.
const (
	DefaultBGPReadyTimeout        = time.Minute
	DefaultBGPRetainRestartTime   = 120 * time.Second
	DefaultBFDInterval            = 300 * time.Millisecond
	DefaultBFDMultiplier          = 3
	MinBFDInterval                = 10 * time.Millisecond
	DefaultNodeHealthCheckPeriod  = 2 * time.Second
	DefaultNodeHealthCheckTimeout = time.Second
	DefaultNodeHealthCheckFails   = 3
	DefaultKubeProxyHealthzPort   = 10256
	DefaultGracefulShutdownTime   = 30 * time.Second
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
	// OnStop is what a clean stop does to this host's paths: withdraw (default) or
	// retain (planned restarts; graceful restart on every peer, see StopRetain).
	OnStop string `json:"onStop,omitempty"`
	// ReadyTimeout bounds how long a starting replica waits for all its BGP sessions
	// before it reports ready anyway (logging the peers still down). Default 1m.
	ReadyTimeout *metav1.Duration `json:"readyTimeout,omitempty"`
	// NodeHealthCheck, in next-hop mode nodes, probes every node the way cloud load
	// balancers do and withdraws a node's next hops after consecutive failures.
	NodeHealthCheck *NodeHealthCheck `json:"nodeHealthCheck,omitempty"`
	// GracefulShutdown, when set, moves traffic off a draining node before its
	// endpoints go (RFC 8326): see GracefulShutdown.
	GracefulShutdown *GracefulShutdown `json:"gracefulShutdown,omitempty"`
}

// GracefulShutdown re-announces every path whose next hop is a draining node (a
// cordoned Node with condition DrainInProgress True, one with
// GracefulNodeShutdownInProgress True, or any cordoned Node with OnCordon) with the
// GRACEFUL_SHUTDOWN community 65535:0 (and LOCAL_PREF 0 to iBGP peers), so routers
// that honor it prefer the other next hops, then withdraws each such path once Time
// has passed since the drain began and the node has no serving endpoint of the
// Service left, whichever is later. Uncordoning restores the paths.
type GracefulShutdown struct {
	// Time is the least time a draining node's paths stay announced with
	// GRACEFUL_SHUTDOWN before they are withdrawn. Default 30s.
	Time *metav1.Duration `json:"time,omitempty"`
	// OnCordon treats every cordoned Node (spec.unschedulable) as draining, not
	// only those with DrainInProgress True. Default false.
	OnCordon bool `json:"onCordon,omitempty"`
}

// NodeHealthCheck probes nodes in next-hop mode nodes: kube-proxy's /healthz for
// Services of externalTrafficPolicy Cluster, the Service's healthCheckNodePort for
// Local ones.
type NodeHealthCheck struct {
	// Period between probes of one node. Default 2s.
	Period *metav1.Duration `json:"period,omitempty"`
	// Timeout of one probe. Default 1s.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// FailureThreshold consecutive failures withdraw the node's next hops; one
	// success restores them. Default 3.
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
	// KubeProxyPort is kube-proxy's healthz port. Default 10256.
	KubeProxyPort int32 `json:"kubeProxyPort,omitempty"`
}

// BFDConfig enables Bidirectional Forwarding Detection (RFC 5880, single hop RFC
// 5881) on a peer: the router detects a dead host within Multiplier x the
// negotiated interval instead of the BGP hold time.
type BFDConfig struct {
	// MinTx is the desired minimum transmit interval. Default 300ms.
	MinTx *metav1.Duration `json:"minTx,omitempty"`
	// MinRx is the required minimum receive interval. Default 300ms.
	MinRx *metav1.Duration `json:"minRx,omitempty"`
	// Multiplier is the detection multiplier (1-255). Default 3.
	Multiplier int32 `json:"multiplier,omitempty"`
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
	// BFD, when set, runs a BFD session with the neighbor; BFD down resets the BGP
	// session at once.
	BFD *BFDConfig `json:"bfd,omitempty"`
}

func setBGPDefaults(b *BGPConfig) {
	if b == nil {
		return
	}
	if b.NextHop == "" {
		b.NextHop = NextHopSelf
	}
	if b.OnStop == "" {
		b.OnStop = StopWithdraw
	}
	if b.ReadyTimeout == nil {
		b.ReadyTimeout = &metav1.Duration{Duration: DefaultBGPReadyTimeout}
	}
	if h := b.NodeHealthCheck; h != nil {
		if h.Period == nil {
			h.Period = &metav1.Duration{Duration: DefaultNodeHealthCheckPeriod}
		}
		if h.Timeout == nil {
			h.Timeout = &metav1.Duration{Duration: DefaultNodeHealthCheckTimeout}
		}
		if h.FailureThreshold == 0 {
			h.FailureThreshold = DefaultNodeHealthCheckFails
		}
		if h.KubeProxyPort == 0 {
			h.KubeProxyPort = DefaultKubeProxyHealthzPort
		}
	}
	if g := b.GracefulShutdown; g != nil && g.Time == nil {
		g.Time = &metav1.Duration{Duration: DefaultGracefulShutdownTime}
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
