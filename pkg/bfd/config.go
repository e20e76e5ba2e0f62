package bfd

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Defaults and limits of PeerConfig.
const (
	DefaultDesiredMinTx  = 300 * time.Millisecond
	DefaultRequiredMinRx = 300 * time.Millisecond
	DefaultDetectMult    = 3
	// MinInterval and MaxInterval bound DesiredMinTx and RequiredMinRx: a user-space
	// implementation cannot keep promises below 10ms, and an interval over a minute
	// is a typo rather than a failure detector.
	MinInterval = 10 * time.Millisecond
	MaxInterval = time.Minute
	// slowTxInterval is the least Desired Min TX Interval while a session is not Up
	// (RFC 5880 section 6.8.3).
	slowTxInterval = time.Second
)

// ErrInvalidConfig is wrapped by AddPeer's validation errors.
var ErrInvalidConfig = errors.New("invalid BFD peer configuration")

// PeerConfig is one single-hop BFD session (RFC 5881). Zero intervals and
// multiplier take the defaults.
type PeerConfig struct {
	// Peer is the neighbor's address; it identifies the session. An IPv6 link-local
	// address needs Interface (or a zone naming the interface).
	Peer netip.Addr
	// Local is this host's address on the link to Peer, of the same family: packets
	// are sent from it and received on it.
	Local netip.Addr
	// Interface, if set, binds the session's sockets to that interface
	// (SO_BINDTODEVICE).
	Interface string
	// DesiredMinTx is how often we would like to send; the negotiated interval is the
	// larger of it and the peer's Required Min RX. While the session is not Up we send
	// at most once a second (RFC 5880 section 6.8.3). Default 300ms.
	DesiredMinTx time.Duration
	// RequiredMinRx is the shortest interval between the peer's packets we accept.
	// Default 300ms.
	RequiredMinRx time.Duration
	// DetectMult is how many of our negotiated intervals the peer waits without a
	// packet before it declares the session down. Default 3.
	DetectMult uint8
}

// normalize returns c with defaults applied and addresses in canonical form
// (IPv4-mapped IPv6 unmapped; a zone only on link-local addresses, naming
// Interface), or an error wrapping ErrInvalidConfig that names every bad field.
func (c PeerConfig) normalize() (PeerConfig, error) {
	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, "bfd."+field+": "+fmt.Sprintf(format, args...))
	}
	if c.DesiredMinTx == 0 {
		c.DesiredMinTx = DefaultDesiredMinTx
	}
	if c.RequiredMinRx == 0 {
		c.RequiredMinRx = DefaultRequiredMinRx
	}
	if c.DetectMult == 0 {
		c.DetectMult = DefaultDetectMult
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"minTx", c.DesiredMinTx}, {"minRx", c.RequiredMinRx}} {
		switch {
		case f.d < MinInterval:
			bad(f.name, "must be >= %v, got %v", MinInterval, f.d)
		case f.d > MaxInterval:
			bad(f.name, "must be <= %v, got %v", MaxInterval, f.d)
		}
	}
	if c.Interface != "" && (len(c.Interface) > 15 || strings.ContainsAny(c.Interface, "/ \t\n%:")) {
		bad("interface", "%q is not a valid interface name", c.Interface)
	}
	zone := ""
	for _, a := range []struct {
		name string
		addr *netip.Addr
	}{{"peer", &c.Peer}, {"local", &c.Local}} {
		addr := a.addr.Unmap()
		switch {
		case !addr.IsValid():
			bad(a.name, "required")
			continue
		case addr.IsUnspecified() || addr.IsMulticast() || addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			bad(a.name, "%s is not a unicast address", addr)
			continue
		}
		if addr.Is6() && addr.IsLinkLocalUnicast() {
			if z := addr.Zone(); z != "" {
				if zone != "" && z != zone {
					bad(a.name, "zone %q differs from %q", z, zone)
				}
				zone = z
			}
		} else {
			addr = addr.WithZone("")
		}
		*a.addr = addr
	}
	if len(errs) == 0 {
		switch {
		case c.Peer.Is4() != c.Local.Is4():
			bad("local", "%s is not of the family of peer %s", c.Local, c.Peer)
		case c.Peer.WithZone("") == c.Local.WithZone(""):
			bad("local", "must differ from peer %s", c.Peer)
		}
	}
	linkLocal := c.Peer.Is6() && (c.Peer.IsLinkLocalUnicast() || c.Local.IsLinkLocalUnicast())
	switch {
	case zone != "" && c.Interface != "" && zone != c.Interface:
		bad("interface", "%q differs from the addresses' zone %q", c.Interface, zone)
	case zone != "" && c.Interface == "":
		c.Interface = zone
	case linkLocal && c.Interface == "" && len(errs) == 0:
		bad("interface", "required with an IPv6 link-local address")
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(errs, "; "))
	}
	if c.Peer.IsLinkLocalUnicast() {
		c.Peer = c.Peer.WithZone(c.Interface)
	}
	if c.Local.IsLinkLocalUnicast() {
		c.Local = c.Local.WithZone(c.Interface)
	}
	return c, nil
}

// key returns the map key of a peer address given to RemovePeer or in a config:
// unmapped, with a zone only if it is link-local.
func peerKey(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if !a.IsLinkLocalUnicast() {
		a = a.WithZone("")
	}
	return a
}
