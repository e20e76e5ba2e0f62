package main

import (
	"context"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// An agent without the kernel mirror lists and watches only its own Node.
func TestOwnNodeOnly(t *testing.T) {
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "self"}})
	var mu sync.Mutex
	var selectors []string
	record := func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch a := a.(type) {
		case k8stesting.ListAction:
			selectors = append(selectors, "list "+a.GetListRestrictions().Fields.String())
		case k8stesting.WatchAction:
			selectors = append(selectors, "watch "+a.GetWatchRestrictions().Fields.String())
		}
		return false, nil, nil
	}
	client.PrependReactor("list", "nodes", record)
	client.PrependWatchReactor("nodes", func(a k8stesting.Action) (bool, watch.Interface, error) {
		_, _, _ = record(a)
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	ownNodeOnly(factory, "self")
	nodes := factory.Core().V1().Nodes()
	nodes.Informer() // the agent's registration: the same informer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if _, err := nodes.Lister().Get("self"); err != nil {
		t.Fatalf("own Node not cached: %v", err)
	}
	// The reflector lists, then watches.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(selectors)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(selectors) < 2 {
		t.Fatalf("saw %v, want a list and a watch of Nodes", selectors)
	}
	for _, s := range selectors {
		if s != "list metadata.name=self" && s != "watch metadata.name=self" {
			t.Errorf("Node request %q, want only the field selector metadata.name=self", s)
		}
	}
}

// The agent runs on one P unless the operator sets GOMAXPROCS.
func TestLimitProcs(t *testing.T) {
	before := goruntime.GOMAXPROCS(0)
	defer goruntime.GOMAXPROCS(before)
	goruntime.GOMAXPROCS(3)
	if got := limitProcs(func(string) (string, bool) { return "3", true }); got != 3 || goruntime.GOMAXPROCS(0) != 3 {
		t.Errorf("with GOMAXPROCS set: limitProcs = %d, GOMAXPROCS %d; want the operator's 3 kept", got, goruntime.GOMAXPROCS(0))
	}
	if got := limitProcs(func(string) (string, bool) { return "", false }); got != agentMaxProcs || goruntime.GOMAXPROCS(0) != agentMaxProcs {
		t.Errorf("without GOMAXPROCS: limitProcs = %d, GOMAXPROCS %d; want %d", got, goruntime.GOMAXPROCS(0), agentMaxProcs)
	}
}
