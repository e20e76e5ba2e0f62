package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// byteCounter counts what is written to it.
type byteCounter int64

func (c *byteCounter) Write(p []byte) (int, error) {
	*c += byteCounter(len(p))
	return len(p), nil
}

// writeLayer writes the layer as a gzip-compressed tar into a new file in dir,
// reproducibly: path order, the given modification time on every entry, numeric owners
// only, no other metadata; gzip without name or time. It returns the file and the size
// of the uncompressed tar.
func writeLayer(t *layerTree, mtime time.Time, dir string) (file string, uncompressed int64, err error) {
	f, err := os.CreateTemp(dir, "layer-*")
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	gz, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		return "", 0, err
	}
	var n byteCounter
	tw := tar.NewWriter(io.MultiWriter(gz, &n))
	for _, e := range t.sorted() {
		h := &tar.Header{
			Name: strings.TrimPrefix(e.path, "/"), Typeflag: e.typeflag, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, ModTime: mtime,
		}
		switch e.typeflag {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = e.link
		case tar.TypeReg:
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			return "", 0, fmt.Errorf("layer %s: %s: %w", t.name, e.path, err)
		}
		if e.typeflag == tar.TypeReg {
			if err := copyContent(tw, e); err != nil {
				return "", 0, fmt.Errorf("layer %s: %s: %w", t.name, e.path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return "", 0, err
	}
	if err := gz.Close(); err != nil {
		return "", 0, err
	}
	return f.Name(), int64(n), f.Close()
}

func copyContent(w io.Writer, e *entry) error {
	r, err := e.open()
	if err != nil {
		return err
	}
	defer r.Close()
	n, err := io.Copy(w, r)
	if err == nil && n != e.size {
		err = fmt.Errorf("read %d bytes, want %d", n, e.size)
	}
	return err
}

// builtImage is the result of buildOCI.
type builtImage struct {
	ref      string
	arch     string
	image    v1.Image
	digest   v1.Hash // of the manifest
	configID v1.Hash // digest of the config: the image ID
	layers   []builtLayer
}

type builtLayer struct {
	digest           v1.Hash
	size             int64 // compressed
	uncompressedSize int64
}

// buildOCI writes the layers into dir and assembles the image (config, manifest) with
// go-containerregistry. The compressed layers are used as they are: their bytes, and so
// their digests, are writeLayer's.
func buildOCI(layers []*layerTree, s *Spec, ref, arch string, created time.Time, labels map[string]string, dir string) (*builtImage, error) {
	ts := v1.Time{Time: created.UTC()}
	base, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Created: ts, Architecture: arch, OS: "linux",
		Config: v1.Config{
			User: s.Config.User, Env: s.Config.Env, Entrypoint: s.Config.Entrypoint, Cmd: s.Config.Cmd,
			WorkingDir: s.Config.WorkingDir, Labels: labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	built := &builtImage{ref: ref, arch: arch}
	var adds []mutate.Addendum
	for _, l := range layers {
		file, unpacked, err := writeLayer(l, created, dir)
		if err != nil {
			return nil, err
		}
		// go-containerregistry sees the gzip header and keeps the compressed bytes as
		// they are; the manifest's descriptor takes the layer's media type.
		layer, err := tarball.LayerFromFile(file, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.name, err)
		}
		bl := builtLayer{uncompressedSize: unpacked}
		if bl.digest, err = layer.Digest(); err != nil {
			return nil, err
		}
		if bl.size, err = layer.Size(); err != nil {
			return nil, err
		}
		built.layers = append(built.layers, bl)
		what := fmt.Sprintf("layer %s: %d files", l.name, len(l.entries))
		if len(l.debs) > 0 {
			what += fmt.Sprintf(" from %d Debian packages", len(l.debs))
		}
		adds = append(adds, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: ts, CreatedBy: "baremetal-ccm hack/mkimage", Comment: what},
		})
	}
	img, err := mutate.Append(base, adds...)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img = mutate.Annotations(img, ociAnnotations(labels)).(v1.Image)
	built.image = img
	if built.digest, err = img.Digest(); err != nil {
		return nil, err
	}
	if built.configID, err = img.ConfigName(); err != nil {
		return nil, err
	}
	return built, nil
}

// ociAnnotations returns the org.opencontainers.image.* labels, which the manifest
// carries as annotations too.
func ociAnnotations(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if strings.HasPrefix(k, "org.opencontainers.image.") {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// splitRef splits "name:tag" (the name may hold a registry port).
func splitRef(ref string) (name, tag string) {
	i := strings.LastIndexByte(ref, ':')
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, ""
	}
	return ref[:i], ref[i+1:]
}

// plainDescriptor is an image whose descriptor has no artifactType: go-containerregistry
// gives an image's descriptor the config's media type as artifactType, which says
// nothing more for an image and makes index.json longer (with a long reference, by a
// tar block).
type plainDescriptor struct{ v1.Image }

func (p plainDescriptor) Descriptor() (*v1.Descriptor, error) {
	d, err := partial.Descriptor(p.Image)
	if err != nil {
		return nil, err
	}
	d.ArtifactType = ""
	return d, nil
}

// writeLayout writes the image as an OCI image layout into dir (which must not exist
// or be empty): oci-layout, index.json naming the image, and the blobs.
func writeLayout(dir string, img *builtImage) error {
	_, tag := splitRef(img.ref)
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{
		Add: plainDescriptor{img.image},
		Descriptor: v1.Descriptor{
			Platform: &v1.Platform{Architecture: img.arch, OS: "linux"},
			Annotations: map[string]string{
				// containerd (ctr images import) and Docker >= 25 name the image from this
				"io.containerd.image.name": img.ref,
				// the OCI image layout's tag
				"org.opencontainers.image.ref.name": tag,
			},
		},
	})
	_, err := layout.Write(dir, idx)
	return err
}

// dockerManifest returns the manifest.json of `docker save`, which `docker load`
// (before Docker 25) and `podman load` read; it names the layout's blobs.
func dockerManifest(img *builtImage) ([]byte, error) {
	d := tarball.Descriptor{Config: blobPath(img.configID), RepoTags: []string{img.ref}}
	for _, l := range img.layers {
		d.Layers = append(d.Layers, blobPath(l.digest))
	}
	return json.Marshal(tarball.Manifest{d})
}

// writeArchive writes the image as one tar file, atomically: an OCI image layout
// (written by go-containerregistry into work) with docker's manifest.json beside it,
// in name order, with mtime on every entry, numeric owners and modes 0644 and 0755.
func writeArchive(out, work string, img *builtImage, mtime time.Time) error {
	dir := filepath.Join(work, "layout")
	if err := writeLayout(dir, img); err != nil {
		return err
	}
	dm, err := dockerManifest(img)
	if err != nil {
		return err
	}
	type file struct {
		name string // with a trailing / for a directory
		src  string // the file, or
		data []byte // its content
	}
	files := []file{{name: "manifest.json", data: dm}}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			files = append(files, file{name: name + "/"})
		case d.Type().IsRegular():
			if name == "manifest.json" {
				return fmt.Errorf("the layout has a manifest.json")
			}
			files = append(files, file{name: name, src: p})
		default:
			return fmt.Errorf("%s: not a file or a directory", p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })

	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	tw := tar.NewWriter(tmp)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, ModTime: mtime}
		switch {
		case strings.HasSuffix(f.name, "/"):
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case f.src != "":
			st, err := os.Stat(f.src)
			if err != nil {
				return err
			}
			h.Size = st.Size()
		default:
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		switch {
		case f.src != "":
			err = copyContent(tw, &entry{src: f.src, size: h.Size})
		case f.data != nil:
			_, err = tw.Write(f.data)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
