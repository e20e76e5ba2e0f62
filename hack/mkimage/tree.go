package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// entry is one file, directory or symbolic link of a layer.
type entry struct {
	path     string // absolute, clean
	typeflag byte   // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	mode     int64  // permissions, setuid, setgid, sticky
	uid, gid int
	link     string // symlink target
	// A regular file's content is data, or the host file src (large files are
	// streamed, not held in memory).
	data []byte
	src  string
	size int64
	// excluded marks a directory dpkg's path filters dropped: it is kept only when
	// something kept lies below it.
	excluded bool
	// from names who added the entry (a package or "spec"), for error messages.
	from string
}

// layerTree is the content of one layer.
type layerTree struct {
	name    string
	entries map[string]*entry
	debs    []*deb
}

func newLayerTree(name string) *layerTree {
	return &layerTree{name: name, entries: map[string]*entry{}}
}

// add puts e into the layer. Two packages may share directories (the first one's
// metadata wins, as with dpkg) but nothing else.
func (t *layerTree) add(e *entry) error {
	if old, ok := t.entries[e.path]; ok {
		if old.typeflag == tar.TypeDir && e.typeflag == tar.TypeDir {
			old.excluded = old.excluded && e.excluded
			return nil
		}
		return fmt.Errorf("%s: both %s and %s provide it", e.path, old.from, e.from)
	}
	t.entries[e.path] = e
	return nil
}

// addDeb adds the files of a package, minus what filter excludes, and its control
// data under /var/lib/dpkg/status.d (the layout distroless images use, which image
// scanners read): <name> holds the control stanza, <name>.md5sums the checksums of the
// files that are in the image.
func (t *layerTree) addDeb(ctx context.Context, d *deb, filter pathFilter) error {
	kept := map[string]bool{}
	err := d.files(ctx, func(h *tar.Header, r io.Reader) error {
		p := path.Clean("/" + strings.TrimPrefix(h.Name, "./"))
		if p == "/" {
			return nil
		}
		e := &entry{path: p, mode: h.Mode & 0o7777, uid: h.Uid, gid: h.Gid, from: "package " + d.Name()}
		excluded := filter.excluded(p)
		switch h.Typeflag {
		case tar.TypeDir:
			e.typeflag, e.excluded = tar.TypeDir, excluded
			return t.add(e)
		case tar.TypeSymlink:
			if excluded {
				return nil
			}
			e.typeflag, e.link = tar.TypeSymlink, h.Linkname
		case tar.TypeReg:
			if excluded {
				return nil
			}
			data, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			e.typeflag, e.data, e.size = tar.TypeReg, data, int64(len(data))
		case tar.TypeLink:
			// A hard link becomes a copy: the layer is written in path order, which
			// may put a link before its target.
			if excluded {
				return nil
			}
			target := t.entries[path.Clean("/"+strings.TrimPrefix(h.Linkname, "./"))]
			if target == nil || target.typeflag != tar.TypeReg {
				return fmt.Errorf("%s: hard link to %s, which is not a file kept in the image", p, h.Linkname)
			}
			e.typeflag, e.data, e.size = tar.TypeReg, target.data, target.size
		default:
			return fmt.Errorf("%s: unsupported file type %q", p, h.Typeflag)
		}
		kept[strings.TrimPrefix(p, "/")] = true
		return t.add(e)
	})
	if err != nil {
		return err
	}
	var sums strings.Builder
	for _, line := range d.md5sums {
		if _, file, ok := strings.Cut(line, "  "); ok && kept[file] {
			sums.WriteString(line + "\n")
		}
	}
	dir := "/var/lib/dpkg/status.d/"
	if err := t.add(&entry{path: dir + d.Name(), typeflag: tar.TypeReg, mode: 0o644, data: []byte(d.control), size: int64(len(d.control)), from: "status of " + d.Name()}); err != nil {
		return err
	}
	if sums.Len() > 0 {
		s := sums.String()
		if err := t.add(&entry{path: dir + d.Name() + ".md5sums", typeflag: tar.TypeReg, mode: 0o644, data: []byte(s), size: int64(len(s)), from: "status of " + d.Name()}); err != nil {
			return err
		}
	}
	t.debs = append(t.debs, d)
	return nil
}

// addFile adds a file of the spec.
func (t *layerTree) addFile(f File) error {
	mode, err := f.mode()
	if err != nil {
		return err
	}
	e := &entry{path: f.Path, mode: mode, uid: f.UID, gid: f.GID, from: "spec"}
	switch {
	case f.Dir:
		e.typeflag = tar.TypeDir
	case f.Symlink != "":
		e.typeflag, e.link = tar.TypeSymlink, f.Symlink
	case f.Src != "":
		st, err := os.Stat(f.Src)
		if err != nil {
			return fmt.Errorf("file %s: %w", f.Path, err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("file %s: %s is not a regular file", f.Path, f.Src)
		}
		e.typeflag, e.src, e.size = tar.TypeReg, f.Src, st.Size()
	default:
		e.typeflag, e.data, e.size = tar.TypeReg, []byte(f.Content), int64(len(f.Content))
	}
	if old, ok := t.entries[f.Path]; ok && old.typeflag == tar.TypeDir && e.typeflag == tar.TypeDir {
		// The spec sets a directory's metadata (/tmp's sticky bit, say).
		*old = *e
		return nil
	}
	return t.add(e)
}

// addCABundle writes the PEM bundle of every certificate under
// /usr/share/ca-certificates, in path order (as update-ca-certificates does with
// Debian's default configuration, which enables them all).
func (t *layerTree) addCABundle(bundle string) error {
	var certs []string
	for p, e := range t.entries {
		if strings.HasPrefix(p, "/usr/share/ca-certificates/") && strings.HasSuffix(p, ".crt") && e.typeflag == tar.TypeReg {
			certs = append(certs, p)
		}
	}
	if len(certs) == 0 {
		return fmt.Errorf("caBundle %s: no certificates under /usr/share/ca-certificates (is ca-certificates in the layer?)", bundle)
	}
	sort.Strings(certs)
	var b bytes.Buffer
	for _, p := range certs {
		b.Write(t.entries[p].data)
		if !bytes.HasSuffix(t.entries[p].data, []byte("\n")) {
			b.WriteByte('\n')
		}
	}
	return t.add(&entry{path: bundle, typeflag: tar.TypeReg, mode: 0o644, data: b.Bytes(), size: int64(b.Len()), from: "caBundle"})
}

// finish drops excluded directories that hold nothing kept and adds the missing
// parent directories of every entry (root-owned, 0755).
func (t *layerTree) finish() {
	needed := map[string]bool{}
	for p, e := range t.entries {
		if e.typeflag == tar.TypeDir && e.excluded {
			continue
		}
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			needed[d] = true
		}
	}
	for p, e := range t.entries {
		if e.typeflag == tar.TypeDir && e.excluded && !needed[p] {
			delete(t.entries, p)
		}
	}
	for d := range needed {
		if _, ok := t.entries[d]; !ok {
			t.entries[d] = &entry{path: d, typeflag: tar.TypeDir, mode: 0o755, from: "parent directory"}
		}
	}
}

// sorted returns the entries in path order (a directory before its contents).
func (t *layerTree) sorted() []*entry {
	out := make([]*entry, 0, len(t.entries))
	for _, e := range t.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// open returns a reader of a regular file's content.
func (e *entry) open() (io.ReadCloser, error) {
	if e.src == "" {
		return io.NopCloser(bytes.NewReader(e.data)), nil
	}
	f, err := os.Open(e.src)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() != e.size {
		f.Close()
		return nil, fmt.Errorf("%s changed size while the image was built", e.src)
	}
	return f, nil
}

// image is the union of the layers, for the checks that need the whole filesystem.
type image struct {
	entries map[string]*entry
}

// union merges layers bottom first. A later layer may add to a directory of an
// earlier one but not replace anything (the writer makes no whiteouts).
func union(layers []*layerTree) (*image, error) {
	img := &image{entries: map[string]*entry{}}
	for _, l := range layers {
		for p, e := range l.entries {
			if old, ok := img.entries[p]; ok {
				if old.typeflag == tar.TypeDir && e.typeflag == tar.TypeDir {
					continue
				}
				return nil, fmt.Errorf("%s: in layers %s (%s) and %s (%s)", p, layerOf(layers, old), old.from, l.name, e.from)
			}
			img.entries[p] = e
		}
	}
	return img, nil
}

func layerOf(layers []*layerTree, e *entry) string {
	for _, l := range layers {
		if l.entries[e.path] == e {
			return l.name
		}
	}
	return "?"
}

// resolve follows symbolic links (absolute or relative) in every component of p and
// returns the entry p names, or nil when it does not exist.
func (img *image) resolve(p string) *entry {
	const maxLinks = 40
	links := 0
	todo := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	cur := "/"
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, name)
		e := img.entries[next]
		if e == nil {
			return nil
		}
		if e.typeflag == tar.TypeSymlink {
			if links++; links > maxLinks {
				return nil
			}
			target := e.link
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			todo = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), todo...)
			cur = "/"
			continue
		}
		cur = next
	}
	return img.entries[cur]
}
