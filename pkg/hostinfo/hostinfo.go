// Package hostinfo carries what a host's agent needs to know from the inventory —
// its rack's BGP peers and its BGP router ID — on the host's own Node, so that agents
// on worker hosts need neither the inventory nor any inventory or BMC credential.
//
// The leader's Publisher writes one annotation (Annotation) on every initialized Node
// whose host it knows; the agent reads it from its own Node (Decode). The annotation
// never carries a password or a file path: a peer that needs TCP-MD5 is marked, and
// the agent takes the password from a file on its own host.
package hostinfo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// Annotation is the Node annotation the leader owns and the agent reads.
const Annotation = "baremetal-ccm.io/bgp-host"

// ErrInvalid wraps every problem with an annotation's content.
var ErrInvalid = errors.New("invalid " + Annotation + " annotation")

// Info is what the leader publishes for one host.
type Info struct {
	// Host is the inventory host the Node was initialized from.
	Host string `json:"host"`
	// Rack is the host's rack ("" when it has none).
	Rack string `json:"rack,omitempty"`
	// RouterID is the host's BGP identifier: the inventory's bgpRouterID, else the
	// host's first IPv4 InternalIP ("" when it has neither).
	RouterID string `json:"routerID,omitempty"`
	// Peers are the rack's BGP peers.
	Peers []Peer `json:"peers,omitempty"`
}

// Peer is one rack peer as published: the inventory's settings without the password
// file, and whether the router expects a TCP-MD5 password.
type Peer struct {
	config.BGPPeer
	// Password is true when the inventory names a password file for this peer: the
	// agent must have the password (its --bgp-password-file).
	Password bool `json:"password,omitempty"`
}

// For returns the Info of host h in view v.
func For(v *inventory.View, h *inventory.Host) Info {
	info := Info{Host: h.Name, Rack: h.Rack, RouterID: h.BGPRouterID}
	if info.RouterID == "" {
		for _, a := range h.Addresses {
			if a.Type != v1.NodeInternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Unmap().Is4() {
				info.RouterID = ip.Unmap().String()
				break
			}
		}
	}
	if h.Rack != "" {
		if r, ok := v.Rack(h.Rack); ok {
			for _, p := range r.BGPPeers {
				pp := Peer{BGPPeer: p, Password: p.PasswordFile != ""}
				pp.PasswordFile = ""
				info.Peers = append(info.Peers, pp)
			}
		}
	}
	return info
}

// Encode is the annotation value of info: compact, deterministic JSON.
func Encode(info Info) string {
	b, _ := json.Marshal(info) // only strings, numbers and durations: cannot fail
	return string(b)
}

// Decode parses and validates an annotation value. Unknown fields and a password file
// are refused: the annotation must never make an agent read a file it names.
func Decode(s string) (Info, error) {
	var info Info
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&info); err != nil {
		return Info{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if dec.More() {
		return Info{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalid)
	}
	var errs field.ErrorList
	if info.RouterID != "" {
		if ip, err := netip.ParseAddr(info.RouterID); err != nil || !ip.Is4() {
			errs = append(errs, field.Invalid(field.NewPath("routerID"), info.RouterID, "must be an IPv4 address"))
		}
	}
	for i := range info.Peers {
		p := field.NewPath("peers").Index(i)
		if info.Peers[i].PasswordFile != "" {
			errs = append(errs, field.Forbidden(p.Child("passwordFile"), "never published: the agent reads passwords from its own --bgp-password-file"))
			continue
		}
		config.SetBGPPeerDefaults(&info.Peers[i].BGPPeer)
		errs = append(errs, config.ValidateBGPPeer(&info.Peers[i].BGPPeer, p)...)
	}
	if len(errs) > 0 {
		return Info{}, fmt.Errorf("%w: %w", ErrInvalid, errs.ToAggregate())
	}
	return info, nil
}

// FromNode returns the Info published on n; ok is false when there is none.
func FromNode(n *v1.Node) (info Info, ok bool, err error) {
	s, ok := n.Annotations[Annotation]
	if !ok {
		return Info{}, false, nil
	}
	info, err = Decode(s)
	return info, true, err
}
