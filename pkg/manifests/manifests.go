// Package manifests renders the Kubernetes objects that run the CCM: the static pod for
// control-plane nodes, the Deployment for clusters that prefer one, the RBAC it needs
// and the RBAC of the worker agents. The files in packaging/kubernetes are its
// output with default options (kept equal by a golden test).
package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Names of the objects.
const (
	Name           = "baremetal-cloud-controller-manager"
	Namespace      = "kube-system"
	ClusterRole    = "system:baremetal-cloud-controller-manager"
	UserName       = "system:baremetal-cloud-controller-manager"
	ServiceAccount = "baremetal-cloud-controller-manager"
	// CredentialsNamespace holds the Secrets with BMC credentials that inventory
	// entries name (bmc.credentialsSecret); the packaged RBAC lets the CCM get
	// Secrets there and nowhere else.
	CredentialsNamespace = "baremetal-ccm"
	// CredentialsRole is the Role that grants it.
	CredentialsRole = ClusterRole + ":bmc-credentials"
	// GuardRole lets the CCM keep the deletion guard's state, the ConfigMap
	// baremetal-ccm-deletion-guard and the pools' use, baremetal-ccm-pools, in
	// CredentialsNamespace.
	GuardRole = ClusterRole + ":deletion-guard"
)

// LifecycleArgs are the flags every packaged CCM runs with, so the node-lifecycle
// controller can taint many powered-off Nodes within one pass: its workers answer
// InstanceShutdown from the power monitor's recent readings, so the limit is the API
// requests (a GET and a PATCH per taint), which the upstream defaults (one worker,
// 20 requests/s) would spread over about 20 s for 200 Nodes.
var LifecycleArgs = []string{"--concurrent-node-lifecycle-syncs=16", "--kube-api-qps=100", "--kube-api-burst=200"}

// StaticPodOptions parameterize the static pod.
type StaticPodOptions struct {
	// Image of the CCM (it must contain ipmitool).
	Image string
	// Kubeconfig is the host path of the CCM's kubeconfig. It should point at this
	// node's own kube-apiserver (https://127.0.0.1:6443), never at a VIP the CCM
	// itself may announce.
	Kubeconfig string
	// ConfigDir is the host directory holding cloud-config.yaml, the inventory and BMC
	// credentials, mounted read-only at the same path.
	ConfigDir string
	// SecurePort serves /healthz and /metrics on 127.0.0.1.
	SecurePort int
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
}

// DefaultStaticPodOptions are the options of packaging/kubernetes/static-pod.yaml.
func DefaultStaticPodOptions() StaticPodOptions {
	return StaticPodOptions{
		Image:      "registry.example/baremetal-ccm/baremetal-cloud-controller-manager:v0.1.0",
		Kubeconfig: "/etc/kubernetes/baremetal-ccm.conf",
		ConfigDir:  "/etc/baremetal-ccm",
		SecurePort: 10258,
	}
}

// StaticPod returns the static pod for a control-plane node: host network, priority
// system-node-critical, only NET_ADMIN and NET_BIND_SERVICE, a read-only root
// filesystem, liveness on the secure port's /healthz and readiness on its /readyz.
func StaticPod(o StaticPodOptions) (*v1.Pod, error) {
	if o.Image == "" || o.Kubeconfig == "" || o.ConfigDir == "" || o.SecurePort <= 0 || o.SecurePort > 65535 {
		return nil, fmt.Errorf("static pod needs an image, a kubeconfig path, a config dir and a secure port (got %+v)", o)
	}
	if !path.IsAbs(o.Kubeconfig) || !path.IsAbs(o.ConfigDir) {
		return nil, fmt.Errorf("kubeconfig %q and config dir %q must be absolute host paths", o.Kubeconfig, o.ConfigDir)
	}
	args := []string{
		"--cloud-config=" + path.Join(o.ConfigDir, "cloud-config.yaml"),
		"--kubeconfig=" + o.Kubeconfig,
		"--authentication-kubeconfig=" + o.Kubeconfig,
		"--authorization-kubeconfig=" + o.Kubeconfig,
	}
	c := ccmContainer(o.Image, o.SecurePort, args, o.ExtraArgs)
	c.VolumeMounts = []v1.VolumeMount{
		{Name: "kubeconfig", MountPath: o.Kubeconfig, ReadOnly: true},
		{Name: "config", MountPath: o.ConfigDir, ReadOnly: true},
	}
	hostPathFile, hostPathDir := v1.HostPathFile, v1.HostPathDirectory
	return &v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: Name, Namespace: Namespace,
			Labels: map[string]string{"component": Name, "tier": "control-plane"},
		},
		Spec: v1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			SecurityContext:   &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
			Containers:        []v1.Container{c},
			Volumes: []v1.Volume{
				{Name: "kubeconfig", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: o.Kubeconfig, Type: &hostPathFile}}},
				{Name: "config", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: o.ConfigDir, Type: &hostPathDir}}},
			},
		},
	}, nil
}

// ccmContainer is the CCM's container in the static pod and the Deployment: the
// binary with args (the configuration and identity flags), then the flags every
// packaged CCM runs with (serving on 127.0.0.1:port, leader election, the node
// controllers, LifecycleArgs), then extra; NODE_NAME from the pod's node (the host name
// need not be the Node's name); root with every capability dropped but NET_ADMIN and
// NET_BIND_SERVICE, a read-only root filesystem; liveness on /healthz, readiness on
// /readyz (ready once this replica's BGP sessions are up with its paths at the
// routers, so a rollout that waits for readiness never leaves a prefix without a path).
// restricted is the security context of the CCM's and the agent's containers: root,
// because root reads host files such as a 0600 kubeconfig or password and a non-root
// process would not keep the added capabilities, with only NET_ADMIN (routes, TCP-MD5)
// and NET_BIND_SERVICE (BGP's port 179); every other capability is dropped, the root
// filesystem is read-only and privileges cannot be escalated.
func restricted() *v1.SecurityContext {
	yes, no, root := true, false, int64(0)
	return &v1.SecurityContext{
		RunAsUser:                &root,
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		Capabilities: &v1.Capabilities{
			Drop: []v1.Capability{"ALL"},
			Add:  []v1.Capability{"NET_ADMIN", "NET_BIND_SERVICE"},
		},
	}
}

func ccmContainer(image string, port int, args, extra []string) v1.Container {
	probe := func(path string, delay, period, failures int32) *v1.Probe {
		return &v1.Probe{
			ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
				Host: "127.0.0.1", Path: path, Port: intstr.FromInt32(int32(port)), Scheme: v1.URISchemeHTTPS,
			}},
			InitialDelaySeconds: delay, PeriodSeconds: period, TimeoutSeconds: 5, FailureThreshold: failures,
		}
	}
	command := append([]string{"/usr/bin/baremetal-cloud-controller-manager"}, args...)
	command = append(command,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--leader-elect=true",
		"--configure-cloud-routes=false",
		"--controllers=cloud-node-controller,cloud-node-lifecycle-controller",
	)
	command = append(command, LifecycleArgs...)
	command = append(command, extra...)
	return v1.Container{
		Name:    Name,
		Image:   image,
		Command: command,
		Env: []v1.EnvVar{{Name: "NODE_NAME", ValueFrom: &v1.EnvVarSource{
			FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"},
		}}},
		Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("50m"), v1.ResourceMemory: resource.MustParse("64Mi"),
		}},
		SecurityContext: restricted(),
		LivenessProbe:   probe("/healthz", 10, 10, 6),
		ReadinessProbe:  probe("/readyz", 2, 2, 3),
	}
}

// ClusterRoleRules are the permissions of the CCM: the ClusterRole of the upstream
// cloud-controller-manager documentation (without persistent volumes, which this
// provider does not label), plus leases for leader election, read access to
// EndpointSlices and the load balancer's address claims (IPAddress), its speakers'
// BGPSessionState objects, and listing pods and VolumeAttachments (the
// out-of-service taint's removal). A golden test and the e2e suite (which runs the CCM bound only to
// these rules) catch a missing or an excess permission.
func ClusterRoleRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch", "patch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"patch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: []string{"create", "get", "list", "watch", "update"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		// Its speaker's session states (every replica), read by the leader.
		{APIGroups: []string{"baremetal-ccm.io"}, Resources: []string{"bgpsessionstates"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
		// IP pools managed in the cluster: every replica watches them, the leader
		// decides (status) and holds those in use (finalizer).
		{APIGroups: []string{"baremetal-ccm.io"}, Resources: []string{"ippools"}, Verbs: []string{"list", "watch", "update"}},
		{APIGroups: []string{"baremetal-ccm.io"}, Resources: []string{"ippools/status"}, Verbs: []string{"update"}},
		// BGP peers managed in the cluster: every replica watches them, the leader
		// decides (status).
		{APIGroups: []string{"baremetal-ccm.io"}, Resources: []string{"bgppeers"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"baremetal-ccm.io"}, Resources: []string{"bgppeers/status"}, Verbs: []string{"update"}},
		// BGP advertisements likewise.
		{APIGroups: []string{"baremetal-ccm.io"}, Resources: []string{"bgpadvertisements"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"baremetal-ccm.io"}, Resources: []string{"bgpadvertisements/status"}, Verbs: []string{"update"}},
		// Address claims (pkg/lb: one IPAddress per load-balancer address).
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ipaddresses"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
		// The out-of-service taint comes off only once the powered-off Node holds no pod
		// and no volume attachment (pkg/powermon).
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"list"}},
	}
}

// CredentialsRules let the CCM read the BMC credentials Secrets by name (it never
// lists or watches Secrets), in CredentialsNamespace only.
func CredentialsRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}
}

// GuardRules let the CCM create the deletion guard's state ConfigMap and read and
// update it by name, in CredentialsNamespace only (RBAC cannot limit create by name).
func GuardRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"baremetal-ccm-deletion-guard", "baremetal-ccm-pools"}, Verbs: []string{"get", "update"}},
	}
}

// RBAC returns the ServiceAccount, the ClusterRole and its bindings, and the
// CredentialsNamespace with a Role that lets the CCM get Secrets there, and one that lets
// it keep the deletion guard's state ConfigMap there. The bindings name
// both the ServiceAccount kube-system/baremetal-cloud-controller-manager (token-based
// kubeconfigs) and the user system:baremetal-cloud-controller-manager (a client
// certificate with that CN, as for a static pod's host kubeconfig). The secure port's
// delegated authentication and authorization need system:auth-delegator and the
// extension-apiserver-authentication-reader Role.
func RBAC() []any {
	subjects := ccmSubjects
	meta := func(name, ns string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/name": "baremetal-ccm"}}
	}
	crb := func(name, role string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: meta(name, ""),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   subjects,
		}
	}
	return []any{
		&v1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta(ServiceAccount, Namespace)},
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: meta(ClusterRole, ""),
			Rules:      ClusterRoleRules(),
		},
		crb(ClusterRole, ClusterRole),
		crb(ClusterRole+":auth-delegator", "system:auth-delegator"),
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: meta(ClusterRole+":extension-apiserver-authentication-reader", Namespace),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
			Subjects:   subjects,
		},
		&v1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: meta(CredentialsNamespace, "")},
		role(CredentialsRole, CredentialsRules()),
		roleBinding(CredentialsRole),
		role(GuardRole, GuardRules()),
		roleBinding(GuardRole),
	}
}

// ccmSubjects are the CCM's identities: its ServiceAccount and the user of a client
// certificate.
var ccmSubjects = []rbacv1.Subject{
	{Kind: rbacv1.ServiceAccountKind, Name: ServiceAccount, Namespace: Namespace},
	{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: UserName},
}

// nsRoleMeta names a Role or RoleBinding of ours in CredentialsNamespace.
func nsRoleMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: CredentialsNamespace, Labels: map[string]string{"app.kubernetes.io/name": "baremetal-ccm"}}
}

// role is a Role of ours in CredentialsNamespace.
func role(name string, rules []rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"}, ObjectMeta: nsRoleMeta(name), Rules: rules}
}

// roleBinding binds the Role name in CredentialsNamespace to the CCM's subjects.
func roleBinding(name string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: nsRoleMeta(name),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   ccmSubjects,
	}
}

// MetalLBRules are what the metallb announcer needs in MetalLB's namespace: its
// pools, peers and advertisements, and the Secrets holding BGP passwords (the
// announcer writes only objects labeled as its own and never touches others).
func MetalLBRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"metallb.io"}, Resources: []string{"ipaddresspools", "bgppeers", "bgpadvertisements"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
	}
}

// MetalLBRBAC returns the Role and RoleBinding the metallb announcer needs in
// MetalLB's namespace (apply it only with loadBalancer.announcer: metallb).
func MetalLBRBAC(namespace string) []any {
	meta := metav1.ObjectMeta{Name: ClusterRole + ":metallb", Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/name": "baremetal-ccm"}}
	return []any{
		&rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: meta,
			Rules:      MetalLBRules(),
		},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: meta,
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: meta.Name},
			Subjects: []rbacv1.Subject{
				{Kind: rbacv1.ServiceAccountKind, Name: ServiceAccount, Namespace: Namespace},
				{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: UserName},
			},
		},
	}
}

// Names of the worker agents' identity (`baremetal-cloud-controller-manager agent`),
// separate from the CCM's.
const (
	// AgentClusterRole is the agents' ClusterRole and the name of its binding.
	AgentClusterRole = "system:baremetal-ccm-agent"
	// AgentServiceAccount is the identity of agents run as a DaemonSet (a bound token).
	AgentServiceAccount = "baremetal-ccm-agent"
	// AgentGroup is the organization (O) of the agents' per-node client certificates.
	AgentGroup = "system:baremetal-ccm-agents"
	// AgentUserPrefix, followed by the Node's name, is the common name (CN) of an
	// agent's client certificate, as system:node:<name> is a kubelet's.
	AgentUserPrefix = "system:baremetal-ccm-agent:"
)

// AgentUserName is the user of node's agent client certificate.
func AgentUserName(node string) string { return AgentUserPrefix + node }

// AgentClusterRoleRules are exactly what an agent uses: it watches Nodes, Services and
// EndpointSlices to decide what its host announces, records Events, watches the
// IPPools (their communities), and writes its node's BGPSessionState objects
// (AgentPolicy keeps it to its own node's). It writes nothing else and reads no
// Secret, ConfigMap or inventory.
func AgentClusterRoleRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"baremetal-ccm.io"}, Resources: []string{"bgpsessionstates"}, Verbs: []string{"list", "create", "update", "delete"}},
		{APIGroups: []string{"baremetal-ccm.io"}, Resources: []string{"ippools"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"baremetal-ccm.io"}, Resources: []string{"bgppeers"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"baremetal-ccm.io"}, Resources: []string{"bgpadvertisements"}, Verbs: []string{"list", "watch"}},
	}
}

// AgentPolicy is the name of the ValidatingAdmissionPolicy (and its binding) that
// keeps each agent to its own node's BGPSessionState objects.
const AgentPolicy = "baremetal-ccm-agent-own-node"

// AgentPolicyObjects returns the ValidatingAdmissionPolicy AgentPolicy and its
// binding: a request from an agent (group AgentGroup, or the ServiceAccount
// AgentServiceAccount) that creates, updates or deletes a BGPSessionState is allowed
// only when the object's spec.node, before and after, is the agent's node (and its
// spec.speaker is Agent): the name
// after AgentUserPrefix in its certificate's user, or the node a ServiceAccount token
// is bound to (authentication.kubernetes.io/node-name, set for tokens bound to a Pod).
// The CRD's own rules tie the object's name to spec.node.
func AgentPolicyObjects() []any {
	meta := metav1.ObjectMeta{Name: AgentPolicy, Labels: map[string]string{"app.kubernetes.io/name": "baremetal-ccm", "app.kubernetes.io/component": "agent"}}
	sa := "system:serviceaccount:" + Namespace + ":" + AgentServiceAccount
	fail := admissionregistrationv1.Fail
	forbidden := metav1.StatusReasonForbidden
	return []any{
		&admissionregistrationv1.ValidatingAdmissionPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
			ObjectMeta: meta,
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: &fail,
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{"baremetal-ccm.io"}, APIVersions: []string{"*"},
							Resources: []string{"bgpsessionstates", "bgpsessionstates/status"}},
					},
				}}},
				MatchConditions: []admissionregistrationv1.MatchCondition{{
					Name:       "agents",
					Expression: fmt.Sprintf("%q in request.userInfo.groups || request.userInfo.username == %q", AgentGroup, sa),
				}},
				Variables: []admissionregistrationv1.Variable{
					{Name: "requester", Expression: fmt.Sprintf("request.userInfo.username.startsWith(%q) ? request.userInfo.username.substring(%d) : "+
						"(has(request.userInfo.extra) && 'authentication.kubernetes.io/node-name' in request.userInfo.extra && "+
						"size(request.userInfo.extra['authentication.kubernetes.io/node-name']) > 0 ? request.userInfo.extra['authentication.kubernetes.io/node-name'][0] : '')",
						AgentUserPrefix, len(AgentUserPrefix))},
					{Name: "node", Expression: "request.operation == 'DELETE' ? oldObject.spec.node : object.spec.node"},
				},
				Validations: []admissionregistrationv1.Validation{{
					Expression: "variables.requester != '' && variables.node == variables.requester && (oldObject == null || oldObject.spec.node == variables.requester)",
					MessageExpression: "variables.requester == '' ? 'this agent identity names no node: use a client certificate for " + AgentUserPrefix + "<node> (baremetal-ccmctl agent kubeconfig) or a ServiceAccount token bound to a Pod on the node' : " +
						"'the agent of node ' + variables.requester + ' may write only its own node\\'s BGPSessionState objects, not those of node ' + variables.node",
					Reason: &forbidden,
				}, {
					// An agent speaks as an agent: it cannot pass its sessions off as a
					// CCM replica's.
					Expression:        "request.operation == 'DELETE' || object.spec.speaker == 'Agent'",
					MessageExpression: "'the agent of node ' + variables.requester + ' may write only spec.speaker Agent'",
					Reason:            &forbidden,
				}},
			},
		},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
			ObjectMeta: meta,
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        AgentPolicy,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		},
	}
}

// AgentRBAC returns the agents' ServiceAccount, ClusterRole and ClusterRoleBinding. The
// binding names the ServiceAccount kube-system/baremetal-ccm-agent (a DaemonSet's bound
// token) and the group AgentGroup (per-node client certificates with CN
// AgentUserName(node) and O AgentGroup, see `baremetal-ccmctl agent kubeconfig`).
func AgentRBAC() []any {
	meta := func(name, ns string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			"app.kubernetes.io/name": "baremetal-ccm", "app.kubernetes.io/component": "agent",
		}}
	}
	return []any{
		&v1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta(AgentServiceAccount, Namespace)},
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: meta(AgentClusterRole, ""),
			Rules:      AgentClusterRoleRules(),
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: meta(AgentClusterRole, ""),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AgentClusterRole},
			Subjects: []rbacv1.Subject{
				{Kind: rbacv1.ServiceAccountKind, Name: AgentServiceAccount, Namespace: Namespace},
				{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: AgentGroup},
			},
		},
		AgentPolicyObjects()[0], AgentPolicyObjects()[1],
	}
}

// YAML renders objects as one multi-document YAML stream.
func YAML(objs ...any) ([]byte, error) {
	var b bytes.Buffer
	for i, o := range objs {
		// Through a map, to leave out the status (a DaemonSet's has fields that are
		// not omitted when empty); the keys come out sorted either way.
		j, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil {
			return nil, err
		}
		delete(m, "status")
		data, err := yaml.Marshal(m)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		data = bytes.ReplaceAll(data, []byte("  creationTimestamp: null\n"), nil)
		data = bytes.ReplaceAll(data, []byte("status: {}\n"), nil)
		b.Write(data)
	}
	return b.Bytes(), nil
}
