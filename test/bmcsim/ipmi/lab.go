package ipmi

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/internal/childproc"
)

//go:embed chassis.sh
var chassisScript []byte

//go:embed bmc.emu
var emuFile []byte

// Defaults for the zero Options.
const (
	DefaultUsername     = "admin"
	DefaultPassword     = "secret"
	DefaultStartTimeout = 30 * time.Second
	// Host is the only address BMCs listen on.
	Host = "127.0.0.1"
	// InstallCommand installs ipmi_sim and ipmitool on Debian.
	InstallCommand = "apt-get install -y --no-install-recommends openipmi ipmitool"
)

// Limits of ipmi_sim for RMCP+ logins: longer names or passwords are accepted
// in lan.conf but every lanplus session then fails.
const (
	MaxUsernameLen = 15
	MaxPasswordLen = 19
)

// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
const stopGrace = 3 * time.Second

// portAttempts bounds the tries to find a free port for one BMC.
const portAttempts = 10

// Options configures a Lab. The zero value is usable.
type Options struct {
	// Username and Password are the BMCs' only administrator account.
	// Defaults: DefaultUsername, DefaultPassword. At most MaxUsernameLen and
	// MaxPasswordLen bytes of printable ASCII without spaces or quotes.
	Username, Password string
	// PoweredOff makes every host start powered off. Default: on.
	PoweredOff bool
	// StartTimeout bounds how long Start (per BMC, in parallel) and Restart
	// wait for a BMC to answer, in addition to their context. Default
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// IPMISimPath and IPMIToolPath locate the binaries. Defaults: "ipmi_sim"
	// and "ipmitool" looked up in PATH.
	IPMISimPath, IPMIToolPath string
	// SystemGUIDs are the 16 bytes BMC i answers Get System GUID with, in the
	// order it sends them, as 32 hex digits (hyphens allowed): any byte order a
	// test needs. BMCs beyond the list get a random GUID.
	SystemGUIDs []string
	// Refuse makes commands fail with a completion code, on every BMC of the
	// lab, as seen through ipmitool: ipmi_sim has no per-command privilege
	// settings, so ToolDir holds an ipmitool that opens the session as the real
	// one does (a wrong password still fails there) and then prints what
	// ipmitool prints for the refused command's completion code, and passes
	// every other command to the real ipmitool. Put ToolDir first in PATH.
	Refuse []Refusal
}

// Refusal is a command a BMC refuses: "raw NetFn Cmd" answers completion code
// Code (0xD4: insufficient privilege level, as a BMC answers an account whose
// privilege is below the command's).
type Refusal struct{ NetFn, Cmd, Code byte }

// Lab is a set of simulated BMCs started by Start. Its methods are safe for
// concurrent use.
type Lab struct {
	dir      string
	opts     Options
	sim      string // ipmi_sim path
	tool     string // ipmitool path
	script   string // chassis.sh path
	emu      string // bmc.emu path
	bmcs     []*BMC
	stopped  atomic.Bool
	stopOnce sync.Once
}

// BMC is one simulated BMC: an ipmi_sim process on Host:Port and the files
// behind its chassis. Its methods are safe for concurrent use.
type BMC struct {
	lab   *Lab
	name  string // "bmc<i>"
	dir   string // <lab dir>/bmc<i>
	port  int
	guid  string
	opMu  sync.Mutex // serializes Kill, Restart and Stop
	mu    sync.Mutex // guards proc
	proc  *process   // the running ipmi_sim, nil when killed or stopped
	spawn int        // number of ipmi_sim processes started (guarded by opMu)
}

// process is one started ipmi_sim, reaped by its own goroutine.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// CheckTools reports whether ipmi_sim and ipmitool can be found (at the
// given paths, or in PATH for empty ones). Its error names InstallCommand.
func CheckTools(opts Options) error {
	_, _, err := lookTools(opts)
	return err
}

func lookTools(opts Options) (sim, tool string, err error) {
	var missing []string
	find := func(p, def string) string {
		if p == "" {
			p = def
		}
		abs, err := exec.LookPath(p)
		if err != nil {
			missing = append(missing, p)
			return ""
		}
		return abs
	}
	sim = find(opts.IPMISimPath, "ipmi_sim")
	tool = find(opts.IPMIToolPath, "ipmitool")
	if len(missing) > 0 {
		return "", "", fmt.Errorf("ipmi: %s not found; install with: %s", strings.Join(missing, " and "), InstallCommand)
	}
	return sim, tool, nil
}

// Start starts n simulated BMCs under dir (created if needed; dir/bmc<i>
// must not exist yet, so every ipmi_sim gets a fresh state directory) and
// returns once each has answered "chassis power status" over RMCP+ with the
// configured credentials. ctx bounds only this wait, not the BMCs' lives;
// Options.StartTimeout bounds it too. On failure everything started is
// stopped and the error carries the failing BMC's sim.log tail. The caller
// must call Stop.
func Start(ctx context.Context, dir string, n int, opts Options) (*Lab, error) {
	if n < 1 {
		return nil, fmt.Errorf("ipmi: n = %d, want at least 1", n)
	}
	if opts.Username == "" {
		opts.Username = DefaultUsername
	}
	if opts.Password == "" {
		opts.Password = DefaultPassword
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if err := checkCredential("username", opts.Username, MaxUsernameLen); err != nil {
		return nil, err
	}
	if err := checkCredential("password", opts.Password, MaxPasswordLen); err != nil {
		return nil, err
	}
	sim, tool, err := lookTools(opts)
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("ipmi: %w", err)
	}
	// The paths end up single-quoted in a shell command inside a
	// double-quoted lan.conf string.
	if strings.ContainsAny(dir, "'\"\\") || strings.ContainsFunc(dir, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return nil, fmt.Errorf("ipmi: directory %q must not contain quotes, backslashes or control characters", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ipmi: %w", err)
	}
	l := &Lab{
		dir:    dir,
		opts:   opts,
		sim:    sim,
		tool:   tool,
		script: filepath.Join(dir, "chassis.sh"),
		emu:    filepath.Join(dir, "bmc.emu"),
	}
	if err := writeFileAtomic(l.script, chassisScript, 0o755); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(l.emu, emuFile, 0o644); err != nil {
		return nil, err
	}
	if len(opts.Refuse) > 0 {
		if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
			return nil, fmt.Errorf("ipmi: %w", err)
		}
		if err := writeFileAtomic(filepath.Join(dir, "bin", "ipmitool"), toolShim(tool, opts.Refuse), 0o755); err != nil {
			return nil, err
		}
	}
	power := "1\n"
	if opts.PoweredOff {
		power = "0\n"
	}
	for i := 1; i <= n; i++ {
		b := &BMC{lab: l, name: "bmc" + strconv.Itoa(i), dir: filepath.Join(dir, "bmc"+strconv.Itoa(i))}
		if err := os.Mkdir(b.dir, 0o755); err != nil {
			return nil, fmt.Errorf("ipmi: %w (Start needs a directory without a previous lab)", err)
		}
		for _, d := range []string{"state", "chassis"} {
			if err := os.Mkdir(filepath.Join(b.dir, d), 0o755); err != nil {
				return nil, fmt.Errorf("ipmi: %w", err)
			}
		}
		if err := writeFileAtomic(b.powerFile(), []byte(power), 0o644); err != nil {
			return nil, err
		}
		if err := writeFileAtomic(filepath.Join(b.dir, "chassis", "boot"), []byte("none\n"), 0o644); err != nil {
			return nil, err
		}
		g := make([]byte, 16)
		if _, err := rand.Read(g); err != nil {
			return nil, fmt.Errorf("ipmi: %w", err)
		}
		b.guid = hex.EncodeToString(g)
		if i <= len(opts.SystemGUIDs) {
			h := strings.ToLower(strings.ReplaceAll(opts.SystemGUIDs[i-1], "-", ""))
			if raw, err := hex.DecodeString(h); err != nil || len(raw) != 16 {
				return nil, fmt.Errorf("ipmi: SystemGUIDs[%d] %q is not 16 bytes in hex", i-1, opts.SystemGUIDs[i-1])
			}
			b.guid = h
		}
		l.bmcs = append(l.bmcs, b)
	}

	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	fail := func(err error) (*Lab, error) {
		l.Stop()
		return nil, err
	}
	// Bind one BMC after the other so that two never race for one port,
	// then wait for all of them to answer in parallel.
	used := map[int]bool{}
	for _, b := range l.bmcs {
		if err := b.startOnFreePort(ctx, used); err != nil {
			return fail(err)
		}
		used[b.port] = true
	}
	errs := make([]error, len(l.bmcs))
	var wg sync.WaitGroup
	for i, b := range l.bmcs {
		wg.Go(func() { errs[i] = b.waitAnswering(ctx, b.currentProc()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	return l, nil
}

func checkCredential(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("ipmi: %s %q is longer than %d bytes (ipmi_sim then refuses every RMCP+ login)", what, s, max)
	}
	for _, r := range s {
		if r <= ' ' || r >= 0x7f || r == '"' || r == '\'' || r == '\\' {
			return fmt.Errorf("ipmi: %s %q: only printable ASCII without spaces, quotes or backslashes", what, s)
		}
	}
	return nil
}

// Dir is the lab directory (absolute).
func (l *Lab) Dir() string { return l.dir }

// ToolDir is the directory of the ipmitool that applies Options.Refuse, to put
// first in PATH; "" without refusals.
func (l *Lab) ToolDir() string {
	if len(l.opts.Refuse) == 0 {
		return ""
	}
	return filepath.Join(l.dir, "bin")
}

// completionCodes are ipmitool's words for the completion codes Refuse uses
// (ipmitool's completion_code_vals).
var completionCodes = map[byte]string{
	0xc0: "Node busy",
	0xc1: "Invalid command",
	0xc9: "Parameter out of range",
	0xcc: "Invalid data field in request",
	0xd4: "Insufficient privilege level",
	0xd5: "Command not supported in present state",
	0xff: "Unspecified error",
}

// toolShim is the ipmitool of ToolDir: for a refused "raw NETFN CMD" it opens a
// session with the same options (Get Device ID, so login failures are the real
// ones) and prints ipmitool's error for the completion code; everything else runs
// the real ipmitool.
func toolShim(real string, refuse []Refusal) []byte {
	var cases strings.Builder
	for _, r := range refuse {
		words := completionCodes[r.Code]
		if words == "" {
			words = "Unknown (0x" + strconv.FormatUint(uint64(r.Code), 16) + ")"
		}
		fmt.Fprintf(&cases, "  %d:%d) code=0x%x words='%s' ;;\n", r.NetFn, r.Cmd, r.Code, words)
	}
	return fmt.Appendf(nil, `#!/bin/bash
# ipmitool through BMCs that refuse some commands (package ipmi, Options.Refuse).
real='%s'
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [[ ${args[i]} == raw ]] && break
done
if ((i + 2 >= ${#args[@]})); then exec "$real" "$@"; fi
netfn=$((args[i+1])); cmd=$((args[i+2]))
case "$netfn:$cmd" in
%s  *) exec "$real" "$@" ;;
esac
# The session is opened as for the real command (a wrong password fails here).
"$real" "${args[@]:0:i}" raw 0x06 0x01 >/dev/null || exit
printf 'Unable to send RAW command (channel=0x0 netfn=0x%%x lun=0x0 cmd=0x%%x rsp=%%s): %%s\n' "$netfn" "$cmd" "$code" "$words" >&2
exit 1
`, real, cases.String())
}

// BMCs returns the BMCs in start order; bmc<i> is BMCs()[i-1].
func (l *Lab) BMCs() []*BMC { return append([]*BMC(nil), l.bmcs...) }

// Stop terminates every ipmi_sim the Lab started and still runs (SIGTERM,
// then SIGKILL if it is still there 3 s later) and returns once all have
// been reaped. It is idempotent; later Kills and Restarts fail. The lab
// directory and its files are left in place.
func (l *Lab) Stop() {
	l.stopOnce.Do(func() {
		l.stopped.Store(true)
		var wg sync.WaitGroup
		for _, b := range l.bmcs {
			wg.Go(func() {
				b.opMu.Lock()
				defer b.opMu.Unlock()
				b.stopProc(syscall.SIGTERM)
			})
		}
		wg.Wait()
	})
}

// Host is always "127.0.0.1".
func (b *BMC) Host() string { return Host }

// Port is the BMC's UDP port; it stays the same across Kill and Restart.
func (b *BMC) Port() int { return b.port }

// Username is the BMC's administrator account.
func (b *BMC) Username() string { return b.lab.opts.Username }

// Password is Username's password.
func (b *BMC) Password() string { return b.lab.opts.Password }

// Name is "bmc<i>", also the name of the BMC's directory in the lab.
func (b *BMC) Name() string { return b.name }

// SystemGUID is the GUID the BMC answers Get System GUID with (random per Lab), in
// the byte order it sends, formatted as a UUID (lower case).
func (b *BMC) SystemGUID() string {
	g := b.guid
	return g[0:8] + "-" + g[8:12] + "-" + g[12:16] + "-" + g[16:20] + "-" + g[20:32]
}

// Dir is the BMC's directory (lan.conf, state/, chassis/, sim.log).
func (b *BMC) Dir() string { return b.dir }

// PID is the process ID of the running ipmi_sim, 0 after Kill or Stop.
func (b *BMC) PID() int {
	if p := b.currentProc(); p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// IPMIToolArgs are the ipmitool options that reach this BMC with its
// credentials: "-I lanplus -C 3 -H 127.0.0.1 -p PORT -U USER -P PASSWORD".
func (b *BMC) IPMIToolArgs() []string {
	return []string{"-I", "lanplus", "-C", "3", "-H", Host, "-p", strconv.Itoa(b.port), "-U", b.Username(), "-P", b.Password()}
}

// IPMITool runs ipmitool with IPMIToolArgs followed by args (more options,
// e.g. "-N", "1", "-R", "1", then a command) and returns its combined
// output. The error is an *exec.ExitError when ipmitool failed.
func (b *BMC) IPMITool(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, b.lab.tool, append(b.IPMIToolArgs(), args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (b *BMC) powerFile() string { return filepath.Join(b.dir, "chassis", "power") }

// Power reports the host's power as the chassis state file has it: what
// the BMC last set or SetPower wrote.
func (b *BMC) Power() (bool, error) {
	data, err := os.ReadFile(b.powerFile())
	if err != nil {
		return false, fmt.Errorf("ipmi: %s: %w", b.name, err)
	}
	switch strings.TrimSpace(string(data)) {
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("ipmi: %s: power file holds %q", b.name, data)
}

// SetPower changes the host's power behind the BMC's back (no IPMI call, no
// calls.log line): the next "chassis power status" reports it. The file is
// replaced atomically.
func (b *BMC) SetPower(on bool) error {
	v := "0\n"
	if on {
		v = "1\n"
	}
	return writeFileAtomic(b.powerFile(), []byte(v), 0o644)
}

// Calls returns what ipmi_sim asked the chassis to do, oldest first, one
// entry per chassis-control call without its timestamp: "get power",
// "set power 1", "set power 0", "set shutdown 1", "set reset 1",
// "get boot", "set boot pxe". "chassis power cycle" is "set power 0" and,
// about a second later, "get power" and "set power 1".
func (b *BMC) Calls() ([]string, error) {
	data, err := os.ReadFile(filepath.Join(b.dir, "chassis", "calls.log"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ipmi: %s: %w", b.name, err)
	}
	var calls []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if _, rest, ok := strings.Cut(line, " "); ok {
			calls = append(calls, rest)
		}
	}
	return calls, nil
}

// Kill simulates a BMC that stops answering: SIGKILL to its ipmi_sim,
// returning once the process has been reaped (its port is then closed).
// The host's power and the BMC's state directory are kept.
func (b *BMC) Kill() error {
	b.opMu.Lock()
	defer b.opMu.Unlock()
	p := b.currentProc()
	if p == nil {
		return fmt.Errorf("ipmi: %s is not running", b.name)
	}
	if p.exited() {
		b.setProc(nil)
		return fmt.Errorf("ipmi: %s had already exited (%s); sim.log: %s", b.name, p.cmd.ProcessState, b.logTail())
	}
	b.stopProc(syscall.SIGKILL)
	return nil
}

// Restart simulates a BMC coming back: it kills the running ipmi_sim, if
// any, starts a new one on the same port with the same configuration and
// state directory, and returns once it answers "chassis power status"
// (bounded by ctx and Options.StartTimeout). The host's power is what it
// was. If another process took the port meanwhile, Restart fails.
func (b *BMC) Restart(ctx context.Context) error {
	b.opMu.Lock()
	defer b.opMu.Unlock()
	if b.lab.stopped.Load() {
		return fmt.Errorf("ipmi: %s: the lab is stopped", b.name)
	}
	b.stopProc(syscall.SIGKILL)
	ctx, cancel := context.WithTimeout(ctx, b.lab.opts.StartTimeout)
	defer cancel()
	p, err := b.spawnAndBind(ctx)
	if err == nil {
		err = b.waitAnswering(ctx, p)
	}
	if err != nil {
		b.stopProc(syscall.SIGKILL)
		return err
	}
	return nil
}

func (b *BMC) currentProc() *process {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.proc
}

func (b *BMC) setProc(p *process) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.proc = p
}

// stopProc sends sig to the running ipmi_sim (SIGTERM: then SIGKILL after
// stopGrace) and waits until it has been reaped. Callers hold opMu.
func (b *BMC) stopProc(sig syscall.Signal) {
	p := b.currentProc()
	if p == nil {
		return
	}
	// os.Process signals through a pidfd on Linux and never signals a
	// reaped process, so this cannot hit a recycled PID.
	_ = p.cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	<-p.done
	b.setProc(nil)
}

// startOnFreePort finds a free UDP port, writes lan.conf and starts
// ipmi_sim on it, trying another port when ipmi_sim cannot bind.
func (b *BMC) startOnFreePort(ctx context.Context, used map[int]bool) error {
	var errs []error
	for range portAttempts {
		port, err := pickPort()
		if err != nil {
			return fmt.Errorf("ipmi: %s: pick a free UDP port: %w", b.name, err)
		}
		if used[port] {
			continue
		}
		b.port = port
		if err := b.writeLanConf(); err != nil {
			return err
		}
		_, err = b.spawnAndBind(ctx)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errNotBound) || ctx.Err() != nil {
			return err
		}
	}
	return fmt.Errorf("ipmi: %s: no port after %d attempts: %w", b.name, portAttempts, errors.Join(errs...))
}

// pickPort returns a UDP port that was free on 127.0.0.1 a moment ago. A
// variable so that tests can hand out a taken port.
var pickPort = func() (int, error) {
	c, err := net.ListenPacket("udp4", net.JoinHostPort(Host, "0"))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

// errNotBound: ipmi_sim did not get its port (it exits when the bind fails).
var errNotBound = errors.New("ipmi_sim did not bind its port")

func (b *BMC) writeLanConf() error {
	q := func(s string) string { return "'" + s + "'" }
	conf := fmt.Sprintf(`# Written by package ipmi (test/bmcsim/ipmi) for %[1]s.
name "%[1]s"
set_working_mc 0x20
  chassis_control "%[2]s %[3]s"
  startlan 1
    addr %[4]s %[5]d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    # guid is required for RMCP+ (-I lanplus)
    guid %[6]s
  endlan
  user 2 true "%[7]s" "%[8]s" admin 10 none md2 md5 straight
`, b.name, q(b.lab.script), q(filepath.Join(b.dir, "chassis")), Host, b.port, b.guid, b.Username(), b.Password())
	return writeFileAtomic(filepath.Join(b.dir, "lan.conf"), []byte(conf), 0o600)
}

// spawnAndBind starts ipmi_sim with the current lan.conf and waits until it
// owns its UDP port. On failure the process has been reaped and the error
// wraps errNotBound if ipmi_sim exited without binding.
func (b *BMC) spawnAndBind(ctx context.Context) (*process, error) {
	logPath := filepath.Join(b.dir, "sim.log")
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ipmi: %w", err)
	}
	defer log.Close() // the child has its own descriptor
	b.spawn++
	fmt.Fprintf(log, "=== package ipmi: %s start #%d of ipmi_sim on %s:%d\n", time.Now().Format(time.RFC3339Nano), b.spawn, Host, b.port)
	cmd := exec.Command(b.lab.sim, "-n",
		"-c", filepath.Join(b.dir, "lan.conf"),
		"-f", b.lab.emu,
		"-s", filepath.Join(b.dir, "state"))
	cmd.Dir = b.dir
	cmd.Stdout = log
	cmd.Stderr = log
	if err := childproc.Start(cmd); err != nil {
		return nil, fmt.Errorf("ipmi: %s: start ipmi_sim: %w", b.name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	b.setProc(p)

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		owned, err := ownsUDPPort(cmd.Process.Pid, b.port)
		if err == nil && owned {
			return p, nil
		}
		if p.exited() {
			b.setProc(nil)
			return nil, fmt.Errorf("ipmi: %s: ipmi_sim on port %d exited (%s): %w; sim.log: %s",
				b.name, b.port, cmd.ProcessState, errNotBound, b.logTail())
		}
		select {
		case <-ctx.Done():
			b.stopProc(syscall.SIGKILL)
			return nil, fmt.Errorf("ipmi: %s: ipmi_sim did not bind %s:%d: %w (last check: %v); sim.log: %s",
				b.name, Host, b.port, ctx.Err(), err, b.logTail())
		case <-tick.C:
		case <-p.done:
		}
	}
}

// waitAnswering runs "chassis power status" until it succeeds, p exits or
// ctx ends.
func (b *BMC) waitAnswering(ctx context.Context, p *process) error {
	if p == nil {
		return fmt.Errorf("ipmi: %s is not running", b.name)
	}
	for {
		out, err := b.IPMITool(ctx, "-N", "1", "-R", "1", "chassis", "power", "status")
		if err == nil && strings.Contains(out, "Chassis Power is") {
			return nil
		}
		if err == nil {
			err = errors.New("unexpected answer")
		}
		if p.exited() {
			return fmt.Errorf("ipmi: %s: ipmi_sim on port %d exited (%s); sim.log: %s",
				b.name, b.port, p.cmd.ProcessState, b.logTail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ipmi: %s: no answer to ipmitool chassis power status on %s:%d: %w (last: %v: %q); sim.log: %s",
				b.name, Host, b.port, ctx.Err(), err, strings.TrimSpace(out), b.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logTail returns the last lines of sim.log, for error messages.
func (b *BMC) logTail() string {
	data, err := os.ReadFile(filepath.Join(b.dir, "sim.log"))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	const max = 2048
	if len(data) > max {
		data = data[len(data)-max:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	s := strings.TrimSpace(string(data))
	if s == "" {
		return "(empty)"
	}
	return "\n" + s
}

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("ipmi: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("ipmi: %w", err)
	}
	return nil
}
