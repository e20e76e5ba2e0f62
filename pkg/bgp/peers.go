package bgp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bgp/wire"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// GoBGP listens on innerHost for the relays (package wire); each peer connects
// from an alias in 127.77.0.0/16, by which GoBGP knows it. Both are loopback
// addresses: nothing of this leaves the host.
var innerHost = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// finishTimeout bounds how long a removed or changed peer's session may take to
// end (withdrawals, Cease, the router's close).
const finishTimeout = 3 * time.Second

// freeLoopbackPort returns a TCP port free on innerHost now.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp4", net.JoinHostPort(innerHost.String(), "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// allocAliasLocked returns a loopback alias no active peer uses.
func (s *Speaker) allocAliasLocked() netip.Addr {
	for {
		s.nextAlias = s.nextAlias%65534 + 1
		a := netip.AddrFrom4([4]byte{127, 77, byte(s.nextAlias >> 8), byte(s.nextAlias)})
		if _, used := s.aliases[a]; !used {
			return a
		}
	}
}

// SetPeers replaces the dynamic peer set (per-rack peers from the inventory): new
// peers are added, missing ones removed and changed ones (any setting or the
// password file's content) re-created, each old session ended with the
// withdrawals of every path the router holds and a Cease. Static peers are
// always kept; a dynamic peer with a static peer's address is ignored. Invalid
// peers are skipped and reported in the returned error (wrapping ErrInvalidConfig
// or ErrPassword); the valid rest is applied in the background (SetPeers does not
// wait for sessions to end). May be called before Run.
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
	s.mu.Unlock()
	s.kickPeers()
	return errors.Join(errs...)
}

// RefreshPasswords re-reads the password files of the static peers (Config.Peers);
// the session of each peer whose password changed is re-created in the background,
// so a rotated password applies without a restart. A file that cannot be read, or
// is empty, keeps the peer as it is and is reported in the error (wrapping
// ErrPassword).
func (s *Speaker) RefreshPasswords() error {
	s.mu.Lock()
	var errs []error
	changed := false
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
			s.static[a] = n
			changed = true
		}
	}
	s.mu.Unlock()
	if changed {
		s.kickPeers()
	}
	return errors.Join(errs...)
}

func (s *Speaker) kickPeers() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func peerListed(peers []config.BGPPeer, a netip.Addr) bool {
	for _, p := range peers {
		if pa, err := netip.ParseAddr(p.Address); err == nil && pa.Unmap() == a {
			return true
		}
	}
	return false
}

func sortedPeers(m map[netip.Addr]peerEntry) []peerEntry {
	out := make([]peerEntry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b peerEntry) int { return a.addr.Compare(b.addr) })
	return out
}

// wantedLocked is the configured peer set: static peers, and the dynamic ones
// whose address no static peer has.
func (s *Speaker) wantedLocked() map[netip.Addr]peerEntry {
	want := make(map[netip.Addr]peerEntry, len(s.static)+len(s.dynamic))
	for a, e := range s.dynamic {
		want[a] = e
	}
	for a, e := range s.static {
		want[a] = e
	}
	return want
}

// applyPeers makes the running server's peers what the configuration says, if
// sessions may be open: removed and changed peers' sessions end first (in
// parallel, without holding s.mu: withdrawals, a Cease, the router's close),
// then they leave GoBGP, then new peers are added. With strict, a static peer
// that cannot be added is returned as an error; otherwise failures are logged
// and retried at the next change.
func (s *Speaker) applyPeers(strict bool) error {
	s.peersMu.Lock()
	defer s.peersMu.Unlock()
	s.mu.Lock()
	if !s.openLocked() {
		s.mu.Unlock()
		return nil
	}
	want := s.wantedLocked()
	type ending struct {
		ap *activePeer
		n  wire.Notification
	}
	var ends []ending
	for a, ap := range s.active {
		w, ok := want[a]
		switch {
		case !ok:
			ends = append(ends, ending{ap, wire.Cease(wire.SubCeasePeerDeconfig, "")})
		case !w.equal(ap.entry):
			ends = append(ends, ending{ap, wire.Cease(wire.SubCeaseOtherConfChange, "")})
		default:
			ap.entry = w // BFD settings may have changed: no new BGP session
			continue
		}
		delete(s.active, a)
	}
	s.mu.Unlock()

	var wg sync.WaitGroup
	for _, e := range ends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
			defer cancel()
			e.ap.wire.Finish(ctx, e.n, true)
		}()
	}
	wg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, e := range ends {
		s.deletePeerLocked(ctx, e.ap)
	}
	var errs []error
	if s.srv != nil {
		for _, e := range sortedPeers(want) {
			if _, ok := s.active[e.addr]; ok {
				continue
			}
			if err := s.addPeerLocked(ctx, e); err != nil {
				if strict && !e.dynamic {
					errs = append(errs, err)
				} else {
					s.log.Error(err, "Adding BGP peer failed; retrying at the next change", "peer", e.addr)
				}
			}
		}
	}
	s.syncBFDLocked()
	if err := s.syncNextHopPolicyLocked(ctx); err != nil {
		s.log.Error(err, "Updating the next-hop policy failed")
	}
	return errors.Join(errs...)
}

// addPeerLocked adds a peer: to GoBGP (passive, known by a loopback alias) and as
// a relay that connects to the router.
func (s *Speaker) addPeerLocked(ctx context.Context, e peerEntry) error {
	alias := s.allocAliasLocked()
	if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: toAPIPeer(e, alias, s.cfg.OnStop == config.StopRetain, s.restarting)}); err != nil {
		return fmt.Errorf("adding BGP peer %s: %w", e.addr, err)
	}
	ap := &activePeer{entry: e, alias: alias, state: "idle", health: &peerHealth{downSince: time.Now()}}
	ttl := 0
	if e.cfg.ASN != s.cfg.LocalASN {
		ttl = 1
		if e.cfg.EBGPMultihop > 0 {
			ttl = int(e.cfg.EBGPMultihop)
		}
	}
	var src netip.Addr
	if a, err := netip.ParseAddr(e.cfg.SourceAddress); err == nil {
		src = a.Unmap()
	}
	ap.wire = wire.NewPeer(wire.Config{
		Remote: netip.AddrPortFrom(e.addr, uint16(e.cfg.Port)), Source: src, Password: e.password, TTL: ttl,
		ConnectRetry: durOf(e.cfg.ConnectRetry), RouterID: s.cfg.RouterID, Inner: s.inner, InnerFrom: alias,
	}, s.hooks(ap), s.log.WithValues("peer", e.addr))
	s.active[e.addr] = ap
	s.aliases[alias] = e.addr
	if s.lis != nil {
		if err := s.lis.Register(ap.wire); err != nil {
			s.log.Error(err, "Setting the TCP-MD5 key on the listener failed: the router's own connections will be refused", "peer", e.addr)
		}
	}
	ap.wire.Start(s.wireCtx)
	sessionUp.WithLabelValues(e.addr.String()).Set(0)
	s.log.Info("Added BGP peer", "peer", e.addr, "asn", e.cfg.ASN, "dynamic", e.dynamic, "md5", e.password != "")
	return nil
}

// deletePeerLocked removes a peer whose relay has finished from GoBGP.
func (s *Speaker) deletePeerLocked(ctx context.Context, ap *activePeer) {
	if s.srv != nil {
		if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: ap.alias.String()}); err != nil {
			s.log.V(2).Info("Deleting the BGP peer from the server failed", "peer", ap.entry.addr, "err", err)
		}
	}
	delete(s.aliases, ap.alias)
	if s.lis != nil {
		s.lis.Unregister(ap.wire)
	}
	forgetPeerMetrics(ap.entry.addr.String())
	s.log.Info("Removed BGP peer", "peer", ap.entry.addr, "asn", ap.entry.cfg.ASN)
}

// hooks are the relay's callbacks for one peer. They act only while ap is the
// active peer of its address.
func (s *Speaker) hooks(ap *activePeer) wire.Hooks {
	addr := ap.entry.addr
	return wire.Hooks{
		Connected: func(local netip.Addr) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.active[addr] != ap {
				return
			}
			ap.local = local
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			if err := s.syncNextHopPolicyLocked(ctx); err != nil {
				s.log.Error(err, "Updating the next-hop policy failed", "peer", addr)
			}
		},
		Ended: func(error) bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.srv == nil || s.active[addr] != ap {
				return false
			}
			// GoBGP's side ends next: re-create GoBGP's peer. A fresh FSM takes
			// the next session at once (after a session it saw fail, GoBGP refuses
			// connections for 5 s), and carries nothing of this one (GoBGP v4.8.0
			// sends a reset asked in another state than Established at the start
			// of the next session, killing it).
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: ap.alias.String()}); err != nil {
				s.log.V(2).Info("Deleting the ended session's peer from the server failed", "peer", addr, "err", err)
				return false
			}
			if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: toAPIPeer(ap.entry, ap.alias, s.cfg.OnStop == config.StopRetain, s.restarting)}); err != nil {
				s.log.Error(err, "Adding the BGP peer to the server again failed; retrying at the next change", "peer", addr)
				delete(s.active, addr) // applyPeers adds it again
				go s.kickPeers()
			}
			return true
		},
		Sent: func(paths map[wire.Family]int) {
			peer := addr.String()
			if paths == nil {
				prefixesAnnounced.DeleteLabelValues(peer, "ipv4")
				prefixesAnnounced.DeleteLabelValues(peer, "ipv6")
				return
			}
			for _, f := range []wire.Family{wire.IPv4Unicast, wire.IPv6Unicast} {
				if n, ok := paths[f]; ok {
					prefixesAnnounced.WithLabelValues(peer, f.String()).Set(float64(n))
				} else {
					prefixesAnnounced.DeleteLabelValues(peer, f.String())
				}
			}
		},
	}
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

// toAPIPeer converts a defaulted peer to GoBGP's form: passive, known by alias
// (the relay connects), both unicast families with ADD-PATH send; graceful
// restart if configured or retain is set (restart time the peer's, else
// config.DefaultBGPRetainRestartTime), always with the RFC 8538 "N" bit, so the
// relay's Cease is a Hard Reset to routers that negotiate it, and with the
// Restart State bit when restarting. TCP-MD5, TTL and the source address are the
// relay's.
func toAPIPeer(e peerEntry, alias netip.Addr, retain, restarting bool) *api.Peer {
	c := e.cfg
	p := &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: alias.String(), PeerAsn: c.ASN},
		Transport: &api.Transport{PassiveMode: true},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:      seconds(durOf(c.ConnectRetry)),
			HoldTime:          seconds(durOf(c.HoldTime)),
			KeepaliveInterval: seconds(durOf(c.KeepaliveTime)),
			// After a session ends (the relay resets GoBGP's side) take the next one
			// after 1 s, not after GoBGP's 30 s default.
			IdleHoldTimeAfterReset: 1,
		}},
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
