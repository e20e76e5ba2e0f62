package adverts

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned/fake"
	v1alpha1listers "github.com/baremetal-ccm/baremetal-ccm/pkg/generated/listers/baremetalccm/v1alpha1"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func advert(name string, s v1alpha1.BGPAdvertisementSpec) *v1alpha1.BGPAdvertisement {
	return &v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1}, Spec: s}
}

type lab struct {
	t      *testing.T
	client *fake.Clientset
	ctl    *Controller
}

func newLab(t *testing.T, objs ...any) *lab {
	client := fake.NewSimpleClientset()
	ctx := context.Background()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *v1alpha1.BGPAdvertisement:
			_, err = client.BaremetalCCMV1alpha1().BGPAdvertisements().Create(ctx, o, metav1.CreateOptions{})
		case *v1alpha1.IPPool:
			_, err = client.BaremetalCCMV1alpha1().IPPools().Create(ctx, o, metav1.CreateOptions{})
		case *v1alpha1.BGPPeer:
			_, err = client.BaremetalCCMV1alpha1().BGPPeers().Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return &lab{t: t, client: client, ctl: &Controller{Client: client, FilePools: []string{"public"}, Clock: func() time.Time { return t0 }}}
}

func (l *lab) pass() {
	l.t.Helper()
	ctx := context.Background()
	ads, pools, peers := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	al, _ := l.client.BaremetalCCMV1alpha1().BGPAdvertisements().List(ctx, metav1.ListOptions{})
	for i := range al.Items {
		_ = ads.Add(&al.Items[i])
	}
	pl, _ := l.client.BaremetalCCMV1alpha1().IPPools().List(ctx, metav1.ListOptions{})
	for i := range pl.Items {
		_ = pools.Add(&pl.Items[i])
	}
	bl, _ := l.client.BaremetalCCMV1alpha1().BGPPeers().List(ctx, metav1.ListOptions{})
	for i := range bl.Items {
		_ = peers.Add(&bl.Items[i])
	}
	l.ctl.Advertisements, l.ctl.Pools, l.ctl.Peers = v1alpha1listers.NewBGPAdvertisementLister(ads), v1alpha1listers.NewIPPoolLister(pools), v1alpha1listers.NewBGPPeerLister(peers)
	l.ctl.Pass(ctx)
}

func (l *lab) want(name string, status metav1.ConditionStatus, reason string, words ...string) *v1alpha1.BGPAdvertisement {
	l.t.Helper()
	o, err := l.client.BaremetalCCMV1alpha1().BGPAdvertisements().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	c := meta.FindStatusCondition(o.Status.Conditions, v1alpha1.PoolConditionAccepted)
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

func acceptedPeer(name, addr string) *v1alpha1.BGPPeer {
	s := v1alpha1.BGPPeerSpec{Address: addr, ASN: 65001}
	return &v1alpha1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: s, Status: v1alpha1.BGPPeerStatus{Applied: s.DeepCopy()}}
}

func acceptedPool(name string, lbls map[string]string) *v1alpha1.IPPool {
	s := v1alpha1.IPPoolSpec{Addresses: []string{"203.0.113.0/28"}}
	return &v1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}, Spec: s, Status: v1alpha1.IPPoolStatus{Applied: s.DeepCopy()}}
}

// References resolve to pools (by name, CloudConfig ones included, and by label)
// and peer addresses (BGPPeers by name, and addresses); a missing one is named and
// keeps the last good resolution; a bad field is named.
func TestControllerResolvesAndNames(t *testing.T) {
	lp := int64(200)
	l := newLab(t,
		acceptedPeer("spine-a", "10.0.255.1"), acceptedPool("edge", map[string]string{"tier": "edge"}), acceptedPool("other", nil),
		advert("a", v1alpha1.BGPAdvertisementSpec{IPPools: []string{"public"}, IPPoolSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}},
			Peers: []string{"spine-a"}, PeerAddresses: []string{"::ffff:10.0.0.254"}, Communities: []string{"65000:7"}, LocalPreference: &lp}),
		advert("everything", v1alpha1.BGPAdvertisementSpec{Communities: []string{"65000:8"}}),
	)
	l.pass()
	a := l.want("a", metav1.ConditionTrue, v1alpha1.AdvertisementReasonAccepted)
	if a.Status.AllPools || !slices.Equal(a.Status.Pools, []string{"edge", "public"}) || a.Status.AllPeers || !slices.Equal(a.Status.PeerAddresses, []string{"10.0.0.254", "10.0.255.1"}) {
		t.Errorf("resolved %+v", a.Status)
	}
	if e := l.want("everything", metav1.ConditionTrue, v1alpha1.AdvertisementReasonAccepted); !e.Status.AllPools || !e.Status.AllPeers {
		t.Errorf("everything: %+v", e.Status)
	}
	// A missing BGPPeer: named; the last good resolution stays.
	a.Spec.Peers = []string{"spine-a", "spine-b"}
	a.Generation++
	if _, err := l.client.BaremetalCCMV1alpha1().BGPAdvertisements().Update(context.Background(), a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.pass()
	a = l.want("a", metav1.ConditionFalse, v1alpha1.AdvertisementReasonMissingReference, "spec.peers[1]", "spine-b", "stays in force")
	if !slices.Equal(a.Status.PeerAddresses, []string{"10.0.0.254", "10.0.255.1"}) {
		t.Errorf("the last good peers were not kept: %v", a.Status.PeerAddresses)
	}
	// A bad community and a bad selector: named.
	bad := advert("bad", v1alpha1.BGPAdvertisementSpec{Communities: []string{"70000:1"}, ServiceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}})
	if _, err := l.client.BaremetalCCMV1alpha1().BGPAdvertisements().Create(context.Background(), bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.pass()
	if o := l.want("bad", metav1.ConditionFalse, v1alpha1.AdvertisementReasonInvalid, "spec.communities[0]", "spec.serviceSelector", "nothing of it is in force"); o.Status.Applied != nil {
		t.Errorf("bad applied %+v", o.Status.Applied)
	}
}

// For: uncovered addresses go everywhere; covered ones to the union of their
// advertisements' peers (every peer when one of them says so), with all their
// communities and the highest local preference; the Service selector limits.
func TestFor(t *testing.T) {
	lp1, lp2 := int64(100), int64(300)
	r1, r2 := "10.0.0.1", "10.0.0.2"
	mk := func(name string, s v1alpha1.BGPAdvertisementSpec, pools []string, peers []string) *v1alpha1.BGPAdvertisement {
		o := advert(name, s)
		o.Status.Applied = s.DeepCopy()
		o.Status.Pools, o.Status.AllPools = pools, pools == nil
		o.Status.PeerAddresses, o.Status.AllPeers = peers, peers == nil
		return o
	}
	ads := Effective([]*v1alpha1.BGPAdvertisement{
		mk("to-r1", v1alpha1.BGPAdvertisementSpec{Communities: []string{"65000:1"}, LocalPreference: &lp1}, []string{"edge"}, []string{r1}),
		mk("web-to-r2", v1alpha1.BGPAdvertisementSpec{ServiceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Communities: []string{"65000:2"}, LocalPreference: &lp2}, []string{"edge"}, []string{r2}),
		mk("core-everywhere", v1alpha1.BGPAdvertisementSpec{LargeCommunities: []string{"65000:1:1"}}, []string{"core"}, nil),
	})
	svc := func(lbls map[string]string) *v1.Service {
		return &v1.Service{ObjectMeta: metav1.ObjectMeta{Labels: lbls}}
	}
	if _, ok := For(ads, svc(nil), "public"); ok {
		t.Error("an address of an uncovered pool is covered")
	}
	got, ok := For(ads, svc(nil), "edge")
	if !ok || !slices.Equal(got.Peers, []netip.Addr{netip.MustParseAddr(r1)}) || !slices.Equal(got.Communities, []string{"65000:1"}) || *got.LocalPref != 100 {
		t.Errorf("edge, no labels: %+v", got)
	}
	got, _ = For(ads, svc(map[string]string{"app": "web"}), "edge")
	if len(got.Peers) != 2 || !slices.Equal(got.Communities, []string{"65000:1", "65000:2"}) || *got.LocalPref != 300 {
		t.Errorf("edge, web: %+v", got)
	}
	if got, ok := For(ads, svc(nil), "core"); !ok || got.Peers != nil || !slices.Equal(got.LargeCommunities, []string{"65000:1:1"}) {
		t.Errorf("core: %+v, want every peer", got)
	}
}
