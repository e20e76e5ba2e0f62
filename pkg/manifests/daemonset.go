package manifests

import (
	"fmt"
	"net"
	"path"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// AgentName names the agents' DaemonSet and its container.
	AgentName = "baremetal-ccm-agent"
	// HostMountPrefix is where the agent's container sees AgentDaemonSetOptions.HostDir.
	HostMountPrefix = "/host"
)

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	p, dir = path.Clean(p), path.Clean(dir)
	return p == dir || dir == "/" || len(p) > len(dir) && p[:len(dir)] == dir && p[len(dir)] == '/'
}

// agentLabels are the labels of the agents' DaemonSet and its pods (its selector).
func agentLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "baremetal-ccm", "app.kubernetes.io/component": "agent"}
}

// AgentDaemonSetOptions parameterize the agents' DaemonSet.
type AgentDaemonSetOptions struct {
	// Image of the CCM (the agent is its agent mode).
	Image string
	// ConfigMap names the ConfigMap in kube-system holding the agents' cloud-config.yaml
	// (bgp, routes, loadBalancer.pools; no inventory), mounted read-only at ConfigDir.
	ConfigMap string
	ConfigDir string
	// HostDir is a directory of each host, mounted read-only at HostMountPrefix+HostDir,
	// for the host's own files such as its TCP-MD5 password
	// (--bgp-password-file=/host/etc/baremetal-ccm/bgp-password); empty mounts nothing.
	HostDir string
	// ServingPort serves /metrics, /healthz and /readyz on the node's 127.0.0.1.
	ServingPort int
	// APIServer, as DeploymentOptions.APIServer: where the agent reaches the API
	// server instead of the kubernetes Service (no kube-proxy needed).
	APIServer string
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
}

// DefaultAgentDaemonSetOptions are the options of packaging/kubernetes/agent-daemonset.yaml.
func DefaultAgentDaemonSetOptions() AgentDaemonSetOptions {
	return AgentDaemonSetOptions{
		Image:       DefaultStaticPodOptions().Image,
		ConfigMap:   "baremetal-ccm-agent-config",
		ConfigDir:   "/etc/baremetal-ccm",
		HostDir:     "/etc/baremetal-ccm",
		ServingPort: 10268,
	}
}

// AgentDaemonSet returns the worker agent (`baremetal-cloud-controller-manager agent`)
// as a DaemonSet: one pod on every Node but the control-plane ones (where the CCM
// runs the agent itself; a host runs one or the other), on the host network (its BGP
// sessions, routes and kernel are the host's), as the ServiceAccount the agent role
// binds (a bound token; it reads no Secret), with NODE_NAME from the downward API. It
// tolerates every taint, as kube-proxy does: a Node that is not Ready, uninitialized or
// cordoned still needs its routes. Its readiness is /readyz (informers synced and its
// paths at the routers), so a rolling update that waits for it never leaves a prefix
// without a path; updates replace one Node's pod at a time.
func AgentDaemonSet(o AgentDaemonSetOptions) (*appsv1.DaemonSet, error) {
	if o.Image == "" || o.ServingPort <= 0 || o.ServingPort > 65535 || !path.IsAbs(o.ConfigDir) || (o.HostDir != "" && !path.IsAbs(o.HostDir)) {
		return nil, fmt.Errorf("agent daemonset needs an image, a serving port and absolute config and host dirs (got %+v)", o)
	}
	if errs := validation.IsDNS1123Subdomain(o.ConfigMap); len(errs) > 0 {
		return nil, fmt.Errorf("config map %q: %v", o.ConfigMap, errs)
	}
	hostMount := path.Join(HostMountPrefix, o.HostDir)
	if o.HostDir != "" && (within(hostMount, o.ConfigDir) || within(o.ConfigDir, hostMount)) {
		return nil, fmt.Errorf("config dir %s and the host dir's mount %s: neither may contain the other", o.ConfigDir, hostMount)
	}
	port := strconv.Itoa(o.ServingPort)
	command := []string{"/usr/bin/baremetal-cloud-controller-manager", "agent",
		"--cloud-config=" + path.Join(o.ConfigDir, "cloud-config.yaml"),
		"--serving-address=127.0.0.1:" + port,
	}
	command = append(command, o.ExtraArgs...)
	probe := func(p string, delay, period, failures int32) *v1.Probe {
		return &v1.Probe{
			ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
				Host: "127.0.0.1", Path: p, Port: intstr.FromInt32(int32(o.ServingPort)), Scheme: v1.URISchemeHTTP,
			}},
			InitialDelaySeconds: delay, PeriodSeconds: period, TimeoutSeconds: 5, FailureThreshold: failures,
		}
	}
	c := v1.Container{
		Name:    AgentName,
		Image:   o.Image,
		Command: command,
		Env: []v1.EnvVar{{Name: "NODE_NAME", ValueFrom: &v1.EnvVarSource{
			FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"},
		}}},
		Ports: []v1.ContainerPort{{Name: "metrics", ContainerPort: int32(o.ServingPort), Protocol: v1.ProtocolTCP}},
		Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("20m"), v1.ResourceMemory: resource.MustParse("64Mi"),
		}},
		SecurityContext: restricted(),
		LivenessProbe:   probe("/healthz", 10, 10, 6),
		ReadinessProbe:  probe("/readyz", 2, 2, 3),
		VolumeMounts:    []v1.VolumeMount{{Name: "config", MountPath: o.ConfigDir, ReadOnly: true}},
	}
	if o.APIServer != "" {
		env, err := apiServerEnv(o.APIServer)
		if err != nil {
			return nil, err
		}
		c.Env = append(c.Env, env...)
	}
	volumes := []v1.Volume{{Name: "config", VolumeSource: v1.VolumeSource{
		ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: o.ConfigMap}},
	}}}
	if o.HostDir != "" {
		dirOrCreate := v1.HostPathDirectoryOrCreate
		c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: "host", MountPath: hostMount, ReadOnly: true})
		volumes = append(volumes, v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{
			HostPath: &v1.HostPathVolumeSource{Path: o.HostDir, Type: &dirOrCreate},
		}})
	}
	maxUnavailable := intstr.FromInt32(1)
	grace := int64(30)
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: AgentName, Namespace: Namespace, Labels: agentLabels()},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: agentLabels()},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable},
			},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: agentLabels()},
				Spec: v1.PodSpec{
					ServiceAccountName:            AgentServiceAccount,
					HostNetwork:                   true,
					DNSPolicy:                     v1.DNSDefault,
					PriorityClassName:             "system-node-critical",
					TerminationGracePeriodSeconds: &grace,
					Affinity: &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
							NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
								{Key: LabelControlPlane, Operator: v1.NodeSelectorOpDoesNotExist},
							}}},
						},
					}},
					Tolerations:     []v1.Toleration{{Operator: v1.TolerationOpExists}},
					SecurityContext: &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
					Containers:      []v1.Container{c},
					Volumes:         volumes,
				},
			},
		},
	}, nil
}

// apiServerEnv returns the in-cluster configuration's variables for apiServer,
// "host:port" or ":port" (the pod's node at its address).
func apiServerEnv(apiServer string) ([]v1.EnvVar, error) {
	host, port, err := net.SplitHostPort(apiServer)
	if p, perr := strconv.Atoi(port); err != nil || perr != nil || p <= 0 || p > 65535 {
		return nil, fmt.Errorf("API server %q: want host:port, or :port for the node's own", apiServer)
	}
	// The in-cluster configuration reads these (they override the Service's).
	hostVar := v1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: host}
	if host == "" {
		hostVar = v1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", ValueFrom: &v1.EnvVarSource{
			FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.hostIP"},
		}}
	}
	return []v1.EnvVar{hostVar, {Name: "KUBERNETES_SERVICE_PORT", Value: port}}, nil
}
