package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGPAdvertisement says how the load-balancer addresses of some pools (and, with a
// Service selector, of some Services) are announced: to which peers, with which
// communities and local preference. An address no BGPAdvertisement covers is
// announced to every peer, as without any; one that some cover goes to the union of
// their peers, with all their communities and the highest local preference. The
// leader checks each change and resolves its references (pools by name or label,
// BGPPeers by name) into status, which every replica and agent then uses; a bad
// change, or one naming what does not exist, leaves the last good one in force.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=baremetal-ccm
// +kubebuilder:printcolumn:name="Pools",type=string,JSONPath=`.status.pools`
// +kubebuilder:printcolumn:name="Peers",type=string,JSONPath=`.status.peerAddresses`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPAdvertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BGPAdvertisementSpec `json:"spec"`
	// +optional
	Status BGPAdvertisementStatus `json:"status,omitempty"`
}

// BGPAdvertisementSpec selects addresses (pools, Services) and says how they are
// announced.
type BGPAdvertisementSpec struct {
	// IPPools names the pools (IPPool objects or CloudConfig loadBalancer.pools)
	// whose addresses it covers.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	IPPools []string `json:"ipPools,omitempty"`
	// IPPoolSelector covers the IPPool objects whose labels match. With neither
	// ipPools nor ipPoolSelector: every pool.
	// +optional
	IPPoolSelector *metav1.LabelSelector `json:"ipPoolSelector,omitempty"`
	// ServiceSelector, when set, covers only the Services whose labels match.
	// +optional
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector,omitempty"`
	// Peers names the BGPPeer objects the addresses go to.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	Peers []string `json:"peers,omitempty"`
	// PeerAddresses are further peers by address: a CloudConfig bgp.peers entry or a
	// rack's peer. With neither peers nor peerAddresses: every peer.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=45
	PeerAddresses []string `json:"peerAddresses,omitempty"`
	// Communities (ASN:value, or no-export, no-advertise, ...) are attached.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	Communities []string `json:"communities,omitempty"`
	// LargeCommunities (ASN:value:value) are attached.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	LargeCommunities []string `json:"largeCommunities,omitempty"`
	// LocalPreference is set on the announcements to iBGP peers.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	LocalPreference *int64 `json:"localPreference,omitempty"`
}

// Reasons of the BGPAdvertisement condition Accepted (type PoolConditionAccepted).
const (
	// AdvertisementReasonAccepted: status.applied is the spec.
	AdvertisementReasonAccepted = "Accepted"
	// AdvertisementReasonInvalid: the spec is wrong (the message names the field).
	AdvertisementReasonInvalid = "Invalid"
	// AdvertisementReasonMissingReference: a named pool or BGPPeer does not exist
	// (or is not accepted); the message names the field and the object.
	AdvertisementReasonMissingReference = "MissingReference"
)

// BGPAdvertisementStatus is what the leader made of the advertisement: the spec in
// force and what its references resolve to.
type BGPAdvertisementStatus struct {
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
	Applied *BGPAdvertisementSpec `json:"applied,omitempty"`
	// AllPools: the applied spec covers every pool; else Pools are the pools it
	// covers.
	// +optional
	AllPools bool `json:"allPools,omitempty"`
	// +optional
	Pools []string `json:"pools,omitempty"`
	// AllPeers: the addresses go to every peer; else to PeerAddresses only.
	// +optional
	AllPeers bool `json:"allPeers,omitempty"`
	// +optional
	PeerAddresses []string `json:"peerAddresses,omitempty"`
}

// BGPAdvertisementList is a list of BGPAdvertisement.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type BGPAdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPAdvertisement `json:"items"`
}
