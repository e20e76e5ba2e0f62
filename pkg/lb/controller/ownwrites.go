package controller

import (
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
)

const (
	// ownWriteRecheck is how soon a Service whose informer copy is older than this
	// controller's own last write is looked at again.
	ownWriteRecheck = 250 * time.Millisecond
	// ownWriteMaxWait bounds that wait: an informer that has not delivered the
	// write by then (a broken watch) no longer holds the Service back; it is synced
	// in full, and a stale precondition conflicts and retries with backoff as before.
	ownWriteMaxWait = 30 * time.Second
)

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
// informer shows any other version of the Service (every update event reports it,
// whether or not it enqueues the Service), when the Service is gone, or after
// ownWriteMaxWait. Safe for concurrent use.
type ownWrites struct {
	mu       sync.Mutex
	now      func() time.Time
	versions map[string]ownEntry
}

type ownEntry struct {
	replaced []string
	at       time.Time
}

func newOwnWrites(now func() time.Time) *ownWrites {
	return &ownWrites{now: now, versions: map[string]ownEntry{}}
}

// wrote records the versions a successful sync of key replaced (none: nothing).
func (o *ownWrites) wrote(key string, t trail) {
	if len(t) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.versions[key] = ownEntry{replaced: slices.Clone(t), at: o.now()}
}

// replaced reports whether rv is a version of key that this controller's own writes
// replaced, at most ownWriteMaxWait ago; otherwise the entry of key is dropped.
func (o *ownWrites) replaced(key, rv string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.versions[key]
	if ok && slices.Contains(e.replaced, rv) && o.now().Sub(e.at) < ownWriteMaxWait {
		return true
	}
	delete(o.versions, key)
	return false
}

// seen notes that the informer shows version rv of key: the entry of key is dropped
// unless rv is one of the versions it replaced.
func (o *ownWrites) seen(key, rv string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e, ok := o.versions[key]; ok && !slices.Contains(e.replaced, rv) {
		delete(o.versions, key)
	}
}

// forget drops what is known of key.
func (o *ownWrites) forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.versions, key)
}

// len is the number of entries (for tests).
func (o *ownWrites) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.versions)
}
