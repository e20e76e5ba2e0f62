//go:build packaging

// Package packaging tests the deb and rpm packages built by hack/packages.sh: their
// metadata and contents, and what really happens when they are installed, upgraded and
// removed in a throwaway root.
//
//	go test -tags packaging -count=1 -v ./test/packaging/
//
// Install method: a chroot made by debootstrap (Debian minbase plus ipmitool, built once
// and cached as a tarball under $BAREMETAL_CCM_CACHE, default ~/.cache/baremetal-ccm), then
// `chroot DIR dpkg -i` and `rpm --root DIR`. Not `dpkg --root`: dpkg runs the maintainer
// scripts chrooted into DIR anyway, so DIR needs a shell, useradd and getent, i.e. a real
// system; with one, plain chroot is the simplest faithful path. The same root has /bin/sh
// and useradd for rpm, so its scriptlets really run (no --noscripts). No mounts are needed:
// the scripts use neither /proc nor /dev.
//
// systemctl does not exist in the root; a stub that logs its arguments stands in for it,
// and /run/systemd/system is created when a test wants the scripts to see a running
// systemd. The log shows exactly which systemctl calls each step made.
//
// Tests that install need root (chroot, dpkg, ownership) and skip otherwise; as root they
// apt-get install what is missing (debootstrap, rpm).
package packaging

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	user = "baremetal-ccm"
	// The packages' two units: the CCM, and the agent alone for worker hosts. Each
	// reads its own environment file, named like the unit.
	unit      = "baremetal-ccm.service"
	agentUnit = "baremetal-ccm-agent.service"
	binPath   = "/usr/bin/baremetal-cloud-controller-manager"
	ctlPath   = "/usr/bin/baremetal-ccmctl"
	// pluginPath is the kubectl plugin: a relative symlink to ctlPath.
	pluginPath   = "/usr/bin/kubectl-baremetal"
	pluginTarget = "baremetal-ccmctl"
	// stub systemctl log, inside the root
	systemctlLog = "/var/log/systemctl-stub.log"
)

// units are both units, as the maintainer scripts pass them to systemctl.
var units = []string{unit, agentUnit}

// bothUnits is units as one systemctl argument list.
var bothUnits = strings.Join(units, " ")

var (
	repo   string // repository root
	outDir string // packages built once for all tests
	v1     pkgs   // hack/packages.sh with the version it derives from git
	// Repository files that v1 ships, read just before it is built: other people may
	// edit them while the tests run.
	shipped = map[string][]byte{}
)

type pkgs struct{ version, deb, rpm string }

// file is one expected entry of a package: ls-style mode and owner/group.
type file struct{ mode, owner string }

// Expected contents; the systemd units and the environment files differ by format.
var common = map[string]file{
	binPath:                                {"-rwxr-xr-x", "root/root"},
	ctlPath:                                {"-rwxr-xr-x", "root/root"},
	"/etc/baremetal-ccm":                   {"drwxr-xr-x", "root/root"},
	"/etc/baremetal-ccm/bmc":               {"drwx------", user + "/" + user},
	"/etc/baremetal-ccm/cloud-config.yaml": {"-rw-r--r--", "root/root"},
	"/etc/baremetal-ccm/inventory.yaml":    {"-rw-r--r--", "root/root"},
}

// layout gives where each format installs units and environment files.
var layout = map[string]struct{ unitDir, envDir string }{
	"deb": {"/lib/systemd/system/", "/etc/default/"},
	"rpm": {"/usr/lib/systemd/system/", "/etc/sysconfig/"},
}

// unitPath is where the deb or rpm package installs unit u.
func unitPath(format, u string) string { return layout[format].unitDir + u }

// envPath is where the deb or rpm package installs the environment file of unit u.
func envPath(format, u string) string {
	return layout[format].envDir + strings.TrimSuffix(u, ".service")
}

// want returns the expected entries of the deb or rpm package.
func want(format string) map[string]file {
	w := map[string]file{}
	for _, u := range units {
		w[unitPath(format, u)] = file{"-rw-r--r--", "root/root"}
		w[envPath(format, u)] = file{"-rw-r--r--", "root/root"}
	}
	for k, v := range common {
		w[k] = v
	}
	return w
}

// conffiles are the noreplace configuration files of the deb or rpm package.
func conffiles(format string) []string {
	c := []string{"/etc/baremetal-ccm/cloud-config.yaml", "/etc/baremetal-ccm/inventory.yaml"}
	for _, u := range units {
		c = append(c, envPath(format, u))
	}
	sort.Strings(c)
	return c
}

// sources maps installed files to the repository files they must be copies of.
func sources(format string) map[string]string {
	s := map[string]string{
		"/etc/baremetal-ccm/cloud-config.yaml": "packaging/examples/cloud-config.yaml",
		"/etc/baremetal-ccm/inventory.yaml":    "packaging/examples/inventory.yaml",
	}
	for _, u := range units {
		s[unitPath(format, u)] = "systemd/" + u
		s[envPath(format, u)] = "packaging/default/" + strings.TrimSuffix(u, ".service")
	}
	return s
}

func TestMain(m *testing.M) {
	os.Exit(func() int {
		var err error
		if repo, err = filepath.Abs("../.."); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if outDir, err = os.MkdirTemp("", "baremetal-ccm-packages-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(outDir)
		for _, format := range []string{"deb", "rpm"} {
			for _, src := range sources(format) {
				if shipped[src], err = os.ReadFile(filepath.Join(repo, src)); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
		}
		start := time.Now()
		if v1, err = buildPackages(filepath.Join(outDir, "v1"), ""); err != nil {
			fmt.Fprintf(os.Stderr, "hack/packages.sh: %v\n", err)
			return 1
		}
		fmt.Printf("built %s and %s in %s\n", v1.deb, v1.rpm, time.Since(start).Round(time.Second))
		return m.Run()
	}())
}

// buildPackages runs hack/packages.sh into dir; version "" lets it derive one from git.
func buildPackages(dir, version string) (pkgs, error) {
	cmd := exec.Command(filepath.Join(repo, "hack/packages.sh"), dir)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "PACKAGE_VERSION="+version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return pkgs{}, fmt.Errorf("%v\n%s", err, stderr.String())
	}
	lines := strings.Fields(string(out))
	if len(lines) != 2 || !strings.HasSuffix(lines[0], ".deb") || !strings.HasSuffix(lines[1], ".rpm") {
		return pkgs{}, fmt.Errorf("want a .deb and a .rpm path on stdout, got %q", out)
	}
	p := pkgs{deb: lines[0], rpm: lines[1]}
	v, err := exec.Command("dpkg-deb", "-f", p.deb, "Version").Output()
	if err != nil {
		return pkgs{}, fmt.Errorf("dpkg-deb -f %s Version: %v", p.deb, err)
	}
	// nfpm appends the release ("-1") to the deb version.
	p.version = strings.TrimSuffix(strings.TrimSpace(string(v)), "-1")
	return p, nil
}

// upgrades holds packages built only for the install tests (as root).
var upgrades struct {
	once sync.Once
	v2   pkgs // hack/packages.sh with a higher version, same content
	v3   pkgs // deb only, higher still, with a changed upstream cloud-config.yaml
	err  error
}

func upgradePackages(t *testing.T) (v2, v3 pkgs) {
	t.Helper()
	upgrades.once.Do(func() {
		// Appending ".1" sorts higher for dpkg and rpm alike, whatever v1 looks like.
		upgrades.v2, upgrades.err = buildPackages(filepath.Join(outDir, "v2"), v1.version+".1")
		if upgrades.err == nil {
			upgrades.v3.version = v1.version + ".2"
			upgrades.v3.deb, upgrades.err = changedConfigDeb(upgrades.v3.version)
		}
	})
	if upgrades.err != nil {
		t.Fatal(upgrades.err)
	}
	return upgrades.v2, upgrades.v3
}

// changedConfigDeb builds a deb whose shipped cloud-config.yaml differs from the
// repository's, to see what dpkg does with a conffile changed both locally and upstream.
// It runs the nfpm that hack/packages.sh pins, on a copy of packaging/nfpm.yaml with that
// one source replaced (and no compression: it only lives for this test).
func changedConfigDeb(version string) (string, error) {
	script, err := os.ReadFile(filepath.Join(repo, "hack/packages.sh"))
	if err != nil {
		return "", err
	}
	nfpm := regexp.MustCompile(`github\.com/goreleaser/nfpm/v2/cmd/nfpm@v[0-9.]+`).Find(script)
	if nfpm == nil {
		return "", fmt.Errorf("no pinned nfpm in hack/packages.sh")
	}
	dir := filepath.Join(outDir, "v3")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	orig, err := os.ReadFile(filepath.Join(repo, "packaging/examples/cloud-config.yaml"))
	if err != nil {
		return "", err
	}
	changed := filepath.Join(dir, "cloud-config.yaml")
	if err := os.WriteFile(changed, append(orig, "# changed upstream\n"...), 0o644); err != nil {
		return "", err
	}
	cfg, err := os.ReadFile(filepath.Join(repo, "packaging/nfpm.yaml"))
	if err != nil {
		return "", err
	}
	src := "src: packaging/examples/cloud-config.yaml"
	if !bytes.Contains(cfg, []byte(src)) {
		return "", fmt.Errorf("packaging/nfpm.yaml has no %q", src)
	}
	cfg = bytes.ReplaceAll(cfg, []byte(src), []byte("src: "+changed))
	cfg = regexp.MustCompile(`(?m)^(\s*compression:).*$`).ReplaceAll(cfg, []byte("${1} none"))
	cfgPath := filepath.Join(dir, "nfpm.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return "", err
	}
	deb := filepath.Join(dir, "baremetal-ccm_"+version+"-1_amd64.deb")
	cmd := exec.Command("go", "run", string(nfpm), "pkg", "--config", cfgPath, "--packager", "deb", "--target", deb)
	cmd.Dir = repo // sources in nfpm.yaml are relative to the repository root
	cmd.Env = append(os.Environ(), "PACKAGE_VERSION="+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("nfpm: %v\n%s", err, out)
	}
	return deb, nil
}

func TestDebMetadata(t *testing.T) {
	logSize(t, v1.deb)
	fields := map[string]string{
		"Package":      "baremetal-ccm",
		"Version":      v1.version + "-1",
		"Architecture": "amd64",
		"Maintainer":   "baremetal-ccm maintainers <maintainers@baremetal-ccm.io>",
		"Homepage":     "https://github.com/baremetal-ccm/baremetal-ccm",
		"Depends":      "ipmitool",
		"Recommends":   "",
		"Suggests":     "",
	}
	for f, w := range fields {
		if got := strings.TrimSpace(run(t, "", "dpkg-deb", "-f", v1.deb, f)); got != w {
			t.Errorf("%s: got %q, want %q", f, got, w)
		}
	}
	if d := run(t, "", "dpkg-deb", "-f", v1.deb, "Description"); !strings.Contains(d, "cloud-controller-manager") {
		t.Errorf("Description: %q", d)
	}
	info := run(t, "", "dpkg-deb", "-I", v1.deb)
	for _, s := range []string{"preinst", "postinst", "prerm", "postrm", "conffiles"} {
		if !regexp.MustCompile(`(?m)^\s+\d+ bytes,\s+\d+ lines\s+\*?\s+` + s + `\b`).MatchString(info) {
			t.Errorf("control member %s missing:\n%s", s, info)
		}
	}
	if got := sortedLines(run(t, "", "dpkg-deb", "-I", v1.deb, "conffiles")); !equal(got, conffiles("deb")) {
		t.Errorf("conffiles: got %q, want %q", got, conffiles("deb"))
	}

	// dpkg-deb -c: "drwx------ baremetal-ccm/baremetal-ccm 0 2026-01-02 03:04 ./etc/baremetal-ccm/bmc/"
	// A symlink: "lrwxrwxrwx root/root 0 2026-01-02 03:04 ./usr/bin/kubectl-baremetal -> baremetal-ccmctl".
	got := map[string]file{}
	links := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(run(t, "", "dpkg-deb", "-c", v1.deb)), "\n") {
		f := strings.Fields(l)
		if !(len(f) == 6 || len(f) == 8 && f[6] == "->" && strings.HasPrefix(f[0], "l")) {
			t.Fatalf("unexpected dpkg-deb -c line %q", l)
		}
		p := strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")
		if len(f) == 8 {
			links[p] = f[7]
			continue
		}
		got[p] = file{f[0], f[1]}
	}
	if want := map[string]string{pluginPath: pluginTarget}; fmt.Sprint(links) != fmt.Sprint(want) {
		t.Errorf("symlinks: got %v, want %v", links, want)
	}
	// Parent directories (/etc, /usr/bin, ...) are in the tar too: only check they are
	// plain root directories, and that nothing else is shipped.
	w := want("deb")
	for p, g := range got {
		if e, ok := w[p]; ok {
			if g != e {
				t.Errorf("%s: got %v, want %v", p, g, e)
			}
		} else if g != (file{"drwxr-xr-x", "root/root"}) || !isParent(p, w) {
			t.Errorf("unexpected entry %s %v", p, g)
		}
	}
	for p := range w {
		if _, ok := got[p]; !ok {
			t.Errorf("%s missing from the deb", p)
		}
	}
}

func TestRPMMetadata(t *testing.T) {
	need(t, "rpm", "rpm")
	logSize(t, v1.rpm)
	q := func(args ...string) string {
		return run(t, "", "rpm", append([]string{"-qp"}, append(args, v1.rpm)...)...)
	}

	tags := map[string]string{
		"NAME":     "baremetal-ccm",
		"VERSION":  v1.version,
		"ARCH":     "x86_64",
		"LICENSE":  "Apache-2.0",
		"URL":      "https://github.com/baremetal-ccm/baremetal-ccm",
		"PACKAGER": "baremetal-ccm maintainers <maintainers@baremetal-ccm.io>",
	}
	for tag, w := range tags {
		if got := q("--qf", "%{"+tag+"}"); got != w {
			t.Errorf("%s: got %q, want %q", tag, got, w)
		}
	}
	if info := q("--info"); !strings.Contains(info, "cloud-controller-manager") {
		t.Errorf("rpm --info has no description:\n%s", info)
	}
	// Requires: ipmitool, and nothing else but rpmlib() capabilities.
	var reqs []string
	for _, r := range sortedLines(q("--requires")) {
		if !strings.HasPrefix(r, "rpmlib(") {
			reqs = append(reqs, r)
		}
	}
	if !equal(reqs, []string{"ipmitool"}) {
		t.Errorf("requires: got %q, want [ipmitool]", reqs)
	}
	if r := strings.TrimSpace(q("--recommends")); r != "" {
		t.Errorf("recommends: got %q, want none", r)
	}
	scripts := q("--scripts")
	for _, s := range []string{"preinstall", "postinstall", "preuninstall", "postuninstall"} {
		if !strings.Contains(scripts, s+" scriptlet (using /bin/sh)") {
			t.Errorf("%s scriptlet missing:\n%s", s, scripts)
		}
	}
	if got := sortedLines(q("--configfiles")); !equal(got, conffiles("rpm")) {
		t.Errorf("configfiles: got %q, want %q", got, conffiles("rpm"))
	}
	// "cn": config, noreplace.
	var noreplace []string
	for _, l := range sortedLines(q("--qf", `[%{FILENAMES} %{FILEFLAGS:fflags}\n]`)) {
		if f := strings.Fields(l); len(f) == 2 && f[1] == "cn" {
			noreplace = append(noreplace, f[0])
		}
	}
	if !equal(noreplace, conffiles("rpm")) {
		t.Errorf("config(noreplace) files: got %q, want %q", noreplace, conffiles("rpm"))
	}
	// rpm lists only explicit entries: the set must match exactly.
	got := map[string]file{}
	links := map[string]string{}
	for _, l := range sortedLines(q("--qf", `[%{FILEMODES:perms} %{FILEUSERNAME}/%{FILEGROUPNAME} %{FILENAMES} %{FILELINKTOS}\n]`)) {
		f := strings.Fields(l)
		if len(f) == 4 {
			links[f[2]] = f[3]
			if !strings.HasPrefix(f[0], "l") {
				t.Errorf("%s: mode %s with a link target %s", f[2], f[0], f[3])
			}
			continue
		}
		got[f[2]] = file{f[0], f[1]}
	}
	if w := want("rpm"); fmt.Sprint(got) != fmt.Sprint(w) {
		t.Errorf("files:\n got %v\nwant %v", got, w)
	}
	if want := map[string]string{pluginPath: pluginTarget}; fmt.Sprint(links) != fmt.Sprint(want) {
		t.Errorf("symlinks: got %v, want %v", links, want)
	}
	if l := sortedLines(q("--list")); len(l) != len(want("rpm"))+len(links) {
		t.Errorf("--list: %q", l)
	}
}

// TestDebInstallUpgradePurge installs, upgrades, removes and purges the deb in a chroot.
func TestDebInstallUpgradePurge(t *testing.T) {
	root := newRoot(t)
	v2, v3 := upgradePackages(t)
	// Let the scripts believe systemd runs, to see what they would ask of it.
	mkdir(t, root, "/run/systemd/system", 0o755)
	dpkg := func(args ...string) string {
		return chroot(t, root, append([]string{"dpkg"}, args...)...)
	}
	copyInto(t, root, v1.deb, "/tmp/v1.deb")
	copyInto(t, root, v2.deb, "/tmp/v2.deb")
	copyInto(t, root, v3.deb, "/tmp/v3.deb")

	// First install: files, the user, and no start/enable (only daemon-reload).
	dpkg("-i", "/tmp/v1.deb")
	checkInstalled(t, root, "deb")
	checkSystemctl(t, root, "first install", "daemon-reload")
	if got := dpkgStatus(t, root); got != "install ok installed "+v1.version+"-1" {
		t.Errorf("status after install: %q", got)
	}

	// Operator edits conffiles (the agent's environment file too) and adds a credential;
	// the upgrade keeps them all and restarts each service only if it was running
	// (try-restart).
	edited := appendFile(t, root, "/etc/baremetal-ccm/cloud-config.yaml", "# edited by the operator\n")
	editedAgentEnv := appendFile(t, root, envPath("deb", agentUnit), "NODE_NAME=worker-1\n")
	writeAs(t, root, "/etc/baremetal-ccm/bmc/node-1", "user:password\n", 0o600)
	dpkg("-i", "/tmp/v2.deb")
	if got := dpkgStatus(t, root); got != "install ok installed "+v2.version+"-1" {
		t.Errorf("status after upgrade: %q", got)
	}
	checkSystemctl(t, root, "upgrade", "daemon-reload", "try-restart "+bothUnits)
	checkContent(t, root, "/etc/baremetal-ccm/cloud-config.yaml", edited)
	checkContent(t, root, envPath("deb", agentUnit), editedAgentEnv)
	// Same upstream content: dpkg keeps the local file silently, writes no copy.
	for _, suffix := range []string{".dpkg-dist", ".dpkg-new", ".dpkg-old"} {
		checkAbsent(t, root, "/etc/baremetal-ccm/cloud-config.yaml"+suffix)
	}
	checkOwner(t, root, "/etc/baremetal-ccm/bmc", user, 0o700)
	checkOwner(t, root, "/etc/baremetal-ccm/bmc/node-1", user, 0o600)

	// Upstream changed the conffile too. Without a terminal dpkg would stop at its
	// conffile prompt (the package stays unconfigured); unattended upgrades pass
	// --force-confdef --force-confold, which keep the local file and put the new one
	// beside it as .dpkg-dist.
	dpkg("--force-confdef", "--force-confold", "-i", "/tmp/v3.deb")
	checkContent(t, root, "/etc/baremetal-ccm/cloud-config.yaml", edited)
	upstream, err := os.ReadFile(filepath.Join(repo, "packaging/examples/cloud-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	checkContent(t, root, "/etc/baremetal-ccm/cloud-config.yaml.dpkg-dist", string(upstream)+"# changed upstream\n")
	checkAbsent(t, root, "/etc/baremetal-ccm/inventory.yaml.dpkg-dist") // untouched: replaced silently
	checkSystemctl(t, root, "upgrade", "daemon-reload", "try-restart "+bothUnits)

	// Remove: both services stopped, program and units gone, configuration kept.
	writeAs(t, root, "/etc/baremetal-ccm/kubeconfig", "apiVersion: v1\n", 0o640)
	mkdir(t, root, "/etc/systemd/system/multi-user.target.wants", 0o755)
	for _, u := range units {
		// As `systemctl enable` would leave them (enabling both is an operator's mistake,
		// but purge must clean up after either).
		if err := os.Symlink(unitPath("deb", u), filepath.Join(root, "/etc/systemd/system/multi-user.target.wants", u)); err != nil {
			t.Fatal(err)
		}
	}
	dpkg("-r", "baremetal-ccm")
	checkSystemctl(t, root, "remove", "stop "+bothUnits, "daemon-reload")
	checkAbsent(t, root, binPath)
	checkAbsent(t, root, ctlPath)
	checkAbsent(t, root, pluginPath)
	for _, u := range units {
		checkAbsent(t, root, unitPath("deb", u))
	}
	for _, c := range conffiles("deb") {
		if _, err := os.Stat(filepath.Join(root, c)); err != nil {
			t.Errorf("conffile after remove: %v", err)
		}
	}
	if got := dpkgStatus(t, root); got != "deinstall ok config-files "+v3.version+"-1" {
		t.Errorf("status after remove: %q", got)
	}

	// Purge: conffiles, everything the operator added in /etc/baremetal-ccm and the
	// enablement symlinks are gone; the user stays (see packaging/scripts/deb/postrm).
	dpkg("-P", "baremetal-ccm")
	checkSystemctl(t, root, "purge", "daemon-reload")
	checkAbsent(t, root, "/etc/baremetal-ccm")
	for _, u := range units {
		checkAbsent(t, root, envPath("deb", u))
		checkAbsent(t, root, "/etc/systemd/system/multi-user.target.wants/"+u)
	}
	if out, err := chrootCmd(root, "dpkg-query", "-W", "baremetal-ccm").CombinedOutput(); err == nil {
		t.Errorf("dpkg still knows the package after purge: %s", out)
	}
	if _, ok := lookup(t, root, "passwd", user); !ok {
		t.Errorf("user %s removed on purge; the convention here is to keep it", user)
	}
}

// TestRPMInstallUpgradeErase does the same with rpm --root. The root's rpm database is
// empty (ipmitool is there as a deb), hence --nodeps. Its scriptlets run chrooted in it.
func TestRPMInstallUpgradeErase(t *testing.T) {
	need(t, "rpm", "rpm")
	root := newRoot(t)
	v2, _ := upgradePackages(t)
	rpm := func(args ...string) {
		t.Helper()
		run(t, "", "rpm", append([]string{"--root", root, "--dbpath", "/var/lib/rpm", "--nodeps"}, args...)...)
	}

	// No /run/systemd/system: the scriptlets must not call systemctl at all.
	rpm("-i", v1.rpm)
	checkInstalled(t, root, "rpm")
	checkSystemctl(t, root, "first install without systemd")

	mkdir(t, root, "/run/systemd/system", 0o755)
	edited := appendFile(t, root, "/etc/baremetal-ccm/cloud-config.yaml", "# edited by the operator\n")
	editedAgentEnv := appendFile(t, root, envPath("rpm", agentUnit), "NODE_NAME=worker-1\n")
	rpm("-U", v2.rpm)
	// New %post ($1=2), then the old %postun ($1=1).
	checkSystemctl(t, root, "upgrade", "daemon-reload", "try-restart "+bothUnits, "daemon-reload")
	checkContent(t, root, "/etc/baremetal-ccm/cloud-config.yaml", edited)
	checkContent(t, root, envPath("rpm", agentUnit), editedAgentEnv)
	checkAbsent(t, root, "/etc/baremetal-ccm/cloud-config.yaml.rpmnew") // same upstream content
	checkAbsent(t, root, envPath("rpm", agentUnit)+".rpmnew")

	rpm("-e", "baremetal-ccm")
	checkSystemctl(t, root, "erase", "stop "+bothUnits, "--no-reload disable "+bothUnits, "daemon-reload")
	checkAbsent(t, root, binPath)
	checkAbsent(t, root, ctlPath)
	checkAbsent(t, root, pluginPath)
	for _, u := range units {
		checkAbsent(t, root, unitPath("rpm", u))
	}
	checkAbsent(t, root, envPath("rpm", unit)) // unmodified config: removed
	checkContent(t, root, "/etc/baremetal-ccm/cloud-config.yaml.rpmsave", edited)
	checkContent(t, root, envPath("rpm", agentUnit)+".rpmsave", editedAgentEnv)
}

// checkInstalled checks the installed files (mode, owner, content), the service user and
// that nothing enabled either service.
func checkInstalled(t *testing.T, root, format string) {
	t.Helper()
	pw, ok := lookup(t, root, "passwd", user)
	if !ok {
		t.Fatalf("no user %s in the root's /etc/passwd", user)
	}
	// name:x:uid:gid:gecos:home:shell
	if uid, _ := strconv.Atoi(pw[2]); uid == 0 || uid >= 1000 {
		t.Errorf("%s: uid %d is not a system uid", user, uid)
	}
	if pw[5] != "/var/lib/baremetal-ccm" || pw[6] != "/usr/sbin/nologin" {
		t.Errorf("%s: home %q shell %q", user, pw[5], pw[6])
	}
	gr, ok := lookup(t, root, "group", user)
	if !ok || gr[2] != pw[3] {
		t.Errorf("group %s missing or not the user's primary group: %v / %v", user, gr, pw)
	}
	for p, w := range want(format) {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Errorf("installed: %v", err)
			continue
		}
		owner := "root"
		if w.owner != "root/root" {
			owner = user
		}
		checkOwner(t, root, p, owner, fi.Mode().Perm())
		if got := fi.Mode().String(); got != w.mode {
			t.Errorf("%s: mode %s, want %s", p, got, w.mode)
		}
	}
	for p, src := range sources(format) {
		checkContent(t, root, p, string(shipped[src]))
	}
	// The tool runs in the target system, under its own name and as the kubectl plugin.
	if l, err := os.Readlink(filepath.Join(root, pluginPath)); err != nil || l != pluginTarget {
		t.Errorf("%s: link to %q (%v), want %q", pluginPath, l, err, pluginTarget)
	}
	for _, p := range []string{ctlPath, pluginPath} {
		if out := chroot(t, root, p, "version"); !strings.HasPrefix(out, "baremetal-ccmctl ") {
			t.Errorf("%s version: %q", p, out)
		}
	}
	for _, u := range units {
		if m, _ := filepath.Glob(filepath.Join(root, "/etc/systemd/system/*.wants", u)); len(m) > 0 {
			t.Errorf("%s was enabled: %v", u, m)
		}
	}
}

// newRoot extracts the cached debootstrap root into a temporary directory, with the
// systemctl stub. Removed with the test.
func newRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("installing into a chroot needs root (chroot, dpkg, file owners)")
	}
	tarball := baseTarball(t)
	root := t.TempDir()
	run(t, "", "tar", "-C", root, "--numeric-owner", "-xzf", tarball)
	if _, err := os.Lstat(filepath.Join(root, "/usr/bin/systemctl")); err == nil {
		t.Fatal("the base root has a real systemctl; the stub would replace it")
	}
	stub := "#!/bin/sh\necho \"$*\" >> " + systemctlLog + "\n"
	if err := os.WriteFile(filepath.Join(root, "/usr/bin/systemctl"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

var base struct {
	once sync.Once
	path string
	err  error
}

// baseTarball returns the cached minbase root (with ipmitool, the packages' dependency),
// making it with debootstrap the first time (about 3 minutes). Its suite is the host's
// Debian release and its mirror the host's apt source for it.
func baseTarball(t *testing.T) string {
	t.Helper()
	need(t, "debootstrap", "debootstrap")
	base.once.Do(func() {
		suite := "bookworm"
		if b, err := os.ReadFile("/etc/os-release"); err == nil {
			if m := regexp.MustCompile(`(?m)^VERSION_CODENAME=(\w+)`).FindSubmatch(b); m != nil {
				suite = string(m[1])
			}
		}
		cache := os.Getenv("BAREMETAL_CCM_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				base.err = err
				return
			}
			cache = filepath.Join(home, ".cache/baremetal-ccm")
		}
		base.path = filepath.Join(cache, "packaging-root-"+suite+"-minbase-ipmitool.tar.gz")
		if _, err := os.Stat(base.path); err == nil {
			return
		}
		if err := os.MkdirAll(cache, 0o755); err != nil {
			base.err = err
			return
		}
		tmp, err := os.MkdirTemp(cache, "debootstrap-")
		if err != nil {
			base.err = err
			return
		}
		defer os.RemoveAll(tmp)
		args := []string{"--variant=minbase", "--include=ipmitool", suite, filepath.Join(tmp, "root")}
		if out, err := exec.Command("apt-get", "indextargets", "--format", "$(REPO_URI)",
			"Release: "+suite, "Identifier: Packages").Output(); err == nil && len(bytes.Fields(out)) > 0 {
			args = append(args, string(bytes.Fields(out)[0]))
		}
		t.Logf("building the base root (once): debootstrap %s", strings.Join(args, " "))
		start := time.Now()
		if out, err := exec.Command("debootstrap", args...).CombinedOutput(); err != nil {
			base.err = fmt.Errorf("debootstrap: %v\n%s", err, tail(out))
			return
		}
		// The downloaded .debs are not needed in the root.
		cached, _ := filepath.Glob(filepath.Join(tmp, "root/var/cache/apt/archives/*.deb"))
		for _, f := range cached {
			os.Remove(f)
		}
		part := filepath.Join(tmp, "root.tar.gz")
		if out, err := exec.Command("tar", "-C", filepath.Join(tmp, "root"), "--numeric-owner", "-czf", part, ".").CombinedOutput(); err != nil {
			base.err = fmt.Errorf("tar: %v\n%s", err, out)
			return
		}
		base.err = os.Rename(part, base.path)
		t.Logf("base root cached in %s (%s)", base.path, time.Since(start).Round(time.Second))
	})
	if base.err != nil {
		t.Fatal(base.err)
	}
	return base.path
}

// need makes sure a command exists, installing its Debian package as root.
func need(t *testing.T, cmd, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(cmd); err == nil {
		return
	}
	if os.Geteuid() != 0 {
		t.Skipf("%s is missing and installing the Debian package %s needs root", cmd, pkg)
	}
	t.Logf("installing the Debian package %s", pkg)
	run(t, "", "apt-get", "update", "-qq")
	run(t, "", "apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg)
}

func chrootCmd(root string, args ...string) *exec.Cmd {
	cmd := exec.Command("chroot", append([]string{root}, args...)...)
	// A clean environment, as a root shell in the target system would have.
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
	return cmd
}

func chroot(t *testing.T, root string, args ...string) string {
	t.Helper()
	out, err := chrootCmd(root, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("chroot %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func dpkgStatus(t *testing.T, root string) string {
	t.Helper()
	return chroot(t, root, "dpkg-query", "-W", "-f", "${Status} ${Version}", "baremetal-ccm")
}

// checkSystemctl compares the calls of the systemctl stub since the last check.
func checkSystemctl(t *testing.T, root, step string, want ...string) {
	t.Helper()
	p := filepath.Join(root, systemctlLog)
	b, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	os.Remove(p)
	var got []string
	if s := strings.TrimSpace(string(b)); s != "" {
		got = strings.Split(s, "\n")
	}
	if !equal(got, want) {
		t.Errorf("%s: systemctl calls %q, want %q", step, got, want)
	}
}

// lookup returns the fields of name's line in the root's /etc/passwd or /etc/group.
func lookup(t *testing.T, root, db, name string) ([]string, bool) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "etc", db))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Split(s.Text(), ":"); fields[0] == name {
			return fields, true
		}
	}
	return nil, false
}

// checkOwner checks that p belongs to owner (user and group of that name in the root)
// and has the permission bits perm.
func checkOwner(t *testing.T, root, p, owner string, perm os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(root, p))
	if err != nil {
		t.Error(err)
		return
	}
	uid, gid := "0", "0"
	if owner != "root" {
		pw, _ := lookup(t, root, "passwd", owner)
		gr, _ := lookup(t, root, "group", owner)
		if pw == nil || gr == nil {
			t.Errorf("%s: no user or group %s", p, owner)
			return
		}
		uid, gid = pw[2], gr[2]
	}
	st := fi.Sys().(*syscall.Stat_t)
	if got := fmt.Sprintf("%d:%d", st.Uid, st.Gid); got != uid+":"+gid {
		t.Errorf("%s: owner %s, want %s:%s (%s)", p, got, uid, gid, owner)
	}
	if fi.Mode().Perm() != perm {
		t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), perm)
	}
}

func checkContent(t *testing.T, root, p, want string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Error(err)
	} else if string(b) != want {
		t.Errorf("%s: content differs:\n%s", p, b)
	}
}

func checkAbsent(t *testing.T, root, p string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
		t.Errorf("%s: should not exist (%v)", p, err)
	}
}

func appendFile(t *testing.T, root, p, s string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, s...)
	if err := os.WriteFile(filepath.Join(root, p), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// writeAs writes a file owned by the service user, as an operator would.
func writeAs(t *testing.T, root, p, s string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, p), []byte(s), perm); err != nil {
		t.Fatal(err)
	}
	chroot(t, root, "chown", user+":"+user, p)
}

func mkdir(t *testing.T, root, p string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, p), perm); err != nil {
		t.Fatal(err)
	}
}

func copyInto(t *testing.T, root, src, dst string) {
	t.Helper()
	run(t, "", "cp", src, filepath.Join(root, dst))
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func logSize(t *testing.T, p string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d bytes (%.1f MiB)", filepath.Base(p), fi.Size(), float64(fi.Size())/(1<<20))
}

// isParent reports whether p is a parent directory of an expected entry.
func isParent(p string, w map[string]file) bool {
	for q := range w {
		if strings.HasPrefix(q, p+"/") {
			return true
		}
	}
	return false
}

func sortedLines(s string) []string {
	var l []string
	for _, x := range strings.Split(s, "\n") {
		if x = strings.TrimSpace(x); x != "" {
			l = append(l, x)
		}
	}
	sort.Strings(l)
	return l
}

func equal(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
