// Package frr runs FRR 8.4 (zebra, bgpd, bfdd; what SONiC and Cumulus switches
// run) as a top-of-rack router for tests: a network namespace created by the test,
// a veth pair to the root namespace (or into a given speaker namespace), and FRR
// daemons inside the namespace, configured from one template (frr.conf.tmpl) the
// way an operator would: passive eBGP neighbors for the speaker addresses with
// `bgp ebgp-requires-policy` on and explicit route-maps (accept the configured
// prefixes in, nothing out), IPv4 and IPv6 unicast on every session, TCP-MD5 per
// speaker, graceful-restart helper (FRR's default) or not, the RFC 8538
// notification (N-bit) and hard administrative reset, and optionally BFD for every
// neighbor with a profile.
//
// Layout of one Router with index idx (allocated uniquely per Router, 1..99, apart
// from test/bird's 100..249):
//
//	root namespace                    namespace bccm-frr-<random>
//	veth "bfrr<idx>h"                 veth "eth0"
//	  10.255.<idx>.<1..n>/24            10.255.<idx>.254/24  (FRR, router ID)
//	  fd00:255:<idx>::<1..n>/64         fd00:255:<idx>::fe/64
//
// Speaker i (0-based) owns 10.255.<idx>.<i+1> and fd00:255:<idx>::<i+1>; FRR has
// one neighbor per speaker address (peer-groups SPEAKERS-V4 and SPEAKERS-V6).
//
// Each daemon runs as user frr with the capabilities it needs (so Pdeathsig, set
// after the credential change, survives and the daemon dies with the test
// binary), with its config, pid file and vty socket in the Router's own
// directory; Vtysh talks to this instance only. Cleanup (t.Cleanup) kills only the
// daemons this package started and deletes only the namespace, veth and
// directories it created; what a killed test binary left behind is removed by the
// next Start (see stale.go). Every helper needs root: Start skips the test
// otherwise.
//
// Usage:
//
//	r := frr.Start(t, frr.Options{Speakers: []frr.Speaker{{ASN: 65000, Password: "pw"}},
//		BFD: &frr.BFD{TransmitInterval: 300 * time.Millisecond, ReceiveInterval: 300 * time.Millisecond, DetectMultiplier: 3}})
//	// speaker i peers from r.SpeakerV4(i) to r.RouterV4 (or V6), ASN r.ASN; FRR is passive.
//	err := frr.WaitFor(ctx, func(ctx context.Context) (bool, error) {
//		rs, err := r.RoutesFor(ctx, netip.MustParsePrefix("198.51.100.10/32"))
//		return len(rs) == 1, err
//	})
//	evs, _ := r.LogEvents(since) // router-side timestamps: BFD down, BGP down, NOTIFICATIONs, route deleted
//	resume, _ := r.PauseBGP()    // bgpd stopped (SIGSTOP): the router is busy
package frr

import (
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
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/childproc"
	"github.com/baremetal-ccm/baremetal-ccm/internal/procsignal"
	"github.com/baremetal-ccm/baremetal-ccm/internal/routertest"
)

// Options configure a Router. Zero values pick the defaults.
type Options struct {
	// RouterASN is FRR's AS number. Default 65001.
	RouterASN uint32
	// Speakers are the BGP speakers that may peer with the router, one root-side
	// address pair each. Default: one speaker with ASN 65000.
	Speakers []Speaker
	// HoldTime of FRR's sessions in seconds. Default 9 (keepalive a third).
	HoldTime int
	// SpeakerNetns, when set, is an existing network namespace (standing for the
	// speakers' host) that gets the speakers' end of the veth pair instead of the
	// root namespace.
	SpeakerNetns string
	// Accept are the prefixes (with every more-specific) accepted from speakers: the
	// load-balancer pools and pod CIDRs. Default 0.0.0.0/0 and ::/0 (everything).
	Accept []netip.Prefix
	// GracefulRestart is FRR's graceful-restart mode. Default GRHelper.
	GracefulRestart GRMode
	// StalePathTime (seconds) bounds how long a restarting speaker's paths are kept
	// as stale. Default FRR's (360).
	StalePathTime int
	// NoGRNotification turns off graceful restart for NOTIFICATIONs (RFC 8538, the
	// N-bit; FRR 8.4's default is on).
	NoGRNotification bool
	// NoHardAdminReset turns off sending Hard Reset for administrative resets
	// (RFC 8538; FRR 8.4's default is on).
	NoHardAdminReset bool
	// BFD, if set, enables BFD for every neighbor (profile "speakers").
	BFD *BFD
}

// GRMode is FRR's graceful-restart mode for all neighbors.
type GRMode string

const (
	// GRHelper keeps a restarting speaker's paths as stale (FRR's default; nothing
	// in the config).
	GRHelper GRMode = ""
	// GRRestart is "bgp graceful-restart": helper, and FRR itself restarts
	// gracefully.
	GRRestart GRMode = "restart"
	// GRDisabled is "bgp graceful-restart-disable": neither.
	GRDisabled GRMode = "disable"
)

// BFD is FRR's BFD profile for the speakers.
type BFD struct {
	// TransmitInterval and ReceiveInterval (FRR's Desired Min TX and Required Min
	// RX). Default 300ms each; whole milliseconds, 10ms-60s.
	TransmitInterval, ReceiveInterval time.Duration
	// DetectMultiplier default 3.
	DetectMultiplier int
	// Passive waits for the speaker's first packet.
	Passive bool
}

// Speaker is one speaker allowed to peer with the router.
type Speaker struct {
	// ASN of the speaker. Default 65000.
	ASN uint32
	// Password, if set, is required as TCP MD5 signature on this speaker's
	// sessions. No whitespace.
	Password string
}

// Router is a running FRR in its own namespace.
type Router struct {
	// Namespace is the network namespace FRR runs in.
	Namespace string
	// HostInterface is the speakers' end of the veth pair.
	HostInterface string
	// Index is the subnet index: 10.255.<Index>.0/24, fd00:255:<Index>::/64.
	Index int
	// ASN is FRR's AS number.
	ASN uint32
	// RouterV4 and RouterV6 are FRR's addresses (the speakers' peer addresses).
	RouterV4, RouterV6 netip.Addr

	opts Options
	dir  string
	cred *syscall.Credential

	mu      sync.Mutex
	daemons map[string]*daemon
}

type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	proc *procsignal.Process // start time for the stale record; pauseDaemon
}

// ErrNotFound is returned by lookups for a neighbor or BFD peer FRR does not have.
var ErrNotFound = errors.New("not found")

const (
	firstIndex = 1
	lastIndex  = 99
	frrIfName  = "eth0"
	frrLibDir  = "/usr/lib/frr"
)

// daemonNames in start order: zebra first, the others connect to it.
var daemonNames = []string{"zebra", "bfdd", "bgpd"}

// Start creates the namespace and veth pair, starts zebra, bfdd and bgpd, loads the
// configuration and registers cleanup with t. It skips t when not running as
// root, and fails it when FRR, ip or nsenter is missing.
func Start(t testing.TB, opts Options) *Router {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and veth pairs")
	}
	for _, bin := range []string{filepath.Join(frrLibDir, "zebra"), filepath.Join(frrLibDir, "bgpd"), filepath.Join(frrLibDir, "bfdd"), "vtysh", "ip", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("frr: %s not found (Debian: apt-get install frr iproute2 util-linux; see hack/deps.sh): %v", bin, err)
		}
	}
	if err := setDefaults(&opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := start(ctx, opts)
	if r != nil {
		t.Cleanup(r.cleanup)
	}
	if err != nil {
		if r != nil {
			err = fmt.Errorf("%w\nfrr.log:\n%s", err, r.Log())
		}
		t.Fatal(err)
	}
	return r
}

func setDefaults(opts *Options) error {
	if opts.RouterASN == 0 {
		opts.RouterASN = 65001
	}
	if len(opts.Speakers) == 0 {
		opts.Speakers = []Speaker{{}}
	}
	if len(opts.Speakers) > 50 {
		return fmt.Errorf("frr: at most 50 speakers, got %d", len(opts.Speakers))
	}
	for i := range opts.Speakers {
		if opts.Speakers[i].ASN == 0 {
			opts.Speakers[i].ASN = 65000
		}
		if strings.ContainsAny(opts.Speakers[i].Password, " \t\n\"") {
			return fmt.Errorf("frr: speaker %d: password with whitespace or quotes", i)
		}
	}
	if opts.HoldTime == 0 {
		opts.HoldTime = 9
	}
	if len(opts.Accept) == 0 {
		opts.Accept = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	}
	switch opts.GracefulRestart {
	case GRHelper, GRRestart, GRDisabled:
	default:
		return fmt.Errorf("frr: unknown graceful-restart mode %q", opts.GracefulRestart)
	}
	if b := opts.BFD; b != nil {
		if b.TransmitInterval == 0 {
			b.TransmitInterval = 300 * time.Millisecond
		}
		if b.ReceiveInterval == 0 {
			b.ReceiveInterval = 300 * time.Millisecond
		}
		if b.DetectMultiplier == 0 {
			b.DetectMultiplier = 3
		}
		for _, d := range []time.Duration{b.TransmitInterval, b.ReceiveInterval} {
			if d < 10*time.Millisecond || d > time.Minute || d%time.Millisecond != 0 {
				return fmt.Errorf("frr: BFD interval %v: want whole milliseconds in 10ms..60s", d)
			}
		}
		if b.DetectMultiplier < 2 || b.DetectMultiplier > 255 {
			return fmt.Errorf("frr: BFD detect multiplier %d: FRR takes 2..255", b.DetectMultiplier)
		}
	}
	return nil
}

// frrCredential is the frr user with its groups (frr, frrvty).
func frrCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("frr")
	if err != nil {
		return nil, fmt.Errorf("frr: user frr (created by the frr package): %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(gid)}}
	if g, err := user.LookupGroup("frrvty"); err == nil {
		vty, _ := strconv.ParseUint(g.Gid, 10, 32)
		cred.Groups = append(cred.Groups, uint32(vty))
	}
	return cred, nil
}

func start(ctx context.Context, opts Options) (*Router, error) {
	cred, err := frrCredential()
	if err != nil {
		return nil, err
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, err
	}
	sweepStale(ctx)
	r := &Router{Namespace: "bccm-frr-" + hex.EncodeToString(suffix[:]), ASN: opts.RouterASN, opts: opts, cred: cred, daemons: map[string]*daemon{}}
	if _, err := run(ctx, "ip", "netns", "add", r.Namespace); err != nil {
		return nil, fmt.Errorf("frr: create namespace: %w", err)
	}
	// The veth name is global in the root namespace: creating it is the atomic
	// allocation of the subnet index among concurrent harness instances.
	first := firstIndex + int(suffix[0])%(lastIndex-firstIndex+1)
	for n := 0; n <= lastIndex-firstIndex; n++ {
		idx := firstIndex + (first-firstIndex+n)%(lastIndex-firstIndex+1)
		name := fmt.Sprintf("bfrr%dh", idx)
		if subnetInUse(idx) {
			continue
		}
		if _, err := run(ctx, "ip", "link", "add", name, "type", "veth", "peer", "name", frrIfName, "netns", r.Namespace); err == nil {
			r.Index, r.HostInterface = idx, name
			break
		}
	}
	if r.HostInterface == "" {
		return r, fmt.Errorf("frr: no free subnet index in %d..%d", firstIndex, lastIndex)
	}
	r.RouterV4 = netip.AddrFrom4([4]byte{10, 255, byte(r.Index), 254})
	r.RouterV6 = netip.MustParseAddr(fmt.Sprintf("fd00:255:%d::fe", r.Index))
	dir, err := os.MkdirTemp("", "bccm-frr-") // short: socket paths must fit sun_path
	if err != nil {
		return r, err
	}
	r.dir = dir
	if err := r.record(); err != nil {
		return r, fmt.Errorf("frr: recording ownership: %w", err)
	}
	cmds := [][]string{
		{"ip", "-n", r.Namespace, "link", "set", "lo", "up"},
		{"ip", "-n", r.Namespace, "addr", "add", r.RouterV4.String() + "/24", "dev", frrIfName},
		{"ip", "-n", r.Namespace, "addr", "add", r.RouterV6.String() + "/64", "dev", frrIfName, "nodad"},
		{"ip", "-n", r.Namespace, "link", "set", frrIfName, "up"},
	}
	hostIP := []string{"ip"}
	if opts.SpeakerNetns != "" {
		cmds = append(cmds, []string{"ip", "link", "set", r.HostInterface, "netns", opts.SpeakerNetns})
		hostIP = []string{"ip", "-n", opts.SpeakerNetns}
	}
	for i := range opts.Speakers {
		cmds = append(cmds,
			append(append([]string{}, hostIP...), "addr", "add", r.SpeakerV4(i).String()+"/24", "dev", r.HostInterface),
			append(append([]string{}, hostIP...), "addr", "add", r.SpeakerV6(i).String()+"/64", "dev", r.HostInterface, "nodad"))
	}
	cmds = append(cmds, append(append([]string{}, hostIP...), "link", "set", r.HostInterface, "up"))
	for _, c := range cmds {
		if _, err := run(ctx, c[0], c[1:]...); err != nil {
			return r, fmt.Errorf("frr: network setup: %w", err)
		}
	}
	conf, err := r.renderConfig()
	if err != nil {
		return r, err
	}
	files := map[string]string{"frr.conf": conf, "vtysh.conf": "service integrated-vtysh-config\n"}
	for _, d := range daemonNames {
		files[d+".conf"] = "" // the daemons start empty; vtysh -b loads frr.conf into them
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return r, err
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			return r, err
		}
		if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
			return r, err
		}
	}
	for _, d := range daemonNames {
		if err := r.startDaemon(ctx, d); err != nil {
			return r, err
		}
	}
	if err := r.loadConfig(ctx); err != nil {
		return r, err
	}
	return r, nil
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

// startDaemon starts one daemon in the namespace and waits for its vty socket.
func (r *Router) startDaemon(ctx context.Context, name string) error {
	r.mu.Lock()
	if d := r.daemons[name]; d != nil {
		select {
		case <-d.done:
		default:
			r.mu.Unlock()
			return fmt.Errorf("frr: %s is running", name)
		}
	}
	r.mu.Unlock()
	vty := filepath.Join(r.dir, name+".vty")
	_ = os.Remove(vty) // a dead daemon's socket would look ready
	if name == "zebra" {
		_ = os.Remove(filepath.Join(r.dir, "zserv.api"))
	}
	args := []string{"--net=/run/netns/" + r.Namespace, "--", filepath.Join(frrLibDir, name),
		"-f", filepath.Join(r.dir, name+".conf"),
		"-i", filepath.Join(r.dir, name+".pid"),
		"-z", filepath.Join(r.dir, "zserv.api"),
		"--vty_socket", r.dir,
		"-A", "127.0.0.1", "-P", "0", // no TCP vty
	}
	if name == "bfdd" {
		args = append(args, "--bfdctl", filepath.Join(r.dir, "bfdd.sock"))
	}
	out, err := os.OpenFile(filepath.Join(r.dir, name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command("nsenter", args...)
	cmd.Stdout, cmd.Stderr = out, out
	// As user frr from the start, with the capabilities the daemons keep: they then
	// change no credentials, which would clear the Pdeathsig childproc sets.
	cmd.SysProcAttr = daemonProcAttr(r.cred)
	if err := childproc.Start(cmd); err != nil {
		return fmt.Errorf("frr: start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{})}
	d.proc = procsignal.New(cmd.Process, name, d.done)
	go func() { _ = cmd.Wait(); close(d.done) }()
	r.mu.Lock()
	r.daemons[name] = d
	r.mu.Unlock()
	if err := r.record(); err != nil {
		return fmt.Errorf("frr: recording ownership: %w", err)
	}
	sockets := []string{vty}
	if name == "zebra" {
		sockets = append(sockets, filepath.Join(r.dir, "zserv.api"))
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ready := true
		for _, s := range sockets {
			if _, err := os.Stat(s); err != nil {
				ready = false
			}
		}
		if ready {
			return nil
		}
		select {
		case <-d.done:
			b, _ := os.ReadFile(filepath.Join(r.dir, name+".out"))
			return fmt.Errorf("frr: %s exited at start (%s): %s", name, cmd.ProcessState, b)
		case <-ctx.Done():
			return fmt.Errorf("frr: %s not ready: %w", name, ctx.Err())
		case <-tick.C:
		}
	}
}

// loadConfig has vtysh push frr.conf to the running daemons ("vtysh -b").
func (r *Router) loadConfig(ctx context.Context) error {
	out, err := run(ctx, "vtysh", "--vty_socket", r.dir, "--config_dir", r.dir, "-b")
	if err != nil {
		return fmt.Errorf("frr: loading frr.conf: %w: %s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "% ") || strings.HasPrefix(strings.TrimSpace(line), "line ") {
			return fmt.Errorf("frr: loading frr.conf: %s", out)
		}
	}
	return nil
}

// StopDaemon stops one daemon ("zebra", "bfdd", "bgpd") and waits for it to exit:
// SIGTERM (bfdd then sends its peers Down with the diagnostic "Neighbor Signaled
// Session Down"), or SIGKILL when kill is set, as a crashing router would (its
// peers hear nothing more). A daemon paused by PauseBGP is resumed first.
func (r *Router) StopDaemon(name string, kill bool) error {
	r.mu.Lock()
	d := r.daemons[name]
	r.mu.Unlock()
	if d == nil {
		return fmt.Errorf("frr: daemon %s: %w", name, ErrNotFound)
	}
	if err := r.resumeDaemon(name); err != nil {
		kill = true // a daemon that cannot continue cannot handle SIGTERM either
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	r.removeTmp(d)
	return nil
}

// StartDaemon starts a daemon stopped by StopDaemon again and reloads frr.conf
// (every daemon gets the whole configuration again; unchanged lines are no-ops).
func (r *Router) StartDaemon(ctx context.Context, name string) error {
	if err := r.startDaemon(ctx, name); err != nil {
		return err
	}
	return r.loadConfig(ctx)
}

// removeTmp removes the crash-log directory FRR makes per daemon process
// (/var/tmp/frr/<daemon>.<pid>), which a killed daemon leaves behind.
func (r *Router) removeTmp(d *daemon) {
	_ = os.RemoveAll(fmt.Sprintf("/var/tmp/frr/%s.%d", d.name, d.cmd.Process.Pid))
}

// Stop stops every daemon (SIGTERM, SIGKILL after 10s). The namespace stays until
// cleanup. Safe to call twice.
func (r *Router) Stop() {
	for i := len(daemonNames) - 1; i >= 0; i-- {
		_ = r.StopDaemon(daemonNames[i], false)
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
	if r.dir != "" && os.Getenv("FRR_KEEP") == "" {
		_ = os.RemoveAll(r.dir)
	}
	r.unrecord()
}

// SpeakerV4 is the speakers'-side IPv4 address of speaker i (0-based).
func (r *Router) SpeakerV4(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 255, byte(r.Index), byte(i + 1)})
}

// SpeakerV6 is the speakers'-side IPv6 address of speaker i (0-based).
func (r *Router) SpeakerV6(i int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("fd00:255:%d::%x", r.Index, i+1))
}

// NodeAddr returns the i-th (0-based, < 100) "node" address of a family on the
// router's subnet: a valid third-party next hop, configured on no interface.
func (r *Router) NodeAddr(i int, ipv6 bool) netip.Addr {
	if ipv6 {
		return netip.MustParseAddr(fmt.Sprintf("fd00:255:%d::%x", r.Index, 0x100+i))
	}
	return netip.AddrFrom4([4]byte{10, 255, byte(r.Index), byte(100 + i)})
}

// Dir is the directory holding frr.conf, frr.log and the daemons' sockets, pid
// files and output (kept until cleanup; FRR_KEEP=1 keeps it after).
func (r *Router) Dir() string { return r.dir }

// Config returns the frr.conf the router was started with.
func (r *Router) Config() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "frr.conf"))
	return string(b)
}

func (r *Router) logFile() string { return filepath.Join(r.dir, "frr.log") }

// Log returns FRR's log (all daemons; for test failure messages).
func (r *Router) Log() string {
	b, _ := os.ReadFile(r.logFile())
	return string(b)
}

// Vtysh runs vtysh commands (each a -c) against this router only and returns the
// output.
func (r *Router) Vtysh(ctx context.Context, cmds ...string) (string, error) {
	args := []string{"--vty_socket", r.dir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	return run(ctx, "vtysh", args...)
}

// KernelRoutes returns `ip -n <ns> [-6] route show proto bgp` as printed.
func (r *Router) KernelRoutes(ctx context.Context, ipv6 bool) (string, error) {
	args := []string{"-n", r.Namespace}
	if ipv6 {
		args = append(args, "-6")
	}
	return run(ctx, "ip", append(args, "route", "show", "proto", "bgp")...)
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

// WaitFor polls cond every 50ms until it returns true or ctx ends (see
// routertest.WaitFor). It is for convergence, not for timing assertions: give ctx
// a generous deadline.
func WaitFor(ctx context.Context, cond func(ctx context.Context) (bool, error)) error {
	return routertest.WaitFor(ctx, cond)
}
