package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Why a session does not come up. A wrong or missing TCP-MD5 password is silent on
// the wire (the kernel drops segments whose signature does not match), so the
// session just stays in Connect/Active; GoBGP reports the failed connection attempts
// only at debug level. The speaker keeps the last connection error of each peer
// that is not established (GoBGP's debug messages are let through while one is
// down, see klogAdapter) and logs, once per change of state or cause, a warning
// that names the likely causes.

// connErrors holds the last connection error per peer address.
type connErrors struct {
	down atomic.Int32 // peers not established: GoBGP's debug messages are wanted
	mu   sync.Mutex
	last map[netip.Addr]error
}

func newConnErrors() *connErrors { return &connErrors{last: map[netip.Addr]error{}} }

func (c *connErrors) watching() bool { return c.down.Load() > 0 }

func (c *connErrors) record(key, err any) {
	s, _ := key.(string)
	a, perr := netip.ParseAddr(s)
	e, _ := err.(error)
	if perr != nil || e == nil {
		return
	}
	c.mu.Lock()
	c.last[a.Unmap()] = e
	c.mu.Unlock()
}

func (c *connErrors) get(a netip.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last[a]
}

func (c *connErrors) forget(a netip.Addr) {
	c.mu.Lock()
	delete(c.last, a)
	c.mu.Unlock()
}

// peerHealth tracks one peer for the warning: since when it is down, and what was
// last said about it.
type peerHealth struct {
	downSince time.Time
	warned    string
}

// downGrace is how long a session may take to come up before the speaker warns:
// two connection attempts, at least 10 s.
func downGrace(connectRetry time.Duration) time.Duration {
	return max(2*connectRetry, 10*time.Second)
}

// causeOf classifies a connection error.
func causeOf(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "source"
	case strings.Contains(err.Error(), "timeout"):
		return "timeout"
	}
	return "other"
}

// downWarning is the warning for a peer down for a while: state is GoBGP's
// session state, err the last connection error (nil if none was seen), md5 whether
// this side signs with TCP-MD5.
func downWarning(state string, err error, md5 bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "BGP session not established (state %s", state)
	if err != nil {
		fmt.Fprintf(&b, "; last connection attempt: %v", err)
	}
	b.WriteString("). ")
	switch causeOf(err) {
	case "refused":
		b.WriteString("The router refused the connection: it has no neighbor for this address (check its neighbor statement, our sourceAddress and the port), or it is not running BGP.")
	case "unreachable":
		b.WriteString("No route to the router: check the address, the interface and the sourceAddress.")
	case "source":
		b.WriteString("The sourceAddress is not configured on this host.")
	default:
		if md5 {
			b.WriteString("Likely causes: the router expects a different TCP-MD5 password or none (a mismatch is silent: the kernel drops the segments), an ACL or firewall dropping TCP port 179, or the router is down or not configured for this neighbor.")
		} else {
			b.WriteString("Likely causes: the router expects a TCP-MD5 password (set passwordFile; a missing password is silent: the router's kernel drops the segments), an ACL or firewall dropping TCP port 179, or the router is down or not configured for this neighbor.")
		}
	}
	return b.String()
}
