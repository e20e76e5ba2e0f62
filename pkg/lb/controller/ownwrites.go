package controller

import (
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
)

// ownWriteRecheck is how soon a Service whose informer copy is older than this
// controller's own last write is looked at again.
const ownWriteRecheck = 250 * time.Millisecond

// trail collects the resourceVersions one sync's own writes replaced, in order.
type trail []string

// moved notes that svc, at version from before a call, was written by it (its
// resourceVersion changed).
func (t *trail) moved(from string, svc *v1.Service) {
	if from != "" && svc.ResourceVersion != from {
		*t = append(*t, from)
	}
}

// ownWrites remembers, per Service key, the versions that a successful sync replaced
// by writes of its own. Each write was conditional on the version before it, so those
// versions are fully handled: a sync that finds one of them in the informer's cache
// has nothing to do but wait for the informer. An entry is dropped as soon as the
// cache shows any other version, or the Service is gone, so it holds at most the
// Services written in the last moments. Safe for concurrent use.
type ownWrites struct {
	mu       sync.Mutex
	versions map[string][]string
}

func newOwnWrites() *ownWrites { return &ownWrites{versions: map[string][]string{}} }

// wrote records the versions a successful sync of key replaced (none: nothing).
func (o *ownWrites) wrote(key string, t trail) {
	if len(t) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.versions[key] = slices.Clone(t)
}

// replaced reports whether rv is a version of key that this controller's own writes
// replaced; when it is not, the entry of key is dropped (the informer caught up).
func (o *ownWrites) replaced(key, rv string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if slices.Contains(o.versions[key], rv) {
		return true
	}
	delete(o.versions, key)
	return false
}

// forget drops what is known of key.
func (o *ownWrites) forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.versions, key)
}
