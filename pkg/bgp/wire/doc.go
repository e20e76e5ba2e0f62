// Package wire owns the router-facing side of every BGP session of the embedded
// speaker (package bgp), so that nothing a router sends ever reaches GoBGP's parser.
//
// Every session is two TCP connections joined by a relay in this process:
//
//	router <--TCP (MD5, TTL, source address)--> wire.Peer <--loopback TCP--> GoBGP (passive)
//
// The relay reads the router's bytes with its own small, strict parser and passes
// GoBGP only what an export-only speaker needs, in canonical form:
//
//   - OPEN: validated (version, hold time, identifier, every optional parameter and
//     capability length) and re-encoded with the capabilities that change how
//     either side encodes messages (multiprotocol, route refresh, extended
//     message, graceful restart, 4-octet AS, ADD-PATH); the others are dropped.
//   - UPDATE: never passed. An End-of-RIB is re-encoded (graceful restart needs
//     it); every other UPDATE becomes a KEEPALIVE, which keeps GoBGP's hold timer
//     as the UPDATE would have. The speaker imports nothing, so no route is lost.
//   - KEEPALIVE, ROUTE-REFRESH: passed when their length and family are valid.
//   - NOTIFICATION: logged, and passed with its code and subcode (and a Hard
//     Reset's encapsulated code) only.
//
// A message that is malformed at this level (bad marker, length or type, an OPEN
// that does not parse, a message out of order) ends that session with the
// NOTIFICATION RFC 4271 prescribes; the relay's goroutines recover from a panic
// of their own the same way. Either way the process, GoBGP and every other
// session carry on: the worst a router can cause is the reset of its own session.
//
// GoBGP's output is passed unchanged, except that a Hard Reset (RFC 8538) is
// re-encoded with its encapsulated error code, and it is read message by message,
// so the relay knows what the router was sent: the paths (for the per-peer
// counts and for withdrawing them) and what both OPENs negotiated. That lets a
// Peer end a session the way routers need: Finish writes the withdrawals of every
// path the router holds, then a Cease (a Hard Reset where the router negotiated
// it), and waits (bounded) until the router closes its side, so a busy router has
// read everything before it sees the connection close.
//
// Lifetimes: a Peer lives from Start until Finish or its context ends; it dials
// (and accepts, through a Listener) one connection at a time and reconnects after
// ConnectRetry until it is finished. Its goroutines end with it.
package wire
