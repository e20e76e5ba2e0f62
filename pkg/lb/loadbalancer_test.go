package lb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/cloud-provider/api"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
)

type event struct{ typ, reason, msg string }

type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) Eventf(_ runtime.Object, typ, reason, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{typ, reason, fmt.Sprintf(format, args...)})
}

func (r *recorder) last() event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return event{}
	}
	return r.events[len(r.events)-1]
}

// newLB builds a LoadBalancer over a 4-address pool, primed from existing.
func newLB(t *testing.T, existing ...*v1.Service) (*LoadBalancer, *recorder) {
	t.Helper()
	rec := &recorder{}
	l, err := New(&config.LoadBalancerConfig{Announcer: config.AnnouncerBGP, Pools: []config.AddressPool{
		{Name: "small", Addresses: []string{"192.0.2.1-192.0.2.4"}},
	}}, rec)
	if err != nil {
		t.Fatal(err)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, s := range existing {
		if err := idx.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	l.SetServices(corelisters.NewServiceLister(idx), func() bool { return true })
	return l, rec
}

func svc(name string, ips ...string) *v1.Service {
	s := lbService("default", name, v1.ServiceExternalTrafficPolicyCluster, ips...)
	s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol}
	s.Spec.Ports = []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: 80}}
	return s
}

func ingressIPs(st *v1.LoadBalancerStatus) []string {
	var out []string
	for _, in := range st.Ingress {
		out = append(out, in.IP)
	}
	return out
}

func TestEnsureLoadBalancer(t *testing.T) {
	ctx := context.Background()
	l, rec := newLB(t)
	st, err := l.EnsureLoadBalancer(ctx, "c", svc("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ingress) != 1 || st.Ingress[0].IPMode == nil || *st.Ingress[0].IPMode != v1.LoadBalancerIPModeVIP {
		t.Fatalf("status = %+v, want one ingress with ipMode VIP", st)
	}
	if e := rec.last(); e.reason != ReasonIPAssigned {
		t.Errorf("last event = %+v, want %s", e, ReasonIPAssigned)
	}
	// Idempotent: the same call (now with the IP in status) keeps it.
	again := svc("a", ingressIPs(st)...)
	st2, err := l.EnsureLoadBalancer(ctx, "c", again, nil)
	if err != nil || ingressIPs(st2)[0] != ingressIPs(st)[0] {
		t.Fatalf("second Ensure = %v, %v; want the same IP %v", st2, err, ingressIPs(st))
	}
	got, exists, err := l.GetLoadBalancer(ctx, "c", again)
	if err != nil || !exists || ingressIPs(got)[0] != ingressIPs(st)[0] {
		t.Fatalf("GetLoadBalancer = %v, %v, %v", got, exists, err)
	}
	if err := l.EnsureLoadBalancerDeleted(ctx, "c", again); err != nil {
		t.Fatal(err)
	}
	if _, exists, _ := l.GetLoadBalancer(ctx, "c", again); exists {
		t.Fatal("GetLoadBalancer after delete: exists, want released")
	}
}

func TestEnsureLoadBalancerUserErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		mutate    func(*v1.Service)
		reason    string
		retryable bool
		mention   string
	}{
		{"unknown pool", func(s *v1.Service) { s.Annotations = map[string]string{"baremetal-ccm.io/address-pool": "nope"} }, ReasonInvalidRequest, false, "nope"},
		{"IP outside pools", func(s *v1.Service) {
			s.Annotations = map[string]string{"baremetal-ccm.io/load-balancer-ips": "198.51.100.1"}
		}, ReasonInvalidRequest, false, "198.51.100.1"},
		{"malformed IP", func(s *v1.Service) {
			s.Annotations = map[string]string{"baremetal-ccm.io/load-balancer-ips": "10.0.0.300"}
		}, ReasonInvalidRequest, false, "10.0.0.300"},
		{"IP taken", func(s *v1.Service) {
			s.Annotations = map[string]string{"baremetal-ccm.io/load-balancer-ips": "192.0.2.1"}
		}, ReasonIPUnavailable, true, "192.0.2.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holder := svc("holder", "192.0.2.1")
			l, rec := newLB(t, holder)
			s := svc("x")
			tc.mutate(s)
			st, err := l.EnsureLoadBalancer(ctx, "c", s, nil)
			if err == nil {
				t.Fatalf("Ensure = %v, want an error", st)
			}
			var re *api.RetryError
			if errors.As(err, &re) != tc.retryable {
				t.Errorf("error %v: RetryError = %v, want %v", err, !tc.retryable, tc.retryable)
			}
			e := rec.last()
			if e.typ != v1.EventTypeWarning || e.reason != tc.reason || !strings.Contains(e.msg, tc.mention) {
				t.Errorf("event = %+v, want a Warning %s naming %q", e, tc.reason, tc.mention)
			}
			// Nothing else disturbed: the holder keeps its IP.
			if a, ok := l.Allocator().Assigned("default/holder"); !ok || a.IPs[0].String() != "192.0.2.1" {
				t.Errorf("holder's assignment = %v, %v; want 192.0.2.1 untouched", a, ok)
			}
		})
	}
}

func TestExhaustedPoolIsRetried(t *testing.T) {
	ctx := context.Background()
	var existing []*v1.Service
	for i := 1; i <= 4; i++ {
		existing = append(existing, svc(fmt.Sprintf("s%d", i), fmt.Sprintf("192.0.2.%d", i)))
	}
	l, rec := newLB(t, existing...)
	_, err := l.EnsureLoadBalancer(ctx, "c", svc("late"), nil)
	var re *api.RetryError
	if !errors.As(err, &re) || re.RetryAfter() != RetryAfter {
		t.Fatalf("Ensure on a full pool = %v, want a RetryError after %v", err, RetryAfter)
	}
	if e := rec.last(); e.reason != ReasonPoolExhausted || !strings.Contains(e.msg, "small") {
		t.Errorf("event = %+v, want %s naming the pool", e, ReasonPoolExhausted)
	}
	// A Service goes away: the waiting one gets its address.
	if err := l.EnsureLoadBalancerDeleted(ctx, "c", existing[2]); err != nil {
		t.Fatal(err)
	}
	st, err := l.EnsureLoadBalancer(ctx, "c", svc("late"), nil)
	if err != nil || ingressIPs(st)[0] != "192.0.2.3" {
		t.Fatalf("Ensure after a release = %v, %v; want 192.0.2.3", st, err)
	}
}

// TestPrimingBeforeFirstAllocation: after a restart, a Service whose request changed
// while the CCM was down must not be handed an IP another Service holds, whatever the
// order the controller visits them in.
func TestPrimingBeforeFirstAllocation(t *testing.T) {
	ctx := context.Background()
	a := svc("a", "192.0.2.1")
	b := svc("b", "192.0.2.2")
	moved := svc("moved", "192.0.2.3")
	moved.Annotations = map[string]string{"baremetal-ccm.io/load-balancer-ips": "192.0.2.2"} // wants b's IP
	l, _ := newLB(t, a, b, moved)
	if _, err := l.EnsureLoadBalancer(ctx, "c", moved, nil); err == nil {
		t.Fatal("Ensure handed out 192.0.2.2, which default/b holds")
	}
	st, err := l.EnsureLoadBalancer(ctx, "c", b, nil)
	if err != nil || ingressIPs(st)[0] != "192.0.2.2" {
		t.Fatalf("b after restart = %v, %v; want its own 192.0.2.2", st, err)
	}
	fresh, err := l.EnsureLoadBalancer(ctx, "c", svc("fresh"), nil)
	if err != nil || ingressIPs(fresh)[0] != "192.0.2.4" {
		t.Fatalf("new Service = %v, %v; want the only free address 192.0.2.4", fresh, err)
	}
}

func TestNotPrimedUntilSynced(t *testing.T) {
	l, err := New(&config.LoadBalancerConfig{Pools: []config.AddressPool{{Name: "p", Addresses: []string{"192.0.2.0/30"}}}}, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.EnsureLoadBalancer(context.Background(), "c", svc("a"), nil)
	var re *api.RetryError
	if !errors.As(err, &re) {
		t.Fatalf("Ensure without a synced Service informer = %v, want a RetryError", err)
	}
	l.SetServices(corelisters.NewServiceLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})), func() bool { return false })
	if _, err = l.EnsureLoadBalancer(context.Background(), "c", svc("a"), nil); !errors.As(err, &re) {
		t.Fatalf("Ensure before the informer synced = %v, want a RetryError", err)
	}
}

// TestPrimingConflictOldestWins: two Services claim the same IP (for example, one
// restored from a backup); whatever the lister's order, the older keeps it, and a
// Service being deleted whose cleanup finalizer is gone claims nothing.
func TestPrimingConflictOldestWins(t *testing.T) {
	ctx := context.Background()
	for _, names := range [][2]string{{"aa", "zz"}, {"zz", "aa"}} {
		old, young := svc(names[0], "192.0.2.1"), svc(names[1], "192.0.2.1")
		old.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		young.CreationTimestamp = metav1.NewTime(old.CreationTimestamp.Add(time.Hour))
		l, rec := newLB(t, young, old)
		if st, _, err := l.GetLoadBalancer(ctx, "c", old); err != nil || st == nil || ingressIPs(st)[0] != "192.0.2.1" {
			t.Errorf("older %s after priming = %v, %v; want 192.0.2.1", old.Name, st, err)
		}
		if _, held, _ := l.GetLoadBalancer(ctx, "c", young); held {
			t.Errorf("younger %s holds an address after the conflict", young.Name)
		}
		if e := rec.last(); e.reason != ReasonPrimingConflict {
			t.Errorf("last event %+v, want %s", e, ReasonPrimingConflict)
		}
	}

	terminating := svc("terminating", "192.0.2.2")
	terminating.DeletionTimestamp = ptr.To(metav1.Now())
	terminating.Finalizers = []string{"example.com/hold"} // not the cleanup finalizer
	l, _ := newLB(t, terminating)
	next := svc("next")
	next.Annotations = map[string]string{"baremetal-ccm.io/load-balancer-ips": "192.0.2.2"}
	st, err := l.EnsureLoadBalancer(ctx, "c", next, nil)
	if err != nil || ingressIPs(st)[0] != "192.0.2.2" {
		t.Errorf("requesting a released IP of a terminating Service = %v, %v; want it", st, err)
	}
}

// TestStaleAllocatorNeverMovesAnIP is the frozen-leader scenario at the balancer: its
// allocator still has "gone" holding 192.0.2.1, but while it was paused another leader
// released it and gave it to "kept", whose status now shows it. The stale replica must
// not move "kept" to another IP: a conflict event, the status left alone, and the
// allocator rebuilt from the Services (a consistent List), after which "kept" keeps
// 192.0.2.1 and nobody else can get it.
func TestStaleAllocatorNeverMovesAnIP(t *testing.T) {
	ctx := context.Background()
	gone := svc("gone", "192.0.2.1")
	l, rec := newLB(t, gone)
	if _, err := l.EnsureLoadBalancer(ctx, "c", gone, nil); err != nil {
		t.Fatal(err)
	}
	// What the API server holds now: "gone" deleted, "kept" holding its IP.
	kept := svc("kept", "192.0.2.1")
	listed := 0
	l.SetLister(func(context.Context) ([]*v1.Service, error) {
		listed++
		return []*v1.Service{kept}, nil
	})

	st, err := l.EnsureLoadBalancer(ctx, "c", kept, nil)
	if err == nil {
		t.Fatalf("EnsureLoadBalancer = %v; want a conflict, not a new IP", ingressIPs(st))
	}
	var re *api.RetryError
	if !errors.As(err, &re) {
		t.Errorf("err = %v, want a RetryError", err)
	}
	if e := rec.last(); e.reason != ReasonPrimingConflict || !strings.Contains(e.msg, "192.0.2.1") {
		t.Errorf("last event %+v, want %s naming 192.0.2.1", e, ReasonPrimingConflict)
	}
	// The next call re-primes from the List: "kept" keeps its IP.
	st, err = l.EnsureLoadBalancer(ctx, "c", kept, nil)
	if err != nil || ingressIPs(st)[0] != "192.0.2.1" || listed != 1 {
		t.Fatalf("after re-priming: %v, %v (listed %d); want 192.0.2.1 from one List", st, err, listed)
	}
	other := svc("other")
	other.Annotations = map[string]string{"baremetal-ccm.io/load-balancer-ips": "192.0.2.1"}
	if _, err := l.EnsureLoadBalancer(ctx, "c", other, nil); err == nil {
		t.Fatal("another Service got 192.0.2.1, which kept holds")
	}
}

// SetPools wakes PoolsChanged only when the pools change; SetPoolsKeeping refuses a set
// that strands a held address.
func TestSetPoolsWakesOnChange(t *testing.T) {
	l, err := New(&config.LoadBalancerConfig{Pools: []config.AddressPool{{Name: "p", Addresses: []string{"192.0.2.0/30"}}}}, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	ch := l.PoolsChanged()
	if err := l.SetPools(slices.Clone(l.Pools())); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Error("the same pools woke PoolsChanged")
	default:
	}
	if err := l.SetPools([]config.AddressPool{{Name: "p", Addresses: []string{"192.0.2.0/29"}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Error("new pools did not wake PoolsChanged")
	}
	if _, err := l.Allocator().Assign("ns/s", ipam.Request{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.SetPoolsKeeping([]config.AddressPool{{Name: "p", Addresses: []string{"192.0.2.4/30"}}}); !errors.Is(err, ipam.ErrWouldStrand) {
		t.Errorf("stranding: %v", err)
	}
	if got := l.Pools()[0].Addresses[0]; got != "192.0.2.0/29" {
		t.Errorf("a refused set is in force: %s", got)
	}
}
