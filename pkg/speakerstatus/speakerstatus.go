// Package speakerstatus is what a CCM replica says about its BGP speaker, on its own
// Node, so the leader can tell who announces a Service (the Service condition
// baremetal-ccm.io/Announced) and `baremetal-ccmctl explain` can show it: the
// annotation Annotation holds JSON with the speaker's sessions, rewritten when a
// session changes state and at least every Heartbeat (a replica that stopped
// writing is stale after Stale).
//
// Worker agents do not publish: their role cannot write Nodes (least privilege).
package speakerstatus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Annotation on a replica's Node.
const Annotation = "baremetal-ccm.io/bgp-speaker"

// Heartbeat is how often an unchanged status is rewritten; Stale how old a status
// may be before readers ignore it.
const (
	Heartbeat = time.Minute
	Stale     = 3 * time.Minute
)

// Status is one replica's speaker.
type Status struct {
	// Updated is when the replica wrote it.
	Updated time.Time `json:"updated"`
	// Paths is how many paths the speaker wants announced.
	Paths int    `json:"paths"`
	Peers []Peer `json:"peers"`
}

// Peer is one BGP session.
type Peer struct {
	Address string `json:"address"`
	// State is GoBGP's session state (established, active, ...).
	State string `json:"state"`
	// Ready: established and its first UPDATEs acknowledged.
	Ready bool `json:"ready,omitempty"`
	// BFD is the BFD session state (Up, Down, ...) when the peer has BFD.
	BFD string `json:"bfd,omitempty"`
	// LastError is the last failed connection attempt while not established.
	LastError string `json:"lastError,omitempty"`
	// BFDProblem says why BFD is configured but not up on an established session
	// (BFD then protects nothing).
	BFDProblem string `json:"bfdProblem,omitempty"`
}

// Up reports whether at least one session is established.
func (s Status) Up() bool {
	return slices.ContainsFunc(s.Peers, func(p Peer) bool { return p.State == "established" })
}

// equal compares everything but Updated.
func (s Status) equal(o Status) bool {
	return s.Paths == o.Paths && slices.Equal(s.Peers, o.Peers)
}

// FromNode returns the status a Node carries, whether it has a fresh one (not
// older than Stale at now), and an error for a malformed annotation.
func FromNode(n *v1.Node, now time.Time) (Status, bool, error) {
	raw, ok := n.Annotations[Annotation]
	if !ok {
		return Status{}, false, nil
	}
	var s Status
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return Status{}, false, fmt.Errorf("node %s: annotation %s: %w", n.Name, Annotation, err)
	}
	return s, now.Sub(s.Updated) <= Stale, nil
}

// Publisher writes this replica's status on its Node.
type Publisher struct {
	Client kubernetes.Interface
	Node   string
	// Read returns the current status (Updated is set by the Publisher).
	Read func() Status
	// Interval between checks. Default 2s.
	Interval time.Duration
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time
}

// Run publishes until ctx ends: when the status changed, or Heartbeat after the last
// write. Errors are logged and retried at the next check.
func (p *Publisher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("speaker-status")
	interval, clock := p.Interval, p.Clock
	if interval <= 0 {
		interval = 2 * time.Second
	}
	if clock == nil {
		clock = time.Now
	}
	var last Status
	var wrote time.Time
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		cur := p.Read()
		if now := clock(); !cur.equal(last) || now.Sub(wrote) >= Heartbeat {
			cur.Updated = now.UTC().Truncate(time.Second)
			if err := p.write(ctx, cur); err != nil {
				logger.V(2).Info("Publishing the speaker status on the Node failed; retrying", "node", p.Node, "err", err)
			} else {
				last, wrote = cur, now
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (p *Publisher) write(ctx context.Context, s Status) error {
	raw, err := json.Marshal(s)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{Annotation: string(raw)}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = p.Client.CoreV1().Nodes().Patch(ctx, p.Node, types.MergePatchType, patch, metav1PatchOptions)
	return err
}

var metav1PatchOptions = metav1.PatchOptions{FieldManager: "baremetal-ccm-speaker-status"}
