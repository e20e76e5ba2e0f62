package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// openWait bounds how long an accepted connection may take to send its OPEN.
const openWait = 10 * time.Second

// Listener accepts the sessions routers open (bgp.listenPort) and hands each to
// the Peer registered for its address. A connection from an address without a
// Peer is closed without a byte read; the TCP-MD5 key of each registered Peer is
// set on the listening sockets, so the kernel drops unsigned segments.
type Listener struct {
	log klog.Logger
	lns []*net.TCPListener

	mu     sync.Mutex
	peers  map[netip.Addr]*Peer
	conns  map[*net.TCPConn]bool // accepted, waiting for their OPEN or a Peer
	closed bool
}

// Listen listens on port of every address (IPv4 and IPv6 wildcard).
func Listen(ctx context.Context, port int, logger klog.Logger) (*Listener, error) {
	l := &Listener{log: logger, peers: map[netip.Addr]*Peer{}, conns: map[*net.TCPConn]bool{}}
	lc := net.ListenConfig{}
	lc.SetMultipathTCP(false) // TCP-MD5 does not work with MPTCP
	for _, network := range []string{"tcp4", "tcp6"} {
		addr := "0.0.0.0"
		if network == "tcp6" {
			addr = "::"
			lc.Control = func(_, _ string, c syscall.RawConn) error {
				return control(c, func(fd int) error { return setV6Only(fd) })
			}
		}
		ln, err := lc.Listen(ctx, network, net.JoinHostPort(addr, strconv.Itoa(port)))
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("listening for BGP sessions on port %d: %w", port, err)
		}
		l.lns = append(l.lns, ln.(*net.TCPListener))
	}
	for _, ln := range l.lns {
		go l.accept(ln)
	}
	return l, nil
}

// Close stops accepting and closes the connections that were accepted and not
// handed to a Peer yet.
func (l *Listener) Close() {
	for _, ln := range l.lns {
		_ = ln.Close()
	}
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
}

// track records an accepted connection until untrack; it reports false (and the
// caller closes it) once the Listener is closed.
func (l *Listener) track(c *net.TCPConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = true
	return true
}

func (l *Listener) untrack(c *net.TCPConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// Register routes the connections from the Peer's router address to it, and sets
// its TCP-MD5 key (if any) on the listening sockets.
func (l *Listener) Register(p *Peer) error {
	a := p.cfg.Remote.Addr()
	l.mu.Lock()
	l.peers[a] = p
	l.mu.Unlock()
	return l.setKey(a, p.cfg.Password)
}

// Unregister stops routing connections to the Peer and clears its key.
func (l *Listener) Unregister(p *Peer) {
	a := p.cfg.Remote.Addr()
	l.mu.Lock()
	if l.peers[a] == p {
		delete(l.peers, a)
	}
	l.mu.Unlock()
	if p.cfg.Password != "" {
		for _, ln := range l.lns {
			if sc, err := ln.SyscallConn(); err == nil && (ln.Addr().(*net.TCPAddr).IP.To4() != nil) == a.Is4() {
				_ = control(sc, func(fd int) error { return md5Sig(fd, a, "") })
			}
		}
	}
}

// setKey sets (or, with "", clears) the TCP-MD5 key for a on the listeners of
// its family.
func (l *Listener) setKey(a netip.Addr, key string) error {
	if key == "" {
		return nil
	}
	var errs []error
	for _, ln := range l.lns {
		if (ln.Addr().(*net.TCPAddr).IP.To4() != nil) != a.Is4() {
			continue
		}
		sc, err := ln.SyscallConn()
		if err == nil {
			err = control(sc, func(fd int) error { return md5Sig(fd, a, key) })
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (l *Listener) accept(ln *net.TCPListener) {
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			l.log.V(2).Info("Accepting a BGP connection failed", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go l.handle(c)
	}
}

// handle reads the OPEN of an accepted connection and offers it to its Peer.
func (l *Listener) handle(c *net.TCPConn) {
	if !l.track(c) {
		_ = c.Close()
		return
	}
	defer l.untrack(c)
	remote := addrPort(c.RemoteAddr())
	l.mu.Lock()
	p := l.peers[remote.Addr()]
	l.mu.Unlock()
	if p == nil {
		l.log.V(2).Info("Closed a BGP connection from an address that is no peer", "remote", remote)
		_ = c.Close()
		return
	}
	if p.cfg.TTL > 0 {
		if sc, err := c.SyscallConn(); err == nil {
			_ = control(sc, func(fd int) error { return setTTL(fd, remote.Addr().Is6(), p.cfg.TTL) })
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(openWait))
	m, err := ReadMessage(c, MaxLen)
	var o *Open
	switch {
	case err == nil && m.Type == TypeOpen:
		o, err = ParseOpen(m.Body)
	case err == nil && m.Type == TypeNotification:
		l.log.V(2).Info("The router refused the connection it opened", "remote", remote, "notification", ParseNotification(m.Body).String())
		_ = c.Close()
		return
	case err == nil:
		err = malformed(CodeFSM, 0, nil, "%s before OPEN", TypeName(m.Type))
	}
	if err != nil {
		var me *MessageError
		if errors.As(err, &me) {
			_, _ = c.Write(me.Notification.Bytes())
		}
		l.log.V(2).Info("Closed a BGP connection the router opened", "remote", remote, "err", err)
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if !p.offer(c, o, m.Bytes()) {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(Cease(7, "").Bytes())
		_ = c.Close()
	}
}
