package lb

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// The leader's pool report counts size, use, free addresses and Services per pool
// and family, and RunPoolStatus keeps the ConfigMap equal to it, writing only on
// change.
func TestPoolStatus(t *testing.T) {
	cfg := &config.LoadBalancerConfig{Pools: []config.AddressPool{
		{Name: "public", Addresses: []string{"192.0.2.0/30", "2001:db8::/126"}},
		{Name: "spare", Addresses: []string{"198.51.100.10-198.51.100.19"}, AutoAssign: ptr.To(false)},
	}}
	l, err := New(cfg, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	var svcs []*v1.Service
	for _, name := range []string{"a", "b"} {
		svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyRequireDualStack)}}
		svcs = append(svcs, svc)
	}
	l.SetServices(corelisters.NewServiceLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})), func() bool { return true })
	for _, svc := range svcs {
		if _, err := l.EnsureLoadBalancer(context.Background(), "c", svc, nil); err != nil {
			t.Fatal(err)
		}
	}
	r := l.PoolReports()
	if len(r.Pools) != 2 || r.Pools[0].Name != "public" || r.Pools[0].Services != 2 || r.Pools[1].Services != 0 || r.Pools[1].AutoAssign {
		t.Fatalf("report %+v", r)
	}
	for _, f := range r.Pools[0].Families {
		if f.InUse != 2 || f.Free != f.Size-2 {
			t.Errorf("public %s: %+v, want 2 in use", f.Family, f)
		}
	}
	if tab := r.Table(); !strings.Contains(tab, "public") || !strings.Contains(tab, "IPv6") || !strings.Contains(tab, "spare") {
		t.Errorf("table:\n%s", tab)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.RunPoolStatus(ctx, client, "baremetal-ccm", 10*time.Millisecond) }()
	var cm *v1.ConfigMap
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cm, err = client.CoreV1().ConfigMaps("baremetal-ccm").Get(ctx, PoolsConfigMap, metav1.GetOptions{}); err == nil {
			break
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap written")
	}
	var got PoolsReport
	if err := json.Unmarshal([]byte(cm.Data[PoolsKey]), &got); err != nil || got.Pools[0].Services != 2 {
		t.Errorf("ConfigMap report %+v %v", got, err)
	}
	time.Sleep(100 * time.Millisecond)
	writes := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "update" {
			writes++
		}
	}
	if writes != 1 {
		t.Errorf("%d writes, want 1 while nothing changed", writes)
	}
	cancel()
	<-done
}

// A replica whose fence refuses (it lost the Lease) writes no pool status, and
// writes again once the fence lets it (a new term).
func TestPoolStatusFenced(t *testing.T) {
	cfg := &config.LoadBalancerConfig{Pools: []config.AddressPool{{Name: "public", Addresses: []string{"192.0.2.0/30"}}}}
	l, err := New(cfg, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	var leading atomic.Bool
	l.SetFence(func(context.Context) error {
		if leading.Load() {
			return nil
		}
		return errors.New("the Lease is held by replica-b")
	})
	l.SetServices(corelisters.NewServiceLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})), func() bool { return true })
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer}}
	leading.Store(true)
	if _, err := l.EnsureLoadBalancer(context.Background(), "c", svc, nil); err != nil {
		t.Fatal(err)
	}
	leading.Store(false)
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.RunPoolStatus(ctx, client, "baremetal-ccm", 10*time.Millisecond) }()
	time.Sleep(200 * time.Millisecond)
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "update" || a.GetVerb() == "get" {
			t.Fatalf("fenced replica called %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	leading.Store(true)
	var cm *v1.ConfigMap
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && cm == nil; time.Sleep(10 * time.Millisecond) {
		cm, _ = client.CoreV1().ConfigMaps("baremetal-ccm").Get(ctx, PoolsConfigMap, metav1.GetOptions{})
	}
	if cm == nil {
		t.Fatal("no ConfigMap written once the fence lets the replica write")
	}
	cancel()
	<-done
}
