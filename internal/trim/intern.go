package trim

import (
	"unique"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The decoder gives every string of every object its own copy: 10,000 Services in
// one namespace hold 10,000 copies of the namespace, of "LoadBalancer", "TCP",
// "Cluster", of their conditions' types, reasons and messages. intern makes the
// strings that objects commonly share point to one copy (unique.Make: a copy lives
// as long as an object uses it), which saved about 4 MB in the CCM at 5000 Nodes and
// 10,000 Services. Every object's metadata (namespace, labels, annotation keys,
// finalizers, owner kinds) is interned, and the fields of Services and Nodes whose
// values repeat across objects (not names, UIDs, addresses); only strings: no
// pointer or map is shared between objects, so an object stays as independent as
// the decoder made it.

func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

func internPtr[T ~string](p *T) {
	if p != nil {
		*p = T(intern(string(*p)))
	}
}

func internMeta(m metav1.Object) {
	m.SetNamespace(intern(m.GetNamespace()))
	if l := m.GetLabels(); len(l) > 0 {
		m.SetLabels(internMap(l, true, m.GetName()))
	}
	if a := m.GetAnnotations(); len(a) > 0 {
		m.SetAnnotations(internMap(a, false, ""))
	}
	f := m.GetFinalizers()
	for i := range f {
		f[i] = intern(f[i])
	}
	refs := m.GetOwnerReferences()
	for i := range refs {
		refs[i].APIVersion, refs[i].Kind = intern(refs[i].APIVersion), intern(refs[i].Kind)
	}
}

// internMap returns m with interned keys (a new map of the same size) and, when
// values, interned values; annotation values (often large and unique) are kept. A
// value equal to name (the object's own: kubernetes.io/hostname, app: <name>) shares
// the name's string instead, as it is unique to the object.
func internMap(m map[string]string, values bool, name string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		switch {
		case !values:
		case v == name && v != "":
			v = name
		default:
			v = intern(v)
		}
		out[intern(k)] = v
	}
	return out
}

func internConditions(cs []metav1.Condition) {
	for i := range cs {
		c := &cs[i]
		c.Type, c.Reason, c.Message = intern(c.Type), intern(c.Reason), intern(c.Message)
		internPtr(&c.Status)
	}
}

func internService(s *v1.Service) {
	sp := &s.Spec
	internPtr(&sp.Type)
	internPtr(&sp.SessionAffinity)
	internPtr(&sp.ExternalTrafficPolicy)
	internPtr(sp.InternalTrafficPolicy)
	internPtr(sp.IPFamilyPolicy)
	internPtr(sp.LoadBalancerClass)
	for i := range sp.IPFamilies {
		internPtr(&sp.IPFamilies[i])
	}
	for i := range sp.Ports {
		p := &sp.Ports[i]
		p.Name = intern(p.Name)
		internPtr(&p.Protocol)
		internPtr(p.AppProtocol)
		p.TargetPort.StrVal = intern(p.TargetPort.StrVal)
	}
	if len(sp.Selector) > 0 {
		sp.Selector = internMap(sp.Selector, true, s.Name)
	}
	for i := range s.Status.LoadBalancer.Ingress {
		internPtr(s.Status.LoadBalancer.Ingress[i].IPMode)
	}
	internConditions(s.Status.Conditions)
}

func internNode(n *v1.Node) {
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		t.Key, t.Value = intern(t.Key), intern(t.Value)
		internPtr(&t.Effect)
	}
	st := &n.Status
	for i := range st.Conditions {
		c := &st.Conditions[i]
		internPtr(&c.Type)
		internPtr(&c.Status)
		c.Reason, c.Message = intern(c.Reason), intern(c.Message)
	}
	for i := range st.Addresses {
		internPtr(&st.Addresses[i].Type)
	}
	ni := &st.NodeInfo
	ni.KernelVersion, ni.OSImage, ni.ContainerRuntimeVersion = intern(ni.KernelVersion), intern(ni.OSImage), intern(ni.ContainerRuntimeVersion)
	ni.KubeletVersion = intern(ni.KubeletVersion)
	ni.OperatingSystem, ni.Architecture = intern(ni.OperatingSystem), intern(ni.Architecture)
}
