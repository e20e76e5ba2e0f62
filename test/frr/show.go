package frr

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Route is one path in FRR's BGP table (ECMP and ADD-PATH paths are separate
// Routes).
type Route struct {
	Prefix netip.Prefix
	// Peer is the neighbor the path came from.
	Peer netip.Addr
	// NextHops as received (IPv6: global, then link-local if any).
	NextHops []netip.Addr
	// Best is FRR's best path; Multipath an ECMP path installed with it.
	Best, Multipath bool
	// Valid is false for a path FRR cannot use (e.g. next hop unreachable).
	Valid bool
	// Stale marks a path kept for a restarting speaker (graceful restart helper).
	Stale  bool
	ASPath string
	// Communities as "a:b", LargeCommunities as "a:b:c".
	Communities, LargeCommunities []string
	LocalPref                     *uint32
	// PathID is the ADD-PATH path identifier the speaker sent (0 without ADD-PATH).
	PathID uint32
}

type jsonPath struct {
	ASPath struct {
		String string `json:"string"`
	} `json:"aspath"`
	Valid    bool `json:"valid"`
	Stale    bool `json:"stale"`
	BestPath *struct {
		Overall bool `json:"overall"`
	} `json:"bestpath"`
	Multipath bool    `json:"multipath"`
	LocPrf    *uint32 `json:"locPrf"`
	Community *struct {
		List []string `json:"list"`
	} `json:"community"`
	LargeCommunity *struct {
		List []string `json:"list"`
	} `json:"largeCommunity"`
	AddpathRxID uint32 `json:"addpathRxId"`
	Nexthops    []struct {
		IP string `json:"ip"`
	} `json:"nexthops"`
	Peer struct {
		PeerID string `json:"peerId"`
	} `json:"peer"`
}

// parsePrefixJSON parses "show bgp <afi> unicast <prefix> json" ("{}" when FRR has
// no path for the prefix).
func parsePrefixJSON(b []byte) ([]Route, error) {
	var v struct {
		Prefix string     `json:"prefix"`
		Paths  []jsonPath `json:"paths"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	if v.Prefix == "" {
		return nil, nil
	}
	prefix, err := netip.ParsePrefix(v.Prefix)
	if err != nil {
		return nil, err
	}
	var res []Route
	for _, p := range v.Paths {
		rt := Route{Prefix: prefix, Valid: p.Valid, Stale: p.Stale, Multipath: p.Multipath, ASPath: p.ASPath.String, LocalPref: p.LocPrf, PathID: p.AddpathRxID}
		rt.Best = p.BestPath != nil && p.BestPath.Overall
		rt.Peer, _ = netip.ParseAddr(p.Peer.PeerID)
		for _, nh := range p.Nexthops {
			if a, err := netip.ParseAddr(nh.IP); err == nil {
				rt.NextHops = append(rt.NextHops, a)
			}
		}
		if p.Community != nil {
			rt.Communities = p.Community.List
		}
		if p.LargeCommunity != nil {
			rt.LargeCommunities = p.LargeCommunity.List
		}
		res = append(res, rt)
	}
	return res, nil
}

func afi(a netip.Addr) string {
	if a.Is4() {
		return "ipv4"
	}
	return "ipv6"
}

// RoutesFor returns the paths FRR holds for exactly prefix (nil if none).
func (r *Router) RoutesFor(ctx context.Context, prefix netip.Prefix) ([]Route, error) {
	out, err := r.Vtysh(ctx, fmt.Sprintf("show bgp %s unicast %s json", afi(prefix.Addr()), prefix.Masked()))
	if err != nil {
		return nil, err
	}
	rs, err := parsePrefixJSON([]byte(out))
	if err != nil {
		return nil, fmt.Errorf("frr: routes for %s: %w: %.200s", prefix, err, out)
	}
	return rs, nil
}

// CountRoutes returns how many paths FRR's BGP tables hold, IPv4 and IPv6 unicast,
// stale ones included ("show bgp <afi> unicast statistics json": cheap, for
// benchmarks with many routes).
func (r *Router) CountRoutes(ctx context.Context) (int, error) {
	total := 0
	for _, af := range []string{"ipv4", "ipv6"} {
		out, err := r.Vtysh(ctx, "show bgp "+af+" unicast statistics json")
		if err != nil {
			return 0, err
		}
		n, err := parseStatisticsCount([]byte(out))
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// parseStatisticsCount sums totalAdvertisements (paths) of "show bgp <afi> unicast
// statistics json".
func parseStatisticsCount(b []byte) (int, error) {
	var v map[string][]struct {
		TotalAdvertisements int `json:"totalAdvertisements"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return 0, fmt.Errorf("frr: bgp statistics: %w", err)
	}
	n := 0
	for _, insts := range v {
		for _, i := range insts {
			n += i.TotalAdvertisements
		}
	}
	return n, nil
}

// Neighbor is FRR's view of one BGP neighbor.
type Neighbor struct {
	Addr             netip.Addr
	RemoteAS         uint32
	LocalAS          uint32
	State            string // "Idle", "Active", "Established", ...
	PeerGroup        string
	Password         bool
	UpdateSource     string
	ConnectionsUp    int
	ConnectionsDown  int
	LastResetReason  string
	UptimeSince      time.Time // zero unless Established (second resolution)
	GRLocalMode      string    // e.g. "Helper*" (* = inherited default), "Restart", "Disable"
	GRRemoteMode     string
	GRNBit, GRRBit   bool
	AddPathRx        map[string]bool // address family ("ipv4Unicast") -> ADD-PATH receive negotiated
	AcceptedPrefixes map[string]int  // address family -> accepted paths
	// InPolicy and OutPolicy are the route-maps by address family.
	InPolicy, OutPolicy map[string]string
	// BFD is set when BFD is configured for the neighbor.
	BFD *NeighborBFD
	// LastNotification is the NOTIFICATION behind the last reset, nil if the last
	// reset had none (see NeighborNotification).
	LastNotification *NeighborNotification
}

// NeighborBFD is bgpd's view of the neighbor's BFD session.
type NeighborBFD struct {
	Status                       string // "Up", "Down", "Unknown"
	DetectMultiplier             int
	RxMinInterval, TxMinInterval time.Duration
}

type jsonNeighbor struct {
	RemoteAs           uint32 `json:"remoteAs"`
	LocalAs            uint32 `json:"localAs"`
	BgpState           string `json:"bgpState"`
	PeerGroup          string `json:"peerGroup"`
	AuthEnabled        int    `json:"authenticationEnabled"`
	UpdateSource       string `json:"updateSource"`
	Established        int    `json:"connectionsEstablished"`
	Dropped            int    `json:"connectionsDropped"`
	LastResetDueTo     string `json:"lastResetDueTo"`
	LastErrorCode      string `json:"lastErrorCodeSubcode"`
	LastNotifyReason   string `json:"lastNotificationReason"`
	LastShutdownDesc   string `json:"lastShutdownDescription"`
	UpEstablishedEpoch int64  `json:"bgpTimerUpEstablishedEpoch"`
	GR                 struct {
		LocalGrMode  string `json:"localGrMode"`
		RemoteGrMode string `json:"remoteGrMode"`
		RBit         bool   `json:"rBit"`
		NBit         bool   `json:"nBit"`
	} `json:"gracefulRestartInfo"`
	Capabilities struct {
		AddPath map[string]map[string]bool `json:"addPath"`
	} `json:"neighborCapabilities"`
	AFI map[string]struct {
		Accepted int    `json:"acceptedPrefixCounter"`
		In       string `json:"routeMapForIncomingAdvertisements"`
		Out      string `json:"routeMapForOutgoingAdvertisements"`
	} `json:"addressFamilyInfo"`
	BFD *struct {
		Status           string `json:"status"`
		DetectMultiplier int    `json:"detectMultiplier"`
		RxMinInterval    int    `json:"rxMinInterval"`
		TxMinInterval    int    `json:"txMinInterval"`
	} `json:"peerBfdInfo"`
}

// parseNeighborJSON parses "show bgp neighbors <addr> json".
func parseNeighborJSON(b []byte, addr netip.Addr) (Neighbor, error) {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil {
		return Neighbor{}, err
	}
	raw, ok := v[addr.String()]
	if !ok {
		return Neighbor{}, fmt.Errorf("frr: neighbor %s: %w", addr, ErrNotFound)
	}
	var j jsonNeighbor
	if err := json.Unmarshal(raw, &j); err != nil {
		return Neighbor{}, err
	}
	n := Neighbor{
		Addr: addr, RemoteAS: j.RemoteAs, LocalAS: j.LocalAs, State: j.BgpState, PeerGroup: j.PeerGroup,
		Password: j.AuthEnabled != 0, UpdateSource: j.UpdateSource,
		ConnectionsUp: j.Established, ConnectionsDown: j.Dropped, LastResetReason: j.LastResetDueTo,
		GRLocalMode: j.GR.LocalGrMode, GRRemoteMode: j.GR.RemoteGrMode, GRNBit: j.GR.NBit, GRRBit: j.GR.RBit,
		AddPathRx: map[string]bool{}, AcceptedPrefixes: map[string]int{}, InPolicy: map[string]string{}, OutPolicy: map[string]string{},
	}
	last, err := neighborNotification(j.LastErrorCode, j.LastNotifyReason, j.LastShutdownDesc, j.LastResetDueTo)
	if err != nil {
		return Neighbor{}, err
	}
	n.LastNotification = last
	if j.UpEstablishedEpoch > 0 && j.BgpState == "Established" {
		n.UptimeSince = time.Unix(j.UpEstablishedEpoch, 0)
	}
	for af, caps := range j.Capabilities.AddPath {
		n.AddPathRx[af] = caps["rxAdvertisedAndReceived"] || (caps["rxAdvertised"] && caps["txReceived"])
	}
	for af, i := range j.AFI {
		n.AcceptedPrefixes[af] = i.Accepted
		n.InPolicy[af], n.OutPolicy[af] = i.In, i.Out
	}
	if j.BFD != nil {
		n.BFD = &NeighborBFD{Status: j.BFD.Status, DetectMultiplier: j.BFD.DetectMultiplier,
			RxMinInterval: time.Duration(j.BFD.RxMinInterval) * time.Millisecond, TxMinInterval: time.Duration(j.BFD.TxMinInterval) * time.Millisecond}
	}
	return n, nil
}

// Neighbor returns FRR's view of the neighbor addr, or ErrNotFound.
func (r *Router) Neighbor(ctx context.Context, addr netip.Addr) (Neighbor, error) {
	out, err := r.Vtysh(ctx, fmt.Sprintf("show bgp neighbors %s json", addr))
	if err != nil {
		return Neighbor{}, err
	}
	return parseNeighborJSON([]byte(out), addr)
}

// BFDPeer is one BFD session in FRR's bfdd ("show bfd peers json").
type BFDPeer struct {
	Peer, Local      netip.Addr
	Interface        string
	ID, RemoteID     uint32
	Status           string // "up", "down", "init", "shutdown"
	Passive          bool
	Diagnostic       string // e.g. "ok", "control detection time expired", "neighbor signaled session down"
	RemoteDiagnostic string // e.g. "administratively down"
	Uptime, Downtime time.Duration
	ReceiveInterval  time.Duration // configured Required Min RX
	TransmitInterval time.Duration // configured Desired Min TX
	DetectMultiplier int
	RemoteReceive    time.Duration
	RemoteTransmit   time.Duration
	RemoteDetectMult int
}

type jsonBFDPeer struct {
	Peer             string `json:"peer"`
	Local            string `json:"local"`
	Interface        string `json:"interface"`
	ID               uint32 `json:"id"`
	RemoteID         uint32 `json:"remote-id"`
	Passive          bool   `json:"passive-mode"`
	Status           string `json:"status"`
	Uptime           int64  `json:"uptime"`
	Downtime         int64  `json:"downtime"`
	Diagnostic       string `json:"diagnostic"`
	RemoteDiagnostic string `json:"remote-diagnostic"`
	ReceiveInterval  int    `json:"receive-interval"`
	TransmitInterval int    `json:"transmit-interval"`
	DetectMultiplier int    `json:"detect-multiplier"`
	RemoteReceive    int    `json:"remote-receive-interval"`
	RemoteTransmit   int    `json:"remote-transmit-interval"`
	RemoteDetectMult int    `json:"remote-detect-multiplier"`
}

func parseBFDPeersJSON(b []byte) ([]BFDPeer, error) {
	var v []jsonBFDPeer
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("frr: bfd peers: %w", err)
	}
	res := make([]BFDPeer, 0, len(v))
	for _, j := range v {
		p := BFDPeer{
			Interface: j.Interface, ID: j.ID, RemoteID: j.RemoteID, Status: j.Status, Passive: j.Passive,
			Diagnostic: j.Diagnostic, RemoteDiagnostic: j.RemoteDiagnostic,
			Uptime: time.Duration(j.Uptime) * time.Second, Downtime: time.Duration(j.Downtime) * time.Second,
			ReceiveInterval: ms(j.ReceiveInterval), TransmitInterval: ms(j.TransmitInterval), DetectMultiplier: j.DetectMultiplier,
			RemoteReceive: ms(j.RemoteReceive), RemoteTransmit: ms(j.RemoteTransmit), RemoteDetectMult: j.RemoteDetectMult,
		}
		var err error
		if p.Peer, err = netip.ParseAddr(j.Peer); err != nil {
			return nil, fmt.Errorf("frr: bfd peer %q: %w", j.Peer, err)
		}
		p.Local, _ = netip.ParseAddr(j.Local)
		res = append(res, p)
	}
	slices.SortFunc(res, func(a, b BFDPeer) int { return a.Peer.Compare(b.Peer) })
	return res, nil
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// BFDPeers returns bfdd's sessions. Uptime and Downtime have second resolution;
// LogEvents has the microsecond timestamps of state changes.
func (r *Router) BFDPeers(ctx context.Context) ([]BFDPeer, error) {
	out, err := r.Vtysh(ctx, "show bfd peers json")
	if err != nil {
		return nil, err
	}
	return parseBFDPeersJSON([]byte(out))
}

// BFDPeer returns bfdd's session with peer, or ErrNotFound.
func (r *Router) BFDPeer(ctx context.Context, peer netip.Addr) (BFDPeer, error) {
	ps, err := r.BFDPeers(ctx)
	if err != nil {
		return BFDPeer{}, err
	}
	for _, p := range ps {
		if p.Peer == peer {
			return p, nil
		}
	}
	return BFDPeer{}, fmt.Errorf("frr: BFD peer %s: %w", peer, ErrNotFound)
}

// EventKind classifies a LogEvents entry.
type EventKind string

const (
	// EventBFDState: a BFD session changed state (From, To, Reason; Peer).
	EventBFDState EventKind = "bfd-state"
	// EventBGPState: a BGP neighbor changed FSM state (From, To; Peer).
	EventBGPState EventKind = "bgp-state"
	// EventRouteInstall: bgpd gave zebra a route (Prefix, NextHops): a new prefix
	// or a changed set of next hops (a path more or less).
	EventRouteInstall EventKind = "route-install"
	// EventRouteDelete: bgpd removed a prefix from zebra: its last path is gone.
	EventRouteDelete EventKind = "route-delete"
	// EventNotification: bgpd received a NOTIFICATION from Peer or sent one to it
	// (Notification).
	EventNotification EventKind = "notification"
)

// Event is one router-side event with FRR's own timestamp (microseconds, the
// machine's local time zone).
type Event struct {
	Time     time.Time
	Daemon   string // "BFD", "BGP", "ZEBRA"
	Kind     EventKind
	Peer     netip.Addr
	From, To string
	Reason   string // BFD: the diagnostic of a transition to down, e.g. "control-expired"
	Prefix   netip.Prefix
	NextHops []netip.Addr
	// Notification is set for EventNotification.
	Notification *Notification
	Line         string
}

// logTimeLayout is FRR's log timestamp with "log timestamp precision 6".
const logTimeLayout = "2006/01/02 15:04:05.000000"

// LogEvents returns the BFD state changes, BGP neighbor state changes,
// NOTIFICATIONs received and sent, and route installs and deletes logged at or
// after since, in log order. The timestamps are FRR's (frr.conf turns on "debug
// bfd peer", "debug bgp neighbor-events" and "debug bgp zebra" with "log timestamp
// precision 6").
func (r *Router) LogEvents(since time.Time) ([]Event, error) {
	return parseLog(r.Log(), since)
}

// parseLog parses FRR log lines such as
//
//	2026/11/25 15:32:57.116101 BFD: [SEY1D-NT8EQ] state-change: [mhop:no peer:10.255.7.1 local:10.255.7.254 vrf:default ifname:eth0] up -> down reason:control-expired
//	2026/11/25 15:32:56.411534 BGP: [ZQHFG-DQGX1] 10.255.7.1 went from Established to Clearing
//	2026/11/25 15:32:46.756035 BGP: [V15FP-4CPVK] Tx route add VRF 0 198.51.100.10/32 metric 0 tag 0 count 1 nhg 0
//	2026/11/25 15:32:46.756036 BGP: [JQXM8-V0CKB]   nhop [1]: 10.255.7.1 if 0 VRF 0 wt 0
//	2026/11/25 15:32:56.471577 BGP: [G7K80-KF0HM] Tx route delete VRF 0 198.51.100.10/32
//	2026/11/27 08:20:31.528234 BGP: [HZN6M-XRM1G] %NOTIFICATION(Hard Reset): received from neighbor 10.255.7.1 6/2 (Cease/Administrative Shutdown) 0 bytes
func parseLog(log string, since time.Time) ([]Event, error) {
	var res []Event
	var install *Event // the route add whose "nhop" lines follow
	for _, line := range strings.Split(log, "\n") {
		if len(line) < len(logTimeLayout)+2 {
			continue
		}
		ts, err := time.ParseInLocation(logTimeLayout, line[:len(logTimeLayout)], time.Local)
		if err != nil {
			continue
		}
		rest := line[len(logTimeLayout)+1:]
		daemon, msg, ok := strings.Cut(rest, ": ")
		if !ok {
			continue
		}
		// Drop the message ID "[XXXXX-XXXXX]" and an error code "[EC n]".
		for strings.HasPrefix(msg, "[") {
			if i := strings.Index(msg, "] "); i > 0 {
				msg = msg[i+2:]
			} else {
				break
			}
		}
		if install != nil && strings.HasPrefix(msg, "  nhop [") {
			if _, after, ok := strings.Cut(msg, "]: "); ok {
				if f := strings.Fields(after); len(f) > 0 {
					if a, err := netip.ParseAddr(f[0]); err == nil {
						install.NextHops = append(install.NextHops, a)
					}
				}
			}
			continue
		}
		install = nil
		ev := Event{Time: ts, Daemon: daemon, Line: line}
		switch {
		case strings.HasPrefix(msg, "%NOTIFICATION"):
			n, peer, err := parseNotification(msg)
			if err != nil {
				continue
			}
			if ev.Peer, err = netip.ParseAddr(peer); err != nil {
				continue
			}
			ev.Kind, ev.Notification = EventNotification, &n
		case strings.HasPrefix(msg, "state-change: ["):
			// state-change: [mhop:no peer:A local:B vrf:V ifname:I] from -> to [reason:R]
			desc, trans, ok := strings.Cut(strings.TrimPrefix(msg, "state-change: ["), "] ")
			if !ok {
				continue
			}
			for _, kv := range strings.Fields(desc) {
				if v, ok := strings.CutPrefix(kv, "peer:"); ok {
					ev.Peer, _ = netip.ParseAddr(v)
				}
			}
			f := strings.Fields(trans)
			if len(f) < 3 || f[1] != "->" {
				continue
			}
			ev.Kind, ev.From, ev.To = EventBFDState, f[0], f[2]
			if len(f) > 3 {
				ev.Reason = strings.TrimPrefix(f[3], "reason:")
			}
		case strings.Contains(msg, " went from "):
			f := strings.Fields(msg)
			if len(f) != 6 || f[1] != "went" || f[2] != "from" || f[4] != "to" {
				continue
			}
			a, err := netip.ParseAddr(f[0])
			if err != nil {
				continue
			}
			ev.Kind, ev.Peer, ev.From, ev.To = EventBGPState, a, f[3], f[5]
		case strings.HasPrefix(msg, "Tx route add ") || strings.HasPrefix(msg, "Tx route delete "):
			// Tx route add VRF 0 198.51.100.10/32 metric ... / Tx route delete VRF 0 198.51.100.10/32
			f := strings.Fields(msg)
			if len(f) < 6 {
				continue
			}
			p, err := netip.ParsePrefix(f[5])
			if err != nil {
				continue
			}
			ev.Prefix = p
			ev.Kind = EventRouteDelete
			if f[2] == "add" {
				ev.Kind = EventRouteInstall
			}
		default:
			continue
		}
		if ts.Before(since) {
			continue
		}
		res = append(res, ev)
		if ev.Kind == EventRouteInstall {
			install = &res[len(res)-1]
		}
	}
	return res, nil
}
