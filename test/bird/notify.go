package bird

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Direction tells whether BIRD received a NOTIFICATION or sent it.
type Direction string

const (
	// Received from the neighbor.
	Received Direction = "received"
	// Sent to the neighbor.
	Sent Direction = "sent"
)

// Notification is a BGP NOTIFICATION as BIRD 2.0 logged it (class "remote",
// logged with or without Options.EventLog):
//
//	s1: Received: Unknown error 6.9: 0602
//	s1: Received: Unknown error 6.10
//	s1: Received: Administrative shutdown: "maintenance"
//	s1: Error: Hold timer expired
//
// "Received:" is one from the neighbor, "Error:" one BIRD sent. BIRD never logs the
// Cease messages it sends itself (birdc restart, disable: 6/4, 6/2). BIRD 2.0.12
// knows neither Hard Reset (RFC 8538) nor BFD Down (RFC 9384): it names them
// "Unknown error 6.9" and "6.10" and does not decode a Hard Reset's data.
type Notification struct {
	Direction     Direction
	Code, Subcode uint8
	// Name is BIRD's description of the code and subcode, e.g. "Administrative
	// shutdown", "Hold timer expired", "Unknown error 6.9".
	Name string
	// Data are the data bytes BIRD printed in hex (at most the first 16).
	Data []byte
	// InnerCode and InnerSubcode are, for a Cease/Hard Reset (6/9) with at least
	// two data bytes, the encapsulated error's code and subcode read from Data
	// (HasInner). BIRD itself prints only the bytes.
	InnerCode, InnerSubcode uint8
	HasInner                bool
	// Communication is the shutdown communication (RFC 9003) of a Cease/
	// Administrative Shutdown or Reset, printed in quotes instead of the data.
	Communication string
}

// String is a compact form for test messages, e.g. "received 6/9 inner 6/2
// (Unknown error 6.9) data 06 02".
func (n Notification) String() string {
	s := fmt.Sprintf("%s %d/%d", n.Direction, n.Code, n.Subcode)
	if n.HasInner {
		s += fmt.Sprintf(" inner %d/%d", n.InnerCode, n.InnerSubcode)
	}
	s += " (" + n.Name + ")"
	if n.Communication != "" {
		s += fmt.Sprintf(" %q", n.Communication)
	} else if len(n.Data) > 0 {
		s += fmt.Sprintf(" data % x", n.Data)
	}
	return s
}

// errorNames are BIRD 2.0's descriptions of BGP error codes and subcodes
// (bgp_error_dsc); others are printed as "Unknown error <code>.<subcode>".
var errorNames = map[string][2]uint8{
	"Invalid message header":                  {1, 0},
	"Connection not synchronized":             {1, 1},
	"Bad message length":                      {1, 2},
	"Bad message type":                        {1, 3},
	"Invalid OPEN message":                    {2, 0},
	"Unsupported version number":              {2, 1},
	"Bad peer AS":                             {2, 2},
	"Bad BGP identifier":                      {2, 3},
	"Unsupported optional parameter":          {2, 4},
	"Authentication failure":                  {2, 5},
	"Unacceptable hold time":                  {2, 6},
	"Required capability missing":             {2, 7},
	"No supported AFI/SAFI":                   {2, 8},
	"Invalid UPDATE message":                  {3, 0},
	"Malformed attribute list":                {3, 1},
	"Unrecognized well-known attribute":       {3, 2},
	"Missing mandatory attribute":             {3, 3},
	"Invalid attribute flags":                 {3, 4},
	"Invalid attribute length":                {3, 5},
	"Invalid ORIGIN attribute":                {3, 6},
	"AS routing loop":                         {3, 7},
	"Invalid NEXT_HOP attribute":              {3, 8},
	"Optional attribute error":                {3, 9},
	"Invalid network field":                   {3, 10},
	"Malformed AS_PATH":                       {3, 11},
	"Hold timer expired":                      {4, 0},
	"Finite state machine error":              {5, 0},
	"Unexpected message in OpenSent state":    {5, 1},
	"Unexpected message in OpenConfirm state": {5, 2},
	"Unexpected message in Established state": {5, 3},
	"Cease":                                {6, 0},
	"Maximum number of prefixes reached":   {6, 1},
	"Administrative shutdown":              {6, 2},
	"Peer de-configured":                   {6, 3},
	"Administrative reset":                 {6, 4},
	"Connection rejected":                  {6, 5},
	"Other configuration change":           {6, 6},
	"Connection collision resolution":      {6, 7},
	"Out of Resources":                     {6, 8},
	"Invalid ROUTE-REFRESH message":        {7, 0},
	"Invalid ROUTE-REFRESH message length": {7, 1},
}

// parseNotification parses what follows "Received: " or "Error: " in BIRD's log
// (description, then optionally ": " and hex data or a quoted communication) or in
// "Last error" (the description alone).
func parseNotification(dir Direction, text string) (Notification, error) {
	n := Notification{Direction: dir}
	name, arg, _ := strings.Cut(text, ": ")
	n.Name = name
	if c, ok := errorNames[name]; ok {
		n.Code, n.Subcode = c[0], c[1]
	} else if cs, ok := strings.CutPrefix(name, "Unknown error "); ok {
		c, s, _ := strings.Cut(cs, ".")
		code, err1 := strconv.ParseUint(c, 10, 8)
		sub, err2 := strconv.ParseUint(s, 10, 8)
		if err1 != nil || err2 != nil {
			return Notification{}, fmt.Errorf("bird: NOTIFICATION %q: code", text)
		}
		n.Code, n.Subcode = uint8(code), uint8(sub)
	} else {
		return Notification{}, fmt.Errorf("bird: NOTIFICATION %q: unknown description", text)
	}
	switch {
	case arg == "":
	case strings.HasPrefix(arg, `"`) && strings.HasSuffix(arg, `"`) && len(arg) >= 2:
		n.Communication = arg[1 : len(arg)-1]
	case n.Code == 2 && (n.Subcode == 2 || n.Subcode == 6):
		// Bad peer AS and unacceptable hold time: BIRD prints the value in decimal.
	default:
		if b, err := hex.DecodeString(arg); err == nil {
			n.Data = b
		}
	}
	if n.Code == 6 && n.Subcode == 9 && len(n.Data) >= 2 {
		n.InnerCode, n.InnerSubcode, n.HasInner = n.Data[0], n.Data[1], true
	}
	return n, nil
}

// parseLogNotification recognizes the message part of a BIRD log line
// ("Received: ..." or "Error: ...").
func parseLogNotification(msg string) (Notification, bool) {
	dir, text := Received, ""
	if t, ok := strings.CutPrefix(msg, "Received: "); ok {
		text = t
	} else if t, ok := strings.CutPrefix(msg, "Error: "); ok {
		dir, text = Sent, t
	} else {
		return Notification{}, false
	}
	n, err := parseNotification(dir, text)
	return n, err == nil
}

// ProtocolDetail is what `birdc show protocols all <name>` says about a BGP
// protocol's session and its last error.
type ProtocolDetail struct {
	ProtocolStatus
	// BGPState is BIRD's "BGP state": "Established", "Passive", "Idle", ...
	BGPState string
	// NeighborAddr and NeighborAS are the configured neighbor.
	NeighborAddr netip.Addr
	NeighborAS   uint32
	// LastError is BIRD's "Last error" as printed, e.g. "Received: Unknown error
	// 6.9" (a NOTIFICATION received, without its data), "BGP Error: Hold timer
	// expired" (one BIRD sent), "BFD session down", "Socket: Connection closed";
	// empty after a restart or a Cease BIRD sent itself.
	LastError string
	// Message is the protocol's message: the shutdown communication of the last
	// Cease/Administrative Shutdown or Reset received (kept through other errors
	// until the next of those), or the one given to birdc disable or restart.
	Message string
	// LastNotification is LastError parsed when it is a NOTIFICATION received or
	// sent, else nil; a received Administrative Shutdown or Reset has Message as
	// its Communication.
	LastNotification *Notification
}

// ProtocolDetail returns BIRD's details of one BGP protocol, or ErrNotFound.
func (r *Router) ProtocolDetail(ctx context.Context, name string) (ProtocolDetail, error) {
	out, err := r.Birdc(ctx, "show", "protocols", "all", name)
	if err != nil {
		if strings.Contains(out, "No protocols match") {
			return ProtocolDetail{}, fmt.Errorf("bird: protocol %s: %w", name, ErrNotFound)
		}
		return ProtocolDetail{}, err
	}
	return parseProtocolDetail(out, name)
}

// parseProtocolDetail parses `birdc show protocols all <name>`:
//
//	Name       Proto      Table      State  Since         Info
//	s1         BGP        ---        start  08:22:05.347  Passive       Received: Administrative shutdown
//	  Message:        maintenance: node drained
//	  BGP state:          Passive
//	    Neighbor address: 10.255.184.1
//	    Neighbor AS:      65000
//	    Local AS:         65001
//	    Last error:       Received: Administrative shutdown
func parseProtocolDetail(out, name string) (ProtocolDetail, error) {
	var d ProtocolDetail
	for _, p := range parseProtocols(out) {
		if p.Name == name {
			d.ProtocolStatus = p
		}
	}
	if d.Name == "" {
		return ProtocolDetail{}, fmt.Errorf("bird: protocol %s: %w", name, ErrNotFound)
	}
	for _, line := range strings.Split(out, "\n") {
		key, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(line, "  ") {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Message":
			d.Message = val
		case "BGP state":
			d.BGPState = val
		case "Neighbor address":
			d.NeighborAddr, _ = netip.ParseAddr(val)
		case "Neighbor AS":
			if as, err := strconv.ParseUint(val, 10, 32); err == nil {
				d.NeighborAS = uint32(as)
			}
		case "Last error":
			d.LastError = val
		}
	}
	d.LastNotification = lastErrorNotification(d.LastError, d.Message)
	return d, nil
}

// lastErrorNotification parses "Last error" when it is a NOTIFICATION.
func lastErrorNotification(lastError, message string) *Notification {
	dir, text := Received, ""
	if t, ok := strings.CutPrefix(lastError, "Received: "); ok {
		text = t
	} else if t, ok := strings.CutPrefix(lastError, "BGP Error: "); ok {
		dir, text = Sent, t
	} else {
		return nil
	}
	n, err := parseNotification(dir, text)
	if err != nil {
		return nil
	}
	if dir == Received && n.Code == 6 && (n.Subcode == 2 || n.Subcode == 4) {
		n.Communication = message
	}
	return &n
}

// protocolPeer returns the speaker address of a BGP protocol of r ("s1": speaker
// 0's IPv4 address, "s1v6" its IPv6 address).
func (r *Router) protocolPeer(name string) (netip.Addr, bool) {
	for i := range r.opts.Speakers {
		switch name {
		case r.Protocol(i, false):
			return r.SpeakerV4(i), true
		case r.Protocol(i, true):
			return r.SpeakerV6(i), true
		}
	}
	return netip.Addr{}, false
}
