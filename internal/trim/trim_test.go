package trim

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
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

// A Service keeps what its readers need: ports and selector only when it may share
// its IP (the sharing rules read them), never cluster IPs; ipam parses the same
// request from the trimmed Service as from the whole one, but for the ports and
// selector of a Service that never shares.
func TestServiceTrim(t *testing.T) {
	whole := func(ann map[string]string) *v1.Service {
		return &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", Annotations: ann},
			Spec: v1.ServiceSpec{
				Type: v1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				ExternalIPs: []string{"192.0.2.200"}, Selector: map[string]string{"app": "s"},
				Ports:                 []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}},
				ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 30123,
				SessionAffinityConfig: &v1.SessionAffinityConfig{},
				LoadBalancerIP:        "192.0.2.9",
			},
		}
	}
	for _, tc := range []struct {
		name  string
		ann   map[string]string
		share bool
	}{
		{"no annotation", nil, false},
		{"empty sharing key", map[string]string{ipam.AnnotationAllowSharedIP: ""}, false},
		{"sharing key", map[string]string{ipam.AnnotationAllowSharedIP: "k"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, _ := ipam.ParseService(whole(tc.ann))
			got, err := Object(whole(tc.ann))
			if err != nil {
				t.Fatal(err)
			}
			s := got.(*v1.Service)
			if s.Spec.ClusterIP != "" || s.Spec.ClusterIPs != nil || s.Spec.ExternalIPs != nil || s.Spec.SessionAffinityConfig != nil {
				t.Errorf("cluster IPs, external IPs or affinity config kept: %+v", s.Spec)
			}
			if kept := s.Spec.Ports != nil && s.Spec.Selector != nil; kept != tc.share {
				t.Errorf("ports and selector kept: %v, want %v", kept, tc.share)
			}
			if s.Spec.HealthCheckNodePort != 30123 || s.Spec.LoadBalancerIP != "192.0.2.9" || s.Spec.ExternalTrafficPolicy != v1.ServiceExternalTrafficPolicyLocal {
				t.Errorf("trimmed a field the agent or ipam reads: %+v", s.Spec)
			}
			req, _ := ipam.ParseService(s)
			if !tc.share {
				want.Ports, want.Selector = nil, nil
			}
			if !reflect.DeepEqual(req, want) {
				t.Errorf("request from the trimmed Service %+v, want %+v", req, want)
			}
		})
	}
}
