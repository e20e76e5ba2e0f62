package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"
)

// dpkgTimeout bounds one dpkg-deb run.
const dpkgTimeout = 2 * time.Minute

// deb is a Debian package file, read with dpkg-deb (a .deb's members are usually
// xz-compressed, which the standard library cannot read).
type deb struct {
	file string
	// control is the package's control stanza, as dpkg keeps it.
	control string
	fields  map[string]string
	// md5sums are the lines of the package's md5sums ("<md5>  <path>", path without
	// the leading /).
	md5sums []string
}

// Name is the package's name.
func (d *deb) Name() string { return d.fields["Package"] }

// Version is the package's version.
func (d *deb) Version() string { return d.fields["Version"] }

// readDeb reads the control data of a .deb file.
func readDeb(ctx context.Context, file string) (*deb, error) {
	d := &deb{file: file}
	err := dpkgTar(ctx, file, "--ctrl-tarfile", func(h *tar.Header, r io.Reader) error {
		switch strings.TrimPrefix(h.Name, "./") {
		case "control":
			b, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			d.control = strings.TrimRight(string(b), "\n") + "\n"
		case "md5sums":
			b, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if l != "" {
					d.md5sums = append(d.md5sums, l)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if d.control == "" {
		return nil, fmt.Errorf("%s: no control file", file)
	}
	d.fields = parseControl(d.control)
	if d.Name() == "" || d.Version() == "" {
		return nil, fmt.Errorf("%s: control file without Package or Version", file)
	}
	return d, nil
}

// files calls fn for every entry of the package's data (paths as in the archive,
// "./usr/bin/x").
func (d *deb) files(ctx context.Context, fn func(h *tar.Header, r io.Reader) error) error {
	return dpkgTar(ctx, d.file, "--fsys-tarfile", fn)
}

// dpkgTar runs `dpkg-deb <mode> file`, which writes an uncompressed tar, and calls fn
// for each of its entries.
func dpkgTar(ctx context.Context, file, mode string, fn func(h *tar.Header, r io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, dpkgTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "dpkg-deb", mode, file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("dpkg-deb %s %s: %w", mode, file, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb %s %s: %w (dpkg-deb comes with dpkg: build on Debian or with packaging/Dockerfile)", mode, file, err)
	}
	tr := tar.NewReader(bufio.NewReader(out))
	var readErr error
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			err = fn(h, tr)
		}
		if err != nil {
			readErr = fmt.Errorf("%s: %w", file, err)
			break
		}
	}
	_, _ = io.Copy(io.Discard, out) // let dpkg-deb finish writing
	if err := cmd.Wait(); err != nil && readErr == nil {
		return fmt.Errorf("dpkg-deb %s %s: %w: %s", mode, file, err, strings.TrimSpace(stderr.String()))
	}
	return readErr
}

// parseControl returns the fields of a control stanza (continuation lines joined).
func parseControl(s string) map[string]string {
	fields := map[string]string{}
	var last string
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if last != "" {
				fields[last] += "\n" + line
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		last = k
		fields[k] = strings.TrimSpace(v)
	}
	return fields
}

// parseDepends splits a Depends-style field into groups of alternative package names
// (versions and architecture qualifiers dropped): "a (>= 1) | b:any, c" is [[a b] [c]].
func parseDepends(s string) [][]string {
	var groups [][]string
	for _, g := range strings.Split(s, ",") {
		var alts []string
		for _, a := range strings.Split(g, "|") {
			a = strings.TrimSpace(a)
			if i := strings.IndexAny(a, " ([<"); i >= 0 {
				a = a[:i]
			}
			a, _, _ = strings.Cut(a, ":")
			if a != "" {
				alts = append(alts, a)
			}
		}
		if len(alts) > 0 {
			groups = append(groups, alts)
		}
	}
	return groups
}

// checkDepends verifies that every Depends and Pre-Depends of the packages is met
// by a package in the set (by name or Provides) or named in ignore, and that every
// entry of ignore is depended on by some package (a stale entry would hide a change).
func checkDepends(debs []*deb, ignore map[string]string) error {
	have := map[string]bool{}
	for _, d := range debs {
		have[d.Name()] = true
		for _, g := range parseDepends(d.fields["Provides"]) {
			have[g[0]] = true
		}
	}
	used := map[string]bool{}
	var errs []string
	for _, d := range debs {
		for _, field := range []string{"Pre-Depends", "Depends"} {
			for _, alts := range parseDepends(d.fields[field]) {
				met := false
				for _, a := range alts {
					if have[a] {
						met = true
						break
					}
				}
				if met {
					continue
				}
				for _, a := range alts {
					if _, ok := ignore[a]; ok {
						used[a], met = true, true
					}
				}
				if !met {
					errs = append(errs, fmt.Sprintf("%s %s %s (add it to the layer's packages, or to debian.ignoreDepends with the reason it is not needed)", d.Name(), field, strings.Join(alts, " | ")))
				}
			}
		}
	}
	for name := range ignore {
		if !used[name] {
			errs = append(errs, fmt.Sprintf("debian.ignoreDepends names %s, which no package in the image depends on (remove it)", name))
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("unmet dependencies:\n  %s", strings.Join(slices.Compact(errs), "\n  "))
	}
	return nil
}
