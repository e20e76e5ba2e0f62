package apigate

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
)

// fakeAPI serves list and watch of Services (including the watch-list protocol the
// reflector uses by default) and /readyz over plain HTTP, and can go away (its
// listener closed, its connections cut: connections are refused) and come back on
// the same address.
type fakeAPI struct {
	t    *testing.T
	addr string

	mu     sync.Mutex
	rv     int
	svcs   map[string]*v1.Service
	events []fakeEvent
	change chan struct{} // closed and replaced on every change
	srv    *http.Server
	gone   chan struct{} // closed when the server goes away
}

type fakeEvent struct {
	rv  int
	typ watch.EventType
	svc *v1.Service
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{t: t, svcs: map[string]*v1.Service{}, change: make(chan struct{}), rv: 1}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.serve(ln)
	t.Cleanup(f.down)
	return f
}

func (f *fakeAPI) serve(ln net.Listener) {
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 5 * time.Second}
	f.mu.Lock()
	f.srv, f.gone = srv, make(chan struct{})
	f.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// down closes the listener and every connection: new connections are refused.
func (f *fakeAPI) down() {
	f.mu.Lock()
	srv, gone := f.srv, f.gone
	f.srv = nil
	f.mu.Unlock()
	if srv == nil {
		return
	}
	close(gone)
	_ = srv.Close()
}

// up listens again on the same address.
func (f *fakeAPI) up() {
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.serve(ln)
}

func (f *fakeAPI) set(typ watch.EventType, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	s := &v1.Service{TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: strconv.Itoa(f.rv)}}
	if typ == watch.Deleted {
		delete(f.svcs, name)
	} else {
		f.svcs[name] = s
	}
	f.events = append(f.events, fakeEvent{rv: f.rv, typ: typ, svc: s})
	close(f.change)
	f.change = make(chan struct{})
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/readyz":
		fmt.Fprintln(w, "ok")
	case "/api/v1/services":
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			f.watch(w, r)
			return
		}
		f.mu.Lock()
		list := v1.ServiceList{TypeMeta: metav1.TypeMeta{Kind: "ServiceList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(f.rv)}}
		for _, s := range f.svcs {
			list.Items = append(list.Items, *s)
		}
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(list)
	default:
		http.NotFound(w, r)
	}
}

// watch streams events after the requested resourceVersion, or, for
// sendInitialEvents, every Service as ADDED followed by the bookmark that ends the
// initial events, then every change, until the client or the server goes away.
func (f *fakeAPI) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	enc := json.NewEncoder(w)
	send := func(typ watch.EventType, obj any) bool {
		b, _ := json.Marshal(obj)
		if err := enc.Encode(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: b}}); err != nil {
			return false
		}
		w.(http.Flusher).Flush()
		return true
	}
	f.mu.Lock()
	from, _ := strconv.Atoi(q.Get("resourceVersion"))
	gone := f.gone
	var initial []*v1.Service
	if q.Get("sendInitialEvents") == "true" {
		for _, s := range f.svcs {
			initial = append(initial, s)
		}
		from = f.rv
	}
	cur := f.rv
	f.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	for _, s := range initial {
		if !send(watch.Added, s) {
			return
		}
	}
	if q.Get("sendInitialEvents") == "true" {
		bm := &v1.Service{TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(cur), Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		if !send(watch.Bookmark, bm) {
			return
		}
	}
	for {
		f.mu.Lock()
		var evs []fakeEvent
		for _, e := range f.events {
			if e.rv > from {
				evs = append(evs, e)
			}
		}
		change := f.change
		f.mu.Unlock()
		for _, e := range evs {
			if !send(e.typ, e.svc) {
				return
			}
			from = e.rv
		}
		select {
		case <-change:
		case <-gone:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// TestInformerCatchesUp: a client-go Service informer behind the gate, against an API
// server that refuses connections for 4 s while a Service is deleted and another
// created. The informer holds both changes well within a second of the server
// listening again (client-go alone would be in a backoff of up to 6.4 s by then).
func TestInformerCatchesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 5 s")
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	api := newFakeAPI(t)
	api.set(watch.Added, "old")
	cfg := &rest.Config{Host: "http://" + api.addr}
	g := New(ctx, Options{})
	client, err := kubernetes.NewForConfig(g.Config(cfg))
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	svcs := factory.Core().V1().Services()
	informer := svcs.Informer()
	factory.Start(ctx.Done())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	names := func() []string {
		var out []string
		for _, o := range informer.GetStore().List() {
			out = append(out, o.(*v1.Service).Name)
		}
		slices.Sort(out)
		return out
	}
	waitFor := func(want []string, limit time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for !slices.Equal(names(), want) {
			if time.Since(start) > limit {
				t.Fatalf("the informer holds %v after %v, want %v", names(), limit, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}
	waitFor([]string{"old"}, 10*time.Second)

	api.down()
	time.Sleep(4 * time.Second)
	api.set(watch.Deleted, "old")
	api.set(watch.Added, "new")
	if g.Open() {
		t.Error("the gate is open while the server refuses connections")
	}
	api.up()
	took := waitFor([]string{"new"}, 10*time.Second)
	t.Logf("the informer caught up %v after the server listened again", took)
	if took > time.Second {
		t.Errorf("caught up after %v, want within the probe interval (at most 0.8 s) plus the round trips", took)
	}
}
