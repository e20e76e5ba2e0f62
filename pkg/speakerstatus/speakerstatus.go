// Package speakerstatus publishes what a BGP speaker says about its sessions, one
// BGPSessionState object (baremetal-ccm.io/v1alpha1) per node and peer, and reads
// them back: the leader's Announced condition and `baremetal-ccmctl explain` use
// them. CCM replicas and worker agents publish alike, each for its own node only
// (for agents the API server enforces it: ValidatingAdmissionPolicy
// baremetal-ccm-agent-own-node). An object is rewritten when its session changes and
// at least every Heartbeat; one not rewritten for Stale is ignored by readers (its
// speaker stopped). An object whose peer left the configuration is deleted; the
// objects are owned by their Node, so they go with it.
package speakerstatus

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
)

// Annotation is where replicas published their speaker before BGPSessionState
// objects; nothing writes it any more (the agent still ignores its changes).
const Annotation = "baremetal-ccm.io/bgp-speaker"

// CRD is the name of the CustomResourceDefinition of the objects.
const CRD = "bgpsessionstates.baremetal-ccm.io"

// Write policy. A change of a session's BGP state, readiness or BFD is written within
// the publisher's Interval; its counters and last error (which move with every
// Service and every connection attempt) at most every Refresh; an unchanged object
// every Heartbeat of its kind. Readers ignore an object older than its kind's Stale.
// At 5,000 agents with two peers each, that is about 17 writes a second when
// nothing changes and at most 167 while Services churn, and a few replicas that
// readers trust for no longer than 3 minutes.
const (
	Refresh = time.Minute
	// ReplicaHeartbeat and ReplicaStale are a CCM replica's: few, and the Announced
	// condition counts on them.
	ReplicaHeartbeat = time.Minute
	ReplicaStale     = 3 * time.Minute
	// AgentHeartbeat and AgentStale are a worker agent's: many, and what they
	// announce also hangs on their Node being Ready (the kubelet's own heartbeat).
	AgentHeartbeat = 10 * time.Minute
	AgentStale     = 30 * time.Minute
)

// StoppedState is the BGP state a speaker writes for its sessions when it stops.
const StoppedState = "stopped"

// heartbeat and stale return the intervals of a speaker kind.
func heartbeat(kind string) time.Duration {
	if kind == v1alpha1.SpeakerAgent {
		return AgentHeartbeat
	}
	return ReplicaHeartbeat
}

func stale(kind string) time.Duration {
	if kind == v1alpha1.SpeakerAgent {
		return AgentStale
	}
	return ReplicaStale
}

// Status is a speaker's sessions, as its owner reads them.
type Status struct {
	Peers []Peer
}

// Peer is one BGP session.
type Peer struct {
	Address netip.Addr
	// State is the BGP state (established, active, ...).
	State string
	// Ready: established and its first UPDATEs sent.
	Ready bool
	// BFD is the BFD session state (Up, Down, ...) when the peer has BFD.
	BFD string
	// LastError is the last failed connection attempt while not established.
	LastError string
	// BFDProblem says why BFD is configured but not up on an established session.
	BFDProblem string
	// PrefixesSent counts the paths announced to the peer.
	PrefixesSent uint64
	// UpSince is when the session was established (zero unless established).
	UpSince time.Time
}

// ObjectName is the name of node's BGPSessionState for peer: <node>.<peer>, an IPv6
// peer fully expanded with '-' for ':' (names cannot hold ':').
func ObjectName(node string, peer netip.Addr) string {
	if peer.Is4() || peer.Is4In6() {
		return node + "." + peer.Unmap().String()
	}
	return node + "." + strings.ReplaceAll(peer.StringExpanded(), ":", "-")
}

// Speaker is one node's speaker as its objects describe it.
type Speaker struct {
	Node string
	// Kind is v1alpha1.SpeakerReplica or v1alpha1.SpeakerAgent.
	Kind  string
	Peers []Peer
}

// Up reports whether at least one session is established.
func (s Speaker) Up() bool {
	return slices.ContainsFunc(s.Peers, func(p Peer) bool { return p.State == "established" })
}

// Fresh groups the fresh objects (IsFresh) by node, sorted by node name
// and peer address. Objects with an unreadable peer are skipped.
func Fresh(objs []*v1alpha1.BGPSessionState, now time.Time) []Speaker {
	byNode := map[string]*Speaker{}
	for _, o := range objs {
		if !IsFresh(o, now) {
			continue
		}
		p, err := PeerOf(o)
		if err != nil {
			continue
		}
		s := byNode[o.Spec.Node]
		if s == nil {
			s = &Speaker{Node: o.Spec.Node, Kind: o.Spec.Speaker}
			byNode[o.Spec.Node] = s
		}
		s.Peers = append(s.Peers, p)
	}
	out := make([]Speaker, 0, len(byNode))
	for _, s := range byNode {
		slices.SortFunc(s.Peers, func(a, b Peer) int { return a.Address.Compare(b.Address) })
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// IsFresh reports whether o was updated within its speaker kind's stale interval of
// now.
func IsFresh(o *v1alpha1.BGPSessionState, now time.Time) bool {
	return o.Status.Updated != nil && now.Sub(o.Status.Updated.Time) <= stale(o.Spec.Speaker)
}

// PeerOf reads the session an object describes.
func PeerOf(o *v1alpha1.BGPSessionState) (Peer, error) {
	addr, err := netip.ParseAddr(o.Spec.Peer)
	if err != nil {
		return Peer{}, fmt.Errorf("BGPSessionState %s: spec.peer: %w", o.Name, err)
	}
	s := o.Status
	p := Peer{Address: addr, State: s.BGPState, Ready: s.Ready, BFD: s.BFDState, LastError: s.LastError, BFDProblem: s.BFDProblem, PrefixesSent: uint64(max(s.PrefixesSent, 0))}
	if s.BGPState == "established" && s.Since != nil {
		p.UpSince = s.Since.Time
	}
	return p, nil
}

// Publisher writes one speaker's BGPSessionState objects.
type Publisher struct {
	Client versioned.Interface
	// Node is the name of this host's Node.
	Node string
	// Speaker is v1alpha1.SpeakerReplica or v1alpha1.SpeakerAgent.
	Speaker string
	// Read returns the current sessions; ok is false while the speaker has not
	// started (nothing is written then).
	Read func() (st Status, ok bool)
	// NodeUID, when set, returns the Node's UID: new objects are owned by the Node,
	// so the garbage collector deletes them with it.
	NodeUID func(ctx context.Context) (types.UID, error)
	// Interval between checks. Default 2s.
	Interval time.Duration
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time

	// known are this node's objects as last read or written, by name; listed is
	// whether they were listed since the last conflict.
	known      map[string]*v1alpha1.BGPSessionState
	listed     bool
	owner      []metav1.OwnerReference
	ownerTried time.Time
	lastErr    string
}

// fieldManager names the publisher in the objects' managed fields.
const fieldManager = "baremetal-ccm-speaker-status"

// Run publishes until ctx ends, then marks this node's sessions stopped. Errors are
// logged (the first of a kind at the default level, with what to do) and retried at
// the next check.
func (p *Publisher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("speaker-status")
	ctx = klog.NewContext(ctx, logger)
	if p.Interval <= 0 {
		p.Interval = 2 * time.Second
	}
	if p.Clock == nil {
		p.Clock = time.Now
	}
	tick := time.NewTicker(p.Interval)
	defer tick.Stop()
	for {
		if err := p.Sync(ctx); err != nil {
			if msg := err.Error(); msg != p.lastErr {
				p.lastErr = msg
				logger.Info("Warning: publishing this node's BGP session states failed; retrying", "node", p.Node, "err", err)
			} else {
				logger.V(2).Info("Publishing this node's BGP session states failed; retrying", "node", p.Node, "err", err)
			}
		} else {
			p.lastErr = ""
		}
		select {
		case <-ctx.Done():
			p.stop(klog.NewContext(context.Background(), logger))
			return
		case <-tick.C:
		}
	}
}

// stopTimeout bounds the final write when the speaker stops.
const stopTimeout = 2 * time.Second

// stop writes this node's sessions as stopped (best effort, within stopTimeout), so
// readers stop counting them at once rather than when they turn stale.
func (p *Publisher) stop(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	now := p.Clock().UTC().Truncate(time.Second)
	api := p.Client.BaremetalCCMV1alpha1().BGPSessionStates()
	if !p.listed {
		list, err := api.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{v1alpha1.LabelNode: p.Node}.String()})
		if err != nil {
			return
		}
		p.known = map[string]*v1alpha1.BGPSessionState{}
		for i := range list.Items {
			if list.Items[i].Spec.Node == p.Node {
				p.known[list.Items[i].Name] = &list.Items[i]
			}
		}
	}
	for _, old := range p.known {
		if old.Status.BGPState == StoppedState {
			continue
		}
		o := old.DeepCopy()
		o.Status = v1alpha1.BGPSessionStateStatus{BGPState: StoppedState, Since: &metav1.Time{Time: now}, Updated: &metav1.Time{Time: now}}
		if _, err := api.Update(ctx, o, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			klog.FromContext(ctx).V(2).Info("Marking a BGP session stopped failed", "name", o.Name, "err", err)
		}
	}
}

// Sync makes this node's objects say what Read returns: it writes those that
// changed or are due for a heartbeat and deletes those of peers no longer there.
func (p *Publisher) Sync(ctx context.Context) error {
	st, ok := p.Read()
	if !ok {
		return nil
	}
	if p.Clock == nil {
		p.Clock = time.Now
	}
	api := p.Client.BaremetalCCMV1alpha1().BGPSessionStates()
	if !p.listed {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		list, err := api.List(lctx, metav1.ListOptions{LabelSelector: labels.Set{v1alpha1.LabelNode: p.Node}.String()})
		cancel()
		if err != nil {
			return explainErr(err)
		}
		p.known = make(map[string]*v1alpha1.BGPSessionState, len(list.Items))
		for i := range list.Items {
			if list.Items[i].Spec.Node == p.Node {
				p.known[list.Items[i].Name] = &list.Items[i]
			}
		}
		p.listed = true
		p.owner = nil
		p.ownerTried = time.Time{}
	}
	now := p.Clock().UTC().Truncate(time.Second)
	if p.owner == nil && p.NodeUID != nil && now.Sub(p.ownerTried) >= Refresh {
		// Read again after a conflict (a Node deleted and registered again has another
		// UID, and the old one's objects are gone with it), and while it failed.
		p.ownerTried = now
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		uid, err := p.NodeUID(uctx)
		cancel()
		if err == nil {
			p.owner = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: p.Node, UID: uid}}
		}
	}
	want := map[string]bool{}
	var errs []error
	for _, peer := range st.Peers {
		name := ObjectName(p.Node, peer.Address)
		want[name] = true
		old := p.known[name]
		obj := p.object(name, peer, old, now)
		if old != nil && old.Spec != obj.Spec {
			// Another kind of speaker wrote it (this host was a replica, now an agent):
			// spec is immutable, so it is replaced.
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := api.Delete(dctx, name, metav1.DeleteOptions{})
			cancel()
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("replacing %s (spec %+v, now %+v): %w", name, old.Spec, obj.Spec, explainErr(err)))
				continue
			}
			delete(p.known, name)
			old = nil
		}
		if old != nil && len(old.OwnerReferences) == 0 && len(p.owner) > 0 {
			old = old.DeepCopy()
			old.OwnerReferences = p.owner // written with the next update, due now
			old.Status.Updated = nil
		}
		if old != nil && !p.due(old.Status, obj.Status, now) {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var got *v1alpha1.BGPSessionState
		var err error
		if old != nil {
			obj.ResourceVersion = old.ResourceVersion
			obj.OwnerReferences = old.OwnerReferences
			got, err = api.Update(wctx, obj, metav1.UpdateOptions{FieldManager: fieldManager})
		} else {
			got, err = api.Create(wctx, obj, metav1.CreateOptions{FieldManager: fieldManager})
		}
		cancel()
		if err != nil {
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || (old != nil && apierrors.IsNotFound(err)) {
				p.listed = false // re-read this node's objects at the next check
			}
			errs = append(errs, fmt.Errorf("%s: %w", name, explainErr(err)))
			continue
		}
		p.known[name] = got
	}
	for name := range p.known {
		if want[name] {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := api.Delete(dctx, name, metav1.DeleteOptions{})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s (its peer left the configuration): %w", name, explainErr(err)))
			continue
		}
		delete(p.known, name)
	}
	return joinErrs(errs)
}

// joined is errors.Join on one line (a log line stays one line).
type joined []error

func (j joined) Error() string {
	msgs := make([]string, len(j))
	for i, e := range j {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

func (j joined) Unwrap() []error { return j }

func joinErrs(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return joined(errs)
}

// object is the object for peer; since carries over from old while the state holds.
func (p *Publisher) object(name string, peer Peer, old *v1alpha1.BGPSessionState, now time.Time) *v1alpha1.BGPSessionState {
	since := metav1.NewTime(now)
	switch {
	case peer.State == "established" && !peer.UpSince.IsZero():
		since = metav1.NewTime(peer.UpSince.UTC().Truncate(time.Second))
	case old != nil && old.Status.BGPState == peer.State && old.Status.Since != nil:
		since = *old.Status.Since
	}
	prefixes := int32(min(peer.PrefixesSent, 1<<31-1))
	return &v1alpha1.BGPSessionState{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNode: p.Node}, OwnerReferences: p.owner},
		Spec:       v1alpha1.BGPSessionStateSpec{Node: p.Node, Peer: peer.Address.Unmap().String(), Speaker: p.Speaker},
		Status: v1alpha1.BGPSessionStateStatus{
			BGPState: peer.State, Ready: peer.Ready, BFDState: peer.BFD, BFDProblem: peer.BFDProblem,
			PrefixesSent: prefixes, LastError: peer.LastError, Since: &since, Updated: &metav1.Time{Time: now},
		},
	}
}

// due reports whether the object whose status is old must be rewritten with cur (see
// the write policy at Refresh).
func (p *Publisher) due(old, cur v1alpha1.BGPSessionStateStatus, now time.Time) bool {
	if old.Updated == nil {
		return true
	}
	if old.BGPState != cur.BGPState || old.Ready != cur.Ready || old.BFDState != cur.BFDState || old.BFDProblem != cur.BFDProblem ||
		(old.Since == nil) != (cur.Since == nil) || old.Since != nil && !old.Since.Equal(cur.Since) {
		return true
	}
	age := now.Sub(old.Updated.Time)
	if (old.PrefixesSent != cur.PrefixesSent || old.LastError != cur.LastError) && age >= Refresh {
		return true
	}
	return age >= heartbeat(p.Speaker)
}

// explainErr adds what to do to the errors an operator can fix.
func explainErr(err error) error {
	switch {
	case apierrors.IsNotFound(err) && strings.Contains(err.Error(), "the server could not find the requested resource"):
		return fmt.Errorf("%w: the CustomResourceDefinition %s is not installed (baremetal-ccmctl manifests crds | kubectl apply -f -, or packaging/kubernetes/crds.yaml; the Helm chart installs it)", err, CRD)
	case apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
		return fmt.Errorf("%w: this identity may not write bgpsessionstates.baremetal-ccm.io (apply the packaged RBAC: baremetal-ccmctl manifests rbac / agent-rbac)", err)
	}
	return err
}

// NewClient returns a client of the baremetal-ccm.io objects from cfg, speaking JSON
// whatever cfg asks (custom resources have no protobuf encoding; the CCM's client
// configuration prefers protobuf).
func NewClient(cfg *rest.Config) (versioned.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.ContentType = "application/json"
	c.AcceptContentTypes = "application/json"
	return versioned.NewForConfig(c)
}
