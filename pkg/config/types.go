// Package config defines the CloudConfig read from --cloud-config: its types, strict
// decoding (unknown or duplicate fields are errors), defaults in one place, and
// validation that reports every problem at once with its field path.
//
// A *CloudConfig returned by Parse or Load is defaulted and valid; callers treat it as
// immutable.
package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
}

// InventoryConfig selects exactly one inventory source.
type InventoryConfig struct {
	// File reads an Inventory document from a local file and reloads it when it changes.
	File *FileSource `json:"file,omitempty"`
	// HTTP polls an Inventory document from an HTTP(S) API.
	HTTP *HTTPSource `json:"http,omitempty"`
	// DeletionGuard limits how many hosts one inventory change may report gone.
	DeletionGuard DeletionGuard `json:"deletionGuard"`
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

// DeletionGuard refuses to report hosts gone when one inventory change would make too
// many of them vanish (absent or decommissioned) at once. A change trips the guard when
// it exceeds either limit; it is then held until acknowledged (see AcknowledgeFile) or
// replaced by an inventory within the limits.
type DeletionGuard struct {
	// MaxRemovedHosts is the largest number of hosts one change may report gone.
	// Default: 10. Zero means any removal trips the guard.
	MaxRemovedHosts *int32 `json:"maxRemovedHosts,omitempty"`
	// MaxRemovedPercent is the largest share (0-100) of known hosts one change may
	// report gone. Default: 25. 100 disables the share limit.
	MaxRemovedPercent *int32 `json:"maxRemovedPercent,omitempty"`
	// AcknowledgeFile is where an operator writes the digest of a held inventory
	// (given in the DeletionGuardTripped event, log and metric) to accept it.
	// Default: /etc/baremetal-ccm/inventory-ack.
	AcknowledgeFile string `json:"acknowledgeFile,omitempty"`
}

// InstancesConfig holds opt-in policies for hosts that stay powered off. "Off
// continuously" is measured from the Node's baremetal-ccm.io/powered-off-since
// annotation, which any answer other than "off" (on, unreachable, unknown) clears.
type InstancesConfig struct {
	// OutOfServiceAfter: a NotReady Node whose host has been off this long gets the
	// node.kubernetes.io/out-of-service taint (non-graceful node shutdown: volumes
	// detach, pods are deleted); it is removed when the host is on and the Node Ready.
	// Unset: never.
	OutOfServiceAfter *metav1.Duration `json:"outOfServiceAfter,omitempty"`
	// DeleteAfter: a NotReady Node whose host has been off this long, and is off now,
	// is reported gone, so the node-lifecycle controller deletes it (the deletion guard
	// still applies). Unset: never.
	DeleteAfter *metav1.Duration `json:"deleteAfter,omitempty"`
}
