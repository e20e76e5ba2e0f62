package informerscope

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	nodecontroller "k8s.io/cloud-provider/controllers/node"
	routecontroller "k8s.io/cloud-provider/controllers/route"
	fakecloud "k8s.io/cloud-provider/fake"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	_ "k8s.io/controller-manager/pkg/features/register" // the route controller reads its gates
)

func started(t *testing.T) (*fake.Clientset, *Scope) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := fake.NewClientset()
	root := New(informers.NewSharedInformerFactory(client, 0))
	_ = root.Core().V1().Nodes().Informer()
	root.Start(ctx.Done())
	root.WaitForCacheSync(ctx.Done())
	return client, root
}

// TestCloseRemovesTheTermsHandlers: a handler added through a child gets the events
// until Close, none after; adding one after Close fails; the root's count follows.
func TestCloseRemovesTheTermsHandlers(t *testing.T) {
	client, root := started(t)
	term := root.Child()
	var seen atomic.Int32
	inf := term.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { seen.Add(1) }}); err != nil {
		t.Fatal(err)
	}
	if root.Handlers() != 1 || term.Handlers() != 1 {
		t.Fatalf("handlers: root %d, term %d; want 1 and 1", root.Handlers(), term.Handlers())
	}
	create := func(name string) {
		if _, err := client.CoreV1().Nodes().Create(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("n1")
	waitFor(t, func() bool { return seen.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := term.Close(ctx); n != 1 || err != nil {
		t.Fatalf("Close = %d, %v; want 1 handler removed", n, err)
	}
	if root.Handlers() != 0 {
		t.Errorf("root still counts %d handlers", root.Handlers())
	}
	create("n2")
	time.Sleep(200 * time.Millisecond)
	if seen.Load() != 1 {
		t.Errorf("a handler removed by Close saw %d events, want 1", seen.Load())
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{}); !errors.Is(err, ErrClosed) {
		t.Errorf("AddEventHandler after Close = %v, want ErrClosed", err)
	}
	// The informer is the process's: it still serves the root and the next term.
	if _, err := root.Core().V1().Nodes().Lister().Get("n2"); err != nil {
		t.Errorf("the process's lister after the term: %v", err)
	}
	if term.Core().V1().Nodes().Informer().HasSynced() != true {
		t.Error("the informer stopped with the term")
	}
}

// TestRemovedByItsOwner: a handler its owner removes is forgotten (not counted, not
// removed twice).
func TestRemovedByItsOwner(t *testing.T) {
	_, root := started(t)
	term := root.Child()
	inf := term.Core().V1().Nodes().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.RemoveEventHandler(reg); err != nil {
		t.Fatal(err)
	}
	if root.Handlers() != 0 || term.Handlers() != 0 {
		t.Fatalf("handlers after their removal: root %d, term %d", root.Handlers(), term.Handlers())
	}
	if n, err := term.Close(context.Background()); n != 0 || err != nil {
		t.Fatalf("Close = %d, %v; want nothing left to remove", n, err)
	}
}

// TestChildStartsForTheProcess: informers a term asks for and starts run for the
// process, not the term.
func TestChildStartsForTheProcess(t *testing.T) {
	_, root := started(t)
	term := root.Child()
	svcs := term.Core().V1().Services().Informer()
	termStop := make(chan struct{})
	term.Start(termStop)
	close(termStop)
	waitFor(t, svcs.HasSynced)
	time.Sleep(100 * time.Millisecond)
	if svcs.IsStopped() {
		t.Fatal("an informer started through a term stopped with the term")
	}
}

// TestUpstreamControllersPerTerm: the upstream node and route controllers add an
// event handler on the Node informer each time they are built and never remove it.
// Built on a term's Scope, closed at each term's end, handlers and goroutines stay
// flat over the terms; without Close they grow with every term (the leak).
func TestUpstreamControllersPerTerm(t *testing.T) {
	for _, close := range []bool{true, false} {
		client, root := started(t)
		cloud := &fakecloud.Cloud{}
		_, cidr, _ := net.ParseCIDR("10.244.0.0/16")
		var handlers, goroutines []int
		for range 5 {
			term := root.Child()
			termCtx, end := context.WithCancel(context.Background())
			nc, err := nodecontroller.NewCloudNodeController(term.Core().V1().Nodes(), client, cloud, time.Minute, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			rc, err := routecontroller.New(cloud, client, term.Core().V1().Nodes(), "c", []*net.IPNet{cidr})
			if err != nil {
				t.Fatal(err)
			}
			m := controllersmetrics.NewControllerManagerMetrics("test")
			var ran sync.WaitGroup
			ran.Go(func() { nc.RunWithContext(termCtx, m) })
			ran.Go(func() { rc.Run(termCtx, time.Minute, m) })
			time.Sleep(50 * time.Millisecond)
			end()
			ran.Wait()
			if close {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if _, err := term.Close(ctx); err != nil {
					t.Fatal(err)
				}
				cancel()
			}
			time.Sleep(100 * time.Millisecond) // stopped goroutines end
			handlers = append(handlers, root.Handlers())
			goroutines = append(goroutines, runtime.NumGoroutine())
		}
		t.Logf("close=%v: handlers per term %v, goroutines %v", close, handlers, goroutines)
		grew := handlers[4] > handlers[1] || goroutines[4] > goroutines[1]
		if grew == close {
			t.Errorf("close=%v: handlers %v, goroutines %v over five terms", close, handlers, goroutines)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met")
}

// TestOneWrapperPerInformer: client-go's typed informers return a new wrapper at
// every Informer() and Lister() call; the scopes keep one entry per informer however
// often they are asked (the upstream node controller asks once per Node sync), and
// give out the same wrapper, so a handler added through any of them is counted.
func TestOneWrapperPerInformer(t *testing.T) {
	_, root := started(t)
	term := root.Child()
	first := term.Core().V1().Nodes().Informer()
	for range 100 {
		_ = root.Core().V1().Nodes().Lister()
		_ = term.Core().V1().Nodes().Lister()
		if inf := term.Core().V1().Nodes().Informer(); inf.GetIndexer() != first.GetIndexer() {
			t.Fatal("a second indexer for Nodes")
		}
	}
	for name, s := range map[string]*Scope{"root": root, "term": term} {
		s.mu.Lock()
		n := len(s.wraps)
		s.mu.Unlock()
		if n != 1 {
			t.Errorf("%s scope: %d wrappers after 100 calls for one informer, want 1", name, n)
		}
	}
	if _, err := term.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{}); err != nil {
		t.Fatal(err)
	}
	if root.Handlers() != 1 || term.Handlers() != 1 {
		t.Errorf("handlers: root %d, term %d; want 1 and 1", root.Handlers(), term.Handlers())
	}
}
