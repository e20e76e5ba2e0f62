package trim

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestObject(t *testing.T) {
	mf := []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationApply}}
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "b"}, ManagedFields: mf},
		Status: v1.NodeStatus{
			Images:    []v1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1}},
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}},
		},
	}
	got, err := Object(node)
	if err != nil {
		t.Fatal(err)
	}
	n := got.(*v1.Node)
	if n.ManagedFields != nil || n.Status.Images != nil {
		t.Errorf("managedFields %v images %v left", n.ManagedFields, n.Status.Images)
	}
	if n.Labels["a"] != "b" || len(n.Status.Addresses) != 1 {
		t.Errorf("trimmed more than managedFields and images: %+v", n)
	}

	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{"k": "v"}, ManagedFields: mf}}
	if got, _ := Object(svc); got.(*v1.Service).ManagedFields != nil || got.(*v1.Service).Annotations["k"] != "v" {
		t.Errorf("Service after trim: %+v", got)
	}
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "e", ManagedFields: mf}}
	if got, _ := Object(es); got.(*discoveryv1.EndpointSlice).ManagedFields != nil {
		t.Error("EndpointSlice keeps managedFields")
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/s", Obj: svc}
	if got, err := Object(tomb); err != nil || got.(cache.DeletedFinalStateUnknown).Key != "ns/s" {
		t.Errorf("tombstone = %v, %v", got, err)
	}
}
