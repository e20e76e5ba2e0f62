// Package trim drops, before the shared informers cache them, the parts of API objects
// that no controller of this binary reads, to keep the caches small on large clusters:
// metadata.managedFields of every object (server-side apply bookkeeping, often larger
// than the object), a Node's status.images (up to 50 image names per Node), and a
// Service's cluster IPs, external IPs and session affinity config and, unless it
// asks to share its load-balancer IP (baremetal-ccm.io/allow-shared-ip, whose rules
// are the only reader), its ports and selector; and it shares the strings that
// objects commonly repeat (see intern.go).
//
// This is safe for writers of the trimmed objects: an update that omits managedFields
// keeps the stored ones; Node status is written only by patches computed between two
// copies of the cached Node (neither has images) or by explicit patches, and an update
// of the main resource ignores status. Services are only ever patched (status,
// finalizers), never updated from the cache.
package trim

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
)

// Object is a cache.TransformFunc: it trims obj in place and returns it. Tombstones
// pass unchanged; objects it does not know lose only managedFields and have their
// metadata's strings interned.
func Object(obj any) (any, error) {
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return obj, nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
		internMeta(m)
	}
	switch o := obj.(type) {
	case *v1.Node:
		o.Status.Images = nil
		internNode(o)
	case *v1.Service:
		trimService(o)
		internService(o)
	}
	return obj, nil
}

var _ cache.TransformFunc = Object

// trimService drops the spec fields of s that no controller here reads. Ports and
// selector matter only to Services that may share an IP (ipam's sharing rules: no
// port twice, Local Services only with the same selector); a Service that gains the
// annotation is cached anew, whole, by the watch event of that change.
func trimService(s *v1.Service) {
	sp := &s.Spec
	sp.ClusterIP, sp.ClusterIPs, sp.ExternalIPs, sp.SessionAffinityConfig = "", nil, nil, nil
	if s.Annotations[ipam.AnnotationAllowSharedIP] == "" {
		sp.Ports, sp.Selector = nil, nil
	}
}
