// Command mkimage builds a container image from Debian packages and files, without a
// container engine or a registry, reproducibly: the same spec, .deb files, files and
// SOURCE_DATE_EPOCH give the same bytes, so the same digest.
//
//	mkimage --spec packaging/image/image.yaml --deb FILE... --ref NAME:TAG --out IMAGE.tar [--label K=V]... [--src-dir DIR]
//	mkimage --spec packaging/image/image.yaml --deb FILE... --rootfs DIR
//	mkimage --spec packaging/image/image.yaml --list-packages
//
// The archive is an OCI image layout with the manifest.json of `docker save` beside it,
// so `ctr images import`, `podman load` and `docker load` all accept it. Every layer is a
// gzip-compressed tar written here, in path order with one modification time
// (--source-date-epoch, default $SOURCE_DATE_EPOCH, else 0) and numeric owners;
// go-containerregistry takes the compressed layers as they are and makes the image of
// them (config, manifest), writes the OCI image layout (index.json, blobs) and gives the
// types of manifest.json. The archive around them is written here too: names in order,
// the same time, numeric owners and modes on every entry.
//
// Debian packages are unpacked with dpkg-deb, without running maintainer scripts (which
// need a shell and more); what those would generate and the image needs (the CA bundle)
// comes from the spec. Before writing anything it checks that every dependency of every
// package is in the image or explicitly ignored, and that every dynamically linked
// program and library finds its loader and libraries in the image.
//
// hack/image.sh (make image) runs it for the CCM; packaging/Dockerfile runs it with
// --rootfs to produce the same files.
package main

import (
	"archive/tar"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// refPattern is a reference with a tag: [registry[:port]/]path:tag.
var refPattern = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var debs, labelArgs listFlag
	specFile := fs.String("spec", "", "image spec (YAML)")
	fs.Var(&debs, "deb", "a Debian package file for the spec's packages (repeatable)")
	ref := fs.String("ref", "", "image reference NAME:TAG, recorded in the archive (with --out)")
	out := fs.String("out", "", "write the image as an OCI image layout tar file")
	rootfs := fs.String("rootfs", "", "write the image's files into this directory instead")
	fs.Var(&labelArgs, "label", "KEY=VALUE added to the spec's labels (repeatable)")
	arch := fs.String("arch", "amd64", "image architecture (Debian's and Go's name): amd64 or arm64")
	srcDir := fs.String("src-dir", ".", "directory the spec's relative src paths are resolved against")
	epochDefault := os.Getenv("SOURCE_DATE_EPOCH")
	if epochDefault == "" {
		epochDefault = "0"
	}
	epoch := fs.String("source-date-epoch", epochDefault, "seconds since 1970: the time of every file and of the image")
	list := fs.Bool("list-packages", false, "print the spec's Debian packages, one a line, and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	if *specFile == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "mkimage: --spec is required and there are no positional arguments")
		return 2
	}
	spec, err := LoadSpec(*specFile)
	if err != nil {
		return fail(err)
	}
	if *list {
		for _, p := range spec.Packages() {
			fmt.Fprintln(stdout, p)
		}
		return 0
	}
	if _, ok := multiarch[*arch]; !ok {
		fmt.Fprintf(stderr, "mkimage: --arch %q: amd64 or arm64\n", *arch)
		return 2
	}
	if (*out == "") == (*rootfs == "") {
		fmt.Fprintln(stderr, "mkimage: exactly one of --out and --rootfs")
		return 2
	}
	if *out != "" && !refPattern.MatchString(*ref) {
		fmt.Fprintf(stderr, "mkimage: --ref %q: want NAME:TAG (lower-case name, a tag of at most 128 letters, digits, '_', '.', '-')\n", *ref)
		return 2
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil || secs < 0 {
		fmt.Fprintf(stderr, "mkimage: --source-date-epoch %q: want seconds since 1970\n", *epoch)
		return 2
	}
	created := time.Unix(secs, 0).UTC()
	labels := map[string]string{}
	for k, v := range spec.Config.Labels {
		labels[k] = v
	}
	for _, kv := range labelArgs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			fmt.Fprintf(stderr, "mkimage: --label %q: want KEY=VALUE\n", kv)
			return 2
		}
		labels[k] = v
	}
	if _, ok := labels["org.opencontainers.image.created"]; !ok && len(labels) > 0 {
		labels["org.opencontainers.image.created"] = created.Format(time.RFC3339)
	}

	spec.resolveSrc(*srcDir)
	layers, err := assemble(ctx, spec, debs, *arch)
	if err != nil {
		return fail(err)
	}
	if *rootfs != "" {
		if err := writeRootfs(*rootfs, layers, created); err != nil {
			return fail(fmt.Errorf("writing %s: %w", *rootfs, err))
		}
		fmt.Fprintf(stdout, "rootfs %s: %s\n", *rootfs, describeLayers(layers))
		return 0
	}
	work, err := os.MkdirTemp(filepath.Dir(*out), ".mkimage-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(work)
	img, err := buildOCI(layers, spec, *ref, *arch, created, labels, work)
	if err != nil {
		return fail(err)
	}
	if err := writeArchive(*out, work, img, created); err != nil {
		return fail(fmt.Errorf("writing %s: %w", *out, err))
	}
	st, err := os.Stat(*out)
	if err != nil {
		return fail(err)
	}
	printSummary(stdout, *out, st.Size(), img, layers)
	return 0
}

// assemble reads the packages and files of every layer and runs the checks.
func assemble(ctx context.Context, spec *Spec, debFiles []string, arch string) ([]*layerTree, error) {
	byName := map[string]*deb{}
	for _, f := range debFiles {
		d, err := readDeb(ctx, f)
		if err != nil {
			return nil, err
		}
		if a := d.fields["Architecture"]; a != arch && a != "all" {
			return nil, fmt.Errorf("%s: architecture %s, want %s or all", f, a, arch)
		}
		if old, ok := byName[d.Name()]; ok {
			return nil, fmt.Errorf("package %s given twice (%s and %s)", d.Name(), old.file, f)
		}
		byName[d.Name()] = d
	}
	var missing []string
	var all []*deb
	for _, p := range spec.Packages() {
		d, ok := byName[p]
		if !ok {
			missing = append(missing, p)
			continue
		}
		all = append(all, d)
		delete(byName, p)
	}
	var extra []string
	for name := range byName {
		extra = append(extra, name)
	}
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		return nil, fmt.Errorf("the --deb files do not match the spec: missing %v, not in the spec %v", missing, extra)
	}
	if err := checkDepends(all, spec.Debian.IgnoreDepends); err != nil {
		return nil, err
	}
	filter := newPathFilter(spec.Debian)
	debIndex := map[string]*deb{}
	for _, d := range all {
		debIndex[d.Name()] = d
	}
	var layers []*layerTree
	for _, l := range spec.Layers {
		t := newLayerTree(l.Name)
		for _, p := range l.Packages {
			if err := t.addDeb(ctx, debIndex[p], filter); err != nil {
				return nil, err
			}
		}
		if l.CABundle != "" {
			if err := t.addCABundle(l.CABundle); err != nil {
				return nil, err
			}
		}
		for _, f := range l.Files {
			if err := t.addFile(f); err != nil {
				return nil, err
			}
		}
		t.finish()
		layers = append(layers, t)
	}
	img, err := union(layers)
	if err != nil {
		return nil, err
	}
	if err := checkELF(img, arch); err != nil {
		return nil, err
	}
	ep := spec.Config.Entrypoint[0]
	if e := img.resolve(ep); e == nil || e.typeflag != tar.TypeReg || e.mode&0o111 == 0 {
		return nil, fmt.Errorf("the entrypoint %s is not an executable file in the image", ep)
	}
	return layers, nil
}

func describeLayers(layers []*layerTree) string {
	var parts []string
	for _, l := range layers {
		var size int64
		for _, e := range l.entries {
			size += e.size
		}
		parts = append(parts, fmt.Sprintf("%s %d files %s", l.name, len(l.entries), mib(size)))
	}
	return strings.Join(parts, ", ")
}

func printSummary(w io.Writer, out string, size int64, img *builtImage, layers []*layerTree) {
	fmt.Fprintf(w, "image    %s\n", img.ref)
	fmt.Fprintf(w, "archive  %s (%s)\n", out, mib(size))
	fmt.Fprintf(w, "digest   %s (manifest)\n", img.digest)
	fmt.Fprintf(w, "image ID %s (config)\n", img.configID)
	var comp, uncomp int64
	for i, l := range img.layers {
		comp += l.size
		uncomp += l.uncompressedSize
		fmt.Fprintf(w, "layer    %-8s %s compressed, %s unpacked\n", layers[i].name, mib(l.size), mib(l.uncompressedSize))
	}
	fmt.Fprintf(w, "size     %s compressed, %s unpacked\n", mib(comp), mib(uncomp))
	var pkgs []string
	for _, l := range layers {
		for _, d := range l.debs {
			pkgs = append(pkgs, d.Name()+" "+d.Version())
		}
	}
	if len(pkgs) > 0 {
		fmt.Fprintf(w, "packages %s\n", strings.Join(pkgs, ", "))
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
