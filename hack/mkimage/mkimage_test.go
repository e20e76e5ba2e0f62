package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestSpecMatchesDockerfile: packaging/Dockerfile configures the image as the spec does,
// so `docker build` and `make image` give the same image (the files come from the same
// hack/image.sh).
func TestSpecMatchesDockerfile(t *testing.T) {
	spec, err := LoadSpec("../../packaging/image/image.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../packaging/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// The instructions of the last stage, continuation lines joined.
	var lines []string
	joined := ""
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if strings.HasSuffix(l, `\`) {
			joined += strings.TrimSuffix(l, `\`) + " "
			continue
		}
		lines = append(lines, strings.TrimSpace(joined+l))
		joined = ""
	}
	last := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			last = i
		}
	}
	lines = lines[last:]
	if lines[0] != "FROM scratch" {
		t.Errorf("the image's stage starts with %q, want FROM scratch (the files are hack/image.sh's)", lines[0])
	}
	var env []string
	var entrypoint []string
	var workdir string
	labels := map[string]string{}
	build := false
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		switch instr {
		case "ENV":
			env = append(env, rest)
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &entrypoint); err != nil {
				t.Errorf("ENTRYPOINT %s: %v", rest, err)
			}
		case "WORKDIR":
			workdir = rest
		case "LABEL":
			for k, v := range labelPairs(t, rest) {
				labels[k] = v
			}
		case "COPY":
			build = rest == "--from=build /rootfs/ /"
		}
	}
	if !build {
		t.Error("the image's files must be copied from the build stage's /rootfs (hack/image.sh --rootfs)")
	}
	if !strings.Contains(string(data), "hack/image.sh --rootfs /rootfs") {
		t.Error("the build stage must run hack/image.sh --rootfs /rootfs")
	}
	if !slices.Equal(env, spec.Config.Env) || !slices.Equal(entrypoint, spec.Config.Entrypoint) || workdir != spec.Config.WorkingDir {
		t.Errorf("Dockerfile: ENV %v ENTRYPOINT %v WORKDIR %q; spec: %v %v %q", env, entrypoint, workdir, spec.Config.Env, spec.Config.Entrypoint, spec.Config.WorkingDir)
	}
	for k, v := range spec.Config.Labels {
		if labels[k] != v {
			t.Errorf("Dockerfile LABEL %s=%q, spec %q", k, labels[k], v)
		}
	}
	for _, k := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision"} {
		if labels[k] == "" {
			t.Errorf("Dockerfile lacks LABEL %s (hack/image.sh passes it to mkimage)", k)
		}
	}
}

// labelPairs parses LABEL's key="value" pairs (values quoted, may hold spaces).
func labelPairs(t *testing.T, s string) map[string]string {
	out := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		k, rest, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(rest, `"`) {
			t.Fatalf("LABEL %q: want key=\"value\" pairs", s)
		}
		end := strings.IndexByte(rest[1:], '"')
		if end < 0 {
			t.Fatalf("LABEL %q: unterminated value", s)
		}
		out[k] = rest[1 : end+1]
		s = rest[end+2:]
	}
	return out
}

func TestSpecValidation(t *testing.T) {
	dir := t.TempDir()
	write := func(doc string) string {
		p := filepath.Join(dir, "spec.yaml")
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, err := LoadSpec(write(`config: {entrypoint: []}
debian: {pathExclude: [relative/*, "/x[!]"], ignoreDepends: {libc6: x}}
layers:
- name: ""
  packages: [libc6, libc6]
  caBundle: etc/ca.crt
  files:
  - {path: /a/../b, content: x}
  - {path: /c, content: x, dir: true}
  - {path: /d, content: x, mode: "999"}
- name: empty
unknownField: 1
`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"config.entrypoint: required", `"relative/*": must be absolute`, `"/x[!]": not a glob`,
		"layers[0].name: required", "libc6 is listed twice", "caBundle", "clean absolute path",
		"exactly one of src, content, dir and symlink", `"999" is not an octal mode`, "layers[1]: no packages and no files",
		"ignoreDepends: libc6 is in the image", `unknown field "unknownField"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := LoadSpec("../../packaging/image/image.yaml"); err != nil {
		t.Errorf("the packaged spec: %v", err)
	}
}

// TestPathFilter: dpkg's path-exclude/path-include semantics (fnmatch without
// FNM_PATHNAME), as debian:bookworm-slim configures them.
func TestPathFilter(t *testing.T) {
	f := newPathFilter(Debian{
		PathExclude: []string{"/usr/share/doc/*", "/usr/share/locale/*", "/x/[ab]?"},
		PathInclude: []string{"/usr/share/doc/*/copyright"},
	})
	for p, want := range map[string]bool{
		"/usr/share/doc/libc6":                    true,
		"/usr/share/doc/libc6/changelog.gz":       true,
		"/usr/share/doc/libc6/copyright":          false,
		"/usr/share/doc/a/examples/deb/copyright": false,
		"/usr/share/locale/de/LC_MESSAGES/x.mo":   true,
		"/usr/share/doc":                          false,
		"/usr/bin/ipmitool":                       false,
		"/x/a1":                                   true,
		"/x/c1":                                   false,
	} {
		if got := f.excluded(p); got != want {
			t.Errorf("excluded(%s) = %v, want %v", p, got, want)
		}
	}
}

func TestDepends(t *testing.T) {
	if got := parseDepends("libc6 (>= 2.34), debconf (>= 0.5) | debconf-2.0, python3:any, "); !reflect.DeepEqual(got, [][]string{{"libc6"}, {"debconf", "debconf-2.0"}, {"python3"}}) {
		t.Errorf("parseDepends = %v", got)
	}
	mk := func(control string) *deb { return &deb{fields: parseControl(control)} }
	debs := []*deb{
		mk("Package: app\nVersion: 1\nPre-Depends: init-system-helpers (>= 1.54~)\nDepends: libc6 (>= 2.34), libfoo | libbar,\n mail-transport-agent\n"),
		mk("Package: libc6\nVersion: 2.36\nDepends: libgcc-s1\n"),
		mk("Package: libgcc-s1\nVersion: 12\n"),
		mk("Package: exim\nVersion: 4\nProvides: mail-transport-agent\n"),
	}
	err := checkDepends(debs, map[string]string{"init-system-helpers": "scripts", "stale": "x"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"app Depends libfoo | libbar", "ignoreDepends names stale"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "mail-transport-agent") || strings.Contains(err.Error(), "init-system-helpers") || strings.Contains(err.Error(), "libgcc") {
		t.Errorf("a met (provided, ignored or present) dependency is reported:\n%v", err)
	}
	debs = append(debs, mk("Package: libbar\nVersion: 1\n"))
	if err := checkDepends(debs, map[string]string{"init-system-helpers": "scripts"}); err != nil {
		t.Errorf("all met: %v", err)
	}
}

// fakeDeb builds a .deb with dpkg-deb: files maps paths to contents (a trailing / makes
// a directory, "->target" a symlink).
func fakeDeb(t *testing.T, dir, name, depends string, files map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("needs dpkg-deb (Debian's dpkg)")
	}
	root := filepath.Join(dir, name+"-root")
	var sums strings.Builder
	for p, content := range files {
		full := filepath.Join(root, p)
		switch {
		case strings.HasSuffix(p, "/"):
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		case strings.HasPrefix(content, "->"):
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(strings.TrimPrefix(content, "->"), full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := md5sum(content)
		fmt.Fprintf(&sums, "%s  %s\n", sum, strings.TrimPrefix(p, "/"))
	}
	if err := os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	control := fmt.Sprintf("Package: %s\nVersion: 1.0-1\nArchitecture: amd64\nMaintainer: e2e <e2e@example.org>\nDescription: test package\n", name)
	if depends != "" {
		control += "Depends: " + depends + "\n"
	}
	for f, c := range map[string]string{"control": control, "md5sums": sums.String()} {
		if err := os.WriteFile(filepath.Join(root, "DEBIAN", f), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, name+"_1.0-1_amd64.deb")
	if b, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, out).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v: %s", err, b)
	}
	return out
}

func md5sum(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

const testSpec = `config:
  entrypoint: [/usr/bin/app]
  env: [PATH=/usr/bin]
  labels: {org.opencontainers.image.source: https://example.org/app}
debian:
  pathExclude: [/usr/share/doc/*]
  pathInclude: [/usr/share/doc/*/copyright]
layers:
- name: base
  packages: [libz, certs]
  caBundle: /etc/ssl/certs/ca-certificates.crt
  files:
  - {path: /etc/passwd, content: "root:x:0:0::/root:/sbin/nologin\n"}
  - {path: /tmp, dir: true, mode: "1777"}
- name: app
  files:
  - {path: /usr/bin/app, src: app.bin, mode: "0755"}
`

// testImage writes the spec, its packages and its file into a directory.
func testImage(t *testing.T) (dir, spec string, debs []string) {
	t.Helper()
	dir = t.TempDir()
	debs = []string{
		fakeDeb(t, dir, "libz", "", map[string]string{
			"/usr/lib/libz.so.1":             "->libz.so.1.2",
			"/usr/lib/libz.so.1.2":           "not really a library",
			"/usr/share/doc/libz/changelog":  "long",
			"/usr/share/doc/libz/copyright":  "MIT",
			"/usr/share/doc/libz/more/notes": "x",
		}),
		fakeDeb(t, dir, "certs", "libz (>= 1)", map[string]string{
			"/usr/share/ca-certificates/mozilla/b.crt": "-----B-----",
			"/usr/share/ca-certificates/mozilla/a.crt": "-----A-----\n",
			"/etc/ssl/certs/":                          "",
		}),
	}
	spec = filepath.Join(dir, "image.yaml")
	if err := os.WriteFile(spec, []byte(testSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.bin"), []byte("#!/bin/true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, spec, debs
}

func build(t *testing.T, dir, spec string, debs []string, out string, extra ...string) string {
	t.Helper()
	args := []string{"--spec", spec, "--src-dir", dir, "--ref", "localhost/test/app:v1", "--out", out, "--source-date-epoch", "1700000000",
		"--label", "org.opencontainers.image.version=v1"}
	for _, d := range debs {
		args = append(args, "--deb", d)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append(args, extra...), &stdout, &stderr); code != 0 {
		t.Fatalf("mkimage: exit %d: %s", code, stderr.String())
	}
	return stdout.String()
}

// TestImage: the archive is a valid OCI image layout (and docker save layout) with the
// spec's configuration, and the same inputs give the same bytes.
func TestImage(t *testing.T) {
	dir, spec, debs := testImage(t)
	out1, out2 := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	summary := build(t, dir, spec, debs, out1)
	build(t, dir, spec, []string{debs[1], debs[0]}, out2) // order of --deb does not matter
	a, _ := os.ReadFile(out1)
	b, _ := os.ReadFile(out2)
	if !bytes.Equal(a, b) {
		t.Fatal("two builds of the same inputs differ")
	}
	for _, want := range []string{"image    localhost/test/app:v1", "digest   sha256:", "packages libz 1.0-1, certs 1.0-1"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}

	files := readTar(t, bytes.NewReader(a))
	var idx v1.IndexManifest
	mustJSON(t, files["index.json"], &idx)
	if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations["io.containerd.image.name"] != "localhost/test/app:v1" ||
		idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v1" || idx.Manifests[0].Platform == nil ||
		idx.Manifests[0].Platform.Architecture != "amd64" || idx.Manifests[0].Platform.OS != "linux" ||
		idx.Manifests[0].MediaType != types.OCIManifestSchema1 || idx.Manifests[0].ArtifactType != "" {
		t.Fatalf("index.json = %s", files["index.json"])
	}
	var layoutFile struct{ ImageLayoutVersion string }
	if mustJSON(t, files["oci-layout"], &layoutFile); layoutFile.ImageLayoutVersion != "1.0.0" {
		t.Errorf("oci-layout = %s", files["oci-layout"])
	}
	// every blob is named by its digest
	for name, data := range files {
		if hexd, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && hexd != "" {
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hexd {
				t.Errorf("blob %s has digest %x", name, sum)
			}
		}
	}
	if !strings.Contains(summary, "digest   "+idx.Manifests[0].Digest.String()+" (manifest)") {
		t.Errorf("the summary's digest is not the manifest's %s:\n%s", idx.Manifests[0].Digest, summary)
	}
	var m v1.Manifest
	mustJSON(t, files[blobPath(idx.Manifests[0].Digest)], &m)
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("manifest media type %s, config %s", m.MediaType, m.Config.MediaType)
	}
	if !strings.Contains(summary, "image ID "+m.Config.Digest.String()+" (config)") {
		t.Errorf("the summary's image ID is not the config's %s:\n%s", m.Config.Digest, summary)
	}
	var cfg v1.ConfigFile
	mustJSON(t, files[blobPath(m.Config.Digest)], &cfg)
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/bin/app"}) || !cfg.Created.Equal(time.Unix(1700000000, 0)) ||
		cfg.Architecture != "amd64" || cfg.OS != "linux" || cfg.RootFS.Type != "layers" ||
		cfg.Config.Labels["org.opencontainers.image.version"] != "v1" || cfg.Config.Labels["org.opencontainers.image.source"] != "https://example.org/app" ||
		cfg.Config.Labels["org.opencontainers.image.created"] != "2023-11-14T22:13:20Z" || m.Annotations["org.opencontainers.image.version"] != "v1" {
		t.Errorf("config %+v, manifest annotations %v", cfg, m.Annotations)
	}
	var dm tarball.Manifest
	mustJSON(t, files["manifest.json"], &dm)
	if len(dm) != 1 || dm[0].Config != blobPath(m.Config.Digest) || !slices.Equal(dm[0].RepoTags, []string{"localhost/test/app:v1"}) || len(dm[0].Layers) != 2 {
		t.Errorf("manifest.json = %s", files["manifest.json"])
	}
	if len(m.Layers) != 2 || len(cfg.RootFS.DiffIDs) != 2 || len(cfg.History) != 2 {
		t.Fatalf("%d layers, %d diff IDs, %d history rows", len(m.Layers), len(cfg.RootFS.DiffIDs), len(cfg.History))
	}
	for i, l := range m.Layers {
		if dm[0].Layers[i] != blobPath(l.Digest) || l.MediaType != types.OCILayer {
			t.Errorf("layer %d: %s %s, manifest.json names %s", i, l.MediaType, l.Digest, dm[0].Layers[i])
		}
	}
	layers := make([]map[string]*tar.Header, 2)
	contents := map[string][]byte{}
	for i, l := range m.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(files[blobPath(l.Digest)]))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != cfg.RootFS.DiffIDs[i].Hex {
			t.Errorf("layer %d: diff ID %s, content sha256:%x", i, cfg.RootFS.DiffIDs[i], sum)
		}
		layers[i] = map[string]*tar.Header{}
		var names []string
		tr := tar.NewReader(bytes.NewReader(raw))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if !h.ModTime.Equal(time.Unix(1700000000, 0)) || h.Uname != "" || h.Gname != "" {
				t.Errorf("%s: time %v, owner names %q %q", h.Name, h.ModTime, h.Uname, h.Gname)
			}
			names = append(names, h.Name)
			layers[i][h.Name] = h
			contents[h.Name], _ = io.ReadAll(tr)
		}
		if !slices.IsSorted(names) {
			t.Errorf("layer %d is not in path order: %v", i, names)
		}
	}
	base, app := layers[0], layers[1]
	for _, want := range []string{"usr/lib/libz.so.1.2", "usr/share/doc/libz/copyright", "etc/passwd", "var/lib/dpkg/status.d/libz", "var/lib/dpkg/status.d/certs.md5sums", "etc/ssl/certs/ca-certificates.crt"} {
		if base[want] == nil {
			t.Errorf("base layer lacks %s", want)
		}
	}
	for _, gone := range []string{"usr/share/doc/libz/changelog", "usr/share/doc/libz/more/", "usr/share/doc/certs/"} {
		if base[gone] != nil {
			t.Errorf("base layer has %s, which the path filters exclude", gone)
		}
	}
	if h := base["usr/lib/libz.so.1"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "libz.so.1.2" {
		t.Errorf("symlink: %+v", h)
	}
	if h := base["tmp/"]; h == nil || h.Mode&0o7777 != 0o1777 {
		t.Errorf("/tmp: %+v", h)
	}
	if got := string(contents["etc/ssl/certs/ca-certificates.crt"]); got != "-----A-----\n-----B-----\n" {
		t.Errorf("CA bundle = %q, want both certificates in path order", got)
	}
	if got := string(contents["var/lib/dpkg/status.d/libz"]); !strings.Contains(got, "Package: libz\nVersion: 1.0-1\n") {
		t.Errorf("status of libz = %q", got)
	}
	if got := string(contents["var/lib/dpkg/status.d/libz.md5sums"]); !strings.Contains(got, "usr/share/doc/libz/copyright") || strings.Contains(got, "changelog") {
		t.Errorf("md5sums of libz list what the image holds, got %q", got)
	}
	if h := app["usr/bin/app"]; h == nil || h.Mode != 0o755 || string(contents["usr/bin/app"]) != "#!/bin/true\n" {
		t.Errorf("app: %+v", h)
	}
	if len(app) != 3 { // usr/, usr/bin/, usr/bin/app
		t.Errorf("app layer holds %d entries", len(app))
	}

	// --rootfs writes the same files.
	root := filepath.Join(dir, "rootfs")
	var stdout, stderr bytes.Buffer
	args := []string{"--spec", spec, "--src-dir", dir, "--rootfs", root, "--deb", debs[0], "--deb", debs[1]}
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("--rootfs: exit %d: %s", code, stderr.String())
	}
	for _, l := range layers {
		for name, h := range l {
			p := filepath.Join(root, name)
			st, err := os.Lstat(p)
			if err != nil {
				t.Errorf("rootfs: %v", err)
				continue
			}
			if int64(st.Mode().Perm()) != h.Mode&0o777 {
				t.Errorf("rootfs %s: mode %v, archive %o", name, st.Mode(), h.Mode)
			}
			if h.Typeflag == tar.TypeReg {
				if got, _ := os.ReadFile(p); !bytes.Equal(got, contents[name]) {
					t.Errorf("rootfs %s differs from the archive", name)
				}
			}
		}
	}
}

// TestImageReproducible: two builds of the same inputs, in other directories, give the
// same bytes; another SOURCE_DATE_EPOCH gives another image.
func TestImageReproducible(t *testing.T) {
	dir, spec, debs := testImage(t)
	var outs []string
	var summaries []string
	for i, sub := range []string{"a", "b/c"} {
		out := filepath.Join(dir, sub, fmt.Sprintf("image-%d.tar", i))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		s := build(t, dir, spec, debs, out)
		outs = append(outs, out)
		summaries = append(summaries, digestLines(s))
	}
	a, err := os.ReadFile(outs[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(outs[1])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("two builds of the same inputs differ (%d and %d bytes)", len(a), len(b))
	}
	if summaries[0] != summaries[1] || !strings.Contains(summaries[0], "digest   sha256:") {
		t.Errorf("summaries differ:\n%s\n%s", summaries[0], summaries[1])
	}
	// nothing but the archive is left beside it
	for _, d := range []string{filepath.Dir(outs[0]), filepath.Dir(outs[1])} {
		if ents, _ := os.ReadDir(d); len(ents) != 1 {
			t.Errorf("%s holds %d entries, want only the archive", d, len(ents))
		}
	}
	later := filepath.Join(dir, "later.tar")
	if s := build(t, dir, spec, debs, later, "--source-date-epoch", "1700000001"); digestLines(s) == summaries[0] {
		t.Errorf("another SOURCE_DATE_EPOCH gives the same image:\n%s", s)
	}
}

// digestLines returns the summary's digest and image ID lines.
func digestLines(summary string) string {
	var out []string
	for _, l := range strings.Split(summary, "\n") {
		if strings.HasPrefix(l, "digest ") || strings.HasPrefix(l, "image ID ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestImageReadBack: go-containerregistry reads the archive back, as an OCI image
// layout and as a `docker save` tarball, as the same valid image; its layers are
// writeLayer's bytes.
func TestImageReadBack(t *testing.T) {
	dir, spec, debs := testImage(t)
	archive := filepath.Join(dir, "image.tar")
	summary := build(t, dir, spec, debs, archive, "--label", "com.example.note=not an annotation")
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "layout")
	for name, content := range readTar(t, bytes.NewReader(data)) {
		p := filepath.Join(root, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	lp, err := layout.FromPath(root)
	if err != nil {
		t.Fatal(err)
	}
	ii, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(ii); err != nil {
		t.Errorf("validate.Index: %v", err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if want := map[string]string{"io.containerd.image.name": "localhost/test/app:v1", "org.opencontainers.image.ref.name": "v1"}; !reflect.DeepEqual(desc.Annotations, want) {
		t.Errorf("index annotations %v, want %v", desc.Annotations, want)
	}
	if desc.Platform == nil || desc.Platform.String() != "linux/amd64" {
		t.Errorf("index platform %v", desc.Platform)
	}
	img, err := ii.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Errorf("validate.Image: %v", err)
	}
	if d, err := img.Digest(); err != nil || d != desc.Digest || !strings.Contains(summary, "digest   "+d.String()+" (manifest)") {
		t.Errorf("image digest %s (%v), index %s, summary:\n%s", d, err, desc.Digest, summary)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	wantAnn := map[string]string{
		"org.opencontainers.image.source":  "https://example.org/app",
		"org.opencontainers.image.version": "v1",
		"org.opencontainers.image.created": "2023-11-14T22:13:20Z",
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON || !reflect.DeepEqual(m.Annotations, wantAnn) {
		t.Errorf("manifest %s, config %s, annotations %v; want annotations %v", m.MediaType, m.Config.MediaType, m.Annotations, wantAnn)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	created := time.Unix(1700000000, 0)
	if !cf.Created.Equal(created) || cf.Architecture != "amd64" || cf.OS != "linux" ||
		!slices.Equal(cf.Config.Entrypoint, []string{"/usr/bin/app"}) || !slices.Equal(cf.Config.Env, []string{"PATH=/usr/bin"}) ||
		cf.Config.Labels["com.example.note"] != "not an annotation" || cf.Config.Labels["org.opencontainers.image.version"] != "v1" {
		t.Errorf("config %+v", cf)
	}
	wantHistory := []string{"layer base: 26 files from 2 Debian packages", "layer app: 3 files"}
	if len(cf.History) != len(wantHistory) {
		t.Fatalf("history %+v", cf.History)
	}
	for i, h := range cf.History {
		if h.Comment != wantHistory[i] || h.CreatedBy != "baremetal-ccm hack/mkimage" || !h.Created.Equal(created) || h.EmptyLayer {
			t.Errorf("history[%d] = %+v, want comment %q", i, h, wantHistory[i])
		}
	}

	// The layers are writeLayer's files, byte for byte.
	s, err := LoadSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	s.resolveSrc(dir)
	trees, err := assemble(context.Background(), s, debs, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != len(trees) || len(cf.RootFS.DiffIDs) != len(trees) {
		t.Fatalf("%d layers, %d diff IDs, want %d", len(layers), len(cf.RootFS.DiffIDs), len(trees))
	}
	for i, l := range layers {
		file, _, err := writeLayer(trees[i], created, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(want)
		d, _ := l.Digest()
		size, _ := l.Size()
		mt, _ := l.MediaType()
		if d.Hex != hex.EncodeToString(sum[:]) || size != int64(len(want)) || mt != types.OCILayer {
			t.Errorf("layer %d: %s %s, %d bytes; writeLayer wrote sha256:%x, %d bytes", i, mt, d, size, sum, len(want))
		}
		if want := fmt.Sprintf("%s compressed", mib(size)); !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}

	// The docker save view (manifest.json) is the same image: same config, same layers.
	dimg, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(dimg); err != nil {
		t.Errorf("validate.Image (manifest.json): %v", err)
	}
	id, _ := img.ConfigName()
	if did, err := dimg.ConfigName(); err != nil || did != id || !strings.Contains(summary, "image ID "+id.String()+" (config)") {
		t.Errorf("manifest.json's config %s (%v), the layout's %s; summary:\n%s", did, err, id, summary)
	}
	dlayers, err := dimg.Layers()
	if err != nil || len(dlayers) != len(layers) {
		t.Fatalf("manifest.json: %d layers (%v), want %d", len(dlayers), err, len(layers))
	}
	for i := range layers {
		d1, _ := layers[i].Digest()
		d2, _ := dlayers[i].Digest()
		if d1 != d2 {
			t.Errorf("layer %d: %s in the layout, %s in manifest.json", i, d1, d2)
		}
	}
}

func TestImageChecks(t *testing.T) {
	dir, spec, debs := testImage(t)
	var stdout, stderr bytes.Buffer
	check := func(wantCode int, want string, args ...string) {
		t.Helper()
		stderr.Reset()
		base := []string{"--spec", spec, "--src-dir", dir}
		if code := run(context.Background(), append(base, args...), &stdout, &stderr); code != wantCode || !strings.Contains(stderr.String(), want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", args, code, stderr.String(), wantCode, want)
		}
	}
	out := filepath.Join(dir, "x.tar")
	check(1, "missing [certs]", "--deb", debs[0], "--ref", "localhost/a:b", "--out", out)
	check(1, "given twice", "--deb", debs[0], "--deb", debs[0], "--deb", debs[1], "--ref", "localhost/a:b", "--out", out)
	check(2, "--ref", "--deb", debs[0], "--deb", debs[1], "--ref", "Upper/case", "--out", out)
	check(2, "--ref", "--deb", debs[0], "--deb", debs[1], "--ref", "no-tag", "--out", out)
	check(2, "exactly one of --out and --rootfs", "--deb", debs[0])
	check(2, "--arch", "--deb", debs[0], "--deb", debs[1], "--arch", "s390x", "--rootfs", filepath.Join(dir, "r"))
	check(1, "architecture amd64, want arm64", "--deb", debs[0], "--deb", debs[1], "--arch", "arm64", "--rootfs", filepath.Join(dir, "r"))
	check(2, "--label", "--deb", debs[0], "--deb", debs[1], "--ref", "localhost/a:b", "--out", out, "--label", "novalue")
	dep := fakeDeb(t, dir, "needy", "libmissing", map[string]string{"/usr/lib/needy": "x"})
	specNeedy := filepath.Join(dir, "needy.yaml")
	if err := os.WriteFile(specNeedy, []byte("config: {entrypoint: [/usr/lib/needy]}\nlayers:\n- {name: base, packages: [needy]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"--spec", specNeedy, "--deb", dep, "--rootfs", filepath.Join(dir, "r")}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "needy Depends libmissing") {
		t.Errorf("unmet dependency: exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed build left an archive")
	}
}

// TestELFCheck: a dynamically linked program needs its loader and libraries in the
// image, found through symlinks.
func TestELFCheck(t *testing.T) {
	prog := "/bin/true"
	data, err := os.ReadFile(prog)
	if err != nil || !bytes.HasPrefix(data, []byte("\x7fELF")) {
		t.Skip("needs a dynamically linked /bin/true")
	}
	l := newLayerTree("t")
	add := func(e *entry) {
		if err := l.add(e); err != nil {
			t.Fatal(err)
		}
	}
	add(&entry{path: "/bin/true", typeflag: tar.TypeReg, mode: 0o755, data: data, size: int64(len(data))})
	img, _ := union([]*layerTree{l})
	err = checkELF(img, "amd64")
	if err == nil || !strings.Contains(err.Error(), "/bin/true needs libc.so.6") || !strings.Contains(err.Error(), "loader /lib64/ld-linux-x86-64.so.2") {
		t.Fatalf("checkELF without libraries = %v", err)
	}
	add(&entry{path: "/lib64", typeflag: tar.TypeSymlink, link: "usr/lib64"})
	add(&entry{path: "/usr/lib64/ld-linux-x86-64.so.2", typeflag: tar.TypeSymlink, link: "../lib/x86_64-linux-gnu/ld.so"})
	add(&entry{path: "/usr/lib/x86_64-linux-gnu/ld.so", typeflag: tar.TypeReg, data: []byte("x"), size: 1})
	add(&entry{path: "/usr/lib/x86_64-linux-gnu/libc.so.6", typeflag: tar.TypeReg, data: []byte("x"), size: 1})
	l.finish()
	img, _ = union([]*layerTree{l})
	if err := checkELF(img, "amd64"); err != nil {
		t.Errorf("checkELF with libraries: %v", err)
	}
}

func TestResolve(t *testing.T) {
	img := &image{entries: map[string]*entry{}}
	for _, e := range []*entry{
		{path: "/lib", typeflag: tar.TypeSymlink, link: "usr/lib"},
		{path: "/usr", typeflag: tar.TypeDir},
		{path: "/usr/lib", typeflag: tar.TypeDir},
		{path: "/usr/lib/a.so", typeflag: tar.TypeSymlink, link: "../lib/./b.so"},
		{path: "/usr/lib/b.so", typeflag: tar.TypeReg},
		{path: "/loop", typeflag: tar.TypeSymlink, link: "/loop"},
	} {
		img.entries[e.path] = e
	}
	if e := img.resolve("/lib/a.so"); e == nil || e.path != "/usr/lib/b.so" {
		t.Errorf("resolve(/lib/a.so) = %+v", e)
	}
	if e := img.resolve("/loop/x"); e != nil {
		t.Errorf("a symlink loop resolved to %+v", e)
	}
	if e := img.resolve("/lib/missing"); e != nil {
		t.Errorf("missing resolved to %+v", e)
	}
}

func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bufio.NewReader(r))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name], _ = io.ReadAll(tr)
	}
}

func mustJSON(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
}

// TestSpecSymlink: a spec file may be a symbolic link (baremetal-ccmctl in the image
// is the CCM binary under another name).
func TestSpecSymlink(t *testing.T) {
	l := newLayerTree("t")
	if err := l.addFile(File{Path: "/usr/bin/baremetal-ccmctl", Symlink: "baremetal-cloud-controller-manager"}); err != nil {
		t.Fatal(err)
	}
	e := l.entries["/usr/bin/baremetal-ccmctl"]
	if e == nil || e.typeflag != tar.TypeSymlink || e.link != "baremetal-cloud-controller-manager" || e.mode != 0o777 {
		t.Fatalf("entry %+v, want a symlink to baremetal-cloud-controller-manager, mode 0777", e)
	}
}
