package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of the project's objects.
const GroupName = "baremetal-ccm.io"

// SchemeGroupVersion is this package's group and version.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Resource returns the GroupResource of resource in this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder registers this package's types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &BGPSessionState{}, &BGPSessionStateList{}, &IPPool{}, &IPPoolList{}, &BGPPeer{}, &BGPPeerList{}, &BGPAdvertisement{}, &BGPAdvertisementList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
