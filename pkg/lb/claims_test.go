package lb

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/cloud-provider/api"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
)

// claimLB is a LoadBalancer ("a replica") with claims in the shared fake API
// server and a Service index of its own (its informer's view).
type claimLB struct {
	*LoadBalancer
	rec *recorder
	idx cache.Indexer
}

func newClaimLB(t *testing.T, client *fake.Clientset, existing ...*v1.Service) *claimLB {
	t.Helper()
	l, rec := newLB(t)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, s := range existing {
		if err := idx.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	l.SetServices(corelisters.NewServiceLister(idx), func() bool { return true })
	l.SetClaimer(IPAddressClaims{Client: client})
	return &claimLB{LoadBalancer: l, rec: rec, idx: idx}
}

func withUID(s *v1.Service, uid string) *v1.Service {
	s.UID = types.UID(uid)
	return s
}

func claimsIn(t *testing.T, client *fake.Clientset) map[netip.Addr]Claim {
	t.Helper()
	cl, err := IPAddressClaims{Client: client}.List(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func ensureIPs(t *testing.T, l *claimLB, s *v1.Service) ([]string, error) {
	t.Helper()
	st, err := l.EnsureLoadBalancer(context.Background(), "", s, nil)
	if err != nil {
		return nil, err
	}
	return ingressIPs(st), nil
}

// A leader with a stale view (it never saw the other leader's assignment) picks an
// address another Service was given meanwhile: its claim fails, it writes nothing,
// and after re-priming from the cluster it gives its Service another address.
func TestStaleLeaderCannotGiveAnAddressTwice(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	s2 := withUID(svc("s2"), "uid-s2")
	a := newClaimLB(t, client, s2) // primed now: .1 is free
	if _, _, err := a.GetLoadBalancer(ctx, "", s2); err != nil {
		t.Fatal(err)
	}
	s1 := withUID(svc("s1"), "uid-s1")
	b := newClaimLB(t, client, s1, s2) // the new leader
	got, err := ensureIPs(t, b, s1)
	if err != nil || !slices.Equal(got, []string{"192.0.2.1"}) {
		t.Fatalf("new leader: %v %v, want 192.0.2.1", got, err)
	}
	// The old leader resumes with its stale view: .1 looks free to it.
	_, err = ensureIPs(t, a, s2)
	var re *api.RetryError
	if !errors.Is(err, ErrClaimed) || !errors.As(err, &re) {
		t.Fatalf("stale leader: %v, want a retry wrapping ErrClaimed", err)
	}
	if c := claimsIn(t, client)[netip.MustParseAddr("192.0.2.1")]; c.Holder.Name != "s1" {
		t.Fatalf("claim of .1 is %+v, want s1's", c)
	}
	// s1's status now shows .1 (the new leader wrote it); the old leader re-primes.
	s1.Status.LoadBalancer = *status([]netip.Addr{netip.MustParseAddr("192.0.2.1")})
	_ = a.idx.Update(s1)
	got, err = ensureIPs(t, a, s2)
	if err != nil || slices.Contains(got, "192.0.2.1") || len(got) != 1 {
		t.Fatalf("after re-priming: %v %v, want one address other than .1", got, err)
	}
}

// A leader that claimed an address and stopped before writing the status: the
// next leader sees the claim, gives the address to that Service (not to another),
// and the status shows it once written.
func TestClaimWithoutStatusStaysWithItsService(t *testing.T) {
	client := fake.NewClientset()
	s2 := withUID(svc("s2"), "uid-s2")
	if err := (IPAddressClaims{Client: client}).Claim(context.Background(), netip.MustParseAddr("192.0.2.1"), holderOf(s2, ipam.Request{})); err != nil {
		t.Fatal(err)
	}
	s1 := withUID(svc("s1"), "uid-s1")
	b := newClaimLB(t, client, s1, s2)
	got1, err := ensureIPs(t, b, s1)
	if err != nil || slices.Contains(got1, "192.0.2.1") {
		t.Fatalf("s1: %v %v, want an address other than the one claimed for s2", got1, err)
	}
	got2, err := ensureIPs(t, b, s2)
	if err != nil || !slices.Equal(got2, []string{"192.0.2.1"}) {
		t.Fatalf("s2: %v %v, want the address claimed for it", got2, err)
	}
}

// Clusters from before claims: every Service's status address gets claimed at its
// next sync, none moves; a duplicate that exists already is resolved for the older
// Service, with an event, and the newer one moves (never both cleared).
func TestMigrationClaimsStatusesAndResolvesDuplicates(t *testing.T) {
	client := fake.NewClientset()
	old := withUID(svc("old", "192.0.2.2"), "uid-old")
	old.CreationTimestamp = metav1.NewTime(time.Unix(100, 0))
	dup := withUID(svc("dup", "192.0.2.2"), "uid-dup")
	dup.CreationTimestamp = metav1.NewTime(time.Unix(200, 0))
	solo := withUID(svc("solo", "192.0.2.3"), "uid-solo")
	l := newClaimLB(t, client, old, dup, solo)
	for _, s := range []*v1.Service{dup, solo, old} { // the newer one first: order must not matter
		if _, err := ensureIPs(t, l, s); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
	}
	claims := claimsIn(t, client)
	if c := claims[netip.MustParseAddr("192.0.2.2")]; c.Holder.Name != "old" {
		t.Errorf("claim of .2: %+v, want the older Service's", c)
	}
	if c := claims[netip.MustParseAddr("192.0.2.3")]; c.Holder.Name != "solo" {
		t.Errorf("claim of .3: %+v, want solo's (its address did not move)", c)
	}
	a, _ := l.Allocator().Assigned("default/dup")
	if len(a.IPs) != 1 || a.IPs[0] == netip.MustParseAddr("192.0.2.2") {
		t.Errorf("dup holds %v, want another address", a.IPs)
	}
	if c := claims[a.IPs[0]]; c.Holder.Name != "dup" {
		t.Errorf("dup's new address is not claimed for it: %+v", c)
	}
	found := false
	for _, e := range l.rec.events {
		found = found || e.reason == ReasonPrimingConflict && e.typ == v1.EventTypeWarning
	}
	if !found {
		t.Errorf("no %s event for the duplicate: %+v", ReasonPrimingConflict, l.rec.events)
	}
}

// Committed releases a Service's claims once its status no longer shows them; a
// shared address is released with its last Service only.
func TestCommittedReleasesClaims(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	sh := func(name string) *v1.Service {
		s := withUID(svc(name), "uid-"+name)
		s.Annotations = map[string]string{ipam.AnnotationAllowSharedIP: "k"}
		s.Spec.Ports = []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: int32(len(name))}}
		return s
	}
	a, b, solo := sh("a"), sh("bb"), withUID(svc("solo"), "uid-solo")
	l := newClaimLB(t, client, a, b, solo)
	ipsA, _ := ensureIPs(t, l, a)
	ipsB, _ := ensureIPs(t, l, b)
	ipsS, _ := ensureIPs(t, l, solo)
	if !slices.Equal(ipsA, ipsB) || slices.Equal(ipsA, ipsS) {
		t.Fatalf("a %v, bb %v (shared), solo %v", ipsA, ipsB, ipsS)
	}
	shared, own := netip.MustParseAddr(ipsA[0]), netip.MustParseAddr(ipsS[0])
	for _, s := range []*v1.Service{a, solo} {
		s.Status.LoadBalancer = *status([]netip.Addr{netip.MustParseAddr(map[bool]string{true: ipsA[0], false: ipsS[0]}[s == a])})
		if err := l.EnsureLoadBalancerDeleted(ctx, "", s); err != nil {
			t.Fatal(err)
		}
		if err := l.Committed(ctx, s, IngressIPs(s), nil); err != nil {
			t.Fatal(err)
		}
	}
	claims := claimsIn(t, client)
	if _, ok := claims[own]; ok {
		t.Errorf("solo's claim of %s is still there", own)
	}
	if _, ok := claims[shared]; !ok {
		t.Errorf("the shared claim of %s went with its first Service; bb still holds it", shared)
	}
	if err := l.EnsureLoadBalancerDeleted(ctx, "", b); err != nil {
		t.Fatal(err)
	}
	if err := l.Committed(ctx, b, []netip.Addr{shared}, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := claimsIn(t, client)[shared]; ok {
		t.Errorf("the shared claim of %s outlived its last Service", shared)
	}
}

// A Service deleted and created again under the same name (another UID) takes over
// the claim its predecessor left; one of another name never does.
func TestStaleClaimOfSameNameIsReplaced(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	ip := netip.MustParseAddr("192.0.2.1")
	claims := IPAddressClaims{Client: client}
	if err := claims.Claim(ctx, ip, Holder{Namespace: "default", Name: "web", UID: "old-uid"}); err != nil {
		t.Fatal(err)
	}
	if err := claims.Claim(ctx, ip, Holder{Namespace: "default", Name: "other", UID: "x"}); !errors.Is(err, ErrClaimed) {
		t.Errorf("another Service's claim: %v, want ErrClaimed", err)
	}
	if err := claims.Claim(ctx, ip, Holder{Namespace: "default", Name: "web", UID: "new-uid"}); err != nil {
		t.Fatalf("same name, new UID: %v", err)
	}
	if c, _, _ := claims.Get(ctx, ip); c.Holder.UID != "new-uid" {
		t.Errorf("claim holder %+v, want the new UID", c.Holder)
	}
}

// An address another manager claims (a ClusterIP of the service CIDR that overlaps
// a pool by mistake) is never assigned.
func TestForeignClaimIsReserved(t *testing.T) {
	foreign := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "192.0.2.1", Labels: map[string]string{networkingv1.LabelManagedBy: "ipallocator.k8s.io"}},
		Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "kubernetes"}},
	}
	client := fake.NewClientset(foreign)
	s := withUID(svc("s"), "uid-s")
	l := newClaimLB(t, client, s)
	got, err := ensureIPs(t, l, s)
	if err != nil || slices.Contains(got, "192.0.2.1") {
		t.Errorf("got %v %v, want an address other than the ClusterIP", got, err)
	}
	// The collector reads only this CCM's claims; priming reads every manager's.
	ours, err := IPAddressClaims{Client: client}.List(context.Background(), true)
	if _, foreignListed := ours[netip.MustParseAddr("192.0.2.1")]; err != nil || foreignListed || len(ours) != len(got) {
		t.Errorf("own claims %v (%v), want exactly the Service's %v", ours, err, got)
	}
	if all := claimsIn(t, client); len(all) != len(got)+1 {
		t.Errorf("every claim: %v, want the Service's %v and the ClusterIP", all, got)
	}
}

// The collector deletes claims no Service needs, once older than the grace: a
// claim of a deleted Service, and keeps the claims of live Services.
func TestClaimCollector(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	live := withUID(svc("live"), "uid-live")
	l := newClaimLB(t, client, live)
	if _, err := ensureIPs(t, l, live); err != nil {
		t.Fatal(err)
	}
	orphan := netip.MustParseAddr("192.0.2.4")
	if err := l.claimer.Claim(ctx, orphan, Holder{Namespace: "default", Name: "gone", UID: "uid-gone"}); err != nil {
		t.Fatal(err)
	}
	// The fake API server leaves creationTimestamp zero: "now" is relative to it.
	var created time.Time
	if n, err := l.collectClaims(ctx, created.Add(ClaimGrace/2)); err != nil || n != 0 {
		t.Fatalf("within the grace: deleted %d (%v), want 0", n, err)
	}
	n, err := l.collectClaims(ctx, created.Add(2*ClaimGrace))
	if err != nil || n != 1 {
		t.Fatalf("after the grace: deleted %d (%v), want 1 (the orphan)", n, err)
	}
	claims := claimsIn(t, client)
	if _, ok := claims[orphan]; ok || len(claims) != 1 {
		t.Errorf("claims left: %v, want the live Service's only", claims)
	}
}

// claimWrites counts the create and delete calls on IPAddress objects.
func claimWrites(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "ipaddresses" && (a.GetVerb() == "create" || a.GetVerb() == "delete") {
			n++
		}
	}
	return n
}

// A Service synced again (a resync, its own status change) keeps its claim without
// an API write: the replica knows the claim is its.
func TestResyncMakesNoClaimWrite(t *testing.T) {
	client := fake.NewClientset()
	s := withUID(svc("s"), "uid-s")
	l := newClaimLB(t, client, s)
	got, err := ensureIPs(t, l, s)
	if err != nil || len(got) != 1 {
		t.Fatalf("%v %v", got, err)
	}
	if n := claimWrites(client); n != 1 {
		t.Fatalf("%d claim writes for the first assignment, want 1", n)
	}
	s.Status.LoadBalancer = *status([]netip.Addr{netip.MustParseAddr(got[0])})
	_ = l.idx.Update(s)
	if err := l.Committed(context.Background(), s, nil, IngressIPs(s)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if again, err := ensureIPs(t, l, s); err != nil || !slices.Equal(again, got) {
			t.Fatalf("resync: %v %v, want %v", again, err, got)
		}
	}
	if n := claimWrites(client); n != 1 {
		t.Errorf("%d claim writes after three resyncs, want still 1", n)
	}
	if _, ok := claimsIn(t, client)[netip.MustParseAddr(got[0])]; !ok {
		t.Error("the claim is gone")
	}
}

// A claim made for a Service whose status shows nothing is kept by the collector
// however old (a paused leader may still write that status: the claim is the
// Service's candidate); once the Service's status shows other addresses (someone
// wrote it, so that stale write would conflict) it is an orphan and is collected.
func TestCollectorKeepsPendingServicesClaim(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	p := withUID(svc("p"), "uid-p")
	l := newClaimLB(t, client, p)
	if _, _, err := l.GetLoadBalancer(ctx, "", p); err != nil { // primed: knows no claim
		t.Fatal(err)
	}
	stale := netip.MustParseAddr("192.0.2.3")
	if err := l.claimer.Claim(ctx, stale, holderOf(p, ipam.Request{})); err != nil { // another leader's
		t.Fatal(err)
	}
	var created time.Time
	if n, err := l.collectClaims(ctx, created.Add(10*ClaimGrace)); err != nil || n != 0 {
		t.Fatalf("pending holder: deleted %d (%v), want 0", n, err)
	}
	p.Status.LoadBalancer = *status([]netip.Addr{netip.MustParseAddr("192.0.2.4")})
	_ = l.idx.Update(p)
	if n, err := l.collectClaims(ctx, created.Add(10*ClaimGrace)); err != nil || n != 1 {
		t.Fatalf("holder shows another address: deleted %d (%v), want 1", n, err)
	}
	if _, ok := claimsIn(t, client)[stale]; ok {
		t.Error("the orphan claim is still there")
	}
}

// A claim another term made for a Service that then gets other addresses (its
// request changed) is released when this leader writes that Service's status.
func TestCommittedReleasesOrphanClaims(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	s := withUID(svc("s"), "uid-s")
	old := netip.MustParseAddr("192.0.2.3")
	if err := (IPAddressClaims{Client: client}).Claim(ctx, old, holderOf(s, ipam.Request{})); err != nil {
		t.Fatal(err)
	}
	s.Annotations = map[string]string{ipam.AnnotationLoadBalancerIPs: "192.0.2.4"}
	l := newClaimLB(t, client, s)
	got, err := ensureIPs(t, l, s)
	if err != nil || !slices.Equal(got, []string{"192.0.2.4"}) {
		t.Fatalf("%v %v, want the requested 192.0.2.4", got, err)
	}
	if err := l.Committed(ctx, s, nil, []netip.Addr{netip.MustParseAddr("192.0.2.4")}); err != nil {
		t.Fatal(err)
	}
	claims := claimsIn(t, client)
	if _, ok := claims[old]; ok {
		t.Errorf("the other term's claim of %s is still there: %v", old, claims)
	}
	if c, ok := claims[netip.MustParseAddr("192.0.2.4")]; !ok || c.Holder.Name != "s" {
		t.Errorf("claim of .9: %+v, want s's", c)
	}
}

// The index of known claims by Service follows every change of an address's claim.
func TestKnownHeldByIndex(t *testing.T) {
	l := &LoadBalancer{}
	a := Holder{Namespace: "ns", Name: "a", UID: "ua"}
	b := Holder{Namespace: "ns", Name: "b", UID: "ub"}
	ip1, ip2 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	l.setKnown(ip1, &Claim{IP: ip1, Holder: a, Ours: true})
	l.setKnown(ip2, &Claim{IP: ip2, Holder: a, Ours: true})
	if got := l.knownHeldBy(a); !slices.Equal(got, []netip.Addr{ip1, ip2}) {
		t.Fatalf("a holds %v, want both", got)
	}
	l.setKnown(ip1, &Claim{IP: ip1, Holder: b, Ours: true}) // ip1 moved to b
	if got := l.knownHeldBy(a); !slices.Equal(got, []netip.Addr{ip2}) {
		t.Errorf("a holds %v after ip1 moved, want ip2 only", got)
	}
	if got := l.knownHeldBy(b); !slices.Equal(got, []netip.Addr{ip1}) {
		t.Errorf("b holds %v, want ip1", got)
	}
	if got := l.knownHeldBy(Holder{Namespace: "ns", Name: "a", UID: "other"}); len(got) != 0 {
		t.Errorf("a re-created Service (another UID) holds %v, want none", got)
	}
	if got := l.knownHeldBy(Holder{Namespace: "ns", Name: "a"}); !slices.Equal(got, []netip.Addr{ip2}) {
		t.Errorf("a Service known to be gone (no UID) holds %v, want its claims", got)
	}
	l.setKnown(ip1, &Claim{IP: ip1, Holder: Holder{Namespace: "ns", Name: "b", SharingKey: "k"}, Ours: true})
	l.setKnown(ip2, nil)
	if got := l.knownHeldBy(a); len(got) != 0 {
		t.Errorf("a holds %v after its claim was released", got)
	}
	if got := l.knownHeldBy(b); len(got) != 0 {
		t.Errorf("b holds %v, but ip1 is a sharing group's now", got)
	}
	if len(l.knownByName) != 0 {
		t.Errorf("index left over: %v", l.knownByName)
	}
}

// A Service that holds its address alone and then allows sharing keeps the address
// (its claim becomes the sharing key's) and another Service with the key shares it;
// before, its own claim refused it and it ended in IPConflict. Dropping the key from
// the shared claim, or another Service of the same name (another UID) asking, stay
// refused.
func TestClaimFollowsAnAddedSharingKey(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	late := withUID(svc("late", "192.0.2.1"), "uid-late")
	late.Annotations = map[string]string{ipam.AnnotationLoadBalancerIPs: "192.0.2.1"}
	b := newClaimLB(t, client, late)
	if got, err := ensureIPs(t, b, late); err != nil || !slices.Equal(got, []string{"192.0.2.1"}) {
		t.Fatalf("late alone: %v %v", got, err)
	}
	late = late.DeepCopy()
	late.Annotations[ipam.AnnotationAllowSharedIP] = "t"
	if got, err := ensureIPs(t, b, late); err != nil || !slices.Equal(got, []string{"192.0.2.1"}) {
		t.Fatalf("late with a sharing key: %v %v, want to keep its address", got, err)
	}
	ip := netip.MustParseAddr("192.0.2.1")
	if c := claimsIn(t, client)[ip]; c.Holder != (Holder{Namespace: "default", Name: "late", UID: "uid-late", SharingKey: "t"}) {
		t.Errorf("claim holder %+v, want late's with sharing key t", c.Holder)
	}
	other := withUID(svc("other"), "uid-other")
	other.Annotations = map[string]string{ipam.AnnotationLoadBalancerIPs: "192.0.2.1", ipam.AnnotationAllowSharedIP: "t"}
	other.Spec.Ports[0].Port = 443
	if err := b.idx.Add(other); err != nil {
		t.Fatal(err)
	}
	if got, err := ensureIPs(t, b, other); err != nil || !slices.Equal(got, []string{"192.0.2.1"}) {
		t.Fatalf("other with the key: %v %v, want the shared address", got, err)
	}

	claims := IPAddressClaims{Client: client}
	if err := claims.Claim(ctx, ip, Holder{Namespace: "default", Name: "late", UID: "uid-late"}); !errors.Is(err, ErrClaimed) {
		t.Errorf("late dropping its key from the shared claim: %v, want ErrClaimed", err)
	}
	if c := claimsIn(t, client)[ip]; c.Holder.SharingKey != "t" {
		t.Errorf("a refused drop changed the claim: %+v", c.Holder)
	}
	alone := netip.MustParseAddr("192.0.2.2")
	if err := claims.Claim(ctx, alone, Holder{Namespace: "default", Name: "web", UID: "uid-1"}); err != nil {
		t.Fatal(err)
	}
	if err := claims.Claim(ctx, alone, Holder{Namespace: "default", Name: "web", UID: "uid-2", SharingKey: "k"}); !errors.Is(err, ErrClaimed) {
		t.Errorf("another Service of the name asking with a key: %v, want ErrClaimed", err)
	}
}
