package hostinfo

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

const doc = `
apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
racks:
- name: r1
  bgpPeers:
  - {address: 10.0.0.254, asn: 65001, passwordFile: /etc/baremetal-ccm/tor-r1, holdTime: 9s}
  - {address: "fd00::fe", asn: 65001}
hosts:
- name: w1
  rack: r1
  addresses: [{type: InternalIP, address: "fd00::1"}, {type: InternalIP, address: 10.0.0.1}]
- name: w2
  bgpRouterID: 10.9.0.2
  addresses: [{type: InternalIP, address: 10.0.0.2}]
`

func view(t *testing.T, s string) *inventory.View {
	t.Helper()
	v, err := inventory.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestForAndRoundTrip(t *testing.T) {
	v := view(t, doc)
	w1, _ := v.Host("w1")
	info := For(v, w1)
	if info.RouterID != "10.0.0.1" || info.Rack != "r1" || len(info.Peers) != 2 {
		t.Fatalf("For(w1) = %+v, want router ID 10.0.0.1 (first IPv4 InternalIP), rack r1, 2 peers", info)
	}
	s := Encode(info)
	if strings.Contains(s, "passwordFile") || strings.Contains(s, "tor-r1") {
		t.Errorf("the annotation %s names the CCM's password file", s)
	}
	got, err := Decode(s)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Peers[0].Password || got.Peers[1].Password || got.Peers[0].HoldTime.Duration != 9*time.Second || got.Peers[1].Port != 179 {
		t.Errorf("decoded peers = %+v, want the password mark, settings and defaults kept", got.Peers)
	}
	w2, _ := v.Host("w2")
	if info := For(v, w2); info.RouterID != "10.9.0.2" || len(info.Peers) != 0 {
		t.Errorf("For(w2) = %+v, want the inventory's bgpRouterID and no peers", info)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, bad := range []string{
		`{"host":"w1","peers":[{"address":"10.0.0.254","asn":65001,"passwordFile":"/etc/shadow"}]}`,
		`{"host":"w1","extra":1}`,
		`{"host":"w1","routerID":"fd00::1"}`,
		`{"host":"w1","peers":[{"address":"not-an-ip","asn":65001}]}`,
		`{"host":"w1"} {}`,
		`not json`,
	} {
		if _, err := Decode(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Decode(%s) = %v, want ErrInvalid", bad, err)
		}
	}
}

// The leader publishes on initialized Nodes of known hosts, follows inventory
// changes, and leaves a Node whose host left the inventory as it was.
func TestPublisher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	initialized := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Spec: v1.NodeSpec{ProviderID: "baremetal://w1"}}
	uninitialized := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2"}}
	client := fake.NewClientset(initialized, uninitialized)
	p, current := startPublisher(ctx, t, client)
	go p.Run(ctx)

	annotation := func(name string) string {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations[Annotation]
	}
	waitFor(t, "w1's annotation", func() bool { return annotation("w1") != "" })
	info, err := Decode(annotation("w1"))
	if err != nil || info.Host != "w1" || len(info.Peers) != 2 {
		t.Fatalf("w1's annotation = %+v (%v), want host w1 with 2 peers", info, err)
	}
	if annotation("w2") != "" {
		t.Error("an uninitialized Node got the annotation")
	}

	// The rack's peers change: the annotation follows.
	current.set(view(t, strings.Replace(doc, "10.0.0.254", "10.0.0.250", 1)))
	waitFor(t, "the changed peer", func() bool { return strings.Contains(annotation("w1"), "10.0.0.250") })

	// The host leaves the inventory: the annotation stays.
	before := annotation("w1")
	current.set(view(t, strings.Replace(strings.Replace(doc, "- name: w1\n  rack: r1\n  addresses: [{type: InternalIP, address: \"fd00::1\"}, {type: InternalIP, address: 10.0.0.1}]\n", "", 1), "10.0.0.254", "10.0.0.250", 1)))
	time.Sleep(300 * time.Millisecond)
	if got := annotation("w1"); got != before {
		t.Errorf("the annotation of a Node whose host left the inventory changed to %q", got)
	}
}

// startPublisher returns a Publisher of client's Nodes, its informers started until
// ctx ends, and the View it publishes from (doc's at first).
func startPublisher(ctx context.Context, t *testing.T, client *fake.Clientset) (*Publisher, *atomicView) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes()
	current := &atomicView{}
	current.set(view(t, doc))
	p, err := NewPublisher(PublisherOptions{Client: client, Nodes: nodes.Lister(), Informer: nodes.Informer(), View: current.get, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	return p, current
}

type atomicView struct {
	p atomic.Pointer[inventory.View]
}

func (a *atomicView) set(v *inventory.View)         { a.p.Store(v) }
func (a *atomicView) get() (*inventory.View, error) { return a.p.Load(), nil }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPublisherRunJoinsItsWorker (issue 25): Run belongs to a leadership term, and
// returned at the term's end while its worker could still be patching a Node. It
// returns once the worker has stopped.
func TestPublisherRunJoinsItsWorker(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Spec: v1.NodeSpec{ProviderID: "baremetal://w1"}})
	patching, release := make(chan struct{}, 1), make(chan struct{})
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		patching <- struct{}{}
		<-release
		return false, nil, nil
	})
	p, _ := startPublisher(ctx, t, client)
	term, end := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		p.Run(term)
	}()
	<-patching
	end()
	select {
	case <-ran:
		t.Fatal("Run returned while its worker was patching a Node")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case <-ran:
	case <-time.After(30 * time.Second): // a deadlock detector
		t.Fatal("Run did not return after its worker stopped")
	}
}

// A kubelet may register any providerID: the host's BGP settings go only on a Node
// that is initialized (no uninitialized taint) and whose systemUUID does not
// contradict the host's; a Node that comes to contradict it loses them.
func TestPublisherChecksTheMachine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const uuid = "4c4c4544-0000-4000-8000-0000000000a1"
	withUUID := strings.Replace(doc, "- name: w1\n", "- name: w1\n  systemUUID: "+uuid+"\n", 1)
	withUUID = strings.Replace(withUUID, "- name: w2\n", "- name: w2\n  systemUUID: 4c4c4544-0000-4000-8000-0000000000a2\n", 1)
	node := func(name, provider, systemUUID string, taints ...v1.Taint) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: provider, Taints: taints},
			Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{SystemUUID: systemUUID}}}
	}
	impostor := node("imp", "baremetal://w2", "4c4c4544-0000-4000-8000-0000000000ff")
	pending := node("w2", "baremetal://w2", "", v1.Taint{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: v1.TaintEffectNoSchedule})
	good := node("w1", "baremetal://w1", uuid)
	client := fake.NewClientset(impostor, pending, good)
	p, current := startPublisher(ctx, t, client)
	current.set(view(t, withUUID))
	go p.Run(ctx)
	annotation := func(name string) string {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations[Annotation]
	}
	waitFor(t, "w1's annotation", func() bool { return annotation("w1") != "" })
	time.Sleep(200 * time.Millisecond) // several passes
	if a := annotation("imp"); a != "" {
		t.Errorf("a Node whose systemUUID contradicts host w2's got its settings: %s", a)
	}
	if a := annotation("w2"); a != "" {
		t.Errorf("an uninitialized Node got its host's settings: %s", a)
	}
	// w1's Node now reports another machine: its settings are taken back.
	good.Status.NodeInfo.SystemUUID = "4c4c4544-0000-4000-8000-0000000000ee"
	good.Annotations = map[string]string{Annotation: annotation("w1")}
	if _, err := client.CoreV1().Nodes().Update(ctx, good, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "w1's annotation removed", func() bool { return annotation("w1") == "" })
}
