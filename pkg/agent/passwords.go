package agent

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// Passwords maps the peers published on this host's Node to TCP-MD5 password files
// on this host (agent mode: the inventory's password files live on the CCM's hosts).
// A file holds one password; it is read on every pass, so a rotated password applies
// without a restart.
type Passwords struct {
	// Default is the file for every peer without a file of its own ("" none).
	Default string
	// ByPeer are the files of single peers.
	ByPeer map[netip.Addr]string
}

// ParsePasswords parses --bgp-password-file values: FILE (every peer) or
// ADDRESS=FILE (that peer). Files must be absolute paths.
func ParsePasswords(values []string) (Passwords, error) {
	var p Passwords
	for _, v := range values {
		addr, file, perPeer := strings.Cut(v, "=")
		if !perPeer {
			file = v
		}
		if !filepath.IsAbs(file) {
			return Passwords{}, fmt.Errorf("--bgp-password-file=%s: %q must be an absolute path (FILE, or PEER-ADDRESS=FILE)", v, file)
		}
		if !perPeer {
			if p.Default != "" {
				return Passwords{}, fmt.Errorf("--bgp-password-file=%s: a file for every peer is already given (%s); name the peer as PEER-ADDRESS=FILE", v, p.Default)
			}
			p.Default = file
			continue
		}
		ip, err := netip.ParseAddr(addr)
		if err != nil {
			return Passwords{}, fmt.Errorf("--bgp-password-file=%s: %q is not an IP address (PEER-ADDRESS=FILE)", v, addr)
		}
		if p.ByPeer == nil {
			p.ByPeer = map[netip.Addr]string{}
		}
		if prev, dup := p.ByPeer[ip.Unmap()]; dup {
			return Passwords{}, fmt.Errorf("--bgp-password-file=%s: peer %s already has %s", v, ip, prev)
		}
		p.ByPeer[ip.Unmap()] = file
	}
	return p, nil
}

// For returns the password file of the peer at address.
func (p Passwords) For(address string) (string, bool) {
	if ip, err := netip.ParseAddr(address); err == nil {
		if f, ok := p.ByPeer[ip.Unmap()]; ok {
			return f, true
		}
	}
	return p.Default, p.Default != ""
}
