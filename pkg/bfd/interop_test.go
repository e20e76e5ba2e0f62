package bfd

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/frr"
)

// Interop tests against the BFD of the routers operators run: BIRD 2 and FRR 8.4
// (test/bird, test/frr), IPv4 and IPv6, in network namespaces. They need root and
// skip otherwise. Timings are measured and logged, never asserted tightly: only
// "the router noticed within 3s" where a bound is needed.

// router is what the interop tests need of a router under test.
type router struct {
	name        string
	local, peer netip.Addr // our address, the router's
	iface       string     // bind our sockets to it ("" for none)
	// state is the router's state of our session: "up", "down", "init", "admindown".
	state func(ctx context.Context) (string, error)
	// remoteDiag is the router's view of our diagnostic ("" if it does not show it).
	remoteDiag func(ctx context.Context) (string, error)
	// downAt returns the router's timestamps of our session going from up to down.
	downAt func(since time.Time) ([]time.Time, error)
	// stop stops the router's BFD without a goodbye; start starts it again.
	stop, start func(ctx context.Context) error
	log         func() string
	// vtysh runs FRR commands (FRR only).
	vtysh func(ctx context.Context, cmds ...string) (string, error)
	// bgpBFD is bgpd's BFD status of the BGP neighbor (FRR only).
	bgpBFD func(ctx context.Context) (string, error)
}

const (
	interopTx     = 300 * time.Millisecond
	interopMult   = 3
	interopWait   = 30 * time.Second
	failoverBound = 3 * time.Second // generous: these machines are loaded
)

func frrRouter(t *testing.T, ipv6 bool, rx time.Duration) *router {
	r := frr.Start(t, frr.Options{BFD: &frr.BFD{TransmitInterval: interopTx, ReceiveInterval: rx, DetectMultiplier: interopMult}})
	rt := &router{name: "frr", local: r.SpeakerV4(0), peer: r.RouterV4, log: r.Log, vtysh: r.Vtysh}
	if ipv6 {
		rt.local, rt.peer, rt.iface = r.SpeakerV6(0), r.RouterV6, r.HostInterface
	}
	rt.state = func(ctx context.Context) (string, error) {
		p, err := r.BFDPeer(ctx, rt.local)
		if p.Status == "shutdown" {
			return "admindown", err
		}
		return p.Status, err
	}
	rt.remoteDiag = func(ctx context.Context) (string, error) {
		p, err := r.BFDPeer(ctx, rt.local)
		return p.RemoteDiagnostic, err
	}
	rt.downAt = func(since time.Time) ([]time.Time, error) {
		evs, err := r.LogEvents(since)
		var res []time.Time
		for _, e := range evs {
			if e.Kind == frr.EventBFDState && e.Peer == rt.local && e.From == "up" && e.To == "down" {
				res = append(res, e.Time)
			}
		}
		return res, err
	}
	rt.bgpBFD = func(ctx context.Context) (string, error) {
		n, err := r.Neighbor(ctx, rt.local)
		if err != nil || n.BFD == nil {
			return "", err
		}
		return n.BFD.Status, nil
	}
	rt.stop = func(context.Context) error { return r.StopDaemon("bfdd", true) }
	rt.start = func(ctx context.Context) error { return r.StartDaemon(ctx, "bfdd") }
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("frr.log:\n%s", r.Log())
		}
	})
	return rt
}

func birdRouter(t *testing.T, ipv6 bool, rx time.Duration) *router {
	r := bird.Start(t, bird.Options{BFD: &bird.BFD{MinTx: interopTx, MinRx: rx, Multiplier: interopMult}, EventLog: true})
	rt := &router{name: "bird", local: r.SpeakerV4(0), peer: r.RouterV4, log: r.Log}
	if ipv6 {
		rt.local, rt.peer, rt.iface = r.SpeakerV6(0), r.RouterV6, r.HostInterface
	}
	rt.state = func(ctx context.Context) (string, error) {
		s, err := r.BFDSession(ctx, rt.local)
		return strings.ToLower(s.State), err
	}
	rt.remoteDiag = func(context.Context) (string, error) { return "", nil }
	rt.downAt = func(since time.Time) ([]time.Time, error) {
		evs, err := r.LogEvents(since)
		var res []time.Time
		for _, e := range evs {
			if e.Kind == bird.EventBFDState && e.Peer == rt.local && e.From == "Up" && e.To == "Down" {
				res = append(res, e.Time)
			}
		}
		return res, err
	}
	// Disabling the protocol drops BIRD's sessions without a word to the peer;
	// enabling it starts them afresh (new discriminators).
	birdc := func(ctx context.Context, args ...string) error {
		out, err := r.Birdc(ctx, args...)
		if err != nil {
			return fmt.Errorf("birdc %v: %w: %s", args, err, out)
		}
		return nil
	}
	rt.stop = func(ctx context.Context) error { return birdc(ctx, "disable", "bfd1") }
	rt.start = func(ctx context.Context) error { return birdc(ctx, "enable", "bfd1") }
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bird.log:\n%s", r.Log())
		}
	})
	return rt
}

// switchNet is the real network with a switch that silently drops everything we
// send, as if the process had died (kill -9).
type switchNet struct {
	Network
	mu       sync.Mutex
	dead     bool
	lastSend time.Time
}

func (n *switchNet) Dial(local netip.Addr, port uint16, ifname string, peer netip.Addr) (Sender, error) {
	s, err := n.Network.Dial(local, port, ifname, peer)
	if err != nil {
		return nil, err
	}
	return &switchSender{Sender: s, n: n}, nil
}

// die stops all sending and returns when the last packet was sent.
func (n *switchNet) die() (last time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dead = true
	return n.lastSend
}

type switchSender struct {
	Sender
	n *switchNet
}

func (s *switchSender) Send(b []byte) error {
	s.n.mu.Lock()
	dead := s.n.dead
	if !dead {
		s.n.lastSend = time.Now()
	}
	s.n.mu.Unlock()
	if dead {
		return nil
	}
	return s.Sender.Send(b)
}

// speaker is our side: a Server with one session and the events it reported.
type speaker struct {
	t      *testing.T
	s      *Server
	net    *switchNet
	cancel context.CancelFunc
	done   chan error
	rec    *recorder
}

func startSpeaker(t *testing.T, rt *router, cfg PeerConfig) *speaker {
	t.Helper()
	real, err := newUDPNetwork()
	if err != nil {
		t.Fatal(err)
	}
	sn := &switchNet{Network: real}
	s, err := New(Options{Network: sn})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Peer, cfg.Local, cfg.Interface = rt.peer, rt.local, rt.iface
	if err := s.AddPeer(cfg); err != nil {
		t.Fatal(err)
	}
	sp := &speaker{t: t, s: s, net: sn, done: make(chan error, 1), rec: &recorder{}}
	s.Subscribe(sp.rec.add)
	_, ctx := ktesting.NewTestContext(t)
	ctx, sp.cancel = context.WithCancel(ctx)
	go func() { sp.done <- s.Run(ctx) }()
	t.Cleanup(sp.stop)
	return sp
}

// stop ends Run (AdminDown unless the network is dead) and waits for it.
func (sp *speaker) stop() {
	sp.cancel()
	select {
	case err := <-sp.done:
		if err != nil {
			sp.t.Errorf("Run: %v", err)
		}
		sp.done <- nil // later calls return at once
	case <-time.After(10 * time.Second):
		sp.t.Error("Run did not return")
	}
}

func (sp *speaker) session() SessionState {
	if ss := sp.s.Sessions(); len(ss) == 1 {
		return ss[0]
	}
	return SessionState{}
}

func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(interopWait)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			lastErr = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s (last error: %v)", interopWait, what, lastErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func routerState(rt *router, want string) func() (bool, error) {
	return func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := rt.state(ctx)
		return st == want, err
	}
}

func bothUpWith(t *testing.T, sp *speaker, rt *router) {
	t.Helper()
	eventually(t, rt.name+" and we are Up", func() (bool, error) {
		if sp.session().State != StateUp {
			return false, nil
		}
		return routerState(rt, "up")()
	})
}

var routers = []struct {
	name  string
	start func(t *testing.T, ipv6 bool, rx time.Duration) *router
}{{"bird", birdRouter}, {"frr", frrRouter}}

var families = []struct {
	name string
	ipv6 bool
}{{"ipv4", false}, {"ipv6", true}}

// TestInteropNegotiation: the router requires a slower rate than we desire; our
// transmit interval follows its Required Min RX (the negotiation GoBGP skips).
func TestInteropNegotiation(t *testing.T) {
	for _, r := range routers {
		for _, fam := range families {
			t.Run(r.name+"/"+fam.name, func(t *testing.T) {
				rt := r.start(t, fam.ipv6, 500*time.Millisecond)
				sp := startSpeaker(t, rt, PeerConfig{DesiredMinTx: interopTx, RequiredMinRx: interopTx, DetectMult: interopMult})
				bothUpWith(t, sp, rt)
				eventually(t, "negotiated intervals", func() (bool, error) {
					st := sp.session()
					return st.TxInterval == 500*time.Millisecond && st.DetectionTime == interopMult*interopTx, nil
				})
				time.Sleep(5 * interopMult * interopTx)
				if ev := sp.rec.all(); len(ev) != 2 && !(len(ev) == 1 && ev[0].State == StateUp) {
					t.Errorf("state changes %+v", ev)
				}
				t.Logf("%s: tx %v, detection %v", rt.name, sp.session().TxInterval, sp.session().DetectionTime)
			})
		}
	}
}

// TestInteropLifecycle runs our side through what a CCM replica does, against each
// router and family: come Up; stop cleanly (AdminDown: the router goes Down and
// knows why); come back; die silently (the router declares us Down within its
// detection time, measured with its own timestamps); come back; the router's BFD
// dies silently (we report Down with "Control Detection Time Expired"); the router
// comes back (Up again, and stays Up).
func TestInteropLifecycle(t *testing.T) {
	cfg := PeerConfig{DesiredMinTx: interopTx, RequiredMinRx: interopTx, DetectMult: interopMult}
	for _, r := range routers {
		for _, fam := range families {
			t.Run(r.name+"/"+fam.name, func(t *testing.T) {
				rt := r.start(t, fam.ipv6, interopTx)
				ctx := context.Background()

				// Up, with the negotiated timers.
				sp := startSpeaker(t, rt, cfg)
				bothUpWith(t, sp, rt)
				eventually(t, "fast timers", func() (bool, error) {
					st := sp.session()
					return st.TxInterval == interopTx && st.DetectionTime == interopMult*interopTx, nil
				})
				if rt.bgpBFD != nil {
					// The BGP neighbor (not established: no speaker here) tracks the session.
					eventually(t, "bgpd sees BFD Up", func() (bool, error) {
						st, err := rt.bgpBFD(ctx)
						return st == "Up", err
					})
				}

				// Clean stop: AdminDown.
				t0 := time.Now()
				sp.stop()
				stopTook := time.Since(t0)
				if last := sp.rec.last(); last.State != StateAdminDown || last.Diag != DiagAdminDown {
					t.Errorf("our last event %+v", last)
				}
				eventually(t, rt.name+" Down after our AdminDown", routerState(rt, "down"))
				if d, err := rt.remoteDiag(ctx); err != nil || (rt.name == "frr" && d != "administratively down") {
					t.Errorf("%s's remote diagnostic %q %v", rt.name, d, err)
				}
				if rt.bgpBFD != nil {
					st, err := rt.bgpBFD(ctx)
					t.Logf("frr: bgpd's BFD status of the neighbor after our AdminDown: %q %v", st, err)
				}
				downs, err := rt.downAt(t0.Add(-time.Second))
				if err != nil || len(downs) == 0 {
					t.Errorf("no router-side timestamp of the AdminDown: %v", err)
				} else {
					t.Logf("%s: clean stop: Run returned after %v; router Down %v after the stop began", rt.name, stopTook.Round(time.Millisecond), downs[0].Sub(t0).Round(10*time.Microsecond))
				}

				// Back, then a silent death.
				sp = startSpeaker(t, rt, cfg)
				bothUpWith(t, sp, rt)
				time.Sleep(3 * interopTx) // steady state
				death := time.Now()
				lastSent := sp.net.die()
				eventually(t, rt.name+" declares us Down", routerState(rt, "down"))
				downs, err = rt.downAt(death.Add(-time.Second))
				if err != nil || len(downs) == 0 {
					t.Fatalf("no router-side timestamp of the detection: %v\n%s", err, rt.log())
				}
				detected := downs[len(downs)-1]
				t.Logf("%s: silent death: router declared Down %v after our last packet, %v after the death (detection time %v)",
					rt.name, detected.Sub(lastSent).Round(time.Millisecond), detected.Sub(death).Round(time.Millisecond), interopMult*interopTx)
				if d := detected.Sub(death); d > failoverBound || d < 0 {
					t.Errorf("router-side detection %v after the death, want under %v", d, failoverBound)
				}
				sp.stop()

				// Back, then the router's BFD dies silently.
				sp = startSpeaker(t, rt, cfg)
				bothUpWith(t, sp, rt)
				if err := rt.stop(ctx); err != nil {
					t.Fatal(err)
				}
				routerDeath := time.Now()
				eventually(t, "we declare the router Down", func() (bool, error) { return sp.session().State == StateDown, nil })
				last := sp.rec.last()
				if last.State != StateDown || last.PreviousState != StateUp || last.Diag != DiagControlDetectionExpired {
					t.Errorf("our event when the router died: %+v", last)
				}
				t.Logf("%s: router died: we declared Down %v later (detection time %v)", rt.name, last.Since.Sub(routerDeath).Round(time.Millisecond), last.DetectionTime)

				// The router comes back: Up again, and it stays Up.
				if err := rt.start(ctx); err != nil {
					t.Fatal(err)
				}
				bothUpWith(t, sp, rt)
				n := len(sp.rec.all())
				time.Sleep(5 * interopMult * interopTx)
				if ev := sp.rec.all(); len(ev) != n || sp.session().State != StateUp {
					t.Errorf("flapped after the router came back: %+v", ev[n-1:])
				}
				if ok, err := routerState(rt, "up")(); !ok {
					t.Errorf("router not Up: %v", err)
				}
			})
		}
	}
}

// TestInteropFRRPoll: FRR changes its timers while Up (Poll Sequence from the
// router); we follow without a state change.
func TestInteropFRRPoll(t *testing.T) {
	rt := frrRouter(t, false, interopTx)
	sp := startSpeaker(t, rt, PeerConfig{DesiredMinTx: interopTx, RequiredMinRx: interopTx, DetectMult: interopMult})
	bothUpWith(t, sp, rt)
	ctx := context.Background()
	vtysh := func(cmds ...string) {
		if _, err := rt.vtysh(ctx, cmds...); err != nil {
			t.Fatal(err)
		}
	}
	vtysh("configure terminal", "bfd", "profile speakers", "receive-interval 800", "transmit-interval 600")
	eventually(t, "slower timers", func() (bool, error) {
		st := sp.session()
		return st.TxInterval == 800*time.Millisecond && st.DetectionTime == interopMult*600*time.Millisecond, nil
	})
	vtysh("configure terminal", "bfd", "profile speakers", "receive-interval 300", "transmit-interval 300")
	eventually(t, "fast timers again", func() (bool, error) {
		st := sp.session()
		return st.TxInterval == interopTx && st.DetectionTime == interopMult*interopTx, nil
	})
	if ev := sp.rec.all(); len(ev) != 2 && !(len(ev) == 1 && ev[0].State == StateUp) {
		t.Errorf("state changes during the router's Poll Sequences: %+v", ev)
	}
}
