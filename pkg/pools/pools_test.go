package pools

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned/fake"
	v1alpha1listers "github.com/baremetal-ccm/baremetal-ccm/pkg/generated/listers/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func pool(name string, age time.Duration, addrs ...string) *v1alpha1.IPPool {
	return &v1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(t0.Add(-age))},
		Spec:       v1alpha1.IPPoolSpec{Addresses: addrs},
	}
}

// lab runs Controller passes over objects in a fake API, re-reading them between
// passes as the informer would.
type lab struct {
	t      *testing.T
	client *fake.Clientset
	ctl    *Controller
	inUse  []Holder
}

func newLab(t *testing.T, file []config.AddressPool, objs ...*v1alpha1.IPPool) *lab {
	client := fake.NewSimpleClientset()
	for _, o := range objs {
		if _, err := client.BaremetalCCMV1alpha1().IPPools().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	l := &lab{t: t, client: client}
	l.ctl = &Controller{Client: client, File: file, Clock: func() time.Time { return t0 },
		Holders: func() []Holder { return l.inUse },
		Usage: func() []ipam.PoolUsage {
			return []ipam.PoolUsage{{Pool: "a", Family: "IPv4", Size: 4, Used: 1}, {Pool: "a", Family: "IPv6", Size: 1 << 63, Used: 0}}
		}}
	return l
}

func (l *lab) pass() {
	l.t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	list, err := l.client.BaremetalCCMV1alpha1().IPPools().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	for i := range list.Items {
		if err := idx.Add(&list.Items[i]); err != nil {
			l.t.Fatal(err)
		}
	}
	l.ctl.Pools = v1alpha1listers.NewIPPoolLister(idx)
	l.ctl.Pass(context.Background())
}

func (l *lab) get(name string) *v1alpha1.IPPool {
	l.t.Helper()
	o, err := l.client.BaremetalCCMV1alpha1().IPPools().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	return o
}

func (l *lab) update(o *v1alpha1.IPPool) {
	l.t.Helper()
	o.Generation++
	if _, err := l.client.BaremetalCCMV1alpha1().IPPools().Update(context.Background(), o, metav1.UpdateOptions{}); err != nil {
		l.t.Fatal(err)
	}
}

func accepted(o *v1alpha1.IPPool) *metav1.Condition {
	return meta.FindStatusCondition(o.Status.Conditions, v1alpha1.PoolConditionAccepted)
}

func (l *lab) want(name string, status metav1.ConditionStatus, reason string, words ...string) *v1alpha1.IPPool {
	l.t.Helper()
	o := l.get(name)
	c := accepted(o)
	if c == nil || c.Status != status || c.Reason != reason {
		l.t.Fatalf("%s: condition %+v, want %s %s", name, c, status, reason)
	}
	for _, w := range words {
		if !strings.Contains(c.Message, w) {
			l.t.Errorf("%s: message %q does not say %q", name, c.Message, w)
		}
	}
	return o
}

// An accepted pool is applied, with its use and the finalizer; a bad change names
// the field and keeps the last good spec; a shrink of held addresses waits for them.
func TestControllerAcceptsInvalidatesAndHolds(t *testing.T) {
	l := newLab(t, []config.AddressPool{{Name: "file", Addresses: []string{"10.9.0.0/24"}}}, pool("a", time.Hour, "10.0.0.0/30", "fd00::/64"))
	l.pass()
	a := l.want("a", metav1.ConditionTrue, v1alpha1.PoolReasonAccepted)
	if a.Status.Applied == nil || !slices.Equal(a.Status.Applied.Addresses, []string{"10.0.0.0/30", "fd00::/64"}) || !slices.Contains(a.Finalizers, v1alpha1.PoolFinalizer) {
		t.Fatalf("accepted pool: %+v", a)
	}
	if a.Status.IPv4 == nil || *a.Status.IPv4 != (v1alpha1.PoolUsage{Size: "4", Used: "1", Free: "3"}) || a.Status.IPv6.Size != "9223372036854775808" || a.Status.ObservedGeneration != 1 {
		t.Errorf("use: %+v %+v, generation %d", a.Status.IPv4, a.Status.IPv6, a.Status.ObservedGeneration)
	}
	// A bad address: Invalid, naming the field; the last good spec stays.
	a.Spec.Addresses = []string{"10.0.0.0/30", "10.0.0.300"}
	l.update(a)
	l.pass()
	a = l.want("a", metav1.ConditionFalse, v1alpha1.PoolReasonInvalid, "spec.addresses[1]", "10.0.0.300", "the last accepted spec (status.applied) stays in force")
	if !slices.Equal(a.Status.Applied.Addresses, []string{"10.0.0.0/30", "fd00::/64"}) || a.Status.ObservedGeneration != 2 {
		t.Errorf("after a bad change: applied %v, generation %d", a.Status.Applied.Addresses, a.Status.ObservedGeneration)
	}
	// A shrink that takes a held address: held, naming it.
	l.inUse = []Holder{{IP: netip.MustParseAddr("10.0.0.2")}, {IP: netip.MustParseAddr("10.9.0.1")}}
	a.Spec.Addresses = []string{"10.0.0.0/31"}
	l.update(a)
	l.pass()
	a = l.want("a", metav1.ConditionFalse, v1alpha1.PoolReasonShrinkHeld, "takes away 1 addresses Services hold, or no longer admits the Services holding them (10.0.0.2)")
	if !slices.Equal(a.Status.Applied.Addresses, []string{"10.0.0.0/30", "fd00::/64"}) {
		t.Errorf("held shrink applied: %v", a.Status.Applied.Addresses)
	}
	// Released: the shrink applies.
	l.inUse = nil
	l.pass()
	a = l.want("a", metav1.ConditionTrue, v1alpha1.PoolReasonAccepted)
	if !slices.Equal(a.Status.Applied.Addresses, []string{"10.0.0.0/31"}) {
		t.Errorf("after release: applied %v", a.Status.Applied.Addresses)
	}
}

// The CloudConfig wins its names and addresses; among IPPools the older wins; a
// loser applies nothing (or keeps what it had).
func TestControllerConflicts(t *testing.T) {
	l := newLab(t, []config.AddressPool{{Name: "file", Addresses: []string{"10.9.0.0/24"}}, {Name: "moving", Addresses: []string{"10.8.0.0/24"}}},
		pool("moving", 3*time.Hour, "10.8.0.0/24"),
		pool("old", 2*time.Hour, "10.0.0.0/29"), pool("young", time.Hour, "10.0.0.4/30"),
		pool("file", time.Hour, "10.1.0.0/30"), pool("overfile", time.Hour, "10.9.0.128/25"), pool("Bad_Name", time.Hour, "10.2.0.0/30"))
	l.pass()
	l.want("old", metav1.ConditionTrue, v1alpha1.PoolReasonAccepted)
	if y := l.want("young", metav1.ConditionFalse, v1alpha1.PoolReasonConflict, "spec.addresses[0] (10.0.0.4/30) overlaps pool old (10.0.0.0/29)", "nothing of it is in force"); y.Status.Applied != nil {
		t.Errorf("a conflicting pool applied: %+v", y.Status.Applied)
	}
	l.want("file", metav1.ConditionFalse, v1alpha1.PoolReasonConflict, "the CloudConfig has a pool named file")
	// The same pool as the CloudConfig's (being moved into the cluster): accepted.
	l.want("moving", metav1.ConditionTrue, v1alpha1.PoolReasonAccepted)
	l.want("overfile", metav1.ConditionFalse, v1alpha1.PoolReasonConflict, "overlaps pool file (10.9.0.0/24)")
	l.want("Bad_Name", metav1.ConditionFalse, v1alpha1.PoolReasonInvalid, "metadata.name")
	// The older grows into nothing of the younger's in force: still accepted; the
	// younger stays out until the older moves away.
	o := l.get("old")
	o.Spec.Addresses = []string{"10.0.0.0/30"}
	l.update(o)
	l.pass()
	l.pass()
	l.want("old", metav1.ConditionTrue, v1alpha1.PoolReasonAccepted)
	l.want("young", metav1.ConditionTrue, v1alpha1.PoolReasonAccepted)
	// Now old may not take young's addresses back.
	o = l.get("old")
	o.Spec.Addresses = []string{"10.0.0.0/29"}
	l.update(o)
	l.pass()
	if o := l.want("old", metav1.ConditionFalse, v1alpha1.PoolReasonConflict, "overlaps pool young"); !slices.Equal(o.Status.Applied.Addresses, []string{"10.0.0.0/30"}) {
		t.Errorf("old after a conflicting change: %v", o.Status.Applied.Addresses)
	}
	// What every process applies: the file's pools, then the accepted ones by name;
	// never two that overlap.
	list, _ := l.client.BaremetalCCMV1alpha1().IPPools().List(context.Background(), metav1.ListOptions{})
	var objs []*v1alpha1.IPPool
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	eff := Effective(l.ctl.File, objs)
	var names []string
	for _, p := range eff {
		names = append(names, p.Name)
	}
	if strings.Join(names, " ") != "file moving old young" {
		t.Errorf("effective pools %v, want file moving old young (the CloudConfig's moving, not the IPPool's)", names)
	}
	if _, err := ipam.New(eff); err != nil {
		t.Errorf("the effective pools do not make an allocator: %v", err)
	}
}

// A pool being deleted stays (finalizer) while Services hold its addresses.
func TestControllerHoldsDeletion(t *testing.T) {
	l := newLab(t, nil, pool("a", time.Hour, "10.0.0.0/30"))
	l.pass()
	a := l.get("a")
	now := metav1.NewTime(t0)
	a.DeletionTimestamp = &now
	if _, err := l.client.BaremetalCCMV1alpha1().IPPools().Update(context.Background(), a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.inUse = []Holder{{IP: netip.MustParseAddr("10.0.0.1")}}
	l.pass()
	a = l.want("a", metav1.ConditionFalse, v1alpha1.PoolReasonDeletionHeld, "Services hold 1 of its addresses (10.0.0.1)")
	if !slices.Contains(a.Finalizers, v1alpha1.PoolFinalizer) || a.Status.Applied == nil {
		t.Errorf("held deletion: %+v", a)
	}
	l.inUse = nil
	l.pass()
	if a = l.get("a"); slices.Contains(a.Finalizers, v1alpha1.PoolFinalizer) {
		t.Errorf("finalizer kept after the addresses were released: %v", a.Finalizers)
	}
}

func TestConversionRoundTrip(t *testing.T) {
	f, lp := false, uint32(200)
	p := config.AddressPool{Name: "x", Addresses: []string{"10.0.0.0/30"}, AutoAssign: &f, AvoidBuggyIPs: true, Priority: 3,
		Namespaces: []string{"web"}, ServiceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
		Communities: []string{"65000:1"}, LargeCommunities: []string{"1:2:3"}, LocalPreference: &lp}
	spec := FromConfig(&p)
	back := ToConfig("x", &spec)
	if back.Name != "x" || *back.AutoAssign || !back.AvoidBuggyIPs || back.Priority != 3 || *back.LocalPreference != 200 ||
		back.ServiceSelector.MatchLabels["a"] != "b" || !slices.Equal(back.Communities, p.Communities) || !slices.Equal(back.LargeCommunities, p.LargeCommunities) {
		t.Errorf("round trip: %+v", back)
	}
	if c := ToConfig("y", &v1alpha1.IPPoolSpec{Addresses: []string{"10.0.0.0/30"}}); c.AutoAssign == nil || !*c.AutoAssign {
		t.Errorf("autoAssign defaults to true: %+v", c.AutoAssign)
	}
}

// A change of namespaces or serviceSelector that would no longer admit a Service
// holding one of the pool's addresses is held like a shrink.
func TestControllerHoldsRestriction(t *testing.T) {
	l := newLab(t, nil, pool("a", time.Hour, "10.0.0.0/30"))
	l.pass()
	l.inUse = []Holder{{IP: netip.MustParseAddr("10.0.0.0"), Known: true, Namespace: "web", Labels: map[string]string{"app": "x"}}}
	a := l.get("a")
	a.Spec.Namespaces = []string{"other"}
	l.update(a)
	l.pass()
	l.want("a", metav1.ConditionFalse, v1alpha1.PoolReasonShrinkHeld, "no longer admits", "10.0.0.0")
	a = l.get("a")
	a.Spec.Namespaces = []string{"web", "other"}
	a.Spec.ServiceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
	l.update(a)
	l.pass()
	l.want("a", metav1.ConditionTrue, v1alpha1.PoolReasonAccepted)
}

// The leader puts the decided set in force before it says so: when that is refused
// (an address would be stranded), nothing is written.
func TestControllerAppliesBeforeWriting(t *testing.T) {
	l := newLab(t, nil, pool("a", time.Hour, "10.0.0.0/30"))
	var applied [][]config.AddressPool
	refuse := true
	l.ctl.Apply = func(p []config.AddressPool) error {
		if refuse {
			return ipam.ErrWouldStrand
		}
		applied = append(applied, p)
		return nil
	}
	l.pass()
	if a := l.get("a"); a.Status.Applied != nil || accepted(a) != nil {
		t.Errorf("written although the set was refused: %+v", a.Status)
	}
	refuse = false
	l.pass()
	l.want("a", metav1.ConditionTrue, v1alpha1.PoolReasonAccepted)
	if len(applied) != 1 || len(applied[0]) != 1 || applied[0][0].Name != "a" {
		t.Errorf("applied %+v", applied)
	}
}

// Effective never returns overlapping pools: a CloudConfig pool wins over an IPPool
// accepted before it was added, the older IPPool over a younger one; a pool being
// deleted assigns nothing new.
func TestEffectiveSkipsOverlaps(t *testing.T) {
	withApplied := func(o *v1alpha1.IPPool) *v1alpha1.IPPool {
		o.Status.Applied = o.Spec.DeepCopy()
		return o
	}
	deleting := withApplied(pool("deleting", time.Minute, "10.3.0.0/30"))
	now := metav1.NewTime(t0)
	deleting.DeletionTimestamp = &now
	eff := Effective([]config.AddressPool{{Name: "file", Addresses: []string{"10.0.0.0/24"}}}, []*v1alpha1.IPPool{
		withApplied(pool("under-file", 3*time.Hour, "10.0.0.128/25")),
		withApplied(pool("young", time.Hour, "10.1.0.0/29")),
		withApplied(pool("old", 2*time.Hour, "10.1.0.4/30")),
		deleting,
	})
	var names []string
	for _, p := range eff {
		names = append(names, p.Name)
	}
	if strings.Join(names, " ") != "file old deleting" {
		t.Errorf("effective %v, want file old deleting", names)
	}
	if _, err := ipam.New(eff); err != nil {
		t.Error(err)
	}
	if p := eff[2]; p.AutoAssign == nil || *p.AutoAssign {
		t.Errorf("a pool being deleted still auto-assigns: %+v", p.AutoAssign)
	}
}
