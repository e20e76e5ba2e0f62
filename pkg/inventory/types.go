// Package inventory holds the server inventory: the Inventory document, its strict
// parsing and validation, an immutable indexed View used to match Nodes to hosts, the
// sources it is loaded from (a file, an HTTP API), and a Store that reloads it, keeps the
// last good View when a reload fails, and guards against mass deletion.
package inventory

import (
	v1 "k8s.io/api/core/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// APIVersion and Kind identify an Inventory document.
const (
	APIVersion = "baremetal-ccm.io/v1alpha1"
	Kind       = "Inventory"
)

// ProviderIDPrefix is the scheme of every providerID this provider sets.
const ProviderIDPrefix = "baremetal://"

// State is the lifecycle state of a host.
type State string

// Host states.
const (
	// StateActive is a host in service (the default).
	StateActive State = "active"
	// StateMaintenance is a host being worked on: it is known and never reported gone.
	StateMaintenance State = "maintenance"
	// StateDecommissioned is a host taken out of service: its Node is reported gone.
	StateDecommissioned State = "decommissioned"
)

// Document is the Inventory file or HTTP response.
type Document struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Hosts      []Host `json:"hosts"`
	// Racks holds per-rack settings: the BGP peers (top-of-rack routers) of the
	// hosts whose rack field names the rack.
	Racks []Rack `json:"racks,omitempty"`
}

// Rack is one rack's settings.
type Rack struct {
	// Name matches hosts' rack field.
	Name string `json:"name"`
	// BGPPeers are the routers a speaker on a host of this rack peers with, in
	// addition to the CloudConfig's bgp.peers.
	BGPPeers []config.BGPPeer `json:"bgpPeers,omitempty"`
}

// Host is one server.
type Host struct {
	// Name is the unique host name (a DNS-1123 subdomain); the providerID is
	// baremetal://<name>.
	Name string `json:"name"`
	// Hostnames are other names the server's Node may register under.
	Hostnames []string `json:"hostnames,omitempty"`
	// SystemUUID is the SMBIOS system UUID, as kubelet reports in
	// status.nodeInfo.systemUUID.
	SystemUUID string `json:"systemUUID,omitempty"`
	// Addresses are the Node addresses to publish (InternalIP, ExternalIP, Hostname,
	// InternalDNS, ExternalDNS).
	Addresses []Address `json:"addresses,omitempty"`
	// InstanceType, Zone and Region become the standard node.kubernetes.io/instance-type
	// and topology.kubernetes.io/{zone,region} labels.
	InstanceType string `json:"instanceType,omitempty"`
	Zone         string `json:"zone,omitempty"`
	Region       string `json:"region,omitempty"`
	// Rack becomes the label baremetal-ccm.io/rack.
	Rack string `json:"rack,omitempty"`
	// BGPRouterID is this host's BGP identifier (IPv4), published on its Node for the
	// host's agent. Default: the host's first IPv4 InternalIP. Unique across hosts.
	BGPRouterID string `json:"bgpRouterID,omitempty"`
	// Labels are added to the Node at initialization. An unprefixed key k becomes
	// baremetal-ccm.io/k; keys under kubernetes.io or k8s.io are rejected (the
	// cloud-node controller would drop them).
	Labels map[string]string `json:"labels,omitempty"`
	// State is active (default), maintenance or decommissioned.
	State State `json:"state,omitempty"`
	// BMC is how to reach the server's baseboard management controller.
	BMC *BMC `json:"bmc,omitempty"`
}

// Address is one Node address.
type Address struct {
	Type    v1.NodeAddressType `json:"type"`
	Address string             `json:"address"`
}

// BMC protocols.
const (
	ProtocolRedfish = "redfish"
	ProtocolIPMI    = "ipmi"
)

// BMC describes a host's baseboard management controller. Credentials are never
// inline: they are read from CredentialsFile or CredentialsSecret (exactly one).
type BMC struct {
	// Protocol is redfish or ipmi.
	Protocol string `json:"protocol"`
	// Address is a host name, an IP, or for Redfish an http(s):// URL.
	Address string `json:"address"`
	// Port overrides the protocol's default port (443 for Redfish, 623 for IPMI).
	Port int32 `json:"port,omitempty"`
	// CredentialsFile holds the username and password.
	CredentialsFile string `json:"credentialsFile,omitempty"`
	// CredentialsSecret names a Kubernetes Secret with keys username and password,
	// read through the CCM's own client (RBAC must let it get that Secret).
	CredentialsSecret *SecretRef `json:"credentialsSecret,omitempty"`
	// CAFile is a PEM bundle to verify the BMC's TLS certificate (Redfish).
	CAFile string `json:"caFile,omitempty"`
	// InsecureSkipVerify disables TLS verification for this BMC. Explicit opt-in only.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
	// PlainHTTP accepts an http:// Redfish address: the password then crosses the
	// network in clear text. The CloudConfig must allow it too
	// (inventory.allowPlainHTTP).
	PlainHTTP bool `json:"plainHTTP,omitempty"`
	// System names the host's ComputerSystem on a Redfish service with several (a
	// blade enclosure, a partitioned or composed system): its Id ("Blade3") or its
	// path ("/redfish/v1/Systems/Blade3"). Unset: the only system, or the one whose
	// UUID is the host's systemUUID.
	System string `json:"system,omitempty"`
}

// SecretRef names a Secret.
type SecretRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ProviderID returns the providerID of the host: baremetal://<name>.
func (h *Host) ProviderID() string { return ProviderIDPrefix + h.Name }

// Gone reports whether the host is out of service.
func (h *Host) Gone() bool { return h.State == StateDecommissioned }
