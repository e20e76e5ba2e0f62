// Package cachelist lists an informer cache's Nodes and Services with one
// exactly-sized slice.
//
// client-go's listers append what they list to a slice that starts empty, so listing
// everything allocates the cache's own list plus twice the result again in growing
// copies: with 5000 Nodes 237 KB a list, and the power monitor and the agent list
// every Node every second or pass. These listers list everything (an empty selector)
// in 123 KB (BenchmarkListNodes); a selector, a Get and a namespace go to client-go's
// listers unchanged. The objects are the cache's: read-only, as with any lister.
package cachelist

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// NodeLister is client-go's Node lister over indexer, listing everything in one slice.
func NodeLister(indexer cache.Indexer) corelisters.NodeLister {
	return nodeLister{corelisters.NewNodeLister(indexer), indexer}
}

// ServiceLister is client-go's Service lister over indexer, listing every namespace's
// Services in one slice.
func ServiceLister(indexer cache.Indexer) corelisters.ServiceLister {
	return serviceLister{corelisters.NewServiceLister(indexer), indexer}
}

type nodeLister struct {
	corelisters.NodeLister
	store cache.Store
}

func (l nodeLister) List(selector labels.Selector) ([]*v1.Node, error) {
	if selector != nil && !selector.Empty() {
		return l.NodeLister.List(selector)
	}
	return all[*v1.Node](l.store), nil
}

type serviceLister struct {
	corelisters.ServiceLister
	store cache.Store
}

func (l serviceLister) List(selector labels.Selector) ([]*v1.Service, error) {
	if selector != nil && !selector.Empty() {
		return l.ServiceLister.List(selector)
	}
	return all[*v1.Service](l.store), nil
}

// all is every T in store, in one slice of exactly their number. A store holds only
// its informer's type (internal/trim passes DeletedFinalStateUnknown to event
// handlers, never into the store); anything else is skipped, not a panic.
func all[T any](store cache.Store) []T {
	objs := store.List()
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}
