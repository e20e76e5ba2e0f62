package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
)

// Kubectl runs the kubectl that hack/build-kube.sh built next to kube-apiserver
// ($KUBE_BIN, else the cache) with the control plane's admin kubeconfig, and returns
// its standard output.
func Kubectl(ctx context.Context, cp *ControlPlane, args ...string) (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(envOr("KUBE_BIN", filepath.Join(cache, "kube", "v"+envOr("KUBE_VERSION", defaultKubeVersion))), "kubectl")
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %v: %w: %s", args, err, stderr.String())
	}
	return stdout.String(), nil
}

// cacheDir is where hack/deps.sh builds what the tests run: $BAREMETAL_CCM_CACHE, else
// ~/.cache/baremetal-ccm.
func cacheDir() (string, error) {
	if c := os.Getenv("BAREMETAL_CCM_CACHE"); c != "" {
		return c, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache", "baremetal-ccm"), nil
}

// DeleteIPPool deletes an IPPool a test created, for the tests after it: deleted
// first (a deleting pool gets no finalizer again), then released from its finalizer
// whether or not a leader still runs to release it.
func DeleteIPPool(cp *ControlPlane, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := rest.CopyConfig(cp.RESTConfig)
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	pools := versioned.NewForConfigOrDie(cfg).BaremetalCCMV1alpha1().IPPools()
	if err := pools.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return
	}
	if p, err := pools.Get(ctx, name, metav1.GetOptions{}); err == nil && len(p.Finalizers) > 0 {
		p.Finalizers = nil
		_, _ = pools.Update(ctx, p, metav1.UpdateOptions{})
	}
}
