package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelNode on a BGPSessionState names the Node whose speaker holds the session
// (spec.node), so a speaker lists its own objects with a label selector.
const LabelNode = "baremetal-ccm.io/node"

// Speaker kinds of BGPSessionStateSpec.Speaker.
const (
	// SpeakerReplica is a CCM replica's embedded speaker.
	SpeakerReplica = "Replica"
	// SpeakerAgent is a worker host's agent (baremetal-cloud-controller-manager agent).
	SpeakerAgent = "Agent"
)

// BGPSessionState is one BGP session of one host's speaker: written by the speaker
// that holds it (a CCM replica or a worker agent) when the session changes and at
// least every minute (replicas) or 10 minutes (agents) (status.updated), marked
// stopped when the speaker stops, deleted when the peer leaves the configuration or
// with its Node. Its name is <node>.<peer>, the peer's IPv4 address as is or its
// IPv6 address fully expanded with '-' for ':' (for example
// w1.10.0.0.1, w1.fd00-0000-0000-0000-0000-0000-0000-0001). An agent may write only
// its own node's objects (the API server enforces it with the ValidatingAdmissionPolicy
// baremetal-ccm-agent-own-node).
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=bgpss,categories=baremetal-ccm
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`
// +kubebuilder:printcolumn:name="Speaker",type=string,JSONPath=`.spec.speaker`
// +kubebuilder:printcolumn:name="Peer",type=string,JSONPath=`.spec.peer`
// +kubebuilder:printcolumn:name="BGP",type=string,JSONPath=`.status.bgpState`
// +kubebuilder:printcolumn:name="BFD",type=string,JSONPath=`.status.bfdState`
// +kubebuilder:printcolumn:name="Prefixes",type=integer,JSONPath=`.status.prefixesSent`
// +kubebuilder:printcolumn:name="Since",type=date,JSONPath=`.status.since`
// +kubebuilder:printcolumn:name="Updated",type=date,JSONPath=`.status.updated`
// +kubebuilder:printcolumn:name="Last Error",type=string,JSONPath=`.status.lastError`,priority=1
// +kubebuilder:validation:XValidation:rule="self.metadata.name.startsWith(self.spec.node + '.') && (self.spec.peer.contains(':') ? self.metadata.name.substring(size(self.spec.node) + 1).matches('^([0-9a-f]{4}-){7}[0-9a-f]{4}$') : self.metadata.name.substring(size(self.spec.node) + 1) == self.spec.peer)",message="metadata.name must be <spec.node>.<spec.peer>, an IPv6 peer fully expanded with '-' for ':' (w1.fd00-0000-0000-0000-0000-0000-0000-0001)"
type BGPSessionState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BGPSessionStateSpec `json:"spec"`
	// +optional
	Status BGPSessionStateStatus `json:"status,omitempty"`
}

// BGPSessionStateSpec says whose session it is. It does not change.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: delete the object and create another"
type BGPSessionStateSpec struct {
	// Node is the name of the Node whose speaker holds the session.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=200
	Node string `json:"node"`
	// Peer is the router's address.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IPv4 or IPv6 address"
	Peer string `json:"peer"`
	// Speaker is Replica (a CCM replica's speaker) or Agent (a worker host's agent).
	// +kubebuilder:validation:Enum=Replica;Agent
	Speaker string `json:"speaker"`
}

// BGPSessionStateStatus is the session as the speaker last saw it.
type BGPSessionStateStatus struct {
	// BGPState is the BGP finite-state-machine state: idle, connect, active, opensent,
	// openconfirm or established; stopped once the speaker stopped.
	// +optional
	BGPState string `json:"bgpState,omitempty"`
	// Ready: established and the speaker's first UPDATEs to this peer are sent.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// BFDState is the BFD session's state (Up, Down, Init, AdminDown) when the peer
	// has BFD.
	// +optional
	BFDState string `json:"bfdState,omitempty"`
	// BFDProblem says why BFD is configured but not up on an established session
	// (BFD then protects nothing).
	// +optional
	BFDProblem string `json:"bfdProblem,omitempty"`
	// PrefixesSent is how many paths the speaker announces to the peer (the paths it
	// wants announced while the session is established, 0 otherwise).
	// +optional
	PrefixesSent int32 `json:"prefixesSent,omitempty"`
	// LastError is the last failed connection attempt while not established.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// Since is when BGPState last changed, as this speaker saw it.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// Updated is when the speaker last wrote the object: it does so at least every
	// minute (replicas) or 10 minutes (agents), so one not updated for 3 (replicas)
	// or 30 minutes (agents) is stale.
	// +optional
	Updated *metav1.Time `json:"updated,omitempty"`
}

// BGPSessionStateList is a list of BGPSessionState.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type BGPSessionStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPSessionState `json:"items"`
}
