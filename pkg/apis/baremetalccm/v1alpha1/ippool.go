package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPPool is a pool of LoadBalancer addresses, as a loadBalancer.pools entry of the
// CloudConfig but managed in the cluster: the leader checks each change (its own
// fields, and no clash with the CloudConfig's pools or another IPPool) and, when it
// is accepted, copies it to status.applied, which every replica and agent then uses.
// A bad change leaves status.applied, the last good spec, in force. A change that
// would take away addresses Services hold, or the deletion of a pool they hold
// addresses of, is held (condition Accepted False, reason ShrinkHeld or
// DeletionHeld, naming the addresses) until they are released: no Service loses its
// address to a pool edit. The pool's name is the object's name (the
// baremetal-ccm.io/address-pool annotation names it).
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=baremetal-ccm
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].reason`
// +kubebuilder:printcolumn:name="IPv4 Size",type=string,JSONPath=`.status.ipv4.size`
// +kubebuilder:printcolumn:name="IPv4 Used",type=string,JSONPath=`.status.ipv4.used`
// +kubebuilder:printcolumn:name="IPv4 Free",type=string,JSONPath=`.status.ipv4.free`
// +kubebuilder:printcolumn:name="IPv6 Size",type=string,JSONPath=`.status.ipv6.size`
// +kubebuilder:printcolumn:name="IPv6 Used",type=string,JSONPath=`.status.ipv6.used`
// +kubebuilder:printcolumn:name="IPv6 Free",type=string,JSONPath=`.status.ipv6.free`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name: a pool name is a DNS-1123 label of at most 63 characters"
type IPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec IPPoolSpec `json:"spec"`
	// +optional
	Status IPPoolStatus `json:"status,omitempty"`
}

// IPPoolSpec is a pool's addresses and who may use them: the fields of a CloudConfig
// loadBalancer.pools entry but its name.
type IPPoolSpec struct {
	// Addresses are CIDRs (192.0.2.0/24, 2001:db8::/120) or first-last ranges
	// (192.0.2.10-192.0.2.20), IPv4 and IPv6 mixed.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=90
	Addresses []string `json:"addresses"`
	// AutoAssign: when false, only Services that name this pool or ask for one of its
	// addresses get addresses from it. Default: true.
	// +optional
	AutoAssign *bool `json:"autoAssign,omitempty"`
	// AvoidBuggyIPs skips IPv4 addresses ending in .0 and .255.
	// +optional
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`
	// Priority orders auto-assignment among the pools a Service may use: lower first.
	// +optional
	Priority int32 `json:"priority,omitempty"`
	// Namespaces, when set, restricts the pool to Services in these namespaces.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	Namespaces []string `json:"namespaces,omitempty"`
	// ServiceSelector, when set, restricts the pool to Services whose labels match.
	// +optional
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector,omitempty"`
	// Communities (ASN:value, or no-export, no-advertise, ...) are attached to the
	// pool's announcements.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	Communities []string `json:"communities,omitempty"`
	// LargeCommunities (ASN:value:value) are attached to the pool's announcements.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	LargeCommunities []string `json:"largeCommunities,omitempty"`
	// LocalPreference is set on the pool's announcements to iBGP peers.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	LocalPreference *int64 `json:"localPreference,omitempty"`
}

// Reasons of the IPPool condition Accepted.
const (
	// PoolConditionAccepted is the condition type.
	PoolConditionAccepted = "Accepted"
	// PoolReasonAccepted: status.applied is the spec.
	PoolReasonAccepted = "Accepted"
	// PoolReasonInvalid: the spec is wrong (the message names the field); the last
	// accepted spec stays in force.
	PoolReasonInvalid = "Invalid"
	// PoolReasonConflict: the pool clashes with a CloudConfig pool or another
	// IPPool (same name, overlapping addresses).
	PoolReasonConflict = "Conflict"
	// PoolReasonShrinkHeld: the spec takes away addresses Services hold.
	PoolReasonShrinkHeld = "ShrinkHeld"
	// PoolReasonDeletionHeld: the pool is being deleted while Services hold some of
	// its addresses.
	PoolReasonDeletionHeld = "DeletionHeld"
)

// PoolFinalizer keeps an IPPool whose addresses Services hold until they release
// them.
const PoolFinalizer = "baremetal-ccm.io/pool-in-use"

// IPPoolStatus is what the leader made of the pool.
type IPPoolStatus struct {
	// Conditions: Accepted.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the conditions are about.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Applied is the spec in force, in every replica and agent; absent until a spec
	// is accepted.
	// +optional
	Applied *IPPoolSpec `json:"applied,omitempty"`
	// IPv4 and IPv6 are the pool's use per family (absent without addresses of it).
	// +optional
	IPv4 *PoolUsage `json:"ipv4,omitempty"`
	// +optional
	IPv6 *PoolUsage `json:"ipv6,omitempty"`
}

// PoolUsage counts one family's addresses (decimal strings: an IPv6 pool may hold
// more than 2^63).
type PoolUsage struct {
	Size string `json:"size"`
	Used string `json:"used"`
	Free string `json:"free"`
}

// IPPoolList is a list of IPPool.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type IPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPPool `json:"items"`
}
