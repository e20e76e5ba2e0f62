package trim

import (
	"strings"
	"testing"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// fresh returns a copy of s with its own bytes, as the decoder makes them.
func fresh(s string) string { return strings.Clone(s) }

func service(name string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: fresh("team-a"), Name: name, Labels: map[string]string{fresh("app"): fresh("web")},
			Annotations: map[string]string{fresh("note"): fresh("x")}, Finalizers: []string{fresh("service.kubernetes.io/load-balancer-cleanup")}},
		Spec: v1.ServiceSpec{Type: v1.ServiceType(fresh("LoadBalancer")), ClusterIP: fresh("10.96.0.1"), ClusterIPs: []string{fresh("10.96.0.1")},
			IPFamilies: []v1.IPFamily{v1.IPFamily(fresh("IPv4"))}, IPFamilyPolicy: ptr.To(v1.IPFamilyPolicy(fresh("SingleStack"))),
			Ports:    []v1.ServicePort{{Name: fresh("http"), Protocol: v1.Protocol(fresh("TCP")), Port: 80, TargetPort: intstr.FromString(fresh("web"))}},
			Selector: map[string]string{fresh("app"): fresh("web")}},
		Status: v1.ServiceStatus{Conditions: []metav1.Condition{{Type: fresh("Announced"), Status: metav1.ConditionStatus(fresh("True")), Reason: fresh("Announced"), Message: fresh("announced by 3 speakers")}}},
	}
}

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestInternService(t *testing.T) {
	a, b := service("a"), service("b")
	want := a.DeepCopy()
	for _, s := range []*v1.Service{a, b} { // what Object does but trimService
		internMeta(s)
		internService(s)
	}
	if !equality.Semantic.DeepEqual(a, want) {
		t.Errorf("interning changed the Service:\n got %+v\nwant %+v", a, want)
	}
	for name, pair := range map[string][2]string{
		"namespace":         {a.Namespace, b.Namespace},
		"type":              {string(a.Spec.Type), string(b.Spec.Type)},
		"ipFamilyPolicy":    {string(*a.Spec.IPFamilyPolicy), string(*b.Spec.IPFamilyPolicy)},
		"port protocol":     {string(a.Spec.Ports[0].Protocol), string(b.Spec.Ports[0].Protocol)},
		"targetPort":        {a.Spec.Ports[0].TargetPort.StrVal, b.Spec.Ports[0].TargetPort.StrVal},
		"label value":       {a.Labels["app"], b.Labels["app"]},
		"selector value":    {a.Spec.Selector["app"], b.Spec.Selector["app"]},
		"finalizer":         {a.Finalizers[0], b.Finalizers[0]},
		"condition message": {a.Status.Conditions[0].Message, b.Status.Conditions[0].Message},
	} {
		if !same(pair[0], pair[1]) {
			t.Errorf("%s: two copies of %q after interning", name, pair[0])
		}
	}
	if a.Spec.IPFamilyPolicy == b.Spec.IPFamilyPolicy {
		t.Error("two Services share a pointer: a write through one would change the other")
	}
	own := service("web") // its selector's value is its name
	internMeta(own)
	internService(own)
	if !same(own.Spec.Selector["app"], own.Name) {
		t.Error("a selector value equal to the Service's name is a copy of its own, not the name")
	}
	if same(a.Annotations["note"], b.Annotations["note"]) {
		t.Error("annotation values are interned: they are often large and unique")
	}
}

func TestInternNode(t *testing.T) {
	node := func() *v1.Node {
		return &v1.Node{
			Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: fresh("node.kubernetes.io/unreachable"), Effect: v1.TaintEffect(fresh("NoExecute"))}}},
			Status: v1.NodeStatus{
				Conditions: []v1.NodeCondition{{Type: v1.NodeConditionType(fresh("Ready")), Status: v1.ConditionStatus(fresh("True")), Reason: fresh("KubeletReady"), Message: fresh("kubelet is posting ready status")}},
				Addresses:  []v1.NodeAddress{{Type: v1.NodeAddressType(fresh("InternalIP")), Address: fresh("10.0.0.1")}},
				NodeInfo:   v1.NodeSystemInfo{KubeletVersion: fresh("v1.37.2"), OSImage: fresh("Debian GNU/Linux 12 (bookworm)")},
			},
		}
	}
	a, b := node(), node()
	want := a.DeepCopy()
	_, _ = Object(a)
	_, _ = Object(b)
	if !equality.Semantic.DeepEqual(a, want) {
		t.Errorf("interning changed the Node:\n got %+v\nwant %+v", a, want)
	}
	for name, pair := range map[string][2]string{
		"taint key":         {a.Spec.Taints[0].Key, b.Spec.Taints[0].Key},
		"condition message": {a.Status.Conditions[0].Message, b.Status.Conditions[0].Message},
		"address type":      {string(a.Status.Addresses[0].Type), string(b.Status.Addresses[0].Type)},
		"kubelet version":   {a.Status.NodeInfo.KubeletVersion, b.Status.NodeInfo.KubeletVersion},
	} {
		if !same(pair[0], pair[1]) {
			t.Errorf("%s: two copies of %q after interning", name, pair[0])
		}
	}
	if same(a.Status.Addresses[0].Address, b.Status.Addresses[0].Address) {
		t.Error("addresses are interned: they are unique per Node")
	}
}

// BenchmarkObjectService: the transform's cost per Service event (managedFields
// dropped, strings interned).
func BenchmarkObjectService(b *testing.B) {
	svcs := make([]*v1.Service, b.N)
	for i := range svcs {
		svcs[i] = service("s")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		_, _ = Object(svcs[i])
	}
}
