package frr

import (
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Direction tells whether the router received a NOTIFICATION or sent it.
type Direction string

const (
	// Received from the neighbor.
	Received Direction = "received"
	// Sent to the neighbor.
	Sent Direction = "sent"
)

// Notification is a BGP NOTIFICATION as FRR 8.4 logged it. FRR logs one line per
// message, at level informational, with "debug bgp neighbor-events" (on in the
// tests' frr.conf) or "bgp log-neighbor-changes":
//
//	%NOTIFICATION: received from neighbor 10.255.7.1 6/10 (Cease/BFD Down) 0 bytes
//	%NOTIFICATION: received from neighbor 10.255.7.1 6/2 (Cease/Administrative Shutdown) "maintenance"
//	%NOTIFICATION(Hard Reset): received from neighbor 10.255.7.1 6/2 (Cease/Administrative Shutdown) 0 bytes
//	%NOTIFICATION(Hard Reset): sent to neighbor 10.255.7.1 6/4 (Cease/Administrative Reset) 0 bytes
//
// "(Hard Reset)" marks a Cease/Hard Reset (6/9) on a session with the RFC 8538
// N-bit negotiated. FRR then prints the encapsulated error instead of 6/9 (the
// first two data bytes taken as code and subcode, the rest as its data), or 6/9
// itself when the Hard Reset has no data; one data byte makes bgpd 8.4.4 abort.
// Without the N-bit a 6/9 is printed as it is ("6/9 (Cease/Hard Reset) 2 bytes 06
// 02"). FRR 8.4 logs some NOTIFICATIONs it sends twice ("clear bgp").
type Notification struct {
	Direction Direction
	// HardReset is FRR's "(Hard Reset)".
	HardReset bool
	// Code and Subcode are the message's own: 6/9 for every Hard Reset.
	Code, Subcode uint8
	// InnerCode and InnerSubcode are the error a Hard Reset encapsulates, as FRR
	// printed it; HasInner is false when FRR printed none.
	InnerCode, InnerSubcode uint8
	HasInner                bool
	// CodeName and SubcodeName are FRR's names of the error it printed (the
	// encapsulated one of a Hard Reset), e.g. "Cease" and "BFD Down"; SubcodeName
	// is empty for codes without subcodes ("Hold Timer Expired") and unknown codes
	// ("Unrecognized Error Code").
	CodeName, SubcodeName string
	// DataLen is the length of the printed error's data ("N bytes"), Data the bytes
	// FRR printed. For a Hard Reset FRR 8.4 prints DataLen bytes of the outer data,
	// the encapsulated code and subcode first; it prints the data of NOTIFICATIONs
	// it sends truncated.
	DataLen int
	Data    []byte
	// Communication is the shutdown communication (RFC 9003) of a Cease/
	// Administrative Shutdown or Reset, printed in quotes instead of the data.
	Communication string
}

// String is a compact form for test messages, e.g. "received 6/9 inner 6/2
// (Cease/Administrative Shutdown) hard-reset".
func (n Notification) String() string {
	s := fmt.Sprintf("%s %d/%d", n.Direction, n.Code, n.Subcode)
	if n.HasInner {
		s += fmt.Sprintf(" inner %d/%d", n.InnerCode, n.InnerSubcode)
	}
	s += " (" + n.CodeName
	if n.SubcodeName != "" {
		s += "/" + n.SubcodeName
	}
	s += ")"
	if n.HardReset {
		s += " hard-reset"
	}
	if n.Communication != "" {
		s += fmt.Sprintf(" %q", n.Communication)
	} else if len(n.Data) > 0 {
		s += fmt.Sprintf(" data % x", n.Data)
	}
	return s
}

// notificationRE matches the message of FRR's NOTIFICATION log line (after the
// message ID): hard reset, direction, neighbor, code, subcode, names, then either
// the data length and bytes or a quoted communication.
var notificationRE = regexp.MustCompile(`^%NOTIFICATION(\(Hard Reset\))?: (received from|sent to) neighbor (\S+) (\d+)/(\d+) \((.*?)\)(?: (\d+) bytes ?(.*?)| "(.*)")\s*$`)

// parseNotification parses the message part of a "%NOTIFICATION" log line and
// returns the neighbor as FRR printed it.
func parseNotification(msg string) (Notification, string, error) {
	m := notificationRE.FindStringSubmatch(msg)
	if m == nil {
		return Notification{}, "", fmt.Errorf("frr: NOTIFICATION line %q", msg)
	}
	n := Notification{HardReset: m[1] != "", Direction: Received}
	if m[2] == "sent to" {
		n.Direction = Sent
	}
	code, err1 := strconv.ParseUint(m[4], 10, 8)
	sub, err2 := strconv.ParseUint(m[5], 10, 8)
	if err1 != nil || err2 != nil {
		return Notification{}, "", fmt.Errorf("frr: NOTIFICATION line %q: code %s/%s", msg, m[4], m[5])
	}
	n.Code, n.Subcode = uint8(code), uint8(sub)
	if n.HardReset && !(n.Code == 6 && n.Subcode == 9) {
		n.InnerCode, n.InnerSubcode, n.HasInner = n.Code, n.Subcode, true
		n.Code, n.Subcode = 6, 9
	}
	n.CodeName, n.SubcodeName, _ = strings.Cut(m[6], "/")
	if m[7] != "" {
		n.DataLen, _ = strconv.Atoi(m[7])
		n.Data = parseHexBytes(m[8])
	} else {
		n.Communication = m[9]
	}
	return n, m[3], nil
}

// parseHexBytes parses "06 02 1a" up to the first field that is not a byte.
func parseHexBytes(s string) []byte {
	var res []byte
	for _, f := range strings.Fields(s) {
		b, err := hex.DecodeString(f)
		if err != nil || len(b) != 1 {
			break
		}
		res = append(res, b[0])
	}
	return res
}

// NeighborNotification is FRR's record of the NOTIFICATION behind a neighbor's
// last reset ("show bgp neighbors <addr> json": lastErrorCodeSubcode,
// lastNotificationReason, lastShutdownDescription). FRR 8.4 has it only while the
// last reset is "BGP Notification received" or "BGP Notification send"; an
// administrative reset or shutdown FRR sends itself ("clear bgp", "neighbor
// shutdown") shows as "User reset" or "Admin. shutdown" without it.
//
// FRR's lastNotificationHardReset is left out: FRR 8.4 sets it for a Hard Reset it
// took apart but clears it only when a later NOTIFICATION carries data, so it
// often still describes an earlier message. LogEvents has "(Hard Reset)" for each.
type NeighborNotification struct {
	// Direction is Received or Sent (from lastResetDueTo; "" if neither).
	Direction Direction
	// Code and Subcode are lastErrorCodeSubcode: the encapsulated error of a Hard
	// Reset FRR took apart, as in the log.
	Code, Subcode uint8
	// Reason is lastNotificationReason, FRR's names as in the log:
	// "Cease/BFD Down", "Hold Timer Expired".
	Reason string
	// Communication is lastShutdownDescription: the shutdown communication received.
	Communication string
}

// neighborNotification builds LastNotification from the JSON fields, nil when FRR
// has no lastErrorCodeSubcode.
func neighborNotification(codeSubcode, reason, communication, resetDueTo string) (*NeighborNotification, error) {
	if codeSubcode == "" {
		return nil, nil
	}
	b, err := hex.DecodeString(codeSubcode)
	if err != nil || len(b) != 2 {
		return nil, fmt.Errorf("frr: lastErrorCodeSubcode %q", codeSubcode)
	}
	n := &NeighborNotification{Code: b[0], Subcode: b[1], Reason: reason, Communication: communication}
	switch resetDueTo {
	case "BGP Notification received":
		n.Direction = Received
	case "BGP Notification send":
		n.Direction = Sent
	}
	return n, nil
}
