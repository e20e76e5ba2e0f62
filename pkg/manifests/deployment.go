package manifests

import (
	"fmt"
	"path"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// deploymentLabels are the labels of the Deployment and its pods (its selector).
func deploymentLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "baremetal-ccm", "app.kubernetes.io/component": "cloud-controller-manager"}
}

// Taints the Deployment's pods tolerate.
const (
	// TaintUninitialized is the taint kubelet --cloud-provider=external registers
	// Nodes with, which the CCM removes.
	TaintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"
	// TaintNotReady is set while a Node is not Ready: before its CNI runs, which may
	// wait for the CCM.
	TaintNotReady = "node.kubernetes.io/not-ready"
	// LabelControlPlane marks control-plane Nodes (kubeadm), and as a taint keeps
	// ordinary pods off them.
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
)

// DeploymentOptions parameterize the Deployment.
type DeploymentOptions struct {
	// Image of the CCM (it must contain ipmitool).
	Image string
	// Replicas, at most one per control-plane node (a required anti-affinity).
	Replicas int32
	// ConfigMap names the ConfigMap in kube-system holding cloud-config.yaml, the
	// inventory file it names and any CA files, mounted read-only at ConfigDir.
	ConfigMap string
	ConfigDir string
	// SecurePort serves /healthz and /metrics on 127.0.0.1 of the node.
	SecurePort int
	// APIServer, "host:port", is where the CCM reaches the API server instead of the
	// kubernetes Service, so that it depends on neither kube-proxy nor a CNI. ":port"
	// is the kube-apiserver of the pod's own node at the node's address (which
	// kubeadm's serving certificate names); "127.0.0.1:6443" works where the
	// certificate names 127.0.0.1. Empty: the Service (the in-cluster default).
	APIServer string
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
}

// DefaultDeploymentOptions are the options of packaging/kubernetes/deployment.yaml.
func DefaultDeploymentOptions() DeploymentOptions {
	return DeploymentOptions{
		Image:      DefaultStaticPodOptions().Image,
		Replicas:   2,
		ConfigMap:  "baremetal-ccm-config",
		ConfigDir:  "/etc/baremetal-ccm",
		SecurePort: 10258,
	}
}

// Deployment returns the CCM as a Deployment, the shape the Kubernetes documentation
// recommends for cloud controller managers: on control-plane nodes (node selector and
// toleration), on Nodes the CCM has not initialized yet and that are not Ready (no CNI
// before the CCM ran), on the host network, at most one replica per node (a required
// pod anti-affinity; the port is on the host too), leader election among them. It runs
// as the ServiceAccount the packaged RBAC binds. Updates replace one pod at a time
// before starting its successor (maxSurge 0: with one replica per control-plane node
// there is no free node to surge to). DNS is the node's (dnsPolicy Default): cluster
// DNS cannot run before the CCM initialized the Nodes.
func Deployment(o DeploymentOptions) (*appsv1.Deployment, error) {
	if o.Image == "" || o.Replicas < 1 || o.SecurePort <= 0 || o.SecurePort > 65535 || !path.IsAbs(o.ConfigDir) {
		return nil, fmt.Errorf("deployment needs an image, at least one replica, a secure port and an absolute config dir (got %+v)", o)
	}
	if errs := validation.IsDNS1123Subdomain(o.ConfigMap); len(errs) > 0 {
		return nil, fmt.Errorf("config map %q: %v", o.ConfigMap, errs)
	}
	c := ccmContainer(o.Image, o.SecurePort, []string{"--cloud-config=" + path.Join(o.ConfigDir, "cloud-config.yaml")}, o.ExtraArgs)
	if o.APIServer != "" {
		env, err := apiServerEnv(o.APIServer)
		if err != nil {
			return nil, err
		}
		c.Env = append(c.Env, env...)
	}
	c.Ports = []v1.ContainerPort{{Name: "https", ContainerPort: int32(o.SecurePort), Protocol: v1.ProtocolTCP}}
	c.VolumeMounts = []v1.VolumeMount{{Name: "config", MountPath: o.ConfigDir, ReadOnly: true}}
	replicas, maxSurge, maxUnavailable := o.Replicas, intstr.FromInt32(0), intstr.FromInt32(1)
	meta := metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: deploymentLabels()}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: deploymentLabels()},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &maxSurge, MaxUnavailable: &maxUnavailable},
			},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: deploymentLabels()},
				Spec: v1.PodSpec{
					ServiceAccountName: ServiceAccount,
					HostNetwork:        true,
					DNSPolicy:          v1.DNSDefault,
					PriorityClassName:  "system-cluster-critical",
					NodeSelector:       map[string]string{LabelControlPlane: ""},
					Affinity: &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: deploymentLabels()},
							TopologyKey:   "kubernetes.io/hostname",
						}},
					}},
					Tolerations: []v1.Toleration{
						{Key: TaintUninitialized, Value: "true", Effect: v1.TaintEffectNoSchedule},
						// NoSchedule and NoExecute: evicting the CCM from a Node that is
						// not Ready because it waits for the CCM would never end.
						{Key: TaintNotReady, Operator: v1.TolerationOpExists},
						{Key: LabelControlPlane, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule},
					},
					SecurityContext: &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
					Containers:      []v1.Container{c},
					Volumes: []v1.Volume{{Name: "config", VolumeSource: v1.VolumeSource{
						ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: o.ConfigMap}},
					}}},
				},
			},
		},
	}, nil
}
