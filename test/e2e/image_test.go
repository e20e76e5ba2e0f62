//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestImagePodman loads `make image`'s archive with the real podman (Debian's, no daemon)
// the three ways an operator would, and runs it the way the packaged pods do:
//
//   - `podman load -i` accepts the archive and names the image by its reference;
//   - read as a docker-archive (manifest.json: the view `docker load` reads) and as an
//     OCI archive (index.json: the view ctr and skopeo read) it is the same image, by
//     config digest, with the same ID the OCI index gives;
//   - it carries the standard OCI labels, and its version label is the version the
//     binary inside prints;
//   - it runs read-only, with every capability dropped but NET_ADMIN and
//     NET_BIND_SERVICE and no new privileges, as in the static pod: the binary starts
//     and the image's ipmitool (with its libraries) runs, and so does baremetal-ccmctl.
//
// Storage is a temporary directory of this test's (vfs driver), so the host's podman
// storage is never touched; the containers have no network.
func TestImagePodman(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: rootful podman with storage in a temporary directory (rootless needs subuid ranges)")
	}
	podmanBin, err := exec.LookPath("podman")
	if err != nil {
		t.Fatal("podman not found: make deps installs Debian's podman")
	}
	img := framework.CCMImage(t)
	dir := t.TempDir()
	// Each run of podman here is a child process of this test; none outlives its call.
	podman := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		base := []string{
			"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
			"--tmpdir", filepath.Join(dir, "tmp"), "--storage-driver", "vfs",
			"--cgroup-manager", "cgroupfs", "--events-backend", "none",
		}
		cmd := exec.CommandContext(ctx, podmanBin, append(base, args...)...)
		cmd.Env = append(os.Environ(), "CONTAINERS_CONF=/dev/null", "CONTAINERS_REGISTRIES_CONF=/dev/null")
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	mustPodman := func(args ...string) string {
		t.Helper()
		out, err := podman(args...)
		if err != nil {
			t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	t.Logf("image %s (%s) from %s", img.Ref, img.ID, img.Path)

	// podman load: the archive's own name.
	out := mustPodman("load", "-i", img.Path)
	if !strings.Contains(out, "Loaded image: "+img.Ref) {
		t.Fatalf("podman load: want %q in\n%s", "Loaded image: "+img.Ref, out)
	}
	id := mustPodman("image", "inspect", "--format", "{{.Id}}", img.Ref)
	if "sha256:"+id != img.ID {
		t.Errorf("podman load: image ID %s, the archive's config is %s", id, img.ID)
	}

	// The two views of the one archive are the same image.
	for _, transport := range []string{"docker-archive", "oci-archive"} {
		got := mustPodman("pull", "-q", transport+":"+img.Path)
		if "sha256:"+got != img.ID {
			t.Errorf("%s view: image ID %s, want %s", transport, got, img.ID)
		}
	}

	var labels map[string]string
	if err := json.Unmarshal([]byte(mustPodman("image", "inspect", "--format", "{{json .Labels}}", img.Ref)), &labels); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.source", "org.opencontainers.image.created", "org.opencontainers.image.title"} {
		if labels[k] == "" {
			t.Errorf("label %s missing; labels: %v", k, labels)
		}
	}

	// Run as the static pod does. Podman's default open-files and processes limits can
	// be above what a machine allows (runc then fails with "error setting rlimits"), so
	// the containers get modest ones, never above this process's.
	run := []string{
		"run", "--rm", "--network", "none", "--runtime", "runc", "--read-only",
		"--user", "0", "--cap-drop", "ALL", "--cap-add", "NET_ADMIN,NET_BIND_SERVICE",
		"--security-opt", "no-new-privileges",
	}
	for name, res := range map[string]int{"nofile": unix.RLIMIT_NOFILE, "nproc": unix.RLIMIT_NPROC} {
		var l unix.Rlimit
		if err := unix.Getrlimit(res, &l); err != nil {
			t.Fatal(err)
		}
		n := min(l.Cur, 1024)
		run = append(run, "--ulimit", fmt.Sprintf("%s=%d:%d", name, n, n))
	}
	version := mustPodman(append(run, img.Ref, "--version")...)
	if want := "baremetal-cloud-controller-manager " + labels["org.opencontainers.image.version"] + " "; !strings.HasPrefix(version, want) {
		t.Errorf("--version in the image: %q, want the prefix %q (the version label)", version, want)
	}
	if rev := labels["org.opencontainers.image.revision"]; !strings.Contains(version, "commit "+rev) {
		t.Errorf("--version in the image: %q, want commit %s (the revision label)", version, rev)
	}
	ipmitool := mustPodman(append(run, "--entrypoint", "ipmitool", img.Ref, "-V")...)
	if !strings.HasPrefix(ipmitool, "ipmitool version ") {
		t.Errorf("ipmitool -V in the image: %q", ipmitool)
	}
	// The operators' tool is in the image: the CCM binary under baremetal-ccmctl's name.
	ctlVersion := mustPodman(append(run, "--entrypoint", "baremetal-ccmctl", img.Ref, "version")...)
	if !strings.HasPrefix(ctlVersion, "baremetal-ccmctl "+labels["org.opencontainers.image.version"]+" ") {
		t.Errorf("baremetal-ccmctl version in the image: %q", ctlVersion)
	}
	rbac := mustPodman(append(run, "--entrypoint", "baremetal-ccmctl", img.Ref, "manifests", "rbac")...)
	if !strings.Contains(rbac, "kind: ClusterRole") {
		t.Errorf("baremetal-ccmctl manifests rbac in the image printed:\n%s", rbac)
	}
	t.Logf("in the image: %s; %s; %s", version, ipmitool, ctlVersion)
}
