// Package bgp is the embedded BGP speaker: a desired-state front end to an
// in-process GoBGP v4 server. Callers say what each source ("lb", "podcidr") wants
// announced; the speaker diffs and announces or withdraws, keeps sessions to the
// static peers of the CloudConfig and the dynamic (per-rack) peers of the inventory,
// and, in mode withdraw, withdraws everything and closes every session when Run's
// context ends.
//
// Routers never talk to GoBGP directly: every session runs through package wire,
// which owns the router's TCP connection, validates everything the router sends
// with its own parser and gives GoBGP only what an export-only speaker needs
// (see wire's package doc). GoBGP listens on a loopback port and knows each peer
// by a loopback alias; a router's UPDATE never reaches GoBGP's parser, so no
// message a router sends can crash the process: at worst its own session resets.
//
// Paths are IPv4 or IPv6 unicast. Every peer gets both families (IPv6 over MP-BGP on
// an IPv4 session and vice versa) with ADD-PATH send, so a router that negotiates
// ADD-PATH receive gets every next hop of a prefix (ECMP); a router without it gets
// only GoBGP's best path.
//
// Next hops. A Path without NextHops is announced with next hop "self": the local
// address of the session's TCP connection to the router (see policy.go for how the
// speaker gets it there, and for the other address family). A Path with NextHops
// is announced once per next hop, each with its own ADD-PATH identifier, unchanged
// (the router must accept third-party next hops: BIRD does for addresses on the
// shared subnet with `next hop keep`).
//
// Lifetimes: a Speaker runs once (Run). Its GoBGP server, relays, BFD server and
// goroutines live until Run returns; in mode retain the sessions are left open for
// the process exit to close.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/config/oc"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bfd"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp/wire"
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
	// withdraws every path and closes the sessions with a Cease, waiting (bounded)
	// until each router closed its side (see stop.go); config.StopRetain leaves
	// paths and sessions as they are for the process to exit, so graceful-restart
	// routers keep the paths, and gives every peer graceful restart (its
	// gracefulRestart time, default 120s) with the Restart State bit set at the
	// next start.
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
	// Peers, when not nil, are the only peers (by router address) the path is sent
	// to; nil: every peer. See scopes in policy.go.
	Peers []netip.Addr
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
	// PrefixesSent counts the paths the router holds from this session, all families.
	PrefixesSent uint64
	// Ready: established, and its first UPDATEs (everything, then End-of-RIB) sent.
	Ready bool
	// LastError is why the last connection attempt failed, or the last session
	// ended, while not established.
	LastError string
	// BFDHeld: BFD took the session down and connecting waits for BFD to be up.
	BFDHeld bool
	// BFDProblem says why BFD is configured but not up on an established session
	// ("" when it is up, or not configured).
	BFDProblem string
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

	// peersMu serializes applyPeers (it is held while sessions finish, without mu).
	peersMu sync.Mutex

	mu sync.Mutex
	// static are Config.Peers (keys fixed by New; a password may change).
	static  map[netip.Addr]peerEntry
	rib     *rib
	dynamic map[netip.Addr]peerEntry
	// active are the peers added to the running server, by router address.
	active map[netip.Addr]*activePeer
	// aliases are the loopback addresses GoBGP knows the active peers by.
	aliases map[netip.Addr]netip.Addr
	srv     *server.BgpServer // nil unless running
	inner   netip.AddrPort    // GoBGP's loopback listener
	lis     *wire.Listener    // ListenPort > 0
	wireCtx context.Context   // the relays' context (not Run's: mode retain leaves them)
	// watchCtx is GoBGP's event watcher's; it ends with Run.
	watchCtx context.Context
	log      klog.Logger
	ran      bool
	dirty    bool // a change failed; resync retries
	// nhSelf is the installed next-hop policy's input (see policy.go), with nhScopes
	// scopes.
	nhSelf          []policyPeer
	nhScopes        int
	policyInstalled bool
	// scopes are the peer sets of Path.Peers, by key (scopeKey), and their tags.
	scopes scopeTable
	// synced: Synced was called (sessions may open with DeferSessions).
	synced bool
	// restarting sets the Restart State bit on the peers added until the speaker is
	// first ready (mode retain).
	restarting bool
	nextAlias  uint32
	// kick asks the peer manager to apply the configured peers.
	kick chan struct{}
	// bfd runs the BFD sessions of peers with bfd configured; bfdPeers are those
	// added to it.
	bfd      *bfd.Server
	bfdPeers map[netip.Addr]bfd.PeerConfig
	// bfdWarnAfter is how long an established session's BFD may take to come up
	// before the speaker warns, bfdHoldMax how long a session BFD took down waits
	// for BFD (defaultBFDWarnAfter, defaultBFDHoldMax; tests shorten them).
	bfdWarnAfter, bfdHoldMax time.Duration

	// events queues GoBGP's peer events for handleEvents: GoBGP calls the watcher from
	// its own loop, and handling an event takes mu, which callers of GoBGP may hold;
	// queueing keeps GoBGP's loop from ever waiting on mu.
	evMu     sync.Mutex
	evQueue  []*apiutil.WatchEventMessage_PeerEvent
	evSignal chan struct{}
}

// activePeer is a peer added to the running server.
type activePeer struct {
	entry peerEntry
	alias netip.Addr
	wire  *wire.Peer
	// local is the session's local address (from the relay), zero before the first
	// connection.
	local netip.Addr
	// state and upAt are GoBGP's session state and when it was established.
	state  string
	upAt   time.Time
	health *peerHealth
	// bfdHeld: BFD took the session down; connecting waits until BFD is up.
	bfdHeld bool
	// bfdEverUp: the peer's BFD session has been up; bfdProblem says why it is not
	// (see checkBFDLocked).
	bfdEverUp  bool
	bfdProblem string
	// bfdKeep: BFD came up again after holding the session down; it keeps running
	// until the session is established (see wantBFDLocked).
	bfdKeep bool
	// bfdGen counts the holds (holdForBFDLocked), so an earlier hold's timer
	// releases no later hold.
	bfdGen uint64
	// bfdDownAt is when the router signaled BFD down (zero: it did not, or BFD is
	// up again); see neighborDownGrace.
	bfdDownAt time.Time
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
		cfg:        cfg,
		static:     map[netip.Addr]peerEntry{},
		rib:        newRIB(),
		dynamic:    map[netip.Addr]peerEntry{},
		active:     map[netip.Addr]*activePeer{},
		aliases:    map[netip.Addr]netip.Addr{},
		log:        klog.Background().WithName("bgp"),
		evSignal:   make(chan struct{}, 1),
		kick:       make(chan struct{}, 1),
		restarting: cfg.OnStop == config.StopRetain,
		bfdPeers:   map[netip.Addr]bfd.PeerConfig{},

		bfdWarnAfter: defaultBFDWarnAfter,
		bfdHoldMax:   defaultBFDHoldMax,
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
// out, in mode withdraw, it withdraws every path from every router and closes each
// session with a Cease NOTIFICATION (a Hard Reset where negotiated), and returns
// once every router closed its side or 2 s passed (see stop.go), so routers drop
// the speaker's routes at once, graceful restart or not; in mode retain it leaves
// the sessions for the process exit to close. It returns nil then, or an error if
// the server cannot start (for example the listen port is taken) or a static peer
// cannot be added. Run may be called once.
func (s *Speaker) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("bgp")
	s.mu.Lock()
	if s.ran {
		s.mu.Unlock()
		return ErrAlreadyRunning
	}
	s.ran = true
	s.log = logger
	s.mu.Unlock()

	srv, inner, err := startServer(ctx, logger, s.cfg)
	if err != nil {
		return err
	}
	wireCtx, stopWires := context.WithCancel(context.WithoutCancel(ctx))
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch() // GoBGP's event watcher ends with Run
	s.mu.Lock()
	s.wireCtx = wireCtx
	s.watchCtx = watchCtx
	s.inner = inner
	if s.cfg.ListenPort > 0 {
		lis, err := wire.Listen(ctx, int(s.cfg.ListenPort), logger.WithName("listener"))
		if err != nil {
			s.mu.Unlock()
			stopWires()
			srv.Stop()
			return err
		}
		s.lis = lis
	}
	if err := s.startLocked(ctx, srv); err != nil {
		s.mu.Unlock()
		stopWires()
		if s.lis != nil {
			s.lis.Close()
		}
		srv.Stop()
		return err
	}
	s.mu.Unlock()
	if err := s.applyPeers(true); err != nil {
		s.shutdown(stopWires)
		return err
	}
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
			s.shutdown(stopWires)
			return nil
		case <-s.evSignal:
			s.handleEvents()
		case <-s.kick:
			if err := s.applyPeers(false); err != nil {
				logger.Error(err, "Applying the BGP peers failed; retrying at the next change or resync")
			}
		case <-health.C:
			s.checkHealth()
		case <-tick.C:
			s.mu.Lock()
			if s.dirty {
				s.reconcileLocked()
			}
			s.mu.Unlock()
		}
	}
}

// globalFamilies are the only address families the GoBGP server keeps tables for.
// Left empty, GoBGP makes a table for each of its families in two table managers,
// each table with 2048 shards: about 9.5 MB of fixed heap for nothing but IPv4 and
// IPv6 unicast.
var globalFamilies = []uint32{
	uint32(oc.AfiSafiTypeToIntMap[oc.AFI_SAFI_TYPE_IPV4_UNICAST]),
	uint32(oc.AfiSafiTypeToIntMap[oc.AFI_SAFI_TYPE_IPV6_UNICAST]),
}

// startServer starts a GoBGP server that listens on a free loopback port for the
// relays' connections (see package wire) and on nothing else.
func startServer(ctx context.Context, logger klog.Logger, cfg Config) (*server.BgpServer, netip.AddrPort, error) {
	var last error
	for range 5 {
		port, err := freeLoopbackPort()
		if err != nil {
			return nil, netip.AddrPort{}, fmt.Errorf("finding a loopback port for the BGP server: %w", err)
		}
		srv := server.NewBgpServer(server.LoggerOption(newSlogLogger(logger.WithName("gobgp")), nil))
		go srv.Serve()
		opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		err = srv.StartBgp(opCtx, &api.StartBgpRequest{Global: &api.Global{
			Asn: cfg.LocalASN, RouterId: cfg.RouterID.String(), ListenPort: int32(port), ListenAddresses: []string{innerHost.String()},
			Families: globalFamilies,
		}})
		cancel()
		if err == nil {
			return srv, netip.AddrPortFrom(innerHost, uint16(port)), nil
		}
		srv.Stop()
		last = err
	}
	return nil, netip.AddrPort{}, fmt.Errorf("starting BGP server: %w", last)
}

func (s *Speaker) startLocked(ctx context.Context, srv *server.BgpServer) error {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if err := srv.WatchEvent(s.watchCtx, server.WatchEventMessageCallbacks{OnPeerUpdate: s.enqueueEvent}, server.WatchPeer()); err != nil {
		return fmt.Errorf("watching BGP peer events: %w", err)
	}
	s.srv = srv
	if err := s.syncNextHopPolicyLocked(opCtx); err != nil {
		s.srv = nil
		return err
	}
	s.reconcileLocked()
	return nil
}

// openLocked reports whether sessions may be open: running, and synced when
// DeferSessions asks for it.
func (s *Speaker) openLocked() bool {
	return s.srv != nil && (!s.cfg.DeferSessions || s.synced)
}

// Synced tells a speaker with DeferSessions that every source has announced its
// complete state: the sessions open now (or when Run starts), so each router
// receives every path before End-of-RIB. It is idempotent; a static peer that
// cannot be added is returned as an error.
func (s *Speaker) Synced() error {
	s.mu.Lock()
	if s.synced {
		s.mu.Unlock()
		return nil
	}
	s.synced = true
	running := s.srv != nil
	s.mu.Unlock()
	if !running {
		return nil
	}
	return s.applyPeers(true)
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
	want, errs := normalize(paths, s.baseComm, s.baseLarge, &s.scopes)
	for _, err := range errs {
		s.log.Error(err, "Skipping invalid BGP path", "source", source)
	}
	s.rib.set(source, want)
	desiredPaths.WithLabelValues(source).Set(float64(len(want)))
	s.reconcileLocked()
}

// Update replaces one source's paths of the given prefixes by paths, leaving the
// source's other prefixes as they are: the incremental form of Announce, costing in
// proportion to the prefixes given, not to the source's size. A path whose prefix
// is not among prefixes is logged and skipped; so are invalid paths (as Announce).
func (s *Speaker) Update(source string, prefixes []netip.Prefix, paths []Path) {
	if len(prefixes) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	want, errs := normalize(paths, s.baseComm, s.baseLarge, &s.scopes)
	for _, err := range errs {
		s.log.Error(err, "Skipping invalid BGP path", "source", source)
	}
	in := make(map[netip.Prefix]bool, len(prefixes))
	for _, p := range prefixes {
		in[p.Masked()] = true
	}
	for k := range want {
		if !in[k.prefix] {
			s.log.Error(nil, "Skipping BGP path outside the prefixes of its update", "source", source, "prefix", k.prefix)
			delete(want, k)
		}
	}
	s.rib.update(source, prefixes, want)
	desiredPaths.WithLabelValues(source).Set(float64(len(s.rib.sources[source])))
	s.reconcileLocked()
}

// reconcileLocked applies the diff between desired and applied paths, in one
// call to GoBGP per kind of change.
func (s *Speaker) reconcileLocked() {
	if s.srv == nil {
		return
	}
	scopesIn := s.syncScopesLocked()
	s.dirty = !scopesIn
	// Twice at most: a path whose scope changed is withdrawn in the pass after the
	// one that added its successor.
	for range 2 {
		plan := s.rib.plan()
		if len(plan) == 0 {
			return
		}
		var adds, dels []change
		for _, c := range plan {
			switch {
			case c.withdraw:
				dels = append(dels, c)
			case scopeOf(c.attrs) > uint32(s.nhScopes):
				// Its scope's rejects are not in the export policy yet (the install
				// failed): it waits for the resync; everything else goes on.
			default:
				adds = append(adds, c)
			}
		}
		s.applyLocked(adds, "Announced", func(ps []*apiutil.Path) error {
			_, err := s.srv.AddPath(apiutil.AddPathRequest{Paths: ps})
			return err
		})
		s.applyLocked(dels, "Withdrew", func(ps []*apiutil.Path) error {
			return s.srv.DeletePath(apiutil.DeletePathRequest{Paths: ps})
		})
		if !s.rib.replacing() {
			return
		}
	}
}

// applyLocked hands GoBGP one batch of changes and commits them. GoBGP reports
// that a batch failed, not which path: then they are applied one by one (adding
// a path again replaces it), and those that fail are retried at the next resync.
func (s *Speaker) applyLocked(cs []change, did string, apply func([]*apiutil.Path) error) {
	paths := make([]*apiutil.Path, 0, len(cs))
	ok := make([]change, 0, len(cs))
	for _, c := range cs {
		p, err := toAPIPath(c)
		if err != nil {
			s.log.Error(err, "Building BGP path failed", "prefix", c.key.prefix)
			continue
		}
		paths, ok = append(paths, p), append(ok, c)
	}
	if len(paths) == 0 {
		return
	}
	if err := apply(paths); err == nil {
		for _, c := range ok {
			s.rib.commit(c)
			s.log.V(2).Info(did+" BGP path", "prefix", c.key.prefix, "nextHop", nextHopString(c.key.nextHop), "pathID", c.id)
		}
		return
	}
	for i, c := range ok {
		if err := apply(paths[i : i+1]); err != nil {
			s.dirty = true
			s.log.Error(err, "Updating BGP path failed; will retry", "prefix", c.key.prefix, "nextHop", nextHopString(c.key.nextHop), "withdraw", c.withdraw)
			continue
		}
		s.rib.commit(c)
	}
}

func nextHopString(a netip.Addr) string {
	if !a.IsValid() {
		return "self"
	}
	return a.String()
}

// toAPIPath builds GoBGP's representation of a change.
func toAPIPath(c change) (*apiutil.Path, error) {
	pfx := c.key.prefix
	nlri, err := bgp.NewIPAddrPrefix(pfx)
	if err != nil {
		return nil, err
	}
	nh := c.key.nextHop
	fam := bgp.RF_IPv4_UC
	if !pfx.Addr().Is4() {
		fam = bgp.RF_IPv6_UC
	}
	if !nh.IsValid() {
		nh = netip.IPv4Unspecified()
		if fam == bgp.RF_IPv6_UC {
			nh = netip.IPv6Unspecified()
		}
	}
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	if fam == bgp.RF_IPv4_UC {
		a, err := bgp.NewPathAttributeNextHop(nh)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, a)
	} else {
		a, err := bgp.NewPathAttributeMpReachNLRI(fam, []bgp.PathNLRI{{NLRI: nlri, ID: c.id}}, nh)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, a)
	}
	if len(c.attrs.communities) > 0 {
		attrs = append(attrs, bgp.NewPathAttributeCommunities(c.attrs.communities))
	}
	if len(c.attrs.large) > 0 {
		lc := make([]*bgp.LargeCommunity, 0, len(c.attrs.large))
		for _, l := range c.attrs.large {
			lc = append(lc, bgp.NewLargeCommunity(l[0], l[1], l[2]))
		}
		attrs = append(attrs, bgp.NewPathAttributeLargeCommunities(lc))
	}
	if c.attrs.hasLocalPref {
		attrs = append(attrs, bgp.NewPathAttributeLocalPref(c.attrs.localPref))
	}
	return &apiutil.Path{Family: fam, Nlri: nlri, Attrs: attrs, Withdrawal: c.withdraw, RemoteID: c.id, Age: time.Now().Unix()}, nil
}

// AppliedPaths returns how many paths the speaker has announced (0 when stopped).
func (s *Speaker) AppliedPaths() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return 0
	}
	return len(s.rib.applied)
}
