package framework

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// NodeEvent is one change of a Node as a watch saw it, with the time it arrived.
type NodeEvent struct {
	At   time.Time
	Type string // ADDED, MODIFIED, DELETED
	Node *v1.Node
}

// NodeRecorder keeps every change of every Node from the moment it started, with
// arrival times: when a Node was registered and initialized, and what happened to it
// in between (a deletion, a taint put back).
type NodeRecorder struct {
	mu     sync.Mutex
	events []NodeEvent
}

// RecordNodes starts a NodeRecorder; it stops when the test ends.
func RecordNodes(t testing.TB, client kubernetes.Interface) *NodeRecorder {
	t.Helper()
	r := &NodeRecorder{}
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	add := func(typ string, obj any) {
		n, ok := obj.(*v1.Node)
		if !ok {
			if d, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
				n, ok = d.Obj.(*v1.Node)
			}
		}
		if !ok {
			return
		}
		r.mu.Lock()
		r.events = append(r.events, NodeEvent{At: time.Now(), Type: typ, Node: n.DeepCopy()})
		r.mu.Unlock()
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { add("ADDED", o) },
		UpdateFunc: func(_, o any) { add("MODIFIED", o) },
		DeleteFunc: func(o any) { add("DELETED", o) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("RecordNodes: the Node informer did not sync")
	}
	return r
}

// Events returns the events of the named Node since since, oldest first.
func (r *NodeRecorder) Events(name string, since time.Time) []NodeEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []NodeEvent
	for _, e := range r.events {
		if e.Node.Name == name && !e.At.Before(since) {
			out = append(out, e)
		}
	}
	return out
}

// First returns the first event of the named Node for which cond holds.
func (r *NodeRecorder) First(name string, cond func(NodeEvent) bool) (NodeEvent, bool) {
	for _, e := range r.Events(name, time.Time{}) {
		if cond(e) {
			return e, true
		}
	}
	return NodeEvent{}, false
}

// WaitFirst waits (at most timeout) for the first event of the named Node for which
// cond holds.
func (r *NodeRecorder) WaitFirst(ctx context.Context, timeout time.Duration, name, what string, cond func(NodeEvent) bool) (NodeEvent, error) {
	var ev NodeEvent
	err := WaitFor(ctx, timeout, fmt.Sprintf("%s: %s", name, what), func(context.Context) (bool, error) {
		var ok bool
		ev, ok = r.First(name, cond)
		return ok, nil
	})
	return ev, err
}

// NodeReady returns the status of the Node's Ready condition ("" without one).
func NodeReady(n *v1.Node) v1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// At returns the named Node as it was at t: its last event at or before t.
func (r *NodeRecorder) At(name string, t time.Time) (NodeEvent, bool) {
	var last NodeEvent
	found := false
	for _, e := range r.Events(name, time.Time{}) {
		if e.At.After(t) {
			break
		}
		last, found = e, true
	}
	return last, found
}
