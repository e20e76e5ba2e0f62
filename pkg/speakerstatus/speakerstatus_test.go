package speakerstatus

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned/fake"
)

func TestObjectName(t *testing.T) {
	for peer, want := range map[string]string{
		"10.0.0.1":        "w1.10.0.0.1",
		"fd00::1":         "w1.fd00-0000-0000-0000-0000-0000-0000-0001",
		"::ffff:10.0.0.2": "w1.10.0.0.2",
	} {
		if got := ObjectName("w1", netip.MustParseAddr(peer)); got != want {
			t.Errorf("ObjectName(w1, %s) = %s, want %s", peer, got, want)
		}
	}
}

// countWrites counts the fake client's create, update and delete actions.
func countWrites(c *fake.Clientset) (n int) {
	for _, a := range c.Actions() {
		switch a.GetVerb() {
		case "create", "update", "delete":
			n++
		}
	}
	return n
}

// The publisher writes one object per peer, only when a session changes or a
// heartbeat is due, deletes the objects of peers that left (also those of an earlier
// run) and never touches another node's.
func TestPublisherSync(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	leftover := &v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{Name: "w1.10.0.0.9", Labels: map[string]string{v1alpha1.LabelNode: "w1"}},
		Spec: v1alpha1.BGPSessionStateSpec{Node: "w1", Peer: "10.0.0.9", Speaker: v1alpha1.SpeakerAgent}}
	other := &v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{Name: "w2.10.0.0.1", Labels: map[string]string{v1alpha1.LabelNode: "w2"}},
		Spec: v1alpha1.BGPSessionStateSpec{Node: "w2", Peer: "10.0.0.1", Speaker: v1alpha1.SpeakerAgent}}
	client := fake.NewSimpleClientset(leftover, other)
	st := Status{Peers: []Peer{
		{Address: netip.MustParseAddr("10.0.0.1"), State: "established", Ready: true, BFD: "Up", PrefixesSent: 3, UpSince: now.Add(-time.Hour)},
		{Address: netip.MustParseAddr("fd00::1"), State: "active", LastError: "dial tcp: connection refused"},
	}}
	started := false
	p := &Publisher{Client: client, Node: "w1", Speaker: v1alpha1.SpeakerAgent, Clock: func() time.Time { return now },
		Read:    func() (Status, bool) { return st, started },
		NodeUID: func(context.Context) (types.UID, error) { return "uid-w1", nil }}
	api := client.BaremetalCCMV1alpha1().BGPSessionStates()

	// Before the speaker starts, nothing is written.
	if err := p.Sync(ctx); err != nil || countWrites(client) != 0 {
		t.Fatalf("before start: err %v, %d writes", err, countWrites(client))
	}
	started = true
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	up, err := api.Get(ctx, "w1.10.0.0.1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if up.Spec != (v1alpha1.BGPSessionStateSpec{Node: "w1", Peer: "10.0.0.1", Speaker: v1alpha1.SpeakerAgent}) || up.Labels[v1alpha1.LabelNode] != "w1" ||
		up.Status.BGPState != "established" || !up.Status.Ready || up.Status.BFDState != "Up" || up.Status.PrefixesSent != 3 ||
		!up.Status.Since.Time.Equal(now.Add(-time.Hour)) || !up.Status.Updated.Time.Equal(now) {
		t.Errorf("established session: %+v", up)
	}
	if want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "w1", UID: "uid-w1"}}; !reflect.DeepEqual(up.OwnerReferences, want) {
		t.Errorf("owner %+v, want the Node (the objects go with it)", up.OwnerReferences)
	}
	down, err := api.Get(ctx, "w1.fd00-0000-0000-0000-0000-0000-0000-0001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if down.Spec.Peer != "fd00::1" || down.Status.BGPState != "active" || down.Status.LastError == "" || !down.Status.Since.Time.Equal(now) {
		t.Errorf("session down: %+v", down)
	}
	if _, err := api.Get(ctx, leftover.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the object of a peer that left is still there (err %v)", err)
	}
	if _, err := api.Get(ctx, other.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("another node's object: %v", err)
	}

	// Nothing changed: no write, until the heartbeat.
	client.ClearActions()
	now = now.Add(30 * time.Second)
	if err := p.Sync(ctx); err != nil || countWrites(client) != 0 {
		t.Errorf("unchanged: err %v, %d writes", err, countWrites(client))
	}
	// Counters and errors move often: written at most every Refresh.
	st.Peers[0].PrefixesSent = 4
	st.Peers[1].LastError = "dial tcp: i/o timeout"
	if err := p.Sync(ctx); err != nil || countWrites(client) != 0 {
		t.Errorf("counters within Refresh: err %v, %d writes", err, countWrites(client))
	}
	now = now.Add(Refresh)
	if err := p.Sync(ctx); err != nil || countWrites(client) != 2 {
		t.Errorf("counters after Refresh: err %v, %d writes, want 2", err, countWrites(client))
	}
	client.ClearActions()
	now = now.Add(AgentHeartbeat - time.Second)
	if err := p.Sync(ctx); err != nil || countWrites(client) != 0 {
		t.Errorf("unchanged within an agent's heartbeat: err %v, %d writes", err, countWrites(client))
	}
	now = now.Add(time.Second)
	if err := p.Sync(ctx); err != nil || countWrites(client) != 2 {
		t.Errorf("heartbeat: err %v, %d writes, want 2", err, countWrites(client))
	}
	// The session down stays down: its since holds. Then it comes up.
	down, _ = api.Get(ctx, down.Name, metav1.GetOptions{})
	if !down.Status.Since.Time.Equal(now.Add(-AgentHeartbeat-Refresh-30*time.Second)) || down.Status.LastError != "dial tcp: i/o timeout" {
		t.Errorf("since moved while the state held, or the error was not refreshed: %+v", down.Status)
	}
	client.ClearActions()
	now = now.Add(2 * time.Second)
	st.Peers[1] = Peer{Address: st.Peers[1].Address, State: "established", UpSince: now}
	if err := p.Sync(ctx); err != nil || countWrites(client) != 1 {
		t.Errorf("change: err %v, %d writes, want 1", err, countWrites(client))
	}
	// A peer leaves the configuration: its object goes.
	st.Peers = st.Peers[:1]
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	list, _ := api.List(ctx, metav1.ListOptions{})
	var names []string
	for _, o := range list.Items {
		names = append(names, o.Name)
	}
	if strings.Join(names, " ") != "w1.10.0.0.1 w2.10.0.0.1" {
		t.Errorf("objects %v, want w1.10.0.0.1 w2.10.0.0.1", names)
	}
	// The speaker stops: its sessions say so at once, another node's are untouched.
	p.stop(ctx)
	if o, _ := api.Get(ctx, "w1.10.0.0.1", metav1.GetOptions{}); o.Status.BGPState != StoppedState || o.Status.Ready || o.Status.PrefixesSent != 0 {
		t.Errorf("after stop: %+v", o.Status)
	}
	if o, _ := api.Get(ctx, "w2.10.0.0.1", metav1.GetOptions{}); o.Status.BGPState == StoppedState {
		t.Error("stop marked another node's session")
	}
}

// Someone else changed the object (a conflict): the publisher re-reads and writes.
func TestPublisherConflictRelists(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	client := fake.NewSimpleClientset()
	st := Status{Peers: []Peer{{Address: netip.MustParseAddr("10.0.0.1"), State: "active"}}}
	p := &Publisher{Client: client, Node: "cp1", Speaker: v1alpha1.SpeakerReplica, Clock: func() time.Time { return now },
		Read: func() (Status, bool) { return st, true }}
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// An admin deletes it: the next write (a change) fails, the one after recreates it.
	if err := client.BaremetalCCMV1alpha1().BGPSessionStates().Delete(ctx, "cp1.10.0.0.1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st.Peers[0].State = "established"
	if err := p.Sync(ctx); err == nil {
		t.Error("updating a deleted object did not fail")
	}
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if o, err := client.BaremetalCCMV1alpha1().BGPSessionStates().Get(ctx, "cp1.10.0.0.1", metav1.GetOptions{}); err != nil || o.Status.BGPState != "established" {
		t.Errorf("after re-listing: %+v, %v", o, err)
	}
}

func TestFresh(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	obj := func(node, peer, state string, updated time.Time) *v1alpha1.BGPSessionState {
		return &v1alpha1.BGPSessionState{Spec: v1alpha1.BGPSessionStateSpec{Node: node, Peer: peer, Speaker: v1alpha1.SpeakerAgent},
			Status: v1alpha1.BGPSessionStateStatus{BGPState: state, Updated: &metav1.Time{Time: updated}}}
	}
	got := Fresh([]*v1alpha1.BGPSessionState{
		obj("w2", "10.0.0.2", "established", now),
		obj("w1", "10.0.0.2", "active", now.Add(-time.Minute)),
		obj("w1", "10.0.0.1", "established", now.Add(-time.Minute)),
		obj("w3", "10.0.0.1", "established", now.Add(-AgentStale-time.Second)),
		obj("w4", "not-an-ip", "established", now),
		{Spec: v1alpha1.BGPSessionStateSpec{Node: "w5", Peer: "10.0.0.1"}},
	}, now)
	if len(got) != 2 || got[0].Node != "w1" || got[1].Node != "w2" || len(got[0].Peers) != 2 || got[0].Peers[0].Address.String() != "10.0.0.1" || !got[0].Up() {
		t.Errorf("Fresh = %+v", got)
	}
	// A replica is trusted for less long than an agent.
	replica := obj("cp1", "10.0.0.1", "established", now.Add(-ReplicaStale-time.Second))
	replica.Spec.Speaker = v1alpha1.SpeakerReplica
	if IsFresh(replica, now) || !IsFresh(obj("w1", "10.0.0.1", "established", now.Add(-ReplicaStale-time.Second)), now) {
		t.Error("staleness does not follow the speaker's kind")
	}
	if (Speaker{Peers: []Peer{{State: "active"}}}).Up() {
		t.Error("a speaker without an established session is up")
	}
}

func TestExplainErr(t *testing.T) {
	missing := apierrors.NewNotFound(schema.GroupResource{Group: "baremetal-ccm.io", Resource: "bgpsessionstates"}, "")
	missing.ErrStatus.Message = "the server could not find the requested resource"
	err := explainErr(missing)
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), CRD+" is not installed") {
		t.Errorf("missing CRD: %v", err)
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "baremetal-ccm.io", Resource: "bgpsessionstates"}, "x", errors.New("RBAC"))
	if err := explainErr(forbidden); !strings.Contains(err.Error(), "packaged RBAC") {
		t.Errorf("forbidden: %v", err)
	}
}

// A host that was a replica and now runs an agent replaces its objects (spec is
// immutable), and an object written without its owner gets it once the Node is read.
func TestPublisherReplacesAnotherSpeakersObject(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	was := &v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{Name: "w1.10.0.0.1", Labels: map[string]string{v1alpha1.LabelNode: "w1"}},
		Spec: v1alpha1.BGPSessionStateSpec{Node: "w1", Peer: "10.0.0.1", Speaker: v1alpha1.SpeakerReplica}}
	client := fake.NewSimpleClientset(was)
	nodeErr := errors.New("no Node yet")
	p := &Publisher{Client: client, Node: "w1", Speaker: v1alpha1.SpeakerAgent, Clock: func() time.Time { return now },
		Read: func() (Status, bool) {
			return Status{Peers: []Peer{{Address: netip.MustParseAddr("10.0.0.1"), State: "established"}}}, true
		},
		NodeUID: func(context.Context) (types.UID, error) { return "uid-w1", nodeErr }}
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	o, err := client.BaremetalCCMV1alpha1().BGPSessionStates().Get(ctx, "w1.10.0.0.1", metav1.GetOptions{})
	if err != nil || o.Spec.Speaker != v1alpha1.SpeakerAgent || len(o.OwnerReferences) != 0 {
		t.Fatalf("after the first sync: %+v, %v", o, err)
	}
	nodeErr = nil
	now = now.Add(Refresh)
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if o, _ = client.BaremetalCCMV1alpha1().BGPSessionStates().Get(ctx, "w1.10.0.0.1", metav1.GetOptions{}); len(o.OwnerReferences) != 1 || o.OwnerReferences[0].UID != "uid-w1" {
		t.Errorf("owner after the Node was read: %+v", o.OwnerReferences)
	}
}

// Several failures make one line (a log line stays one line) and still match.
func TestJoinErrsOneLine(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "baremetal-ccm.io", Resource: "bgpsessionstates"}, "a", errors.New("RBAC"))
	err := joinErrs([]error{fmt.Errorf("a: %w", forbidden), errors.New("b: refused")})
	if strings.Contains(err.Error(), "\n") || !apierrors.IsForbidden(errors.Unwrap(err.(joined)[0])) || !errors.Is(err, forbidden) {
		t.Errorf("joined: %q", err)
	}
	if joinErrs(nil) != nil {
		t.Error("no error joined is not nil")
	}
}
