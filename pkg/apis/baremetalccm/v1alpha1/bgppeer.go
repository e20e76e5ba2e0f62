package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGPPeer is a router the speakers peer with, as a bgp.peers entry of the
// CloudConfig but managed in the cluster: the leader checks each change (its own
// fields, and no clash with the CloudConfig's peers or another BGPPeer) and, when it
// is accepted, copies it to status.applied, which every replica and agent then uses:
// a new peer's session opens, a changed one is re-created, a deleted one ends (its
// paths withdrawn, then a Cease), all without a restart. A bad change leaves
// status.applied, the last good spec, in force.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=baremetal-ccm
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`
// +kubebuilder:printcolumn:name="ASN",type=integer,JSONPath=`.spec.asn`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BGPPeerSpec `json:"spec"`
	// +optional
	Status BGPPeerStatus `json:"status,omitempty"`
}

// BGPPeerSpec is one neighbor: the fields of a CloudConfig bgp.peers entry, and which
// speakers peer with it.
type BGPPeerSpec struct {
	// Address of the neighbor (IPv4 or IPv6).
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="address must be an IPv4 or IPv6 address such as 192.0.2.1"
	Address string `json:"address"`
	// ASN of the neighbor.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967294
	ASN int64 `json:"asn"`
	// Port of the neighbor. Default: 179.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
	// SourceAddress is the local address to connect from. Default: chosen by the
	// kernel.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	SourceAddress string `json:"sourceAddress,omitempty"`
	// PasswordFile is the path, on every host that peers with this router, of the
	// file holding the TCP-MD5 password (never inline). A host without the file
	// skips this peer and says so in its log and session state.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	PasswordFile string `json:"passwordFile,omitempty"`
	// EBGPMultihop is the TTL for eBGP sessions to non-adjacent peers; 0 = directly
	// connected.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	EBGPMultihop int32 `json:"ebgpMultihop,omitempty"`
	// HoldTime and KeepaliveTime. Defaults: 90s and 30s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="a duration such as 9s, 300ms or 1m30s"
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="a duration such as 9s, 300ms or 1m30s"
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`
	// ConnectRetry is the time between connection attempts. Default: 5s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="a duration such as 9s, 300ms or 1m30s"
	ConnectRetry *metav1.Duration `json:"connectRetry,omitempty"`
	// GracefulRestart enables graceful restart (RFC 4724) with this restart time.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="a duration such as 9s, 300ms or 1m30s"
	GracefulRestart *metav1.Duration `json:"gracefulRestart,omitempty"`
	// BFD, when set, runs a BFD session with the neighbor; BFD down resets the BGP
	// session at once.
	// +optional
	BFD *BFDSpec `json:"bfd,omitempty"`
	// NodeSelector picks the hosts that peer with this router: the speakers,
	// replicas and worker agents alike, on the Nodes whose labels match. Absent or
	// empty: every speaker, as the CloudConfig's bgp.peers.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
}

// BFDSpec are a BFD session's timers.
type BFDSpec struct {
	// MinTx is the desired minimum transmit interval. Default 300ms.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="a duration such as 9s, 300ms or 1m30s"
	MinTx *metav1.Duration `json:"minTx,omitempty"`
	// MinRx is the required minimum receive interval. Default 300ms.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="a duration such as 9s, 300ms or 1m30s"
	MinRx *metav1.Duration `json:"minRx,omitempty"`
	// Multiplier is the detection multiplier. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	Multiplier int32 `json:"multiplier,omitempty"`
}

// Reasons of the BGPPeer condition Accepted (type PoolConditionAccepted).
const (
	// PeerReasonAccepted: status.applied is the spec.
	PeerReasonAccepted = "Accepted"
	// PeerReasonInvalid: the spec is wrong (the message names the field); the last
	// accepted spec stays in force.
	PeerReasonInvalid = "Invalid"
	// PeerReasonConflict: the neighbor's address is a CloudConfig peer's or an older
	// BGPPeer's.
	PeerReasonConflict = "Conflict"
)

// BGPPeerStatus is what the leader made of the peer.
type BGPPeerStatus struct {
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
	Applied *BGPPeerSpec `json:"applied,omitempty"`
}

// BGPPeerList is a list of BGPPeer.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type BGPPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPPeer `json:"items"`
}
