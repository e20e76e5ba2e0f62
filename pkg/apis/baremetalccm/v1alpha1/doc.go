// Package v1alpha1 is the baremetal-ccm.io/v1alpha1 API: objects the CCM and its
// agents publish in the cluster (BGPSessionState).
//
// +k8s:deepcopy-gen=package
// +groupName=baremetal-ccm.io
// +groupGoName=BaremetalCCM
package v1alpha1
