// Package bgp is the embedded BGP speaker: a desired-state front end to an
// in-process GoBGP v3 server. Callers say what each source ("lb", "podcidr") wants
// announced; the speaker diffs and announces or withdraws, keeps sessions to the
// static peers of the CloudConfig and the dynamic (per-rack) peers of the inventory,
// and withdraws everything and closes every session when Run's context ends.
//
// Paths are IPv4 or IPv6 unicast. Every peer gets both families (IPv6 over MP-BGP on
// an IPv4 session and vice versa) with ADD-PATH send, so a router that negotiates
// ADD-PATH receive gets every next hop of a prefix (ECMP); a router without it gets
// only GoBGP's best path.
//
// Next hops. A Path without NextHops is announced with next hop "self": GoBGP puts
// the session's local address in it (eBGP and iBGP). For an IPv6 prefix on an IPv4
// session there is no IPv6 session address; see nextHopSelfV6 in policy.go for what
// the speaker does then. A Path with NextHops is announced once per next hop, each
// with its own ADD-PATH identifier; GoBGP keeps an explicit next hop of a locally
// originated path unchanged on eBGP (it rewrites only unspecified next hops), so
// the router receives the node addresses as they are (the router must accept
// third-party next hops: BIRD does for addresses on the shared subnet with
// `next hop keep`).
package bgp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bfd"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// Errors callers can test with errors.Is.
var (
	// ErrInvalidConfig wraps every problem New finds in a Config, and SetPeers in a peer.
	ErrInvalidConfig = errors.New("invalid BGP speaker configuration")
	// ErrAlreadyRunning is returned by a second call to Run: a Speaker runs once.
	ErrAlreadyRunning = errors.New("bgp speaker already ran")
	// ErrPassword wraps failures to read a peer's passwordFile.
	ErrPassword = errors.New("reading BGP password file")
)

// Timeouts of calls into the GoBGP server (in-process, so only a wedged server
// hits them) and of the shutdown sequence.
const (
	opTimeout       = 10 * time.Second
	shutdownTimeout = 10 * time.Second
	resyncInterval  = 10 * time.Second
)

// Config of a Speaker.
type Config struct {
	// LocalASN is the speaker's AS number (required).
	LocalASN uint32
	// RouterID is the BGP identifier, an IPv4 address (required).
	RouterID netip.Addr
	// ListenPort accepts incoming sessions when > 0; 0 makes outbound connections only.
	ListenPort int32
	// Peers are static peers, kept for the Speaker's life (defaults applied by New).
	Peers []config.BGPPeer
	// Communities and LargeCommunities are attached to every path.
	Communities, LargeCommunities []string
	// IPv6NextHop is next hop "self" for IPv6 paths sent on IPv4 sessions, and
	// IPv4NextHop for IPv4 paths on IPv6 sessions (typically the host's InternalIPs).
	// Unset: the only global address of that family on the interface holding the
	// session's local address; if there is none or several, such paths are not sent
	// on that session (see policy.go).
	IPv4NextHop, IPv6NextHop netip.Addr
	// OnStop is what the end of Run does: config.StopWithdraw (also when empty)
	// withdraws every path and closes the sessions, confirmed at the routers' TCP
	// (see stop.go); config.StopRetain leaves paths and sessions as they are for the
	// process to exit, so graceful-restart routers keep the paths, and gives every
	// peer graceful restart (its gracefulRestart time, default 120s) with the
	// Restart State bit set at the next start.
	OnStop string
	// DeferSessions opens no session until Synced is called: a (re)starting speaker
	// then sends every path, and End-of-RIB after them, in its first UPDATEs.
	DeferSessions bool
}

// Path is one prefix to announce.
type Path struct {
	Prefix netip.Prefix
	// NextHops empty: next hop self. Otherwise one ADD-PATH path per next hop, which
	// must be of the prefix's family.
	NextHops []netip.Addr
	// Communities ("a:b" or well-known names) and LargeCommunities ("a:b:c") are
	// added to the speaker-wide ones.
	Communities, LargeCommunities []string
	// LocalPref is sent to iBGP peers only (eBGP strips it, RFC 4271).
	LocalPref *uint32
}

// PeerStatus is the state of one configured peer.
type PeerStatus struct {
	Address netip.Addr
	ASN     uint32
	// Dynamic peers came from SetPeers, the others from Config.Peers.
	Dynamic bool
	// State is idle, connect, active, opensent, openconfirm, established, or
	// stopped when the speaker is not running.
	State string
	// UpSince is when the session was established (zero unless established).
	UpSince time.Time
	// PrefixesSent counts the paths advertised to the peer, all families.
	PrefixesSent uint64
	// Ready: established, and its first UPDATEs (everything, then End-of-RIB) sent.
	Ready bool
	// LastError is the last failed connection attempt while not established.
	LastError string
}

// peerEntry is a configured peer: the defaulted config and its password.
type peerEntry struct {
	cfg      config.BGPPeer
	addr     netip.Addr
	password string // never logged
	dynamic  bool
}

func (p peerEntry) equal(o peerEntry) bool {
	a, b := p.cfg, o.cfg
	return a.ASN == b.ASN && a.Port == b.Port && a.SourceAddress == b.SourceAddress && a.EBGPMultihop == b.EBGPMultihop &&
		durEq(a.HoldTime, b.HoldTime) && durEq(a.KeepaliveTime, b.KeepaliveTime) && durEq(a.ConnectRetry, b.ConnectRetry) &&
		durEq(a.GracefulRestart, b.GracefulRestart) && p.password == o.password
}

// Speaker announces the desired paths of its sources to its peers. All methods are
// safe for concurrent use.
type Speaker struct {
	cfg       Config
	baseComm  []uint32
	baseLarge [][3]uint32

	mu sync.Mutex
	// static are Config.Peers (keys fixed by New; a password may change).
	static  map[netip.Addr]peerEntry
	rib     *rib
	dynamic map[netip.Addr]peerEntry
	// active are the peers added to the running server.
	active map[netip.Addr]peerEntry
	srv    *server.BgpServer // nil unless running
	log    klog.Logger
	ran    bool
	dirty  bool // a change failed; resync retries
	// sessionLocal and established are learned from peer events.
	sessionLocal map[netip.Addr]netip.Addr
	established  map[netip.Addr]bool
	// nhSelf is the installed next-hop policy's input (see policy.go).
	nhSelf          map[netip.Addr]netip.Addr
	policyInstalled bool
	// synced: Synced was called (sessions may open with DeferSessions).
	synced bool
	// restarting sets the Restart State bit on the peers added until the speaker is
	// first ready (mode retain).
	restarting bool
	// state and upAt are learned from peer events: GoBGP's state and when the
	// session was established.
	state    map[netip.Addr]string
	upAt     map[netip.Addr]time.Time
	conns    map[netip.Addr]conn
	health   map[netip.Addr]*peerHealth
	connErrs *connErrors
	prober   tcpProber
	// bfd runs the BFD sessions of peers with bfd configured; bfdPeers are those
	// added to it.
	bfd      *bfd.Server
	bfdPeers map[netip.Addr]bfd.PeerConfig

	// events queues GoBGP's peer events for handleEvents: GoBGP calls the watcher from
	// its own loop, and handling an event takes mu, which callers of GoBGP (DeletePeer
	// under mu) may hold; queueing keeps GoBGP's loop from ever waiting on mu.
	evMu     sync.Mutex
	evQueue  []*api.WatchEventResponse
	evSignal chan struct{}
}

// New validates cfg and returns a Speaker that is not running yet. Errors wrap
// ErrInvalidConfig (or ErrPassword for an unreadable password file).
func New(cfg Config) (*Speaker, error) {
	var errs field.ErrorList
	p := field.NewPath("bgp")
	if cfg.LocalASN == 0 || cfg.LocalASN == ^uint32(0) {
		errs = append(errs, field.Invalid(p.Child("localASN"), cfg.LocalASN, "required: 1-4294967294"))
	}
	if cfg.IPv4NextHop.IsValid() && !cfg.IPv4NextHop.Unmap().Is4() {
		errs = append(errs, field.Invalid(p.Child("ipv4NextHop"), cfg.IPv4NextHop.String(), "must be an IPv4 address"))
	}
	if cfg.IPv6NextHop.IsValid() && (!cfg.IPv6NextHop.Is6() || cfg.IPv6NextHop.Is4In6()) {
		errs = append(errs, field.Invalid(p.Child("ipv6NextHop"), cfg.IPv6NextHop.String(), "must be an IPv6 address"))
	}
	if !cfg.RouterID.Is4() {
		errs = append(errs, field.Invalid(p.Child("routerID"), cfg.RouterID.String(), "required: an IPv4 address"))
	}
	if cfg.ListenPort < 0 || cfg.ListenPort > 65535 {
		errs = append(errs, field.Invalid(p.Child("listenPort"), cfg.ListenPort, "must be 0-65535"))
	}
	errs = append(errs, config.ValidateCommunities(cfg.Communities, p.Child("communities"))...)
	errs = append(errs, config.ValidateLargeCommunities(cfg.LargeCommunities, p.Child("largeCommunities"))...)
	s := &Speaker{
		cfg:          cfg,
		static:       map[netip.Addr]peerEntry{},
		rib:          newRIB(),
		dynamic:      map[netip.Addr]peerEntry{},
		active:       map[netip.Addr]peerEntry{},
		log:          klog.Background().WithName("bgp"),
		sessionLocal: map[netip.Addr]netip.Addr{},
		established:  map[netip.Addr]bool{},
		evSignal:     make(chan struct{}, 1),
		restarting:   cfg.OnStop == config.StopRetain,
		state:        map[netip.Addr]string{},
		upAt:         map[netip.Addr]time.Time{},
		conns:        map[netip.Addr]conn{},
		health:       map[netip.Addr]*peerHealth{},
		connErrs:     newConnErrors(),
		prober:       sockDiag{},
		bfdPeers:     map[netip.Addr]bfd.PeerConfig{},
	}
	if cfg.OnStop != "" && cfg.OnStop != config.StopWithdraw && cfg.OnStop != config.StopRetain {
		errs = append(errs, field.NotSupported(p.Child("onStop"), cfg.OnStop, []string{config.StopWithdraw, config.StopRetain}))
	}
	var pwErrs []error
	for i := range cfg.Peers {
		e, fe, err := makePeer(cfg.Peers[i], p.Child("peers").Index(i), false)
		errs = append(errs, fe...)
		if err != nil {
			pwErrs = append(pwErrs, err)
			continue
		}
		if len(fe) > 0 {
			continue
		}
		if _, dup := s.static[e.addr]; dup {
			errs = append(errs, field.Duplicate(p.Child("peers").Index(i).Child("address"), e.cfg.Address))
			continue
		}
		s.static[e.addr] = e
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errs.ToAggregate())
	}
	if len(pwErrs) > 0 {
		return nil, errors.Join(pwErrs...)
	}
	for _, c := range cfg.Communities {
		v, _ := config.ParseCommunity(c)
		s.baseComm = append(s.baseComm, v)
	}
	for _, c := range cfg.LargeCommunities {
		v, _ := config.ParseLargeCommunity(c)
		s.baseLarge = append(s.baseLarge, v)
	}
	b, err := bfd.New(bfd.Options{})
	if err != nil {
		return nil, fmt.Errorf("starting BFD: %w", err)
	}
	s.bfd = b
	b.Subscribe(s.onBFD)
	registerMetrics()
	return s, nil
}

// makePeer defaults and validates one peer and reads its password.
func makePeer(in config.BGPPeer, p *field.Path, dynamic bool) (peerEntry, field.ErrorList, error) {
	c := in
	config.SetBGPPeerDefaults(&c)
	if fe := config.ValidateBGPPeer(&c, p); len(fe) > 0 {
		return peerEntry{}, fe, nil
	}
	addr, _ := netip.ParseAddr(c.Address)
	e := peerEntry{cfg: c, addr: addr.Unmap(), dynamic: dynamic}
	if c.PasswordFile != "" {
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return peerEntry{}, nil, fmt.Errorf("%w for peer %s: %w", ErrPassword, c.Address, err)
		}
		e.password = strings.TrimRight(string(b), "\r\n")
		if e.password == "" {
			return peerEntry{}, nil, fmt.Errorf("%w for peer %s: %s is empty", ErrPassword, c.Address, c.PasswordFile)
		}
	}
	return e, nil, nil
}

// Run starts the GoBGP server, adds the peers (with DeferSessions, once Synced is
// called) and announces the desired state, then serves until ctx ends. On the way
// out, in mode withdraw, it withdraws every path and closes every session with a
// Cease NOTIFICATION (a Hard Reset where negotiated), and returns once the routers'
// TCP acknowledged both (bounded; see stop.go), so routers drop the speaker's
// routes at once, graceful restart or not; in mode retain it leaves the sessions
// for the process exit to close. It returns nil then, or an error if the server
// cannot start (for example the listen port is taken) or a static peer cannot be
// added. Run may be called once.
func (s *Speaker) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("bgp")
	s.mu.Lock()
	if s.ran {
		s.mu.Unlock()
		return ErrAlreadyRunning
	}
	s.ran = true
	s.log = logger
	srv := server.NewBgpServer(server.LoggerOption(klogAdapter{l: logger.WithName("gobgp"), connErrs: s.connErrs}))
	go srv.Serve() // GoBGP v3's Serve never returns: one idle goroutine stays after Run.

	if err := s.start(ctx, srv); err != nil {
		s.mu.Unlock()
		stopServer(srv)
		return err
	}
	s.mu.Unlock()
	// BFD stops after the BGP sessions (shutdown), so its AdminDown follows the Cease.
	bfdCtx, stopBFD := context.WithCancel(context.WithoutCancel(ctx))
	bfdDone := make(chan struct{})
	go func() {
		defer close(bfdDone)
		if err := s.bfd.Run(bfdCtx); err != nil {
			logger.Error(err, "BFD stopped")
		}
	}()
	defer func() {
		if s.cfg.OnStop == config.StopRetain {
			// Like the BGP sessions, BFD is left to the process exit: it falls silent
			// without AdminDown, which some routers (FRR) take as a reason to drop
			// the BGP session's paths instead of keeping them for the restart.
			return
		}
		stopBFD()
		<-bfdDone
	}()
	logger.Info("BGP speaker started", "asn", s.cfg.LocalASN, "routerID", s.cfg.RouterID, "listenPort", s.cfg.ListenPort)

	tick := time.NewTicker(resyncInterval)
	defer tick.Stop()
	health := time.NewTicker(time.Second)
	defer health.Stop()
	for {
		select {
		case <-ctx.Done():
			s.shutdown()
			return nil
		case <-s.evSignal:
			s.handleEvents()
		case <-health.C:
			s.checkHealth()
		case <-tick.C:
			s.mu.Lock()
			if s.dirty {
				s.reconcileLocked()
			}
			s.mu.Unlock()
			s.updatePrefixMetrics()
		}
	}
}

func (s *Speaker) start(ctx context.Context, srv *server.BgpServer) error {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	port := s.cfg.ListenPort
	if port == 0 {
		port = -1 // GoBGP: no listener
	}
	if err := srv.StartBgp(opCtx, &api.StartBgpRequest{Global: &api.Global{
		Asn: s.cfg.LocalASN, RouterId: s.cfg.RouterID.String(), ListenPort: port,
	}}); err != nil {
		return fmt.Errorf("starting BGP server: %w", err)
	}
	if err := srv.WatchEvent(context.WithoutCancel(ctx), &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}}, s.enqueueEvent); err != nil {
		return fmt.Errorf("watching BGP peer events: %w", err)
	}
	s.srv = srv
	if err := s.syncNextHopPolicyLocked(opCtx); err != nil {
		s.srv = nil
		return err
	}
	s.reconcileLocked()
	if s.openLocked() {
		if err := s.openSessionsLocked(opCtx); err != nil {
			s.srv = nil
			return err
		}
	}
	return nil
}

// openLocked reports whether sessions may be open: running, and synced when
// DeferSessions asks for it.
func (s *Speaker) openLocked() bool {
	return s.srv != nil && (!s.cfg.DeferSessions || s.synced)
}

// openSessionsLocked adds the static peers (an error is returned) and the dynamic
// ones (errors are logged; SetPeers retries).
func (s *Speaker) openSessionsLocked(ctx context.Context) error {
	for _, e := range sortedPeers(s.static) {
		if _, ok := s.active[e.addr]; ok {
			continue
		}
		if err := s.addPeerLocked(ctx, e); err != nil {
			return err
		}
	}
	for _, e := range sortedPeers(s.dynamic) {
		if _, static := s.static[e.addr]; static {
			continue
		}
		if _, ok := s.active[e.addr]; ok {
			continue
		}
		if err := s.addPeerLocked(ctx, e); err != nil {
			s.log.Error(err, "Adding dynamic BGP peer failed; retrying on the next SetPeers", "peer", e.addr)
		}
	}
	return nil
}

// Synced tells a speaker with DeferSessions that every source has announced its
// complete state: the sessions open now (or when Run starts), so each router
// receives every path before End-of-RIB. It is idempotent; a static peer that
// cannot be added is returned as an error.
func (s *Speaker) Synced() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.synced {
		return nil
	}
	s.synced = true
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return s.openSessionsLocked(ctx)
}

func sortedPeers(m map[netip.Addr]peerEntry) []peerEntry {
	out := make([]peerEntry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b peerEntry) int { return a.addr.Compare(b.addr) })
	return out
}

// shutdown ends the speaker as Config.OnStop says.
//
// Mode withdraw: every path withdrawn and every session closed with a Cease, both
// confirmed at the routers' TCP (withdrawAndClose, stop.go), then, only if the
// speaker listens, StopBgp to close the listener. StopBgp is skipped otherwise: in
// GoBGP v3.37.0 it rewrites the server config while the closing sessions'
// goroutines may still read it (a data race inside GoBGP), and with no listener
// there is nothing left for it to release.
//
// Mode retain: nothing is sent; the sessions stay up until the process exits and
// the kernel closes the connections without a NOTIFICATION, which graceful-restart
// routers treat as a restart: they keep the paths for the restart time.
func (s *Speaker) shutdown() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil // from here on no other method touches the server
	if srv == nil {
		s.mu.Unlock()
		return
	}
	n := len(s.rib.applied)
	logger := s.log
	if s.cfg.OnStop == config.StopRetain {
		s.mu.Unlock()
		logger.Info("BGP speaker stopped for a restart: paths and sessions left for the process exit; graceful-restart routers keep the paths until this host's next start refreshes them", "paths", n)
		return
	}
	s.rib.reset()
	peers := sortedPeers(s.active)
	var conns []conn
	for _, e := range peers {
		if c, ok := s.conns[e.addr]; ok && s.established[e.addr] {
			conns = append(conns, c)
		}
	}
	s.active = map[netip.Addr]peerEntry{}
	s.established = map[netip.Addr]bool{}
	s.mu.Unlock()
	// GoBGP delivers the peer events these calls cause to onEvent, which takes s.mu:
	// the lock must not be held here.
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	confirmed, unconfirmed := withdrawAndClose(ctx, logger, srv, peers, conns, s.prober)
	for _, e := range peers {
		forgetPeerMetrics(e.addr.String())
	}
	if s.cfg.ListenPort > 0 {
		stopServer(srv)
	}
	logger.Info("BGP speaker stopped: paths withdrawn, sessions closed", "withdrawn", n, "sessionsConfirmed", confirmed, "sessionsUnconfirmed", unconfirmed)
}

// stopServer closes every session with a Cease and waits (bounded) for it.
func stopServer(srv *server.BgpServer) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.StopBgp(context.Background(), &api.StopBgpRequest{})
	}()
	select {
	case <-done:
	case <-time.After(shutdownTimeout):
	}
}

// Announce sets the desired paths of one source, replacing what it wanted before:
// new paths are announced, changed ones re-announced, missing ones withdrawn.
// Sources are independent. The same prefix and next hop wanted by two sources is
// one path, announced while either wants it, with the attributes of the source
// whose name sorts first. Invalid paths (bad community, next hop of the wrong
// family) are logged and skipped. Announce may be called before Run; the state is
// applied when Run starts.
func (s *Speaker) Announce(source string, paths []Path) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want, errs := normalize(paths, s.baseComm, s.baseLarge)
	for _, err := range errs {
		s.log.Error(err, "Skipping invalid BGP path", "source", source)
	}
	s.rib.set(source, want)
	desiredPaths.WithLabelValues(source).Set(float64(len(want)))
	s.reconcileLocked()
}

// reconcileLocked applies the diff between desired and applied paths.
func (s *Speaker) reconcileLocked() {
	if s.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s.dirty = false
	for _, c := range s.rib.plan() {
		p, err := toAPIPath(c)
		if err == nil {
			if c.withdraw {
				err = s.srv.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Family: p.Family, Path: p})
			} else {
				_, err = s.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: p})
			}
		}
		if err != nil {
			s.dirty = true
			s.log.Error(err, "Updating BGP path failed; will retry", "prefix", c.key.prefix, "nextHop", nextHopString(c.key.nextHop), "withdraw", c.withdraw)
			continue
		}
		s.rib.commit(c)
		if c.withdraw {
			s.log.V(2).Info("Withdrew BGP path", "prefix", c.key.prefix, "nextHop", nextHopString(c.key.nextHop))
		} else {
			s.log.V(2).Info("Announced BGP path", "prefix", c.key.prefix, "nextHop", nextHopString(c.key.nextHop), "pathID", c.id)
		}
	}
}

func nextHopString(a netip.Addr) string {
	if !a.IsValid() {
		return "self"
	}
	return a.String()
}

// toAPIPath builds GoBGP's representation of a change.
func toAPIPath(c change) (*api.Path, error) {
	pfx := c.key.prefix
	var nlri bgp.AddrPrefixInterface
	nh := c.key.nextHop
	if pfx.Addr().Is4() {
		nlri = bgp.NewIPAddrPrefix(uint8(pfx.Bits()), pfx.Addr().String())
		if !nh.IsValid() {
			nh = netip.IPv4Unspecified()
		}
	} else {
		nlri = bgp.NewIPv6AddrPrefix(uint8(pfx.Bits()), pfx.Addr().String())
		if !nh.IsValid() {
			nh = netip.IPv6Unspecified()
		}
	}
	nlri.SetPathIdentifier(c.id)
	pattrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	if pfx.Addr().Is4() {
		pattrs = append(pattrs, bgp.NewPathAttributeNextHop(nh.String()))
	} else {
		pattrs = append(pattrs, bgp.NewPathAttributeMpReachNLRI(nh.String(), []bgp.AddrPrefixInterface{nlri}))
	}
	if len(c.attrs.communities) > 0 {
		pattrs = append(pattrs, bgp.NewPathAttributeCommunities(c.attrs.communities))
	}
	if len(c.attrs.large) > 0 {
		lc := make([]*bgp.LargeCommunity, 0, len(c.attrs.large))
		for _, l := range c.attrs.large {
			lc = append(lc, bgp.NewLargeCommunity(l[0], l[1], l[2]))
		}
		pattrs = append(pattrs, bgp.NewPathAttributeLargeCommunities(lc))
	}
	if c.attrs.hasLocalPref {
		pattrs = append(pattrs, bgp.NewPathAttributeLocalPref(c.attrs.localPref))
	}
	return apiutil.NewPath(nlri, c.withdraw, pattrs, time.Now())
}

// SetPeers replaces the dynamic peer set (per-rack peers from the inventory): new
// peers are added, missing ones removed (their sessions closed with a Cease),
// changed ones (any setting or the password file's content) re-created. Static
// peers are always kept; a dynamic peer with a static peer's address is ignored.
// Invalid peers are skipped and reported in the returned error (wrapping
// ErrInvalidConfig or ErrPassword); the valid rest is applied. May be called before
// Run.
func (s *Speaker) SetPeers(peers []config.BGPPeer) error {
	var errs []error
	next := map[netip.Addr]peerEntry{}
	for i := range peers {
		e, fe, err := makePeer(peers[i], field.NewPath("peers").Index(i), true)
		switch {
		case err != nil:
			errs = append(errs, err)
			continue
		case len(fe) > 0:
			errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, fe.ToAggregate()))
			continue
		}
		next[e.addr] = e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for a := range next {
		if _, static := s.static[a]; static {
			delete(next, a)
		}
	}
	if len(errs) > 0 {
		// Keep a peer whose new config is unusable as it was, rather than dropping it.
		for a, e := range s.dynamic {
			if _, ok := next[a]; !ok && peerListed(peers, a) {
				next[a] = e
			}
		}
	}
	s.dynamic = next
	if !s.openLocked() {
		return errors.Join(errs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, e := range sortedPeers(s.active) {
		if !e.dynamic {
			continue
		}
		if n, ok := next[e.addr]; !ok || !n.equal(e) {
			if err := s.deletePeerLocked(ctx, e); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, e := range sortedPeers(next) {
		if old, ok := s.active[e.addr]; ok {
			if !bfdEqual(old.cfg.BFD, e.cfg.BFD) {
				s.active[e.addr] = e // new BFD timers: no new BGP session
			}
			continue
		}
		if err := s.addPeerLocked(ctx, e); err != nil {
			errs = append(errs, err)
		}
	}
	s.syncBFDLocked()
	return errors.Join(errs...)
}

// RefreshPasswords re-reads the password files of the static peers (Config.Peers)
// and re-creates the session of each peer whose password changed, so a rotated
// password applies without a restart. A file that cannot be read, or is empty, keeps
// the peer as it is and is reported in the error (wrapping ErrPassword).
func (s *Speaker) RefreshPasswords() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	changed := map[netip.Addr]peerEntry{}
	for a, e := range s.static {
		if e.cfg.PasswordFile == "" {
			continue
		}
		n, _, err := makePeer(e.cfg, field.NewPath("peers"), false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n.password != e.password {
			changed[a] = n
		}
	}
	if len(changed) == 0 {
		return errors.Join(errs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, e := range sortedPeers(changed) {
		if old, active := s.active[e.addr]; s.openLocked() && active {
			if err := s.deletePeerLocked(ctx, old); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		s.static[e.addr] = e
		if s.openLocked() {
			if err := s.addPeerLocked(ctx, e); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		s.log.Info("Applied a changed TCP-MD5 password", "peer", e.addr)
	}
	return errors.Join(errs...)
}

func peerListed(peers []config.BGPPeer, a netip.Addr) bool {
	for _, p := range peers {
		if pa, err := netip.ParseAddr(p.Address); err == nil && pa.Unmap() == a {
			return true
		}
	}
	return false
}

func (s *Speaker) addPeerLocked(ctx context.Context, e peerEntry) error {
	if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: toAPIPeer(e, s.cfg.OnStop == config.StopRetain, s.restarting)}); err != nil {
		return fmt.Errorf("adding BGP peer %s: %w", e.addr, err)
	}
	s.active[e.addr] = e
	s.syncBFDLocked()
	s.state[e.addr] = "idle"
	s.health[e.addr] = &peerHealth{downSince: time.Now()}
	s.connErrs.forget(e.addr)
	s.countDownLocked()
	sessionUp.WithLabelValues(e.addr.String()).Set(0)
	s.log.Info("Added BGP peer", "peer", e.addr, "asn", e.cfg.ASN, "dynamic", e.dynamic, "md5", e.password != "")
	return s.syncNextHopPolicyLocked(ctx)
}

func (s *Speaker) deletePeerLocked(ctx context.Context, e peerEntry) error {
	if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: e.addr.String()}); err != nil {
		return fmt.Errorf("removing BGP peer %s: %w", e.addr, err)
	}
	delete(s.active, e.addr)
	s.syncBFDLocked()
	delete(s.sessionLocal, e.addr)
	delete(s.established, e.addr)
	delete(s.state, e.addr)
	delete(s.upAt, e.addr)
	delete(s.conns, e.addr)
	delete(s.health, e.addr)
	s.connErrs.forget(e.addr)
	s.countDownLocked()
	forgetPeerMetrics(e.addr.String())
	s.log.Info("Removed BGP peer", "peer", e.addr, "asn", e.cfg.ASN)
	return s.syncNextHopPolicyLocked(ctx)
}

func seconds(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64((d + time.Second - 1) / time.Second)
}

// grDeferral is how long a restarting speaker waits for the routers' End-of-RIB
// before it sends its own paths anyway (RFC 4724's selection deferral).
const grDeferral = 10

// toAPIPeer converts a defaulted peer to GoBGP's form: both unicast families with
// ADD-PATH send; graceful restart if configured or retain is set (restart time the
// peer's, else config.DefaultBGPRetainRestartTime), always with the RFC 8538 "N"
// bit, so a Cease is sent as a Hard Reset to routers that negotiate it, and with
// the Restart State bit when restarting.
func toAPIPeer(e peerEntry, retain, restarting bool) *api.Peer {
	c := e.cfg
	p := &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: e.addr.String(), PeerAsn: c.ASN, AuthPassword: e.password},
		Transport: &api.Transport{RemotePort: uint32(c.Port), LocalAddress: c.SourceAddress},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:      seconds(durOf(c.ConnectRetry)),
			HoldTime:          seconds(durOf(c.HoldTime)),
			KeepaliveInterval: seconds(durOf(c.KeepaliveTime)),
			// After a reset (BFD down) reconnect as soon as a connection attempt would,
			// not after GoBGP's 30 s default.
			IdleHoldTimeAfterReset: max(1, seconds(durOf(c.ConnectRetry))),
		}},
	}
	if c.EBGPMultihop > 0 {
		p.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(c.EBGPMultihop)}
	}
	restart := durOf(c.GracefulRestart)
	if restart <= 0 && retain {
		restart = config.DefaultBGPRetainRestartTime
	}
	gr := restart > 0
	if gr {
		p.GracefulRestart = &api.GracefulRestart{
			Enabled: true, RestartTime: uint32(seconds(restart)), NotificationEnabled: true,
			LocalRestarting: restarting, DeferralTime: grDeferral,
		}
	}
	for _, afi := range []api.Family_Afi{api.Family_AFI_IP, api.Family_AFI_IP6} {
		a := &api.AfiSafi{
			Config:   &api.AfiSafiConfig{Family: &api.Family{Afi: afi, Safi: api.Family_SAFI_UNICAST}, Enabled: true},
			AddPaths: &api.AddPaths{Config: &api.AddPathsConfig{SendMax: 255}},
		}
		if gr {
			a.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		p.AfiSafis = append(p.AfiSafis, a)
	}
	return p
}

// enqueueEvent is GoBGP's watcher: it only queues the event (never blocks).
func (s *Speaker) enqueueEvent(r *api.WatchEventResponse) {
	s.evMu.Lock()
	s.evQueue = append(s.evQueue, r)
	s.evMu.Unlock()
	select {
	case s.evSignal <- struct{}{}:
	default:
	}
}

// handleEvents handles the queued events in order.
func (s *Speaker) handleEvents() {
	s.evMu.Lock()
	q := s.evQueue
	s.evQueue = nil
	s.evMu.Unlock()
	for _, r := range q {
		s.onEvent(r)
	}
}

// onEvent handles GoBGP peer events: state metrics and log lines.
func (s *Speaker) onEvent(r *api.WatchEventResponse) {
	pe := r.GetPeer()
	if pe == nil || pe.Type != api.WatchEventResponse_PeerEvent_STATE || pe.Peer == nil || pe.Peer.State == nil {
		return
	}
	addr := pe.Peer.State.NeighborAddress
	if a, err := netip.ParseAddr(addr); err == nil {
		addr = a.Unmap().String()
	}
	state := stateName(pe.Peer.State.SessionState)
	var local netip.Addr
	if t := pe.Peer.Transport; t != nil {
		if l, err := netip.ParseAddr(t.LocalAddress); err == nil {
			local = l.Unmap()
		}
	}
	a, _ := netip.ParseAddr(addr)
	s.mu.Lock()
	logger := s.log
	_, known := s.active[a]
	if known && s.srv != nil {
		was := s.established[a]
		s.established[a] = state == "established"
		s.state[a] = state
		switch {
		case state == "established" && !was:
			s.upAt[a] = time.Now()
			if c, ok := connFromEvent(a, pe.Peer.Transport); ok {
				s.conns[a] = c
			}
			s.health[a] = &peerHealth{}
			s.connErrs.forget(a)
		case state != "established" && was:
			delete(s.upAt, a)
			delete(s.conns, a)
			s.health[a] = &peerHealth{downSince: time.Now()}
		}
		s.countDownLocked()
		if state == "established" && local.IsValid() && s.sessionLocal[a] != local {
			s.sessionLocal[a] = local
			s.syncBFDLocked()
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			if err := s.syncNextHopPolicyLocked(ctx); err != nil {
				logger.Error(err, "Updating next-hop policy failed", "peer", addr)
			}
			cancel()
		}
	}
	s.mu.Unlock()
	stateChanges.WithLabelValues(addr, state).Inc()
	if known {
		up := 0.0
		if state == "established" {
			up = 1
		}
		sessionUp.WithLabelValues(addr).Set(up)
	}
	kv := []any{"peer", addr, "state", state, "asn", pe.Peer.State.PeerAsn}
	if local.IsValid() {
		kv = append(kv, "localAddress", local)
	}
	logger.Info("BGP session state changed", kv...)
	if state == "established" {
		go s.updatePrefixMetrics()
	}
}

func stateName(st api.PeerState_SessionState) string {
	switch st {
	case api.PeerState_IDLE:
		return "idle"
	case api.PeerState_CONNECT:
		return "connect"
	case api.PeerState_ACTIVE:
		return "active"
	case api.PeerState_OPENSENT:
		return "opensent"
	case api.PeerState_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_ESTABLISHED:
		return "established"
	default:
		return "unknown"
	}
}

// listPeers returns GoBGP's view of the peers, or nil when not running.
func (s *Speaker) listPeers() []*api.Peer {
	s.mu.Lock()
	srv := s.srv
	if srv == nil {
		s.mu.Unlock()
		return nil
	}
	var out []*api.Peer
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err := srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) { out = append(out, p) })
	s.mu.Unlock()
	if err != nil {
		return nil
	}
	return out
}

func (s *Speaker) updatePrefixMetrics() {
	for _, p := range s.listPeers() {
		addr, ok := peerAddr(p)
		if !ok {
			continue
		}
		adv := advertised(p)
		for _, fam := range []string{"ipv4", "ipv6"} {
			if n, ok := adv[fam]; ok {
				prefixesAnnounced.WithLabelValues(addr.String(), fam).Set(float64(n))
			} else {
				prefixesAnnounced.DeleteLabelValues(addr.String(), fam) // not negotiated, or down
			}
		}
	}
}

// Peers returns the status of every configured peer (static and dynamic), sorted
// by address.
func (s *Speaker) Peers() []PeerStatus {
	live := map[netip.Addr]*api.Peer{}
	for _, p := range s.listPeers() {
		if p.State == nil {
			continue
		}
		if a, err := netip.ParseAddr(p.State.NeighborAddress); err == nil {
			live[a.Unmap()] = p
		}
	}
	s.mu.Lock()
	all := map[netip.Addr]peerEntry{}
	for a, e := range s.dynamic {
		all[a] = e
	}
	for a, e := range s.static {
		all[a] = e
	}
	upAt, conns, prober := maps.Clone(s.upAt), maps.Clone(s.conns), s.prober
	s.mu.Unlock()
	out := make([]PeerStatus, 0, len(all))
	for _, e := range sortedPeers(all) {
		st := PeerStatus{Address: e.addr, ASN: e.cfg.ASN, Dynamic: e.dynamic, State: "stopped"}
		if p, ok := live[e.addr]; ok {
			st.State = stateName(p.State.SessionState)
			if st.State == "established" && p.Timers != nil && p.Timers.State != nil && p.Timers.State.Uptime != nil {
				st.UpSince = p.Timers.State.Uptime.AsTime()
			}
			for _, n := range advertised(p) {
				st.PrefixesSent += n
			}
			st.Ready = peerReady(p, upAt[e.addr], conns[e.addr], prober)
		}
		if st.State != "established" {
			if err := s.connErrs.get(e.addr); err != nil {
				st.LastError = err.Error()
			}
		}
		out = append(out, st)
	}
	return out
}
