package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// A clean stop in mode withdraw (config.StopWithdraw) must be complete at the
// router: every withdrawal received, then a Cease that tells a graceful-restart
// helper to drop the session's paths at once rather than keep them as stale.
//
// GoBGP's DeletePeer does not give that: it puts the NOTIFICATION on a side
// channel and cancels the session, whose writer drops the UPDATEs still queued
// (the withdrawals), and the process may exit before anything is written; the
// router then sees a bare TCP close, which graceful restart treats as a restart.
// Even a Cease written in order is not enough: GoBGP closes the socket right
// after writing it, and a close with unread received data (a KEEPALIVE that just
// arrived) makes the kernel send a RST and drop whatever is still unsent.
//
// The speaker therefore stops so:
//
//  1. it takes a second reference (dup) to the socket of every established
//     session, found by its addresses (sock_diag gives the inode, /proc/self/fd
//     the descriptor), so GoBGP's close of its descriptor sends nothing;
//  2. every path is deleted from the global table: GoBGP queues the withdrawals on
//     each session's outgoing queue;
//  3. each peer is disabled: GoBGP queues a Cease "administrative shutdown" behind
//     the withdrawals (sent as the RFC 8538 Hard Reset where the router negotiated
//     the "N" bit), writes it, closes its descriptor and leaves Established;
//  4. the speaker waits until the socket's send queue is empty (SIOCOUTQ: every
//     byte written, the Cease included, acknowledged by the router's TCP), and only
//     then closes its own reference, which sends the FIN.
//
// A socket that cannot be held, or is not acknowledged within the deadline, is
// logged as unconfirmed.

// tcpProber reads the kernel's view of a TCP connection (sock_diag in production).
type tcpProber interface {
	// probe returns the state of the connection local->remote, the bytes sent but not
	// yet acknowledged, and whether the kernel still has the socket.
	probe(local, remote netip.AddrPort) (state uint8, unacked uint32, found bool, err error)
	// hold returns a second reference to the connection's socket.
	hold(local, remote netip.AddrPort) (heldSocket, error)
}

// heldSocket is a second reference to a session's socket.
type heldSocket interface {
	// outq is the number of bytes written and not yet acknowledged by the peer.
	outq() (int, error)
	// Close drops the reference (the last one sends the FIN).
	Close() error
}

// Linux TCP states (include/net/tcp_states.h).
const tcpEstablished = 1

// conn is an established session's TCP connection.
type conn struct {
	peer          netip.Addr
	local, remote netip.AddrPort
}

// connFromEvent is the TCP connection of a session that a peer event reports
// established (GoBGP's ListPeer gives only the configured ports).
func connFromEvent(peer netip.Addr, t *api.Transport) (conn, bool) {
	if t == nil || t.LocalPort == 0 || t.RemotePort == 0 {
		return conn{}, false
	}
	local, err := netip.ParseAddr(t.LocalAddress)
	if err != nil {
		return conn{}, false
	}
	return conn{peer: peer, local: netip.AddrPortFrom(local.Unmap(), uint16(t.LocalPort)), remote: netip.AddrPortFrom(peer, uint16(t.RemotePort))}, true
}

// establishedPeers returns the peers whose session GoBGP has established.
func establishedPeers(ctx context.Context, srv *server.BgpServer) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	_ = srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		if a, ok := peerAddr(p); ok && p.State.SessionState == api.PeerState_ESTABLISHED {
			out[a] = true
		}
	})
	return out
}

// withdrawAndClose is the stop of mode withdraw (see the comment above); conns
// are the connections of the sessions established when the stop began. It returns
// how many sessions were confirmed flushed at the router and how many were not.
func withdrawAndClose(ctx context.Context, logger klog.Logger, srv *server.BgpServer, peers []peerEntry, conns []conn, prober tcpProber) (confirmed, unconfirmed int) {
	held := map[conn]heldSocket{}
	for _, c := range conns {
		h, err := prober.hold(c.local, c.remote)
		if err != nil {
			logger.Info("Warning: cannot hold the session's socket; its withdrawals will not be confirmed", "peer", c.peer, "err", err)
			continue
		}
		held[c] = h
	}
	defer func() {
		for _, h := range held {
			_ = h.Close()
		}
	}()
	if err := srv.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL}); err != nil {
		logger.Error(err, "Withdrawing all paths failed; closing sessions anyway")
	}
	for _, e := range peers {
		if err := srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: e.addr.String(), Communication: "baremetal-ccm stopping"}); err != nil {
			logger.Error(err, "Closing BGP session failed", "peer", e.addr)
		}
	}
	// GoBGP has written the Cease once the session left Established.
	waitUntil(ctx, 10*time.Millisecond, func() bool {
		up := establishedPeers(ctx, srv)
		for _, c := range conns {
			if up[c.peer] {
				return false
			}
		}
		return true
	})
	// The router's TCP acknowledged every byte.
	waitUntil(ctx, 5*time.Millisecond, func() bool {
		for c, h := range held {
			n, err := h.outq()
			if err != nil || n > 0 {
				if err != nil {
					logger.V(2).Info("Reading the send queue failed", "peer", c.peer, "err", err)
				}
				continue
			}
			confirmed++
			logger.V(2).Info("The router acknowledged every withdrawal and the Cease", "peer", c.peer)
			_ = h.Close()
			delete(held, c)
		}
		return len(held) == 0
	})
	for c := range held {
		logger.Info("Warning: the router did not acknowledge the withdrawals and the Cease in time; it may keep stale paths until its hold or restart timer", "peer", c.peer, "local", c.local, "remote", c.remote)
	}
	unconfirmed = len(conns) - confirmed
	for _, e := range peers {
		if err := srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: e.addr.String()}); err != nil {
			logger.V(2).Info("Deleting the disabled peer failed", "peer", e.addr, "err", err)
		}
	}
	return confirmed, unconfirmed
}

// waitUntil polls cond every interval until it holds or ctx ends.
func waitUntil(ctx context.Context, interval time.Duration, cond func() bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sockDiag reads TCP connections with sock_diag (netlink INET_DIAG).
type sockDiag struct{}

var _ tcpProber = sockDiag{}

func (sockDiag) probe(local, remote netip.AddrPort) (uint8, uint32, bool, error) {
	s, err := findSocket(local, remote)
	if err != nil || s == nil {
		return 0, 0, false, err
	}
	return s.State, s.WQueue, true, nil
}

// findSocket returns the kernel's TCP socket local->remote, nil if there is none.
func findSocket(local, remote netip.AddrPort) (*netlink.Socket, error) {
	family := uint8(unix.AF_INET)
	if local.Addr().Is6() {
		family = unix.AF_INET6
	}
	socks, err := diagTCP(family)
	if err != nil {
		return nil, err
	}
	for _, s := range socks {
		l, ok1 := netip.AddrFromSlice(s.ID.Source)
		r, ok2 := netip.AddrFromSlice(s.ID.Destination)
		if !ok1 || !ok2 {
			continue
		}
		if netip.AddrPortFrom(l.Unmap(), s.ID.SourcePort) == local && netip.AddrPortFrom(r.Unmap(), s.ID.DestinationPort) == remote {
			return s, nil
		}
	}
	return nil, nil
}

// hold finds the socket's descriptor in this process by its inode and duplicates
// it, checking that the duplicate is that socket (the descriptor may have been
// closed and reused in between).
func (sockDiag) hold(local, remote netip.AddrPort) (heldSocket, error) {
	s, err := findSocket(local, remote)
	if err != nil {
		return nil, err
	}
	if s == nil || s.State != tcpEstablished {
		return nil, fmt.Errorf("no established TCP connection %s -> %s", local, remote)
	}
	want := "socket:[" + strconv.FormatUint(uint64(s.INode), 10) + "]"
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || link != want {
			continue
		}
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("duplicating the socket of %s -> %s: %w", local, remote, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(dup, &st); err != nil || st.Ino != uint64(s.INode) {
			_ = unix.Close(dup)
			return nil, fmt.Errorf("the socket of %s -> %s closed while being held", local, remote)
		}
		return heldFD(dup), nil
	}
	return nil, fmt.Errorf("no descriptor of this process holds %s -> %s", local, remote)
}

// heldFD is a duplicated socket descriptor.
type heldFD int

func (h heldFD) outq() (int, error) { return unix.IoctlGetInt(int(h), unix.SIOCOUTQ) }

func (h heldFD) Close() error { return unix.Close(int(h)) }

// diagTCP dumps the TCP sockets of a family, retrying a dump the kernel interrupted.
func diagTCP(family uint8) ([]*netlink.Socket, error) {
	var err error
	for range 3 {
		var socks []*netlink.Socket
		socks, err = netlink.SocketDiagTCP(family)
		if err == nil {
			return socks, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, err
		}
	}
	return nil, err
}
