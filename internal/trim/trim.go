// Package trim drops, before the shared informers cache them, the parts of API objects
// that no controller of this binary reads, to keep the caches small on large clusters:
// metadata.managedFields of every object (server-side apply bookkeeping, often larger
// than the object) and a Node's status.images (up to 50 image names per Node); and it
// shares the strings that objects commonly repeat (see intern.go).
//
// This is safe for writers of the trimmed objects: an update that omits managedFields
// keeps the stored ones; Node status is written only by patches computed between two
// copies of the cached Node (neither has images) or by explicit patches, and an update
// of the main resource ignores status.
package trim

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
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
		internService(o)
	}
	return obj, nil
}

var _ cache.TransformFunc = Object
