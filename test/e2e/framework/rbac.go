package framework

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
)

// ApplyPackagedRBAC creates the objects of packaging/kubernetes/rbac.yaml (the file an
// operator applies) and writes a kubeconfig for the ServiceAccount it binds, with a
// token from the TokenRequest API. A CCM run with it has exactly the packaged
// permissions, so the e2e suite catches a missing one.
func ApplyPackagedRBAC(ctx context.Context, cp *ControlPlane, kubeconfigPath string) error {
	if err := ApplyPackagingFile(ctx, cp, "rbac.yaml"); err != nil {
		return err
	}
	return WriteTokenKubeconfig(ctx, cp, manifests.Namespace, manifests.ServiceAccount, kubeconfigPath)
}

// ApplyPackagingFile creates the objects of packaging/kubernetes/<name> as an
// operator applies them (Namespaces, ServiceAccounts and RBAC objects). Objects that
// exist already are left as they are, so several tests may apply the same file.
func ApplyPackagingFile(ctx context.Context, cp *ControlPlane, name string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(root, "packaging", "kubernetes", name))
	if err != nil {
		return fmt.Errorf("packaged %s: %w", name, err)
	}
	objs, err := DecodeManifests(data)
	if err != nil {
		return fmt.Errorf("packaged %s: %w", name, err)
	}
	c := cp.Client
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.ServiceAccount:
			_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *v1.Namespace:
			_, err = c.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			return fmt.Errorf("packaged %s: unexpected object %T", name, o)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("packaged %s: creating %T: %w", name, o, err)
		}
	}
	return nil
}

// WriteTokenKubeconfig writes a kubeconfig for the ServiceAccount namespace/name, with
// a 6-hour token from the TokenRequest API, to path.
func WriteTokenKubeconfig(ctx context.Context, cp *ControlPlane, namespace, name, path string) error {
	expiry := int64(6 * 3600)
	tr, err := cp.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: cp.RESTConfig.Host, InsecureSkipTLSVerify: true}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: name}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// DecodeManifests decodes a multi-document YAML stream of built-in kinds.
func DecodeManifests(data []byte) ([]any, error) {
	return DecodeManifestsOf(data, func(string) bool { return true })
}

// DecodeManifestsOf decodes the documents of a multi-document YAML stream whose kind
// keep accepts (they must be built-in kinds) and skips the others, so that a manifest
// that also holds CRDs or custom resources can be picked from.
func DecodeManifestsOf(data []byte, keep func(kind string) bool) ([]any, error) {
	var out []any
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, err
		}
		if !keep(meta.Kind) {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// ClientFor returns a client using the kubeconfig at path.
func ClientFor(path string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
