// Package bird runs BIRD 2 as a top-of-rack router for tests: a network namespace
// created by the test, a veth pair to the root namespace, and a BIRD process inside
// the namespace that accepts eBGP from one or more "speaker" addresses on the root
// side, with ADD-PATH receive, `next hop keep`, ECMP into the namespace's kernel
// table and short timers.
//
// Layout of one Router with index idx (allocated uniquely per Router):
//
//	root namespace                    namespace bccm-<random>
//	veth "bccm<idx>h"                 veth "eth0"
//	  10.255.<idx>.<1..n>/24            10.255.<idx>.254/24  (BIRD, router ID)
//	  fd00:255:<idx>::<1..n>/64         fd00:255:<idx>::fe/64
//
// Speaker i (0-based) owns 10.255.<idx>.<i+1> and fd00:255:<idx>::<i+1>; BIRD has
// one passive protocol per speaker and family of session: "s<i+1>" (IPv4 session,
// IPv4 and IPv6 channels) and "s<i+1>v6" (IPv6 session, both channels). NodeAddr
// returns further addresses on the same subnet, usable as third-party next hops.
//
// Nothing is sent outside the veth pair; cleanup (t.Cleanup) kills only the BIRD
// process this package started and deletes only the namespace and veth it created.
// BIRD dies with the test binary (Pdeathsig); what a killed test binary left
// behind is removed by the next Start (see stale.go). Every helper needs root:
// Start skips the test otherwise.
//
// Usage:
//
//	r := bird.Start(t, bird.Options{Speakers: []bird.Speaker{{ASN: 65000}, {ASN: 65000}}})
//	// speaker i peers from r.SpeakerV4(i) (or r.SpeakerV6(i)) to r.RouterV4
//	// (r.RouterV6), ASN r.ASN, port 179; BIRD is passive.
//	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
//	defer cancel()
//	err := bird.WaitFor(ctx, func(ctx context.Context) (bool, error) {
//		rs, err := r.RoutesFor(ctx, netip.MustParsePrefix("198.51.100.10/32"))
//		return len(rs) == 2, err // one path per speaker
//	})
//	routes, _ := r.KernelRoutes(ctx, false) // "ip -n <ns> route show proto bird"
//	evs, _ := r.LogEvents(since)            // NOTIFICATIONs received and sent (notify.go)
//	d, _ := r.ProtocolDetail(ctx, "s1")     // BGP state, last error, shutdown message
//	resume, _ := r.PauseBGP()               // BIRD stopped (SIGSTOP): the router is busy
package bird

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/childproc"
	"github.com/baremetal-ccm/baremetal-ccm/internal/procsignal"
	"github.com/baremetal-ccm/baremetal-ccm/internal/routertest"
)

// Options configure a Router. Zero values pick the defaults.
type Options struct {
	// RouterASN is BIRD's AS number. Default 65001.
	RouterASN uint32
	// Speakers are the BGP speakers that may peer with the router, one root-side
	// address pair each. Default: one speaker with ASN 65000.
	Speakers []Speaker
	// HoldTime of BIRD's sessions in seconds. Default 9 (keepalive a third).
	HoldTime int
	// SpeakerNetns, when set, is an existing network namespace (standing for the
	// speakers' host) that gets the speakers' end of the veth pair instead of the
	// root namespace.
	SpeakerNetns string
	// SpeakerNetnsEach, when set, has one existing namespace per speaker (standing
	// for one host each): speaker i gets a veth pair of its own into SpeakerNetnsEach[i],
	// joined on BIRD's side by a bridge that holds the router's addresses. Exclusive
	// with SpeakerNetns.
	SpeakerNetnsEach []string
	// GracefulRestart enables graceful restart on BIRD's side.
	GracefulRestart bool
	// Accept, when set, are the only prefixes (with every more-specific) accepted
	// from the speakers (import filter); default: everything.
	Accept []netip.Prefix
	// BFD, if set, runs BIRD's BFD protocol "bfd1" on the speakers' link (see bfd.go).
	BFD *BFD
	// EventLog logs protocol states, events and route changes with microsecond
	// timestamps, for LogEvents. It costs BIRD time with many routes.
	EventLog bool
	// RouteTimes has BIRD keep, and show, when each route last changed to the
	// millisecond, for RouteSince.
	RouteTimes bool
}

// Speaker is one speaker allowed to peer with the router.
type Speaker struct {
	// ASN of the speaker. Default 65000.
	ASN uint32
	// Password, if set, is required as TCP MD5 signature on this speaker's sessions.
	Password string
}

// Router is a running BIRD in its own namespace.
type Router struct {
	// Namespace is the network namespace BIRD runs in.
	Namespace string
	// HostInterface is the root-namespace end of the veth pair.
	HostInterface string
	// Index is the subnet index: 10.255.<Index>.0/24, fd00:255:<Index>::/64.
	Index int
	// ASN is BIRD's AS number.
	ASN uint32
	// RouterV4 and RouterV6 are BIRD's addresses (the speakers' peer addresses).
	RouterV4, RouterV6 netip.Addr

	opts    Options
	dir     string
	ctl     string
	cmd     *exec.Cmd
	proc    *procsignal.Process // BIRD, for PauseBGP
	done    chan struct{}
	stopped bool
}

// ErrNotFound is returned by lookups for a prefix or protocol BIRD does not have.
var ErrNotFound = errors.New("not found")

const (
	firstIndex = 100
	lastIndex  = 249
	birdIfName = "eth0"
)

// Start creates the namespace and veth pair, starts BIRD and registers cleanup with
// t. It skips t when not running as root, and fails it when bird or ip is missing.
func Start(t testing.TB, opts Options) *Router {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and veth pairs")
	}
	for _, bin := range []string{"bird", "birdc", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("bird: %s not on PATH (Debian: apt-get install bird2 iproute2; see hack/deps.sh): %v", bin, err)
		}
	}
	if opts.RouterASN == 0 {
		opts.RouterASN = 65001
	}
	if len(opts.Speakers) == 0 {
		opts.Speakers = []Speaker{{}}
	}
	for i := range opts.Speakers {
		if opts.Speakers[i].ASN == 0 {
			opts.Speakers[i].ASN = 65000
		}
	}
	if opts.HoldTime == 0 {
		opts.HoldTime = 9
	}
	if len(opts.Speakers) > 50 {
		t.Fatalf("bird: at most 50 speakers, got %d", len(opts.Speakers))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := start(ctx, opts)
	if r != nil {
		t.Cleanup(r.cleanup)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func start(ctx context.Context, opts Options) (*Router, error) {
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, err
	}
	sweepStale(ctx)
	r := &Router{Namespace: "bccm-" + hex.EncodeToString(suffix[:]), ASN: opts.RouterASN, opts: opts, done: make(chan struct{})}
	if _, err := run(ctx, "ip", "netns", "add", r.Namespace); err != nil {
		return nil, fmt.Errorf("bird: create namespace: %w", err)
	}
	// The veth name is global in the root namespace: creating it is the atomic
	// allocation of the subnet index among concurrent harness instances.
	start := firstIndex + int(suffix[0])%(lastIndex-firstIndex+1)
	for n := 0; n <= lastIndex-firstIndex; n++ {
		idx := firstIndex + (start-firstIndex+n)%(lastIndex-firstIndex+1)
		name := fmt.Sprintf("bccm%dh", idx)
		if subnetInUse(idx) {
			continue
		}
		if _, err := run(ctx, "ip", "link", "add", name, "type", "veth", "peer", "name", birdIfName, "netns", r.Namespace); err == nil {
			r.Index, r.HostInterface = idx, name
			break
		}
	}
	if r.HostInterface == "" {
		return r, fmt.Errorf("bird: no free subnet index in %d..%d", firstIndex, lastIndex)
	}
	r.RouterV4 = netip.AddrFrom4([4]byte{10, 255, byte(r.Index), 254})
	r.RouterV6 = netip.MustParseAddr(fmt.Sprintf("fd00:255:%d::fe", r.Index))
	cmds := [][]string{
		{"ip", "-n", r.Namespace, "link", "set", "lo", "up"},
		{"ip", "-n", r.Namespace, "addr", "add", r.RouterV4.String() + "/24", "dev", birdIfName},
		{"ip", "-n", r.Namespace, "addr", "add", r.RouterV6.String() + "/64", "dev", birdIfName, "nodad"},
		{"ip", "-n", r.Namespace, "link", "set", birdIfName, "up"},
	}
	if len(opts.SpeakerNetnsEach) > 0 {
		if len(opts.SpeakerNetnsEach) != len(opts.Speakers) || opts.SpeakerNetns != "" {
			return r, fmt.Errorf("bird: SpeakerNetnsEach needs one namespace per speaker (%d), and no SpeakerNetns", len(opts.Speakers))
		}
		cmds = [][]string{
			{"ip", "-n", r.Namespace, "link", "set", "lo", "up"},
			{"ip", "-n", r.Namespace, "link", "add", "br0", "type", "bridge"},
			{"ip", "-n", r.Namespace, "link", "set", birdIfName, "master", "br0"},
			{"ip", "-n", r.Namespace, "addr", "add", r.RouterV4.String() + "/24", "dev", "br0"},
			{"ip", "-n", r.Namespace, "addr", "add", r.RouterV6.String() + "/64", "dev", "br0", "nodad"},
			{"ip", "-n", r.Namespace, "link", "set", birdIfName, "up"},
			{"ip", "-n", r.Namespace, "link", "set", "br0", "up"},
			{"ip", "link", "set", r.HostInterface, "up"},
		}
		for i, ns := range opts.SpeakerNetnsEach {
			port, inside := fmt.Sprintf("p%d", i), fmt.Sprintf("rtr%d", r.Index)
			cmds = append(cmds,
				[]string{"ip", "-n", r.Namespace, "link", "add", port, "type", "veth", "peer", "name", inside, "netns", ns},
				[]string{"ip", "-n", r.Namespace, "link", "set", port, "master", "br0"},
				[]string{"ip", "-n", r.Namespace, "link", "set", port, "up"},
				[]string{"ip", "-n", ns, "addr", "add", r.SpeakerV4(i).String() + "/24", "dev", inside},
				[]string{"ip", "-n", ns, "addr", "add", r.SpeakerV6(i).String() + "/64", "dev", inside, "nodad"},
				[]string{"ip", "-n", ns, "link", "set", inside, "up"})
		}
	}
	hostIP := []string{"ip"}
	if opts.SpeakerNetns != "" {
		cmds = append(cmds, []string{"ip", "link", "set", r.HostInterface, "netns", opts.SpeakerNetns})
		hostIP = []string{"ip", "-n", opts.SpeakerNetns}
	}
	if len(opts.SpeakerNetnsEach) == 0 {
		for i := range opts.Speakers {
			cmds = append(cmds,
				append(append([]string{}, hostIP...), "addr", "add", r.SpeakerV4(i).String()+"/24", "dev", r.HostInterface),
				append(append([]string{}, hostIP...), "addr", "add", r.SpeakerV6(i).String()+"/64", "dev", r.HostInterface, "nodad"))
		}
		cmds = append(cmds, append(append([]string{}, hostIP...), "link", "set", r.HostInterface, "up"))
	}
	for _, c := range cmds {
		if _, err := run(ctx, c[0], c[1:]...); err != nil {
			return r, fmt.Errorf("bird: network setup: %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "bccm-bird-") // short: the control socket path must fit sun_path
	if err != nil {
		return r, err
	}
	r.dir = dir
	if err := r.record(); err != nil {
		return r, fmt.Errorf("bird: recording ownership: %w", err)
	}
	r.ctl = filepath.Join(dir, "bird.ctl")
	if err := os.WriteFile(filepath.Join(dir, "bird.conf"), []byte(r.config()), 0o600); err != nil {
		return r, err
	}
	logf, err := os.Create(filepath.Join(dir, "bird.out"))
	if err != nil {
		return r, err
	}
	defer logf.Close()
	r.cmd = exec.Command("ip", "netns", "exec", r.Namespace, "bird", "-f", "-c", filepath.Join(dir, "bird.conf"), "-s", r.ctl)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := childproc.Start(r.cmd); err != nil {
		return r, fmt.Errorf("bird: start: %w", err)
	}
	r.proc = procsignal.New(r.cmd.Process, "bird", r.done)
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := r.Birdc(ctx, "show", "status"); err == nil {
			return r, nil
		}
		select {
		case <-r.done:
			out, _ := os.ReadFile(filepath.Join(dir, "bird.out"))
			return r, fmt.Errorf("bird: exited at start (%s): %s", r.cmd.ProcessState, out)
		case <-ctx.Done():
			return r, fmt.Errorf("bird: control socket not ready: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// subnetInUse reports whether an address of the index's subnets is already
// configured in the root namespace (a foreign lab on the same numbers).
func subnetInUse(idx int) bool {
	p4 := netip.MustParsePrefix(fmt.Sprintf("10.255.%d.0/24", idx))
	p6 := netip.MustParsePrefix(fmt.Sprintf("fd00:255:%d::/64", idx))
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && (p4.Contains(ip.Unmap()) || p6.Contains(ip)) {
				return true
			}
		}
	}
	return false
}

// SpeakerV4 is the root-side IPv4 address of speaker i (0-based).
func (r *Router) SpeakerV4(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 255, byte(r.Index), byte(i + 1)})
}

// SpeakerV6 is the root-side IPv6 address of speaker i (0-based).
func (r *Router) SpeakerV6(i int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("fd00:255:%d::%x", r.Index, i+1))
}

// NodeAddr returns the i-th (0-based, < 100) "node" address of a family on the
// router's subnet: a valid third-party next hop BIRD accepts, configured on no
// interface.
func (r *Router) NodeAddr(i int, ipv6 bool) netip.Addr {
	if ipv6 {
		return netip.MustParseAddr(fmt.Sprintf("fd00:255:%d::%x", r.Index, 0x100+i))
	}
	return netip.AddrFrom4([4]byte{10, 255, byte(r.Index), byte(100 + i)})
}

// Protocol returns BIRD's protocol name for speaker i (0-based) and session family.
func (r *Router) Protocol(i int, ipv6Session bool) string {
	if ipv6Session {
		return fmt.Sprintf("s%dv6", i+1)
	}
	return fmt.Sprintf("s%d", i+1)
}

// SetPassword changes the TCP-MD5 password BIRD expects from speaker i ("" none),
// rewrites bird.conf and has BIRD reload it; the sessions with that speaker restart.
func (r *Router) SetPassword(ctx context.Context, i int, password string) error {
	r.opts.Speakers[i].Password = password
	if err := os.WriteFile(filepath.Join(r.dir, "bird.conf"), []byte(r.config()), 0o600); err != nil {
		return err
	}
	out, err := r.Birdc(ctx, "configure")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "Reconfigur") {
		return fmt.Errorf("birdc configure: %s", out)
	}
	return nil
}

// Dir is the directory holding bird.conf, bird.log and bird.out (kept until cleanup).
func (r *Router) Dir() string { return r.dir }

// Birdc runs one birdc command against this router and returns its output (also
// on error: birdc exits 1 for answers such as "Network not found").
func (r *Router) Birdc(ctx context.Context, args ...string) (string, error) {
	return run(ctx, "birdc", append([]string{"-s", r.ctl}, args...)...)
}

// KernelRoutes returns `ip -n <ns> [-6] route show proto bird` as printed.
func (r *Router) KernelRoutes(ctx context.Context, ipv6 bool) (string, error) {
	args := []string{"-n", r.Namespace}
	if ipv6 {
		args = append(args, "-6")
	}
	return run(ctx, "ip", append(args, "route", "show", "proto", "bird")...)
}

// Stop kills BIRD (SIGTERM, then SIGKILL after 5s) and waits for it; a BIRD paused
// by PauseBGP is resumed first. The namespace stays until cleanup. Safe to call
// twice.
func (r *Router) Stop() {
	if r.cmd == nil || r.cmd.Process == nil || r.stopped {
		return
	}
	r.stopped = true
	sig := syscall.SIGTERM
	if err := r.ResumeBGP(); err != nil {
		sig = syscall.SIGKILL // a BIRD that cannot continue cannot handle SIGTERM either
	}
	_ = r.cmd.Process.Signal(sig)
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

func (r *Router) cleanup() {
	r.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r.HostInterface != "" {
		if ns := r.opts.SpeakerNetns; ns != "" {
			_, _ = run(ctx, "ip", "-n", ns, "link", "del", r.HostInterface)
		} else {
			_, _ = run(ctx, "ip", "link", "del", r.HostInterface)
		}
	}
	_, _ = run(ctx, "ip", "netns", "del", r.Namespace)
	if r.dir != "" && os.Getenv("BIRD_KEEP") == "" {
		_ = os.RemoveAll(r.dir)
	}
	r.unrecord()
}

// Log returns BIRD's log file contents (for test failure messages).
func (r *Router) Log() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "bird.log"))
	return string(b)
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Route is one path in BIRD's table (ECMP/ADD-PATH paths are separate Routes).
type Route struct {
	Prefix netip.Prefix
	// Protocol is the BIRD protocol that learned it (Protocol(i, v6)).
	Protocol string
	// Primary marks BIRD's best path ("*").
	Primary bool
	// NextHops are the "via" gateways (BIRD's resolved next hops).
	NextHops []netip.Addr
	// BGPNextHop is the BGP.next_hop attribute as received (may hold two addresses
	// for IPv6: global and link-local).
	BGPNextHop []netip.Addr
	ASPath     string
	// Communities as "a:b", LargeCommunities as "a:b:c".
	Communities, LargeCommunities []string
	LocalPref                     *uint32
}

// Routes parses `birdc show route all` (both tables).
func (r *Router) Routes(ctx context.Context) ([]Route, error) {
	out, err := r.Birdc(ctx, "show", "route", "all")
	if err != nil {
		return nil, err
	}
	return parseRoutes(out)
}

// RoutesFor returns the paths BIRD holds for exactly prefix (nil if none).
func (r *Router) RoutesFor(ctx context.Context, prefix netip.Prefix) ([]Route, error) {
	out, err := r.Birdc(ctx, "show", "route", prefix.String(), "all")
	if err != nil {
		if strings.Contains(out, "Network not found") {
			return nil, nil
		}
		return nil, err
	}
	rs, err := parseRoutes(out)
	if err != nil {
		return nil, err
	}
	var res []Route
	for _, rt := range rs {
		if rt.Prefix == prefix {
			res = append(res, rt)
		}
	}
	return res, nil
}

// CountRoutes returns how many prefixes and paths BIRD's tables hold from BGP
// (cheap, for benchmarks with many routes).
func (r *Router) CountRoutes(ctx context.Context) (int, error) {
	// "show route count" prints "N of M routes for K networks in table master4".
	total := 0
	for _, tbl := range []string{"master4", "master6"} {
		out, err := r.Birdc(ctx, "show", "route", "table", tbl, "count")
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 4 && f[1] == "of" && f[3] == "routes" {
				n, err := strconv.Atoi(f[0])
				if err != nil {
					return 0, fmt.Errorf("bird: count %q: %w", line, err)
				}
				total += n
			}
		}
	}
	return total, nil
}

func parseRoutes(out string) ([]Route, error) {
	var res []Route
	var cur *Route
	var lastPrefix netip.Prefix
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	flush := func() {
		if cur != nil {
			res = append(res, *cur)
			cur = nil
		}
	}
	for sc.Scan() {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		switch {
		case trim == "" || strings.HasPrefix(line, "BIRD ") || strings.HasPrefix(line, "Table "):
			continue
		case !strings.HasPrefix(line, "\t") && strings.Contains(line, "[") && (strings.Contains(line, "unicast") || strings.Contains(line, "unreachable") || strings.Contains(line, "blackhole")):
			// "<prefix>   unicast [proto time] * (pref) [ASx]" or a continuation
			// "                     unicast [proto ...]" for another path.
			flush()
			f := strings.Fields(line)
			if !strings.HasPrefix(line, " ") {
				p, err := netip.ParsePrefix(f[0])
				if err != nil {
					return nil, fmt.Errorf("bird: route line %q: %w", line, err)
				}
				lastPrefix = p
				f = f[1:]
			}
			cur = &Route{Prefix: lastPrefix}
			for j, w := range f {
				if strings.HasPrefix(w, "[") && j > 0 && cur.Protocol == "" {
					cur.Protocol = strings.TrimPrefix(w, "[")
				}
				if w == "*" {
					cur.Primary = true
				}
			}
		case cur == nil:
			continue
		case strings.HasPrefix(trim, "via "):
			f := strings.Fields(trim)
			if a, err := netip.ParseAddr(f[1]); err == nil {
				cur.NextHops = append(cur.NextHops, a)
			}
		case strings.HasPrefix(trim, "BGP.next_hop:"):
			for _, w := range strings.Fields(strings.TrimPrefix(trim, "BGP.next_hop:")) {
				if a, err := netip.ParseAddr(w); err == nil {
					cur.BGPNextHop = append(cur.BGPNextHop, a)
				}
			}
		case strings.HasPrefix(trim, "BGP.as_path:"):
			cur.ASPath = strings.TrimSpace(strings.TrimPrefix(trim, "BGP.as_path:"))
		case strings.HasPrefix(trim, "BGP.local_pref:"):
			if n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(trim, "BGP.local_pref:")), 10, 32); err == nil {
				v := uint32(n)
				cur.LocalPref = &v
			}
		case strings.HasPrefix(trim, "BGP.community:"):
			cur.Communities = parseTuples(strings.TrimPrefix(trim, "BGP.community:"))
		case strings.HasPrefix(trim, "BGP.large_community:"):
			cur.LargeCommunities = parseTuples(strings.TrimPrefix(trim, "BGP.large_community:"))
		}
	}
	flush()
	return res, sc.Err()
}

// parseTuples turns "(65000,1) (65000,2)" or "(1, 2, 3)" into "65000:1", "1:2:3".
func parseTuples(s string) []string {
	var res []string
	for _, part := range strings.Split(s, ")") {
		part = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(part), "("))
		if part == "" {
			continue
		}
		fields := strings.Split(part, ",")
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		res = append(res, strings.Join(fields, ":"))
	}
	return res
}

// ProtocolStatus is one line of `birdc show protocols`.
type ProtocolStatus struct {
	Name, Proto, State, Info string
}

// Established reports whether a BGP protocol's session is up.
func (p ProtocolStatus) Established() bool {
	return p.State == "up" && strings.HasPrefix(p.Info, "Established")
}

// Protocols returns BIRD's protocols and their states.
func (r *Router) Protocols(ctx context.Context) ([]ProtocolStatus, error) {
	out, err := r.Birdc(ctx, "show", "protocols")
	if err != nil {
		return nil, err
	}
	return parseProtocols(out), nil
}

// parseProtocols parses the protocol lines of `birdc show protocols [all]`.
func parseProtocols(out string) []ProtocolStatus {
	var res []ProtocolStatus
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		// Name Proto Table State Since Info
		if len(f) < 5 || f[0] == "Name" || f[0] == "BIRD" {
			continue
		}
		ps := ProtocolStatus{Name: f[0], Proto: f[1], State: f[3]}
		if len(f) > 5 {
			// "Since" may be one or two fields (time, or date and time).
			i := 5
			if len(f) > 6 && strings.Count(f[5], ":") == 2 {
				i = 6
			}
			if strings.Count(f[4], "-") == 2 && strings.Count(f[5], ":") >= 1 {
				i = 6
			}
			if i < len(f) {
				ps.Info = strings.Join(f[i:], " ")
			}
		}
		res = append(res, ps)
	}
	return res
}

// ProtocolState returns the status of one protocol, or ErrNotFound.
func (r *Router) ProtocolState(ctx context.Context, name string) (ProtocolStatus, error) {
	ps, err := r.Protocols(ctx)
	if err != nil {
		return ProtocolStatus{}, err
	}
	for _, p := range ps {
		if p.Name == name {
			return p, nil
		}
	}
	return ProtocolStatus{}, fmt.Errorf("bird: protocol %s: %w", name, ErrNotFound)
}

// WaitFor polls cond every 50ms until it returns true or ctx ends (see
// routertest.WaitFor). It is for convergence, not for timing assertions: give ctx
// a generous deadline.
func WaitFor(ctx context.Context, cond func(ctx context.Context) (bool, error)) error {
	return routertest.WaitFor(ctx, cond)
}
