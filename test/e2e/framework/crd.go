package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ModuleDir returns the directory of a module the main module requires, as
// `go list -m` reports it (the module cache), so tests can read files a dependency
// ships, such as its CRDs.
func ModuleDir(ctx context.Context, module string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w: %s", module, err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list -m %s: module not downloaded (run go mod download %s)", module, module)
	}
	return dir, nil
}

// InstallCRDs creates every CustomResourceDefinition in the YAML files (each may hold
// several documents) and waits until the apiserver reports each Established, so that
// objects of their kinds are validated against their schemas from then on. A CRD that
// already exists is left as it is (the control plane is shared by the package's tests).
// fix, when not nil, may change each CRD before it is created.
func InstallCRDs(ctx context.Context, client dynamic.Interface, fix func(crd *unstructured.Unstructured) error, files ...string) error {
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("reading CRDs: %w", err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("decoding %s: %w", f, err)
			}
			if len(obj) == 0 {
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			if u.GetKind() != "CustomResourceDefinition" {
				return fmt.Errorf("%s: unexpected %s %s", filepath.Base(f), u.GetKind(), u.GetName())
			}
			if fix != nil {
				if err := fix(u); err != nil {
					return fmt.Errorf("fixing CRD %s: %w", u.GetName(), err)
				}
			}
			if _, err := client.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating CRD %s from %s: %w", u.GetName(), filepath.Base(f), err)
			}
			names = append(names, u.GetName())
		}
	}
	for _, name := range names {
		err := WaitFor(ctx, time.Minute, "CRD "+name+" established", func(ctx context.Context) (bool, error) {
			crd, err := client.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				c, _ := c.(map[string]any)
				if c["type"] == "Established" && c["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
