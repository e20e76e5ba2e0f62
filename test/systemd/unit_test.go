//go:build systemd

// Package systemd checks systemd/baremetal-ccm.service with systemd's own tools:
// `systemd-analyze verify` (the unit loads without a warning, its ExecStart binary
// exists) and `systemd-analyze security --offline=true` (exposure at most 2.0, and
// nothing exposed beyond the items the unit justifies), plus the settings the service
// depends on. Run: go test -tags systemd -count=1 -v ./test/systemd/
// The tests skip when systemd-analyze is missing (Debian: apt-get install systemd).
package systemd

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
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
	unitName = "baremetal-ccm.service"
	binary   = "/usr/bin/baremetal-cloud-controller-manager"
	// maxExposure is the highest acceptable "Overall exposure level".
	maxExposure = 2.0
)

// unitPath is the unit file in the repository (go test runs in the package directory).
var unitPath = filepath.Join("..", "..", "systemd", unitName)

// allowedExposure lists what `systemd-analyze security` may still flag, with the
// reason (the unit file says the same next to the directive). Anything else flagged
// is a regression: tighten the unit, or add the item here with its reason.
var allowedExposure = map[string]string{
	"PrivateNetwork=":                      "it manages the host's routes and talks to kube-apiserver, BMCs and BGP peers",
	"PrivateUsers=":                        "CAP_NET_ADMIN in a user namespace would not act on the host's network namespace",
	"IPAddressDeny=":                       "apiserver, BMC and router addresses are operator-defined",
	"RootDirectory=/RootImage=":            "runs the host's ipmitool and reads the host's /etc",
	"AmbientCapabilities=":                 "a non-root process needs CAP_NET_ADMIN and CAP_NET_BIND_SERVICE",
	"CapabilityBoundingSet=~CAP_NET_ADMIN": "netlink routes",
	"CapabilityBoundingSet=~CAP_NET_(BIND_SERVICE|BROADCAST|RAW)": "BGP on port 179 (CAP_NET_BIND_SERVICE only)",
	"RestrictAddressFamilies=~AF_(INET|INET6)":                    "kube-apiserver, BMCs (HTTPS, IPMI), BGP",
	"RestrictAddressFamilies=~AF_NETLINK":                         "routes over netlink",
	"RestrictAddressFamilies=~AF_UNIX":                            "journal and notify sockets",
	"ProcSubset=":                                                 "ProcSubset=pid hides /proc/stat, which process_start_time_seconds needs",
	"DeviceAllow=":                                                "ProtectClock=yes itself allows reading /dev/rtc (char-rtc:r)",
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
// packaged units, the unit under test where the packages install it, and (if
// withBinary) an executable stand-in for the CCM binary. verify only checks that
// ExecStart's command exists and is executable; a stub does, without a build.
func root(t *testing.T, unit []byte, withBinary bool) string {
	t.Helper()
	r := t.TempDir()
	units := filepath.Join(r, "usr", "lib", "systemd", "system")
	if err := copyTree(systemUnitDir(t), units); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(units, unitName), unit, 0o644); err != nil {
		t.Fatal(err)
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

func readUnit(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestVerify(t *testing.T) {
	systemdAnalyze(t)
	unit := readUnit(t)

	t.Run("unit", func(t *testing.T) {
		stdout, stderr, code := run(t, "verify", "--root="+root(t, unit, true), unitName)
		if code != 0 || stdout != "" || stderr != "" {
			// verify exits 0 on unknown keys and unparsable values: any output fails.
			t.Fatalf("systemd-analyze verify: exit %d, want 0 and no output:\n%s%s", code, stdout, stderr)
		}
	})

	// The controls show that the check above can fail with this systemd.
	t.Run("control: missing binary is reported", func(t *testing.T) {
		_, stderr, code := run(t, "verify", "--root="+root(t, unit, false), unitName)
		if code == 0 || !strings.Contains(stderr, binary) {
			t.Fatalf("verify without %s: exit %d, output %q; want a failure naming it", binary, code, stderr)
		}
	})
	t.Run("control: unknown key is reported", func(t *testing.T) {
		bad := strings.Replace(string(unit), "[Service]\n", "[Service]\nNoSuchSetting=yes\n", 1)
		stdout, stderr, _ := run(t, "verify", "--root="+root(t, []byte(bad), true), unitName)
		if !strings.Contains(stdout+stderr, "NoSuchSetting") {
			t.Fatalf("verify did not report an unknown key; output %q", stdout+stderr)
		}
	})
}

var overallRE = regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(unitName) + `: ([0-9]+\.[0-9]+) `)

func TestSecurityExposure(t *testing.T) {
	stdout, stderr, code := run(t, "security", "--offline=true", "--no-pager", unitPath)
	t.Logf("systemd-analyze security --offline=true %s:\n%s", unitPath, stdout)
	if code != 0 || stderr != "" {
		t.Fatalf("systemd-analyze security: exit %d, want 0 and nothing on stderr:\n%s", code, stderr)
	}
	m := overallRE.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no %q line in the output", "Overall exposure level")
	}
	exposure, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
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
		if _, ok := allowedExposure[name]; !ok {
			t.Errorf("newly exposed: %s (tighten the unit, or add it to allowedExposure with the reason)", name)
		}
	}
	if len(exposed) == 0 {
		t.Errorf("no exposed (✗) item parsed: the output format changed?")
	}

	// The same limit through systemd-analyze itself (threshold in tenths).
	if _, _, code := run(t, "security", "--offline=true", "--no-pager",
		"--threshold="+strconv.Itoa(int(maxExposure*10)), unitPath); code != 0 {
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
	svc := settings(t, readUnit(t))["Service"]
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

	for k, want := range map[string]string{
		"Type":            "notify",
		"NotifyAccess":    "main",
		"Restart":         "on-failure",
		"ExecStart":       binary + " $BAREMETAL_CCM_ARGS",
		"User":            "baremetal-ccm",
		"Group":           "baremetal-ccm",
		"NoNewPrivileges": "yes",
		"ProtectSystem":   "strict",
		"PrivateTmp":      "yes",
		"KillMode":        "mixed",
	} {
		if got := last(k); got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"WatchdogSec", "TimeoutStartSec", "TimeoutStopSec", "LimitNOFILE"} {
		if last(k) == "" {
			t.Errorf("%s= is not set", k)
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
	if got, want := svc["EnvironmentFile"], []string{"-/etc/default/baremetal-ccm", "-/etc/sysconfig/baremetal-ccm"}; !slices.Equal(got, want) {
		t.Errorf("EnvironmentFile=%q, want %q (optional, deb then rpm)", got, want)
	}
	if got := svc["SystemCallFilter"]; len(got) == 0 || got[0] != "@system-service" {
		t.Errorf("SystemCallFilter=%q, want an allow list starting with @system-service", got)
	}
}
