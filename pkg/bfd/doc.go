// Package bfd is a single-hop BFD speaker (Bidirectional Forwarding Detection, RFC
// 5880 asynchronous mode over UDP as RFC 5881 describes), so that a router drops
// the paths of a replica that died within a detection time (300ms x 3) rather than
// a BGP hold time.
//
// What it implements: the control packet's mandatory section (version 1; packets
// with authentication are dropped, no Echo function, no Demand mode of its own, but
// a peer's Demand mode is honoured); the state machine of RFC 5880 section 6.8.6;
// random, unique, non-zero discriminators; demultiplexing by Your Discriminator, or
// by source and local address when it is zero. Every session takes the active role.
//
// Timers. The transmit interval is the larger of our Desired Min TX and the peer's
// Required Min RX, reduced by a random 0-25% per packet (10-25% with a multiplier
// of 1). While a session is not Up, Desired Min TX is at least one second. The
// detection time is the peer's multiplier times the larger of our Required Min RX
// and the peer's Desired Min TX. Every change of the advertised intervals (the
// session coming Up or going Down, AddPeer with new values) runs a Poll Sequence,
// and while Up a slower transmit or faster receive interval takes effect only once
// the peer has answered it (section 6.8.3). A session answers a Poll at once and
// sends at once when its state changes.
//
// Sockets (RFC 5881). Packets go to UDP port 3784 from a source port in
// 49152-65535 unique per session, with IP TTL or hop limit 255 and DSCP CS6;
// received packets with another TTL or hop limit are dropped. Sockets are bound to
// the session's local address and, if configured, its interface.
//
// Stopping. RemovePeer, and Run when its context ends, send AdminDown with the
// diagnostic "Administratively Down" (at once, then at most twice more at the
// rate of a session that is not Up, until the peer reports Down; Run waits at most
// a second), so the peer knows the stop was deliberate: RFC 5882 section 3.2 asks
// it not to treat that as a path failure. A process that dies without that
// goodbye is declared down by the peer after its detection time.
//
// Metrics: baremetal_ccm_bfd_session_up{peer}, baremetal_ccm_bfd_session_state_changes_total{peer,state},
// baremetal_ccm_bfd_received_packets_dropped_total{reason}.
//
// Usage:
//
//	s, err := bfd.New(bfd.Options{})
//	...
//	s.Subscribe(func(st bfd.SessionState) {
//		if st.PreviousState == bfd.StateUp && st.State == bfd.StateDown && st.RemoteState != bfd.StateAdminDown {
//			// the path to st.Peer failed: reset the BGP session
//		}
//	})
//	err = s.AddPeer(bfd.PeerConfig{Peer: peer, Local: local, DesiredMinTx: 300 * time.Millisecond,
//		RequiredMinRx: 300 * time.Millisecond, DetectMult: 3})
//	go s.Run(ctx) // until ctx ends; then AdminDown to every peer
package bfd
