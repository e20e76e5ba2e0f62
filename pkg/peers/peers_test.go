package peers

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned/fake"
	v1alpha1listers "github.com/baremetal-ccm/baremetal-ccm/pkg/generated/listers/baremetalccm/v1alpha1"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func peer(name string, age time.Duration, addr string, asn int64) *v1alpha1.BGPPeer {
	return &v1alpha1.BGPPeer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(t0.Add(-age))},
		Spec:       v1alpha1.BGPPeerSpec{Address: addr, ASN: asn},
	}
}

// lab runs Controller passes over objects in a fake API, re-reading them between
// passes as the informer would.
type lab struct {
	t      *testing.T
	client *fake.Clientset
	ctl    *Controller
}

func newLab(t *testing.T, file []config.BGPPeer, objs ...*v1alpha1.BGPPeer) *lab {
	client := fake.NewSimpleClientset()
	for _, o := range objs {
		if _, err := client.BaremetalCCMV1alpha1().BGPPeers().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return &lab{t: t, client: client, ctl: &Controller{Client: client, File: file, Clock: func() time.Time { return t0 }}}
}

func (l *lab) list() []*v1alpha1.BGPPeer {
	l.t.Helper()
	list, err := l.client.BaremetalCCMV1alpha1().BGPPeers().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	out := make([]*v1alpha1.BGPPeer, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out
}

func (l *lab) pass() {
	l.t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range l.list() {
		if err := idx.Add(o); err != nil {
			l.t.Fatal(err)
		}
	}
	l.ctl.Peers = v1alpha1listers.NewBGPPeerLister(idx)
	l.ctl.Pass(context.Background())
}

func (l *lab) get(name string) *v1alpha1.BGPPeer {
	l.t.Helper()
	o, err := l.client.BaremetalCCMV1alpha1().BGPPeers().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	return o
}

func (l *lab) update(o *v1alpha1.BGPPeer) {
	l.t.Helper()
	o.Generation++
	if _, err := l.client.BaremetalCCMV1alpha1().BGPPeers().Update(context.Background(), o, metav1.UpdateOptions{}); err != nil {
		l.t.Fatal(err)
	}
}

func (l *lab) want(name string, status metav1.ConditionStatus, reason string, words ...string) *v1alpha1.BGPPeer {
	l.t.Helper()
	o := l.get(name)
	c := meta.FindStatusCondition(o.Status.Conditions, v1alpha1.PoolConditionAccepted)
	if c == nil || c.Status != status || c.Reason != reason {
		l.t.Fatalf("%s: condition %+v, want %s %s", name, c, status, reason)
	}
	if c.ObservedGeneration != o.Generation {
		l.t.Errorf("%s: condition about generation %d, object at %d", name, c.ObservedGeneration, o.Generation)
	}
	for _, w := range words {
		if !strings.Contains(c.Message, w) {
			l.t.Errorf("%s: message %q does not say %q", name, c.Message, w)
		}
	}
	return o
}

// An accepted peer is applied; a bad change names the field and keeps the last good
// spec in force; fixing it applies the fix.
func TestControllerAcceptsAndKeepsLastGood(t *testing.T) {
	l := newLab(t, nil, peer("tor1", time.Hour, "192.0.2.1", 64512))
	l.pass()
	o := l.want("tor1", metav1.ConditionTrue, v1alpha1.PeerReasonAccepted)
	if o.Status.Applied == nil || o.Status.Applied.Address != "192.0.2.1" {
		t.Fatalf("applied %+v", o.Status.Applied)
	}
	o.Spec.HoldTime = &metav1.Duration{Duration: time.Second}
	l.update(o)
	l.pass()
	o = l.want("tor1", metav1.ConditionFalse, v1alpha1.PeerReasonInvalid, "spec.holdTime", "stays in force")
	if o.Status.Applied == nil || o.Status.Applied.HoldTime != nil {
		t.Fatalf("a bad change reached status.applied: %+v", o.Status.Applied)
	}
	if eff := Effective(nil, l.list()); len(eff) != 1 || eff[0].Config.HoldTime == nil || eff[0].Config.HoldTime.Duration != 90*time.Second {
		t.Fatalf("in force: %+v, want the last good spec, defaulted", eff)
	}
	o.Spec.HoldTime = &metav1.Duration{Duration: 9 * time.Second}
	o.Spec.KeepaliveTime = &metav1.Duration{Duration: 3 * time.Second}
	l.update(o)
	l.pass()
	o = l.want("tor1", metav1.ConditionTrue, v1alpha1.PeerReasonAccepted)
	if o.Status.Applied.HoldTime.Duration != 9*time.Second {
		t.Fatalf("applied %+v", o.Status.Applied)
	}
}

// Every field's mistake is named; a new invalid object applies nothing.
func TestControllerNamesTheField(t *testing.T) {
	bad := map[string]func(*v1alpha1.BGPPeerSpec){
		"spec.address":       func(s *v1alpha1.BGPPeerSpec) { s.Address = "10.0.0.256" },
		"spec.asn":           func(s *v1alpha1.BGPPeerSpec) { s.ASN = 1 << 32 },
		"spec.sourceAddress": func(s *v1alpha1.BGPPeerSpec) { s.SourceAddress = "2001:db8::1" },
		"spec.passwordFile":  func(s *v1alpha1.BGPPeerSpec) { s.PasswordFile = "relative/pw" },
		"spec.keepaliveTime": func(s *v1alpha1.BGPPeerSpec) {
			s.HoldTime, s.KeepaliveTime = &metav1.Duration{Duration: 9 * time.Second}, &metav1.Duration{Duration: 10 * time.Second}
		},
		"spec.bfd.minTx": func(s *v1alpha1.BGPPeerSpec) {
			s.BFD = &v1alpha1.BFDSpec{MinTx: &metav1.Duration{Duration: time.Millisecond}}
		},
		"spec.nodeSelector": func(s *v1alpha1.BGPPeerSpec) {
			s.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: "Near"}}}
		},
	}
	for fieldName, mutate := range bad {
		o := peer("p", time.Minute, "192.0.2.1", 64512)
		mutate(&o.Spec)
		l := newLab(t, nil, o)
		l.pass()
		got := l.want("p", metav1.ConditionFalse, v1alpha1.PeerReasonInvalid, fieldName, "nothing of it is in force")
		if got.Status.Applied != nil {
			t.Errorf("%s: applied %+v", fieldName, got.Status.Applied)
		}
		if eff := Effective(nil, l.list()); len(eff) != 0 {
			t.Errorf("%s: in force %+v", fieldName, eff)
		}
	}
}

// A CloudConfig peer wins its address; among objects the older does, and the newer
// takes over once the older is gone.
func TestControllerConflicts(t *testing.T) {
	file := []config.BGPPeer{{Address: "192.0.2.1", ASN: 64512}}
	l := newLab(t, file,
		peer("dup-of-file", time.Hour, "192.0.2.1", 64513),
		peer("old", time.Hour, "2001:db8::1", 64514),
		peer("young", time.Minute, "2001:db8:0:0::1", 64515))
	l.pass()
	l.want("dup-of-file", metav1.ConditionFalse, v1alpha1.PeerReasonConflict, "spec.address", "bgp.peers[0]")
	l.want("old", metav1.ConditionTrue, v1alpha1.PeerReasonAccepted)
	l.want("young", metav1.ConditionFalse, v1alpha1.PeerReasonConflict, "BGPPeer old")
	eff := Effective(file, l.list())
	if len(eff) != 1 || eff[0].Name != "old" {
		t.Fatalf("in force %+v, want old only", eff)
	}
	if err := l.client.BaremetalCCMV1alpha1().BGPPeers().Delete(context.Background(), "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	l.pass()
	l.want("young", metav1.ConditionTrue, v1alpha1.PeerReasonAccepted)
	if eff := Effective(file, l.list()); len(eff) != 1 || eff[0].Name != "young" || eff[0].Config.ASN != 64515 {
		t.Fatalf("in force %+v, want young", eff)
	}
}

// A BGPPeer equal to a CloudConfig peer is accepted as the same peer (moving it into
// the cluster); where the CloudConfig has it, the CloudConfig's is in force.
func TestSameAsFileAccepted(t *testing.T) {
	file := []config.BGPPeer{{Address: "192.0.2.1", ASN: 64512, HoldTime: &metav1.Duration{Duration: 9 * time.Second}}}
	config.SetBGPPeerDefaults(&file[0])
	same := peer("moved", time.Hour, "192.0.2.1", 64512)
	same.Spec = FromConfig(&file[0])
	l := newLab(t, file, same)
	l.pass()
	l.want("moved", metav1.ConditionTrue, v1alpha1.PeerReasonAccepted, "bgp.peers[0]")
	if eff := Effective(file, l.list()); len(eff) != 0 {
		t.Errorf("with the CloudConfig's peer in force: %+v", eff)
	}
	if eff := Effective(nil, l.list()); len(eff) != 1 || eff[0].Config.HoldTime.Duration != 9*time.Second {
		t.Errorf("once the CloudConfig has it no more: %+v", eff)
	}
	o := l.get("moved")
	o.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "a"}}
	l.update(o)
	l.pass()
	l.want("moved", metav1.ConditionFalse, v1alpha1.PeerReasonConflict, "bgp.peers[0] with other settings", "stays in force")
}

// An accepted peer whose change takes an older one's address keeps its last good
// address in force; Effective never yields an address twice even from stale
// statuses.
func TestConflictingChangeKeepsLastGood(t *testing.T) {
	l := newLab(t, nil, peer("a", time.Hour, "192.0.2.1", 64512), peer("b", time.Minute, "192.0.2.2", 64512))
	l.pass()
	b := l.get("b")
	b.Spec.Address = "192.0.2.1"
	l.update(b)
	l.pass()
	b = l.want("b", metav1.ConditionFalse, v1alpha1.PeerReasonConflict, "BGPPeer a", "stays in force")
	if b.Status.Applied.Address != "192.0.2.2" {
		t.Fatalf("b applies %+v", b.Status.Applied)
	}
	stale := l.list()
	for _, o := range stale {
		o.Status.Applied = o.Spec.DeepCopy() // as if both had been accepted
	}
	if eff := Effective(nil, stale); len(eff) != 1 || eff[0].Name != "a" {
		t.Fatalf("in force %+v, want a alone", eff)
	}
}

// For picks by node selector, leaves out the rack's addresses, and gives a Node not
// yet known only the selector-less peers.
func TestFor(t *testing.T) {
	all := peer("all", time.Hour, "192.0.2.1", 64512)
	rack := peer("rack-a", time.Hour, "192.0.2.2", 64512)
	rack.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": "a"}}
	empty := peer("empty-selector", time.Hour, "192.0.2.3", 64512)
	empty.Spec.NodeSelector = &metav1.LabelSelector{}
	objs := []*v1alpha1.BGPPeer{all, rack, empty}
	for _, o := range objs {
		o.Status.Applied = o.Spec.DeepCopy()
	}
	eff := Effective(nil, objs)
	addrs := func(ps []config.BGPPeer) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.Address)
		}
		return strings.Join(s, ",")
	}
	inA := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{"topology.kubernetes.io/zone": "a"}}}
	inB := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2", Labels: map[string]string{"topology.kubernetes.io/zone": "b"}}}
	for _, c := range []struct {
		node    *v1.Node
		exclude []config.BGPPeer
		want    string
	}{
		{inA, nil, "192.0.2.1,192.0.2.3,192.0.2.2"}, // oldest first, then by name
		{inB, nil, "192.0.2.1,192.0.2.3"},
		{nil, nil, "192.0.2.1,192.0.2.3"},
		{inA, []config.BGPPeer{{Address: "192.0.2.2"}}, "192.0.2.1,192.0.2.3"},
	} {
		if got := addrs(For(eff, c.node, c.exclude)); got != c.want {
			t.Errorf("For(%v, exclude %v) = %s, want %s", c.node, c.exclude, got, c.want)
		}
	}
}

// A CloudConfig peer converts to a BGPPeer spec and back unchanged (defaulted).
func TestConversionRoundTrip(t *testing.T) {
	in := config.BGPPeer{Address: "2001:db8::1", ASN: 4200000000, Port: 1179, SourceAddress: "2001:db8::2",
		PasswordFile: "/etc/bgp/pw", HoldTime: &metav1.Duration{Duration: 9 * time.Second},
		KeepaliveTime: &metav1.Duration{Duration: 3 * time.Second}, ConnectRetry: &metav1.Duration{Duration: time.Second},
		GracefulRestart: &metav1.Duration{Duration: time.Minute},
		BFD:             &config.BFDConfig{MinTx: &metav1.Duration{Duration: 100 * time.Millisecond}, MinRx: &metav1.Duration{Duration: 100 * time.Millisecond}, Multiplier: 5}}
	config.SetBGPPeerDefaults(&in)
	spec := FromConfig(&in)
	out := ToConfig(&spec)
	if errs := config.ValidateBGPPeer(&out, nil); len(errs) > 0 {
		t.Fatal(errs)
	}
	if a, b := toJSON(t, in), toJSON(t, out); a != b {
		t.Fatalf("round trip:\n%s\n%s", a, b)
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An older peer's change to an address a newer one has in force is the Conflict:
// the newer keeps its session, the older its last good address.
func TestOlderChangeDoesNotTakeAnAppliedAddress(t *testing.T) {
	l := newLab(t, nil, peer("older", time.Hour, "192.0.2.1", 64512), peer("newer", time.Minute, "192.0.2.2", 64512))
	l.pass()
	o := l.get("older")
	o.Spec.Address = "192.0.2.2"
	l.update(o)
	l.pass()
	o = l.want("older", metav1.ConditionFalse, v1alpha1.PeerReasonConflict, "BGPPeer newer", "stays in force")
	if o.Status.Applied.Address != "192.0.2.1" {
		t.Errorf("older applies %s", o.Status.Applied.Address)
	}
	if n := l.want("newer", metav1.ConditionTrue, v1alpha1.PeerReasonAccepted); n.Status.Applied == nil || n.Status.Applied.Address != "192.0.2.2" {
		t.Errorf("newer lost its address: %+v", n.Status.Applied)
	}
	if eff := Effective(nil, l.list()); len(eff) != 2 {
		t.Errorf("in force %+v, want both", eff)
	}
}
