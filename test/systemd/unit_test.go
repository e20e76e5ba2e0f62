//go:build systemd

// Package systemd checks the units in systemd/ (baremetal-ccm.service, the CCM, and
// baremetal-ccm-agent.service, the agent alone for worker hosts) with systemd's own
// tools: `systemd-analyze verify` (the unit loads without a warning, its ExecStart binary
// exists) and `systemd-analyze security --offline=true` (exposure at most 2.0, and
// nothing exposed beyond the items the unit justifies), plus the settings each service
// depends on, and that the agent unit is as hardened as the CCM's.
// Run: go test -tags systemd -count=1 -v ./test/systemd/
// The tests skip when systemd-analyze is missing (Debian: apt-get install systemd).
package systemd

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	binary = "/usr/bin/baremetal-cloud-controller-manager"
	// maxExposure is the highest acceptable "Overall exposure level", for every unit.
	maxExposure = 2.0
	mainUnit    = "baremetal-ccm.service"
	agentUnit   = "baremetal-ccm-agent.service"
)

// unit describes one unit file of systemd/ and what the tests expect of it.
type unit struct {
	name string // file name in systemd/, and the unit's name once installed
	// allowedExposure lists what `systemd-analyze security` may still flag, with the
	// reason (the unit file says the same next to the directive). Anything else
	// flagged is a regression: tighten the unit, or add the item here with its reason.
	allowedExposure map[string]string
	// exact maps [Service] keys to their required (last) value; set lists keys that
	// must have a value, unset keys that must have none.
	exact      map[string]string
	set, unset []string
	// unitSection maps [Unit] keys to values they must contain (among their words).
	unitSection map[string][]string
}

// path is the unit file in the repository (go test runs in the package directory).
func (u unit) path() string { return filepath.Join("..", "..", "systemd", u.name) }

// envFile is the repository file the packages install as /etc/default/<unit> (deb)
// and /etc/sysconfig/<unit> (rpm).
func (u unit) envFile() string {
	return filepath.Join("..", "..", "packaging", "default", strings.TrimSuffix(u.name, ".service"))
}

// exposedBoth is what both units leave exposed, for the same reasons.
var exposedBoth = map[string]string{
	"PrivateUsers=":                        "CAP_NET_ADMIN in a user namespace would not act on the host's network namespace",
	"AmbientCapabilities=":                 "a non-root process needs CAP_NET_ADMIN and CAP_NET_BIND_SERVICE",
	"CapabilityBoundingSet=~CAP_NET_ADMIN": "netlink routes",
	"CapabilityBoundingSet=~CAP_NET_(BIND_SERVICE|BROADCAST|RAW)": "BGP on port 179 (CAP_NET_BIND_SERVICE only)",
	"RestrictAddressFamilies=~AF_NETLINK":                         "routes over netlink",
	"RestrictAddressFamilies=~AF_UNIX":                            "journal and notify sockets",
	"DeviceAllow=":                                                "ProtectClock=yes itself allows reading /dev/rtc (char-rtc:r)",
}

func with(m map[string]string, more map[string]string) map[string]string {
	out := maps.Clone(m)
	maps.Copy(out, more)
	return out
}

// common are the [Service] settings both units must have.
var common = map[string]string{
	"Type":            "notify",
	"NotifyAccess":    "main",
	"Restart":         "on-failure",
	"User":            "baremetal-ccm",
	"Group":           "baremetal-ccm",
	"NoNewPrivileges": "yes",
	"ProtectSystem":   "strict",
	"PrivateTmp":      "yes",
	"KillMode":        "mixed",
}

var units = []unit{
	{
		name: mainUnit,
		allowedExposure: with(exposedBoth, map[string]string{
			"PrivateNetwork=":                          "it manages the host's routes and talks to kube-apiserver, BMCs and BGP peers",
			"IPAddressDeny=":                           "apiserver, BMC and router addresses are operator-defined",
			"RootDirectory=/RootImage=":                "runs the host's ipmitool and reads the host's /etc",
			"RestrictAddressFamilies=~AF_(INET|INET6)": "kube-apiserver, BMCs (HTTPS, IPMI), BGP",
			"ProcSubset=":                              "ProcSubset=pid hides /proc/stat, which process_start_time_seconds needs",
		}),
		exact: with(common, map[string]string{
			"ExecStart": binary + " $BAREMETAL_CCM_ARGS",
		}),
		set: []string{"WatchdogSec", "TimeoutStartSec", "TimeoutStopSec", "LimitNOFILE"},
	},
	{
		name: agentUnit,
		allowedExposure: with(exposedBoth, map[string]string{
			"PrivateNetwork=":                          "it manages the host's routes and talks to kube-apiserver and BGP peers",
			"IPAddressDeny=":                           "apiserver and router addresses are operator-defined",
			"RootDirectory=/RootImage=":                "reads the host's /etc (CloudConfig, kubeconfig, resolver, CA certificates)",
			"RestrictAddressFamilies=~AF_(INET|INET6)": "kube-apiserver, BGP",
		}),
		exact: with(common, map[string]string{
			"ExecStart":  binary + " agent $BAREMETAL_CCM_AGENT_ARGS",
			"ProcSubset": "pid", // no metrics served: /proc/stat is not needed
		}),
		set: []string{"TimeoutStartSec", "TimeoutStopSec", "LimitNOFILE"},
		// The agent sends no WATCHDOG=1: a watchdog would kill it while healthy.
		unset: []string{"WatchdogSec"},
		// Never both on one host (every CCM replica runs the agent); the ordering makes
		// systemd finish stopping one before starting the other.
		unitSection: map[string][]string{
			"Conflicts": {mainUnit},
			"After":     {mainUnit},
		},
	},
}

// forEachUnit runs f as a subtest per unit.
func forEachUnit(t *testing.T, f func(t *testing.T, u unit)) {
	for _, u := range units {
		t.Run(u.name, func(t *testing.T) { f(t, u) })
	}
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skipf("systemd-analyze not found, cannot check the unit (Debian: apt-get install systemd): %v", err)
	}
	return path
}

// run runs systemd-analyze and returns its stdout, its stderr and its exit code.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a hang detector
	defer cancel()
	cmd := exec.CommandContext(ctx, systemdAnalyze(t), args...)
	cmd.Env = append(os.Environ(), "SYSTEMD_COLORS=0", "SYSTEMD_PAGER=cat", "SYSTEMD_LOG_COLOR=0")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("systemd-analyze %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// systemUnitDir is the host's directory of packaged units (sysinit.target, ...).
func systemUnitDir(t *testing.T) string {
	t.Helper()
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if _, err := os.Stat(filepath.Join(d, "sysinit.target")); err == nil {
			return d
		}
	}
	t.Skip("systemd-analyze is installed but no system unit directory with sysinit.target was found")
	return ""
}

// copyTree copies regular files, directories and symbolic links (as links).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, 0o644)
		}
		return nil // sockets, devices: not in a unit directory
	})
}

// root builds a file system root for `systemd-analyze verify --root`: the host's
// packaged units, every unit of systemd/ where the packages install it (as the
// packages ship them together; the one under test with the content given), and (if
// withBinary) an executable stand-in for the CCM binary. verify only checks that
// ExecStart's command exists and is executable; a stub does, without a build.
func root(t *testing.T, u unit, content []byte, withBinary bool) string {
	t.Helper()
	r := t.TempDir()
	dir := filepath.Join(r, "usr", "lib", "systemd", "system")
	if err := copyTree(systemUnitDir(t), dir); err != nil {
		t.Fatal(err)
	}
	for _, o := range units {
		data := content
		if o.name != u.name {
			data = readUnit(t, o)
		}
		if err := os.WriteFile(filepath.Join(dir, o.name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if withBinary {
		bin := filepath.Join(r, binary)
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func readUnit(t *testing.T, u unit) []byte {
	t.Helper()
	data, err := os.ReadFile(u.path())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestVerify(t *testing.T) {
	systemdAnalyze(t)
	forEachUnit(t, func(t *testing.T, u unit) {
		content := readUnit(t, u)

		t.Run("unit", func(t *testing.T) {
			stdout, stderr, code := run(t, "verify", "--root="+root(t, u, content, true), u.name)
			if code != 0 || stdout != "" || stderr != "" {
				// verify exits 0 on unknown keys and unparsable values: any output fails.
				t.Fatalf("systemd-analyze verify: exit %d, want 0 and no output:\n%s%s", code, stdout, stderr)
			}
		})

		// The controls show that the check above can fail with this systemd.
		t.Run("control: missing binary is reported", func(t *testing.T) {
			_, stderr, code := run(t, "verify", "--root="+root(t, u, content, false), u.name)
			if code == 0 || !strings.Contains(stderr, binary) {
				t.Fatalf("verify without %s: exit %d, output %q; want a failure naming it", binary, code, stderr)
			}
		})
		t.Run("control: unknown key is reported", func(t *testing.T) {
			bad := strings.Replace(string(content), "[Service]\n", "[Service]\nNoSuchSetting=yes\n", 1)
			stdout, stderr, _ := run(t, "verify", "--root="+root(t, u, []byte(bad), true), u.name)
			if !strings.Contains(stdout+stderr, "NoSuchSetting") {
				t.Fatalf("verify did not report an unknown key; output %q", stdout+stderr)
			}
		})
	})
}

func TestSecurityExposure(t *testing.T) {
	systemdAnalyze(t)
	forEachUnit(t, func(t *testing.T, u unit) { securityExposure(t, u) })
}

func securityExposure(t *testing.T, u unit) {
	stdout, stderr, code := run(t, "security", "--offline=true", "--no-pager", u.path())
	t.Logf("systemd-analyze security --offline=true %s:\n%s", u.path(), stdout)
	if code != 0 || stderr != "" {
		t.Fatalf("systemd-analyze security: exit %d, want 0 and nothing on stderr:\n%s", code, stderr)
	}
	overallRE := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(u.name) + `: ([0-9]+\.[0-9]+) `)
	m := overallRE.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no %q line in the output", "Overall exposure level for "+u.name)
	}
	exposure, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: overall exposure %.1f (at most %.1f)", u.name, exposure, maxExposure)
	if exposure > maxExposure {
		t.Errorf("exposure %.1f, want at most %.1f", exposure, maxExposure)
	}

	var exposed []string
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		name, ok := strings.CutPrefix(sc.Text(), "✗ ")
		if !ok {
			continue
		}
		name = strings.Fields(name)[0]
		exposed = append(exposed, name)
		if _, ok := u.allowedExposure[name]; !ok {
			t.Errorf("newly exposed: %s (tighten the unit, or add it to allowedExposure with the reason)", name)
		}
	}
	if len(exposed) == 0 {
		t.Errorf("no exposed (✗) item parsed: the output format changed?")
	}

	// Allowed items no longer exposed: drop them from the list (it documents the unit).
	for name := range u.allowedExposure {
		if !slices.Contains(exposed, name) {
			t.Errorf("%s is allowed but no longer exposed: remove it from allowedExposure", name)
		}
	}

	// The same limit through systemd-analyze itself (threshold in tenths).
	if _, _, code := run(t, "security", "--offline=true", "--no-pager",
		"--threshold="+strconv.Itoa(int(maxExposure*10)), u.path()); code != 0 {
		t.Errorf("systemd-analyze security --threshold=%d: exit %d", int(maxExposure*10), code)
	}
}

// settings parses a unit file: section -> key -> values in order (an empty
// assignment resets the list, as systemd does for list settings).
func settings(t *testing.T, data []byte) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		for strings.HasSuffix(line, "\\") && sc.Scan() {
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(sc.Text())
		}
		switch {
		case line == "", line[0] == '#', line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			if out[section] == nil {
				out[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("not a unit file line: %q", line)
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if v == "" {
				out[section][k] = nil
				continue
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func TestSettings(t *testing.T) {
	forEachUnit(t, func(t *testing.T, u unit) {
		all := settings(t, readUnit(t, u))
		svc := all["Service"]
		if svc == nil {
			t.Fatal("no [Service] section")
		}
		last := func(k string) string {
			if v := svc[k]; len(v) > 0 {
				return v[len(v)-1]
			}
			return ""
		}
		words := func(k string) []string {
			var w []string
			for _, v := range svc[k] {
				w = append(w, strings.Fields(v)...)
			}
			slices.Sort(w)
			return w
		}

		for k, want := range u.exact {
			if got := last(k); got != want {
				t.Errorf("%s=%q, want %q", k, got, want)
			}
		}
		for _, k := range u.set {
			if last(k) == "" {
				t.Errorf("%s= is not set", k)
			}
		}
		for _, k := range u.unset {
			if got := last(k); got != "" {
				t.Errorf("%s=%q is set, want it unset", k, got)
			}
		}
		caps := []string{"CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE"}
		for _, k := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
			if got := words(k); !slices.Equal(got, caps) {
				t.Errorf("%s=%v, want exactly %v", k, got, caps)
			}
		}
		if got, want := words("RestrictAddressFamilies"), []string{"AF_INET", "AF_INET6", "AF_NETLINK", "AF_UNIX"}; !slices.Equal(got, want) {
			t.Errorf("RestrictAddressFamilies=%v, want exactly %v", got, want)
		}
		base := strings.TrimSuffix(u.name, ".service")
		if got, want := svc["EnvironmentFile"], []string{"-/etc/default/" + base, "-/etc/sysconfig/" + base}; !slices.Equal(got, want) {
			t.Errorf("EnvironmentFile=%q, want %q (optional, deb then rpm)", got, want)
		}
		if got := svc["SystemCallFilter"]; len(got) == 0 || got[0] != "@system-service" {
			t.Errorf("SystemCallFilter=%q, want an allow list starting with @system-service", got)
		}
		for k, want := range u.unitSection {
			var got []string
			for _, v := range all["Unit"][k] {
				got = append(got, strings.Fields(v)...)
			}
			for _, w := range want {
				if !slices.Contains(got, w) {
					t.Errorf("[Unit] %s=%q, want it to include %s", k, got, w)
				}
			}
		}
	})
}

// TestAgentAsHardened compares the [Service] sections: every setting of the CCM's unit
// must be in the agent's with the same values, but for the differences listed here; a
// hardening directive added to one unit and forgotten in the other fails.
func TestAgentAsHardened(t *testing.T) {
	var main, agent unit
	for _, u := range units {
		switch u.name {
		case mainUnit:
			main = u
		case agentUnit:
			agent = u
		}
	}
	m := settings(t, readUnit(t, main))["Service"]
	a := settings(t, readUnit(t, agent))["Service"]
	differ := map[string]string{
		"ExecStart":       "the agent subcommand and its own variable",
		"EnvironmentFile": "the agent's own environment file",
		"WatchdogSec":     "the agent sends no watchdog pings",
		"ProcSubset":      "only the CCM serves process metrics, which need /proc/stat",
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if _, ok := differ[k]; ok {
			continue
		}
		if !slices.Equal(m[k], a[k]) {
			t.Errorf("%s: %s has %q, %s has %q (same value expected, or list the difference in this test with its reason)",
				k, main.name, m[k], agent.name, a[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if _, ok := m[k]; !ok {
			if _, ok := differ[k]; !ok {
				t.Errorf("%s: set in %s only (add it to %s too, or list the difference in this test)", k, agent.name, main.name)
			}
		}
	}
}

// TestEnvironmentFile checks the default environment file each unit reads: it sets
// the variable ExecStart= expands, to the flags the unit needs.
func TestEnvironmentFile(t *testing.T) {
	wantFlags := map[string][]string{
		mainUnit:  {"--cloud-config=/etc/baremetal-ccm/cloud-config.yaml", "--kubeconfig=/etc/baremetal-ccm/kubeconfig"},
		agentUnit: {"--cloud-config=/etc/baremetal-ccm/cloud-config.yaml", "--kubeconfig=/etc/baremetal-ccm/agent.kubeconfig"},
	}
	varRE := regexp.MustCompile(`\$([A-Z_]+)`)
	forEachUnit(t, func(t *testing.T, u unit) {
		exec := u.exact["ExecStart"]
		m := varRE.FindStringSubmatch(exec)
		if m == nil {
			t.Fatalf("ExecStart=%q expands no variable", exec)
		}
		data, err := os.ReadFile(u.envFile())
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		sc := bufio.NewScanner(strings.NewReader(string(data)))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || line[0] == '#' {
				continue
			}
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: not an assignment: %q", u.envFile(), line)
			}
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			env[k] = v
		}
		args, ok := env[m[1]]
		if !ok {
			t.Fatalf("%s does not set %s, which ExecStart= expands", u.envFile(), m[1])
		}
		flags := strings.Fields(args)
		for _, f := range wantFlags[u.name] {
			if !slices.Contains(flags, f) {
				t.Errorf("%s=%q lacks %s", m[1], args, f)
			}
		}
	})
}
