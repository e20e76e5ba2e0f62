package inventory

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
)

// Matching errors. Match wraps exactly one of them.
var (
	// ErrNoMatch: no host matches the Node by any criterion.
	ErrNoMatch = errors.New("no inventory host matches the node")
	// ErrHostGone: the Node's providerID names a host the inventory does not have.
	ErrHostGone = errors.New("the node's host is not in the inventory")
	// ErrAmbiguous: criteria point at different hosts; the inventory or the Node is wrong.
	ErrAmbiguous = errors.New("the node matches more than one inventory host")
	// ErrForeignProviderID: the Node's providerID belongs to another cloud provider.
	ErrForeignProviderID = errors.New("the node's providerID is not a baremetal:// providerID")
	// ErrUUIDMismatch: the Node's systemUUID contradicts the matched host's.
	ErrUUIDMismatch = errors.New("the node's systemUUID contradicts its inventory host's")
)

// View is an immutable, indexed snapshot of a valid inventory. It is safe for concurrent
// use and never changes after construction; reloads produce a new View.
type View struct {
	digest string
	hosts  []Host
	byName map[string]*Host     // host names and hostnames
	byID   map[string]*Host     // host names only
	byUUID map[string]*Host     // lower-case system UUIDs, in every byte order (UUIDForms)
	byIP   map[netip.Addr]*Host // InternalIP addresses
	racks  map[string]*Rack
}

func newView(doc *Document, digest string) *View {
	n := len(doc.Hosts)
	v := &View{
		digest: digest,
		hosts:  doc.Hosts,
		byName: make(map[string]*Host, n),
		byID:   make(map[string]*Host, n),
		byUUID: make(map[string]*Host, n),
		byIP:   make(map[netip.Addr]*Host, n),
		racks:  make(map[string]*Rack, len(doc.Racks)),
	}
	for i := range doc.Racks {
		v.racks[doc.Racks[i].Name] = &doc.Racks[i]
	}
	for i := range v.hosts {
		h := &v.hosts[i]
		v.byID[h.Name] = h
		v.byName[h.Name] = h
		for _, n := range h.Hostnames {
			v.byName[n] = h
		}
		if h.SystemUUID != "" {
			for _, form := range UUIDForms(h.SystemUUID) {
				v.byUUID[form] = h // every byte order: a Node or BMC may report any
			}
		}
		for _, a := range h.Addresses {
			if a.Type == v1.NodeInternalIP {
				v.byIP[netip.MustParseAddr(a.Address)] = h
			}
		}
	}
	return v
}

// Digest identifies the document this View was parsed from.
func (v *View) Digest() string { return v.digest }

// Len is the number of hosts.
func (v *View) Len() int { return len(v.hosts) }

// Host returns the host with the given name.
func (v *View) Host(name string) (*Host, bool) {
	h, ok := v.byID[name]
	return h, ok
}

// Hosts calls fn for every host in document order.
func (v *View) Hosts(fn func(*Host)) {
	for i := range v.hosts {
		fn(&v.hosts[i])
	}
}

// HostIDFromProviderID returns the host name of a baremetal:// providerID.
func HostIDFromProviderID(providerID string) (string, bool) {
	id, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	return id, ok && id != ""
}

// Match returns the host a Node runs on. A set providerID is authoritative: a
// baremetal:// one names the host (ErrHostGone when the inventory lacks it), any other
// is ErrForeignProviderID. Without a providerID the Node is matched by systemUUID, by
// name against host names and hostnames, and by InternalIP (the Node's status or
// kubelet's provided node IP against the hosts' InternalIP addresses); when these point at different hosts the result is ErrAmbiguous,
// never a guess. Whatever matched, a Node systemUUID that contradicts the host's
// systemUUID (see SameSystemUUID) is ErrUUIDMismatch: the Node runs on another machine.
// The returned string says which criterion matched.
func (v *View) Match(node *v1.Node) (*Host, string, error) {
	h, by, err := v.match(node)
	if err != nil {
		return nil, "", err
	}
	if same, ok := SameSystemUUID(NodeSystemUUID(node), h.SystemUUID); ok && !same {
		return nil, "", fmt.Errorf("%w: %s matches host %q, but the Node reports systemUUID %s and the host has %s; fix the inventory (or the Node's providerID) so they name the same machine",
			ErrUUIDMismatch, by, h.Name, node.Status.NodeInfo.SystemUUID, h.SystemUUID)
	}
	return h, by, nil
}

func (v *View) match(node *v1.Node) (*Host, string, error) {
	if pid := node.Spec.ProviderID; pid != "" {
		id, ok := HostIDFromProviderID(pid)
		if !ok {
			return nil, "", fmt.Errorf("%w: %q", ErrForeignProviderID, pid)
		}
		h, ok := v.byID[id]
		if !ok {
			return nil, "", fmt.Errorf("%w: providerID %q names host %q", ErrHostGone, pid, id)
		}
		return h, "providerID", nil
	}

	var found *Host
	var by []string
	var conflict []string
	add := func(h *Host, criterion string) {
		if h == nil {
			return
		}
		switch {
		case found == nil:
			found = h
			by = append(by, criterion)
		case found == h:
			by = append(by, criterion)
		default:
			conflict = append(conflict, fmt.Sprintf("%s matches host %q", criterion, h.Name))
		}
	}
	if u := NodeSystemUUID(node); u != "" {
		add(v.byUUID[strings.ToLower(u)], "systemUUID")
	}
	add(v.byName[strings.ToLower(node.Name)], "name")
	for _, ip := range nodeInternalIPs(node) {
		add(v.byIP[ip], "InternalIP "+ip.String())
	}
	if len(conflict) > 0 {
		return nil, "", fmt.Errorf("%w: %s matches host %q but %s; fix the inventory or the Node so they agree",
			ErrAmbiguous, strings.Join(by, " and "), found.Name, strings.Join(conflict, ", "))
	}
	if found == nil {
		return nil, "", fmt.Errorf("%w: tried systemUUID %q, name %q, InternalIPs %v; add a host with one of these to the inventory (name, hostnames, systemUUID or an InternalIP address)",
			ErrNoMatch, node.Status.NodeInfo.SystemUUID, node.Name, nodeInternalIPs(node))
	}
	return found, strings.Join(by, "+"), nil
}

// nodeInternalIPs returns the Node's InternalIP status addresses and the IPs kubelet
// provided with --node-ip, de-duplicated.
func nodeInternalIPs(node *v1.Node) []netip.Addr {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	addIP := func(s string) {
		ip, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || ip.IsUnspecified() {
			return
		}
		ip = ip.Unmap()
		if !seen[ip] {
			seen[ip] = true
			out = append(out, ip)
		}
	}
	for _, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			addIP(a.Address)
		}
	}
	if s, ok := node.Annotations[cloudproviderapi.AnnotationAlphaProvidedIPAddr]; ok {
		for _, part := range strings.Split(s, ",") {
			addIP(part)
		}
	}
	return out
}

// ProvidedNodeIPs returns the IPs kubelet set with --node-ip (the
// alpha.kubernetes.io/provided-node-ip annotation), ignoring unspecified ones.
func ProvidedNodeIPs(node *v1.Node) []netip.Addr {
	s, ok := node.Annotations[cloudproviderapi.AnnotationAlphaProvidedIPAddr]
	if !ok {
		return nil
	}
	var out []netip.Addr
	for _, part := range strings.Split(s, ",") {
		if ip, err := netip.ParseAddr(strings.TrimSpace(part)); err == nil && !ip.IsUnspecified() {
			out = append(out, ip.Unmap())
		}
	}
	return out
}
