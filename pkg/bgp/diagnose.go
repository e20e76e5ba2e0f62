package bgp

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// Why a session does not come up. A wrong or missing TCP-MD5 password is silent on
// the wire (the kernel drops segments whose signature does not match), so the
// session just stays in Connect/Active. The relay (package wire) keeps the last
// connection error of each peer, and the speaker logs, once per change of state or
// cause, a warning that names the likely causes.

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

// downWarning is the warning for a peer down for a while: state is the session
// state, err the last connection error (nil if none was seen), md5 whether
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
