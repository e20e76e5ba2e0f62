package cachelist

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestSharedNodeLister: listings share one slice while the cache is unchanged, and a
// change reaches the next listing after the informer's handlers ran.
func TestSharedNodeLister(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"rack": "r1"}}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
	)
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	l := SharedNodeLister(ctx, inf)
	if _, ok := l.(sharedNodeLister); !ok {
		t.Fatalf("SharedNodeLister = %T, want the shared lister", l)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("cache not synced")
	}
	waitNodes := func(want int) []*v1.Node {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := l.List(labels.Everything())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == want {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("List = %d Nodes, want %d", len(got), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	first := waitNodes(2)
	again, _ := l.List(labels.Everything())
	if &first[0] != &again[0] {
		t.Error("an unchanged cache listed into a new slice; want the shared one")
	}
	if got, err := l.List(labels.SelectorFromSet(labels.Set{"rack": "r1"})); err != nil || len(got) != 1 || got[0].Name != "a" {
		t.Errorf("List(rack=r1) = %v, %v; want a", got, err)
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	after := waitNodes(3)
	if len(first) != 2 {
		t.Errorf("the earlier listing changed to %d Nodes; a listing must not change under its caller", len(first))
	}
	if err := client.CoreV1().Nodes().Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNodes(2)
	if len(after) != 3 {
		t.Errorf("the earlier listing changed to %d Nodes", len(after))
	}
}

func TestSharedServiceLister(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(&v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a"}})
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Services().Informer()
	l := SharedServiceLister(ctx, inf)
	if _, ok := l.(sharedServiceLister); !ok {
		t.Fatalf("SharedServiceLister = %T, want the shared lister", l)
	}
	factory.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	if _, err := client.CoreV1().Services("y").Create(ctx, &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "y", Name: "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := l.List(labels.Everything())
		if len(got) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("List = %d Services, want 2", len(got))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s, err := l.Services("y").Get("b"); err != nil || s.Name != "b" {
		t.Errorf("Services(y).Get(b) = %v, %v", s, err)
	}
}

// BenchmarkSharedListNodes: allocation per listing of 5000 unchanged Nodes.
func BenchmarkSharedListNodes(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var objs []any
	for i := range 5000 {
		objs = append(objs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: string(rune('a'+i%26)) + string(rune(i))}})
	}
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.Node{}, 0, cache.Indexers{})
	for _, o := range objs {
		if err := inf.GetStore().Add(o); err != nil {
			b.Fatal(err)
		}
	}
	l := SharedNodeLister(ctx, inf)
	if _, ok := l.(sharedNodeLister); !ok {
		b.Fatalf("SharedNodeLister = %T, want the shared lister", l)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.List(labels.Everything())
	}
}

// TestSnapshotAge: a snapshot of an unchanged cache is rebuilt after maxSnapshotAge
// (a relist replaces objects without a change event).
func TestSnapshotAge(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.Node{}, 0, cache.Indexers{})
	if err := inf.GetStore().Add(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	s, err := newSnapshot[*v1.Node](ctx, inf)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	first := s.all()
	now = now.Add(maxSnapshotAge - time.Second)
	if again := s.all(); &again[0] != &first[0] {
		t.Error("rebuilt before maxSnapshotAge")
	}
	now = now.Add(time.Second)
	if again := s.all(); &again[0] == &first[0] {
		t.Error("not rebuilt after maxSnapshotAge")
	}
}

// An informer that has stopped takes no event handler: the listers fall back to
// listing its cache each time, which stays correct.
func TestSharedListersStoppedInformer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		&v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "s"}})
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes, svcs := factory.Core().V1().Nodes().Informer(), factory.Core().V1().Services().Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, svcs.HasSynced) {
		t.Fatal("cache not synced")
	}
	cancel()
	factory.Shutdown()
	if !nodes.IsStopped() || !svcs.IsStopped() {
		t.Fatal("the informers did not stop")
	}
	nl := SharedNodeLister(context.Background(), nodes)
	if _, ok := nl.(sharedNodeLister); ok {
		t.Error("SharedNodeLister on a stopped informer is the shared lister; want the plain one")
	}
	if got, err := nl.List(labels.Everything()); err != nil || len(got) != 1 || got[0].Name != "a" {
		t.Errorf("List = %v, %v; want Node a", got, err)
	}
	sl := SharedServiceLister(context.Background(), svcs)
	if _, ok := sl.(sharedServiceLister); ok {
		t.Error("SharedServiceLister on a stopped informer is the shared lister; want the plain one")
	}
	if got, err := sl.List(labels.Everything()); err != nil || len(got) != 1 || got[0].Name != "s" {
		t.Errorf("List = %v, %v; want Service x/s", got, err)
	}
}
