package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Media types of the OCI image specification.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type imageConfig struct {
	Created      string       `json:"created"`
	Architecture string       `json:"architecture"`
	OS           string       `json:"os"`
	Config       runConfig    `json:"config"`
	RootFS       rootFS       `json:"rootfs"`
	History      []historyRow `json:"history"`
}

type runConfig struct {
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type historyRow struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
	Comment   string `json:"comment,omitempty"`
}

// dockerManifest is one entry of the manifest.json of `docker save`, which `docker
// load` (before Docker 25) and `podman load` read; the same archive is an OCI image
// layout (index.json) for containerd and newer Docker.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// blob is a content-addressed file in the build directory.
type blob struct {
	digest string // sha256:<hex>
	size   int64
	file   string
}

// layerBlob is a compressed layer.
type layerBlob struct {
	blob
	diffID           string // digest of the uncompressed tar
	uncompressedSize int64
}

// countingWriter counts and hashes what passes through it.
type countingWriter struct {
	h hash.Hash
	n int64
}

func newCountingWriter() *countingWriter { return &countingWriter{h: sha256.New()} }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

func (c *countingWriter) digest() string { return "sha256:" + hex.EncodeToString(c.h.Sum(nil)) }

// writeLayer writes the layer as a gzip-compressed tar into dir, reproducibly: path
// order, the given modification time on every entry, numeric owners only, no other
// metadata; gzip without name or time.
func writeLayer(t *layerTree, mtime time.Time, dir string) (layerBlob, error) {
	f, err := os.CreateTemp(dir, "layer-*")
	if err != nil {
		return layerBlob{}, err
	}
	defer f.Close()
	compressed, uncompressed := newCountingWriter(), newCountingWriter()
	gz, err := gzip.NewWriterLevel(io.MultiWriter(f, compressed), gzip.BestCompression)
	if err != nil {
		return layerBlob{}, err
	}
	tw := tar.NewWriter(io.MultiWriter(gz, uncompressed))
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
			return layerBlob{}, fmt.Errorf("layer %s: %s: %w", t.name, e.path, err)
		}
		if e.typeflag == tar.TypeReg {
			if err := copyContent(tw, e); err != nil {
				return layerBlob{}, fmt.Errorf("layer %s: %s: %w", t.name, e.path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return layerBlob{}, err
	}
	if err := gz.Close(); err != nil {
		return layerBlob{}, err
	}
	if err := f.Close(); err != nil {
		return layerBlob{}, err
	}
	return layerBlob{
		blob:   blob{digest: compressed.digest(), size: compressed.n, file: f.Name()},
		diffID: uncompressed.digest(), uncompressedSize: uncompressed.n,
	}, nil
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

// writeJSONBlob stores v as a JSON blob in dir.
func writeJSONBlob(dir string, v any) (blob, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return blob{}, err
	}
	sum := sha256.Sum256(data)
	b := blob{digest: "sha256:" + hex.EncodeToString(sum[:]), size: int64(len(data)), file: filepath.Join(dir, hex.EncodeToString(sum[:]))}
	return b, os.WriteFile(b.file, data, 0o644)
}

// builtImage is the result of buildOCI.
type builtImage struct {
	ref            string
	manifest       blob
	config         blob
	layers         []layerBlob
	index          []byte
	dockerManifest []byte
}

// buildOCI writes the layers, the config and the manifest as blobs into dir.
func buildOCI(layers []*layerTree, s *Spec, ref, arch string, created time.Time, labels map[string]string, dir string) (*builtImage, error) {
	img := &builtImage{ref: ref}
	ts := created.UTC().Format(time.RFC3339)
	cfg := imageConfig{
		Created: ts, Architecture: arch, OS: "linux",
		Config: runConfig{
			User: s.Config.User, Env: s.Config.Env, Entrypoint: s.Config.Entrypoint, Cmd: s.Config.Cmd,
			WorkingDir: s.Config.WorkingDir, Labels: labels,
		},
		RootFS: rootFS{Type: "layers"},
	}
	for _, l := range layers {
		lb, err := writeLayer(l, created, dir)
		if err != nil {
			return nil, err
		}
		img.layers = append(img.layers, lb)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, lb.diffID)
		what := fmt.Sprintf("layer %s: %d files", l.name, len(l.entries))
		if len(l.debs) > 0 {
			what += fmt.Sprintf(" from %d Debian packages", len(l.debs))
		}
		cfg.History = append(cfg.History, historyRow{Created: ts, CreatedBy: "baremetal-ccm hack/mkimage", Comment: what})
	}
	var err error
	if img.config, err = writeJSONBlob(dir, cfg); err != nil {
		return nil, err
	}
	m := manifest{
		SchemaVersion: 2, MediaType: mediaTypeManifest,
		Config:      descriptor{MediaType: mediaTypeConfig, Digest: img.config.digest, Size: img.config.size},
		Annotations: ociAnnotations(labels),
	}
	for _, l := range img.layers {
		m.Layers = append(m.Layers, descriptor{MediaType: mediaTypeLayer, Digest: l.digest, Size: l.size})
	}
	if img.manifest, err = writeJSONBlob(dir, m); err != nil {
		return nil, err
	}
	_, tag := splitRef(ref)
	img.index, err = json.Marshal(index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{{
		MediaType: mediaTypeManifest, Digest: img.manifest.digest, Size: img.manifest.size,
		Platform: &platform{Architecture: arch, OS: "linux"},
		Annotations: map[string]string{
			// containerd (ctr images import) and Docker >= 25 name the image from this
			"io.containerd.image.name": ref,
			// the OCI image layout's tag
			"org.opencontainers.image.ref.name": tag,
		},
	}}})
	if err != nil {
		return nil, err
	}
	dm := dockerManifest{Config: blobPath(img.config.digest), RepoTags: []string{ref}}
	for _, l := range img.layers {
		dm.Layers = append(dm.Layers, blobPath(l.digest))
	}
	img.dockerManifest, err = json.Marshal([]dockerManifest{dm})
	return img, err
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

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

// splitRef splits "name:tag" (the name may hold a registry port).
func splitRef(ref string) (name, tag string) {
	i := strings.LastIndexByte(ref, ':')
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, ""
	}
	return ref[:i], ref[i+1:]
}

// writeArchive writes the OCI image layout (with docker's manifest.json) as a tar file,
// atomically, with mtime on every entry.
func writeArchive(out string, img *builtImage, mtime time.Time) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	tw := tar.NewWriter(tmp)
	type file struct {
		name string
		data []byte
		src  string
		size int64
	}
	files := []file{
		{name: "index.json", data: img.index},
		{name: "manifest.json", data: img.dockerManifest},
		{name: "oci-layout", data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
	}
	seen := map[string]bool{}
	for _, b := range append([]blob{img.config, img.manifest}, layerBlobs(img.layers)...) {
		if !seen[b.digest] {
			seen[b.digest] = true
			files = append(files, file{name: blobPath(b.digest), src: b.file, size: b.size})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}); err != nil {
			return err
		}
	}
	for _, f := range files {
		size := f.size
		if f.src == "" {
			size = int64(len(f.data))
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: mtime}); err != nil {
			return err
		}
		if f.src == "" {
			_, err = tw.Write(f.data)
		} else {
			err = copyContent(tw, &entry{src: f.src, size: f.size})
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

func layerBlobs(ls []layerBlob) []blob {
	out := make([]blob, len(ls))
	for i, l := range ls {
		out[i] = l.blob
	}
	return out
}
