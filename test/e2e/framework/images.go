package framework

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Image is an image archive (an OCI image layout tar, see hack/mkimage) and the
// reference it carries.
type Image struct {
	Path string
	// Ref is the image's name (the io.containerd.image.name annotation), what
	// containerd calls it once imported and pods name it by.
	Ref string
	// Digest is the manifest's digest (what a registry serves the image by); ID the
	// config's (the image ID the container runtime reports).
	Digest, ID string
}

// LoadImage reads the reference and digests of an image archive (its index.json and
// manifest).
func LoadImage(path string) (Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return Image{}, fmt.Errorf("image archive: %w", err)
	}
	defer f.Close()
	// index.json and the small blobs (manifests, configs), by name
	small := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Image{}, fmt.Errorf("%s: %w", path, err)
		}
		if h.Typeflag == tar.TypeReg && h.Size < 1<<20 {
			if small[strings.TrimPrefix(h.Name, "./")], err = io.ReadAll(tr); err != nil {
				return Image{}, fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	var idx struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(small["index.json"], &idx); err != nil {
		return Image{}, fmt.Errorf("%s: index.json: %w (not an OCI image layout?)", path, err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations["io.containerd.image.name"] == "" {
		return Image{}, fmt.Errorf("%s: want one named manifest in index.json", path)
	}
	m := idx.Manifests[0]
	var manifest struct {
		Config struct {
			Digest string `json:"digest"`
		} `json:"config"`
	}
	if err := json.Unmarshal(small["blobs/sha256/"+strings.TrimPrefix(m.Digest, "sha256:")], &manifest); err != nil || manifest.Config.Digest == "" {
		return Image{}, fmt.Errorf("%s: manifest %s: %v", path, m.Digest, err)
	}
	return Image{Path: path, Ref: m.Annotations["io.containerd.image.name"], Digest: m.Digest, ID: manifest.Config.Digest}, nil
}

// CCMImageEnv names the archive of `make image` for the e2e suite (the Makefile's e2e
// target sets it).
const CCMImageEnv = "BAREMETAL_CCM_IMAGE"

var ccmImage struct {
	once sync.Once
	img  Image
	err  error
}

// CCMImage returns the CCM image the suite runs under real kubelets: the archive named
// by $BAREMETAL_CCM_IMAGE (make e2e builds it with make image), else one built now with
// hack/image.sh (once per test binary).
func CCMImage(t testing.TB) Image {
	t.Helper()
	ccmImage.once.Do(func() {
		if p := os.Getenv(CCMImageEnv); p != "" {
			ccmImage.img, ccmImage.err = LoadImage(p)
			return
		}
		ccmImage.img, ccmImage.err = BuildCCMImage(context.Background(), "")
	})
	if ccmImage.err != nil {
		t.Fatal(ccmImage.err)
	}
	return ccmImage.img
}

// BuildCCMImage builds the CCM image as `make image` does (hack/image.sh), with version
// as its version (and tag) unless empty, into RunMain's temp dir, and returns it. The
// binary is built there too, so the checkout's bin/ is left alone.
func BuildCCMImage(ctx context.Context, version string) (Image, error) {
	if shared.tmp == "" {
		return Image{}, errors.New("framework.BuildCCMImage: call framework.RunMain from TestMain")
	}
	root, err := ModuleRoot()
	if err != nil {
		return Image{}, err
	}
	dir, err := os.MkdirTemp(shared.tmp, "image-")
	if err != nil {
		return Image{}, err
	}
	out := filepath.Join(dir, "image.tar")
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "image.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "IMAGE_OUT="+out, "IMAGE_BUILD_DIR="+dir)
	if version != "" {
		cmd.Env = append(cmd.Env, "VERSION="+version, "IMAGE=")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return Image{}, fmt.Errorf("hack/image.sh: %w\n%s", err, b)
	}
	return LoadImage(out)
}

var pause struct {
	once sync.Once
	img  Image
	err  error
}

// pauseImageRef is the sandbox image the lab's containerd is configured with.
const pauseImageRef = "localhost/baremetal-ccm-e2e/pause:1"

// pauseImage builds the pod sandbox image from framework/pause with hack/mkimage, once
// per test binary.
func pauseImage(ctx context.Context) (Image, error) {
	pause.once.Do(func() {
		pause.img, pause.err = buildPauseImage(ctx)
	})
	return pause.img, pause.err
}

func buildPauseImage(ctx context.Context) (Image, error) {
	bin, err := BuildBinary(ctx, "./test/e2e/framework/pause")
	if err != nil {
		return Image{}, err
	}
	mkimage, err := BuildBinary(ctx, "./hack/mkimage")
	if err != nil {
		return Image{}, err
	}
	dir := filepath.Dir(bin)
	spec := filepath.Join(dir, "pause.yaml")
	doc := fmt.Sprintf("config: {entrypoint: [/pause]}\nlayers:\n- name: pause\n  files:\n  - {path: /pause, src: %s, mode: \"0755\"}\n", bin)
	if err := os.WriteFile(spec, []byte(doc), 0o644); err != nil {
		return Image{}, err
	}
	out := filepath.Join(dir, "pause.tar")
	if b, err := run1(ctx, 2*time.Minute, mkimage, "--spec", spec, "--ref", pauseImageRef, "--out", out); err != nil {
		return Image{}, fmt.Errorf("building the pause image: %w: %s", err, b)
	}
	return LoadImage(out)
}
