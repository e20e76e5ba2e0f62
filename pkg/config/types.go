// Package config defines the CloudConfig read from --cloud-config: its types, strict
// decoding (unknown or duplicate fields are errors), defaults in one place, and
// validation that reports every problem at once with its field path.
//
// A *CloudConfig returned by Parse or Load is defaulted and valid; callers treat it as
// immutable.
package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// APIVersion and Kind identify a CloudConfig document.
const (
	APIVersion = "baremetal-ccm.io/v1alpha1"
	Kind       = "CloudConfig"
)

// CloudConfig is the configuration of the baremetal cloud provider.
type CloudConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`

	// Inventory says where the server inventory comes from and how reloads are guarded.
	Inventory InventoryConfig `json:"inventory"`

	// BMC tunes how power state is read from the hosts' BMCs.
	BMC BMCConfig `json:"bmc"`

	// Instances holds the opt-in power-off policies.
	Instances InstancesConfig `json:"instances"`

	// LoadBalancer enables LoadBalancer Services (IP pools and their announcement).
	LoadBalancer *LoadBalancerConfig `json:"loadBalancer,omitempty"`

	// BGP enables the embedded BGP speaker run by every replica and agent.
	BGP *BGPConfig `json:"bgp,omitempty"`

	// Routes enables pod-CIDR routes in the kernel (leader) and their mirror (agents).
	Routes *RoutesConfig `json:"routes,omitempty"`

	// EventsNamespace is where events about cluster-wide objects (the inventory) are
	// recorded. Default: kube-system.
	EventsNamespace string `json:"eventsNamespace,omitempty"`
}

// BMCConfig tunes BMC access. Every call has a deadline; concurrent asks for one host
// share one call; a BMC that keeps failing is backed off.
type BMCConfig struct {
	// CAFile is the PEM bundle that verifies Redfish BMCs whose inventory entry has no
	// caFile of its own. Unset: the system roots.
	CAFile string `json:"caFile,omitempty"`
	// CallTimeout bounds one BMC call (login, query, logout). Default: 10s.
	CallTimeout *metav1.Duration `json:"callTimeout,omitempty"`
	// CacheTTL is how long a power state read from a BMC is reused. Default: 5s.
	CacheTTL *metav1.Duration `json:"cacheTTL,omitempty"`
	// MaxConcurrent is the number of BMC calls in flight at once. Default: 64.
	MaxConcurrent int32 `json:"maxConcurrent,omitempty"`
	// FailureThreshold consecutive failures back a BMC off for BackoffInitial,
	// doubling up to BackoffMax. Defaults: 3, 10s, 5m.
	FailureThreshold int32            `json:"failureThreshold,omitempty"`
	BackoffInitial   *metav1.Duration `json:"backoffInitial,omitempty"`
	BackoffMax       *metav1.Duration `json:"backoffMax,omitempty"`
	// ReadyInterval and NotReadyInterval: how often the BMC conditions of a Ready and
	// of a NotReady Node are refreshed. Defaults: 5m and 10s.
	ReadyInterval    *metav1.Duration `json:"readyInterval,omitempty"`
	NotReadyInterval *metav1.Duration `json:"notReadyInterval,omitempty"`
	// FailedLogins keeps the CCM well below the failed-login limits after which real
	// BMCs lock a client out (iDRAC blocks the client's IP for 600 s after the third
	// failure).
	FailedLogins FailedLoginBudget `json:"failedLogins"`
}

// FailedLoginBudget bounds the refused logins per BMC: credentials a BMC refused are
// not tried again on it until they change or Window has passed, and after MaxFailures
// refusals within Window no login is tried on it until the oldest leaves the window.
type FailedLoginBudget struct {
	// MaxFailures refused logins per BMC within Window. Default: 2; at least 1.
	MaxFailures int32 `json:"maxFailures,omitempty"`
	// Window of MaxFailures, and how long refused credentials are not retried.
	// Default: 10m; at least 1m.
	Window *metav1.Duration `json:"window,omitempty"`
}

// InventoryConfig selects exactly one inventory source.
type InventoryConfig struct {
	// File reads an Inventory document from a local file and reloads it when it changes.
	File *FileSource `json:"file,omitempty"`
	// HTTP polls an Inventory document from an HTTP(S) API.
	HTTP *HTTPSource `json:"http,omitempty"`
	// DeletionGuard limits how many hosts may be reported gone over a window.
	DeletionGuard DeletionGuard `json:"deletionGuard"`
	// CredentialsDir: every inventory host's bmc.credentialsFile and every rack's
	// bgpPeers[].passwordFile must lie under it (compared after cleaning the path, so
	// ".." cannot escape), so whoever writes the inventory cannot make the CCM read any
	// other file and send it to an address of their choice. An absolute path other
	// than /. Default: /etc/baremetal-ccm/bmc.
	CredentialsDir string `json:"credentialsDir,omitempty"`
	// AllowInsecureSkipVerify lets inventory hosts set bmc.insecureSkipVerify; without
	// it such a host is refused. Default: false.
	AllowInsecureSkipVerify bool `json:"allowInsecureSkipVerify,omitempty"`
	// AllowPlainHTTP lets inventory hosts set bmc.plainHTTP (an http:// Redfish
	// address, the password in clear text); without it such a host is refused.
	// Default: false.
	AllowPlainHTTP bool `json:"allowPlainHTTP,omitempty"`
}

// FileSource reads the inventory from a YAML or JSON file.
type FileSource struct {
	// Path of the Inventory document.
	Path string `json:"path"`
	// PollInterval is how often the file is checked for changes. Default: 5s.
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`
}

// HTTPSource polls the inventory from an HTTP(S) endpoint that answers GET with an
// Inventory document as JSON or YAML. ETag/If-None-Match is used when the server
// supports it.
type HTTPSource struct {
	// URL of the document (http:// or https://).
	URL string `json:"url"`
	// CAFile is a PEM bundle used to verify the server's certificate instead of the
	// system roots.
	CAFile string `json:"caFile,omitempty"`
	// InsecureSkipVerify disables server certificate verification. Explicit opt-in only.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
	// ClientCertFile and ClientKeyFile authenticate to the server with mutual TLS.
	ClientCertFile string `json:"clientCertFile,omitempty"`
	ClientKeyFile  string `json:"clientKeyFile,omitempty"`
	// BearerTokenFile holds a token sent as "Authorization: Bearer <token>"; it is
	// re-read on every request so it can be rotated.
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
	// Timeout bounds one request, including reading the body. Default: 10s.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// PollInterval is the time between requests. Default: 30s.
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`
	// MaxBodyBytes caps the size of a response. Default: 64 MiB.
	MaxBodyBytes int64 `json:"maxBodyBytes,omitempty"`
}

// DeletionGuard refuses to report hosts gone when too many of them vanish (absent or
// decommissioned) within a sliding window. A change beyond either limit is held until
// acknowledged or until its hosts are back; a document that would report hosts gone is
// used only once it has settled.
type DeletionGuard struct {
	// MaxRemovedHosts is the largest number of hosts that may be reported gone within
	// Window. Default: 10. Zero means any removal trips the guard.
	MaxRemovedHosts *int32 `json:"maxRemovedHosts,omitempty"`
	// MaxRemovedPercent is the largest share (0-100) of the hosts known at the start
	// of Window that may be reported gone within Window. Default: 25. 100 disables the
	// share limit.
	MaxRemovedPercent *int32 `json:"maxRemovedPercent,omitempty"`
	// Window is the sliding window both limits count over, so hosts vanishing a few
	// at a time across reloads add up. Default: 1h; at least 1m.
	Window *metav1.Duration `json:"window,omitempty"`
	// SettleTime: a document that would report hosts gone must be seen unchanged this
	// long, and by at least two polls, before any of them is reported gone (a file
	// read mid-write is never acted on). Default: 30s; 0 to 1h.
	SettleTime *metav1.Duration `json:"settleTime,omitempty"`
	// AcknowledgeFile is a file the leader reads for acknowledgements: the IDs of held
	// changes (given in the DeletionGuardTripped and PowerOffBudgetExceeded events, logs
	// and errors). Default: /etc/baremetal-ccm/inventory-ack.
	AcknowledgeFile string `json:"acknowledgeFile,omitempty"`
}

// InstancesConfig holds opt-in policies for hosts that stay powered off. "Off
// continuously" is measured from the Node's baremetal-ccm.io/powered-off-since
// annotation, which any answer other than "off" (on, unreachable, unknown) clears.
type InstancesConfig struct {
	// OutOfServiceAfter: a NotReady Node whose host has been off this long gets the
	// node.kubernetes.io/out-of-service taint (non-graceful node shutdown: volumes
	// detach, pods are deleted); it is removed while the host still reads off, once the
	// Node holds no pod the taint evicts and no VolumeAttachment (never after the host
	// came back: kubernetes#142331). Unset: never. At least 1m.
	OutOfServiceAfter *metav1.Duration `json:"outOfServiceAfter,omitempty"`
	// DeleteAfter: a NotReady Node whose host has been off this long, and is off now,
	// is reported gone, so the node-lifecycle controller deletes it. Unset: never. At
	// least 5m.
	DeleteAfter *metav1.Duration `json:"deleteAfter,omitempty"`
	// PowerOffBudget limits the power-based actions (DeleteAfter, OutOfServiceAfter)
	// over a window; beyond it they wait for an acknowledgement.
	PowerOffBudget PowerOffBudget `json:"powerOffBudget"`
	// MaxUnhealthy, when set, holds every power-based action while more Nodes are
	// unhealthy (not Ready, not in maintenance) than this: a count ("3") or a percent
	// of the initialized Nodes of inventory hosts ("30%", rounded down), as medik8s
	// Node Health Check's maxUnhealthy. A mass failure (a power feed, a switch, a bad
	// rollout) is then left to people instead of fencing or deleting half the cluster.
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`
	// StormCooldown: after the unhealthy count dropped to MaxUnhealthy or below, the
	// power-based actions stay held this long. Default: 5m (only with MaxUnhealthy).
	StormCooldown *metav1.Duration `json:"stormCooldown,omitempty"`
}

// PowerOffBudget limits how many hosts the power-off policies may act on within a
// sliding window (a PDU or rack power event must not fence or delete a whole rack).
// Hosts in maintenance are exempt from both policies and never count.
type PowerOffBudget struct {
	// MaxHosts is the largest number of hosts granted a power-based action within
	// Window. Default: 5. Zero: every such action needs an acknowledgement.
	MaxHosts *int32 `json:"maxHosts,omitempty"`
	// Window is the sliding window of MaxHosts. Default: 1h; at least 1m.
	Window *metav1.Duration `json:"window,omitempty"`
}
