package cachelist

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

func indexer(objs ...any) cache.Indexer {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			panic(err)
		}
	}
	return idx
}

func TestNodeLister(t *testing.T) {
	l := NodeLister(indexer(
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"rack": "r1"}}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
	))
	names := func(ns []*v1.Node) string {
		var s []string
		for _, n := range ns {
			s = append(s, n.Name)
		}
		slices.Sort(s)
		return strings.Join(s, ",")
	}
	for _, sel := range []labels.Selector{labels.Everything(), nil} {
		got, err := l.List(sel)
		if err != nil || names(got) != "a,b" || cap(got) != 2 {
			t.Errorf("List(%v) = %s (cap %d), %v; want a,b in a slice of 2", sel, names(got), cap(got), err)
		}
	}
	got, err := l.List(labels.SelectorFromSet(labels.Set{"rack": "r1"}))
	if err != nil || names(got) != "a" {
		t.Errorf("List(rack=r1) = %s, %v; want a", names(got), err)
	}
	if n, err := l.Get("b"); err != nil || n.Name != "b" {
		t.Errorf("Get(b) = %v, %v", n, err)
	}
}

func TestServiceLister(t *testing.T) {
	l := ServiceLister(indexer(
		&v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a", Labels: map[string]string{"app": "web"}}},
		&v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "y", Name: "b"}},
	))
	got, err := l.List(labels.Everything())
	if err != nil || len(got) != 2 || cap(got) != 2 {
		t.Errorf("List(everything) = %d Services (cap %d), %v; want 2", len(got), cap(got), err)
	}
	if got, err := l.List(labels.SelectorFromSet(labels.Set{"app": "web"})); err != nil || len(got) != 1 || got[0].Name != "a" {
		t.Errorf("List(app=web) = %v, %v; want x/a", got, err)
	}
	if got, err := l.Services("y").List(labels.Everything()); err != nil || len(got) != 1 || got[0].Name != "b" {
		t.Errorf("Services(y).List = %v, %v; want y/b", got, err)
	}
	if s, err := l.Services("x").Get("a"); err != nil || s.Name != "a" {
		t.Errorf("Services(x).Get(a) = %v, %v", s, err)
	}
}

// BenchmarkListNodes: allocation per list of 5000 Nodes, client-go's lister against
// this one.
func BenchmarkListNodes(b *testing.B) {
	var objs []any
	for i := range 5000 {
		objs = append(objs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("n", 1+i%7) + string(rune('a'+i%26)) + string(rune(i))}})
	}
	idx := indexer(objs...)
	b.Run("client-go", func(b *testing.B) {
		l := NodeLister(idx).(nodeLister).NodeLister
		b.ReportAllocs()
		for b.Loop() {
			_, _ = l.List(labels.Everything())
		}
	})
	b.Run("cachelist", func(b *testing.B) {
		l := NodeLister(idx)
		b.ReportAllocs()
		for b.Loop() {
			_, _ = l.List(labels.Everything())
		}
	})
}
