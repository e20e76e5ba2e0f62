package bird

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// BFD configures BIRD's BFD protocol "bfd1" (RFC 5880/5881, single hop) on the
// speakers' link: a session per speaker address, requested either by BIRD's BGP
// protocols ("bfd on", so a BFD Down takes the BGP session down) or, without BGP,
// as BFD-only neighbors.
type BFD struct {
	// MinTx and MinRx are BIRD's "min tx interval" (Desired Min TX while Up) and
	// "min rx interval" (Required Min RX). Default 300ms each.
	MinTx, MinRx time.Duration
	// IdleTx is the Desired Min TX while not Up ("idle tx interval"). Default 1s.
	IdleTx time.Duration
	// Multiplier is the detect multiplier. Default 3.
	Multiplier int
	// Passive waits for the speaker's first packet.
	Passive bool
	// BGP has every BGP protocol request its session ("bfd on"); otherwise the
	// speakers' addresses are configured as BFD-only neighbors.
	BGP bool
	// Graceful makes a BFD down a graceful restart of the BGP session ("bfd
	// graceful"): its paths are kept as stale, as for a speaker that restarts.
	Graceful bool
}

func (b BFD) withDefaults() BFD {
	if b.MinTx == 0 {
		b.MinTx = 300 * time.Millisecond
	}
	if b.MinRx == 0 {
		b.MinRx = 300 * time.Millisecond
	}
	if b.IdleTx == 0 {
		b.IdleTx = time.Second
	}
	if b.Multiplier == 0 {
		b.Multiplier = 3
	}
	return b
}

// BFDSession is one line of `birdc show bfd sessions`.
type BFDSession struct {
	Addr      netip.Addr
	Interface string
	State     string // "Down", "Init", "Up", "AdminDown"
	Since     string // as BIRD prints it
	// Interval is the negotiated transmit interval, Timeout the detection time.
	Interval, Timeout time.Duration
}

// BFDSessions returns the sessions of protocol bfd1.
func (r *Router) BFDSessions(ctx context.Context) ([]BFDSession, error) {
	out, err := r.Birdc(ctx, "show", "bfd", "sessions")
	if err != nil {
		return nil, err
	}
	return parseBFDSessions(out)
}

// BFDSession returns the session with addr, or ErrNotFound.
func (r *Router) BFDSession(ctx context.Context, addr netip.Addr) (BFDSession, error) {
	ss, err := r.BFDSessions(ctx)
	if err != nil {
		return BFDSession{}, err
	}
	for _, s := range ss {
		if s.Addr == addr {
			return s, nil
		}
	}
	return BFDSession{}, fmt.Errorf("bird: BFD session %s: %w", addr, ErrNotFound)
}

// parseBFDSessions parses
//
//	bfd1:
//	IP address                Interface  State      Since         Interval  Timeout
//	10.255.7.254              bfdx7h     Up         15:31:54.353    0.300    0.900
func parseBFDSessions(out string) ([]BFDSession, error) {
	var res []BFDSession
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			continue
		}
		s := BFDSession{Addr: a, Interface: f[1], State: f[2], Since: strings.Join(f[3:len(f)-2], " ")}
		for i, p := range []*time.Duration{&s.Interval, &s.Timeout} {
			v, err := strconv.ParseFloat(f[len(f)-2+i], 64)
			if err != nil {
				return nil, fmt.Errorf("bird: BFD session line %q: %w", line, err)
			}
			*p = time.Duration(v * float64(time.Second)).Round(time.Millisecond)
		}
		res = append(res, s)
	}
	return res, nil
}

// EventKind classifies a LogEvents entry.
type EventKind string

const (
	// EventBFDState: a BFD session changed state (Peer, From, To).
	EventBFDState EventKind = "bfd-state"
	// EventBFDDown: a BGP protocol was told its BFD session went down (Protocol).
	EventBFDDown EventKind = "bgp-bfd-down"
	// EventProtocolState: a protocol changed state (Protocol, To: "up", "stop",
	// "flush", "down", "start").
	EventProtocolState EventKind = "protocol-state"
	// EventRouteAdded and EventRouteRemoved: a route entered or left a channel
	// (Protocol, Channel, Prefix; Detail is BIRD's qualifier such as "[sole]").
	EventRouteAdded   EventKind = "route-added"
	EventRouteRemoved EventKind = "route-removed"
	// EventNotification: a BGP protocol received a NOTIFICATION or sent one
	// (Protocol, Notification; LogEvents sets Peer to the speaker's address).
	EventNotification EventKind = "notification"
)

// Event is one router-side event with BIRD's own timestamp (microseconds with
// Options.EventLog, else milliseconds; the machine's local time zone).
type Event struct {
	Time     time.Time
	Kind     EventKind
	Protocol string
	Channel  string
	Peer     netip.Addr
	From, To string
	Prefix   netip.Prefix
	Detail   string
	// Notification is set for EventNotification.
	Notification *Notification
	Line         string
}

// logTimeLayout is the log time format eventLogConfig sets ("%F %T.%6f"); BIRD's
// default has milliseconds ("%F %T.%3f").
const logTimeLayout = "2006-01-02 15:04:05.000000"

// LogEvents returns the BFD session state changes, BGP protocols' "BFD session
// down", protocol state changes, route changes and NOTIFICATIONs logged at or
// after since, in log order. All but the NOTIFICATIONs need Options.EventLog,
// which also gives the timestamps microseconds instead of milliseconds.
func (r *Router) LogEvents(since time.Time) ([]Event, error) {
	b, err := os.ReadFile(filepath.Join(r.dir, "bird.log"))
	if err != nil {
		return nil, err
	}
	evs := parseLog(string(b), since)
	for i, e := range evs {
		if e.Kind == EventNotification {
			evs[i].Peer, _ = r.protocolPeer(e.Protocol)
		}
	}
	return evs, nil
}

// parseLogTime parses the timestamp that starts a BIRD log line ("2006-01-02
// 15:04:05" with any fraction of a second) and returns the rest of the line.
func parseLogTime(line string) (time.Time, string, bool) {
	const secs = len("2006-01-02 15:04:05")
	if len(line) < secs+2 {
		return time.Time{}, "", false
	}
	end := secs
	if line[end] == '.' {
		end++
		for end < len(line) && line[end] >= '0' && line[end] <= '9' {
			end++
		}
	}
	// Go accepts a fraction after the seconds that the layout does not have.
	ts, err := time.ParseInLocation(logTimeLayout[:secs], line[:end], time.Local)
	if err != nil {
		return time.Time{}, "", false
	}
	return ts, line[end:], true
}

// parseLog parses BIRD log lines such as
//
//	2026-11-25 15:31:46.673031 <TRACE> bfd1: Session to 10.255.7.1 changed state from Init to Up
//	2026-11-25 15:31:51.160044 <TRACE> s1: BFD session down
//	2026-11-25 15:31:51.160044 <TRACE> s1: State changed to stop
//	2026-11-25 16:07:18.147757 <TRACE> s1.ipv4 > removed [sole] 198.51.100.10/32 0L 2G unicast
//	2026-11-27 08:27:36.154625 <RMT> s1: Received: Unknown error 6.9: 0602
func parseLog(log string, since time.Time) []Event {
	var res []Event
	for _, line := range strings.Split(log, "\n") {
		ts, rest, ok := parseLogTime(line)
		if !ok || ts.Before(since) {
			continue
		}
		rest = strings.TrimSpace(rest)
		var err error
		if strings.HasPrefix(rest, "<") {
			if i := strings.Index(rest, "> "); i > 0 {
				rest = rest[i+2:]
			}
		}
		who, msg, ok := strings.Cut(rest, ": ")
		if !ok {
			// Route traces have no colon after the channel: "s1.ipv4 > removed ...".
			f := strings.Fields(rest)
			if len(f) < 4 || (f[1] != ">" && f[1] != "<") || (f[2] != "added" && f[2] != "removed") {
				continue
			}
			ev := Event{Time: ts, Kind: EventRouteAdded, Line: line}
			if f[2] == "removed" {
				ev.Kind = EventRouteRemoved
			}
			ev.Protocol, ev.Channel, _ = strings.Cut(f[0], ".")
			i := 3
			if strings.HasPrefix(f[i], "[") {
				ev.Detail = f[i]
				i++
			}
			if i >= len(f) {
				continue
			}
			if ev.Prefix, err = netip.ParsePrefix(f[i]); err != nil {
				continue
			}
			res = append(res, ev)
			continue
		}
		ev := Event{Time: ts, Protocol: who, Line: line}
		switch {
		case strings.HasPrefix(msg, "Session to ") && strings.Contains(msg, " changed state from "):
			// Session to A changed state from X to Y
			f := strings.Fields(msg)
			if len(f) != 9 {
				continue
			}
			if ev.Peer, err = netip.ParseAddr(f[2]); err != nil {
				continue
			}
			ev.Kind, ev.From, ev.To = EventBFDState, f[6], f[8]
		case msg == "BFD session down":
			ev.Kind = EventBFDDown
		case strings.HasPrefix(msg, "State changed to "):
			ev.Kind, ev.To = EventProtocolState, strings.TrimPrefix(msg, "State changed to ")
		case strings.HasPrefix(msg, "Received: ") || strings.HasPrefix(msg, "Error: "):
			n, ok := parseLogNotification(msg)
			if !ok {
				continue
			}
			ev.Kind, ev.Notification = EventNotification, &n
		default:
			continue
		}
		res = append(res, ev)
	}
	return res
}
