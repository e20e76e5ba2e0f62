package inventory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// GuardState is the deletion guard's memory: which hosts were accepted as gone and
// when, the held change, the power-off budget's grants, and which acknowledgements were
// used. The Store loads it before every decision and saves it before acting on one, so
// a restart or a leader change forgets nothing.
type GuardState struct {
	// Gone are the hosts whose removal (absent or decommissioned) was accepted, within
	// the limits or by an acknowledgement, by host name. Only these are reported gone.
	Gone map[string]Removal `json:"gone,omitempty"`
	// Removals are the removals accepted within the limits, oldest first, kept for the
	// sliding window.
	Removals []Removal `json:"removals,omitempty"`
	// Trip is the held inventory change, nil when none.
	Trip *Trip `json:"trip,omitempty"`
	// Power are the hosts granted a power-based action (deleteAfter, out-of-service)
	// within the power window, by host name.
	Power map[string]Removal `json:"power,omitempty"`
	// PowerTrip lists the hosts waiting for an acknowledgement because the power-off
	// budget is used up, nil when none wait.
	PowerTrip *Trip `json:"powerTrip,omitempty"`
	// UsedAcks are acknowledgements already applied, newest last; they never apply
	// again.
	UsedAcks []string `json:"usedAcks,omitempty"`
	// Storm is the remediation storm holding every power-based action, nil when none
	// (see Store.ObserveHealth).
	Storm *Storm `json:"storm,omitempty"`
}

// Removal is one accepted removal or power-based grant.
type Removal struct {
	Host string    `json:"host"`
	At   time.Time `json:"at"`
	// By is "limits" (within the configured budget) or "acknowledgement <id>".
	By string `json:"by"`
	// ControlPlane marks a power-based grant to a control-plane Node's host: at most
	// one such host holds a grant within the power window.
	ControlPlane bool `json:"controlPlane,omitempty"`
}

// byLimits marks a removal or grant counted against the window's budget.
const byLimits = "limits"

// Trip describes a held change: an inventory that would report too many hosts gone,
// or power-based actions beyond the budget.
type Trip struct {
	// ID names exactly this held change (its kind, hosts and start); acknowledging
	// it accepts these hosts and nothing else, once.
	ID string `json:"id"`
	// Digest identifies the latest held inventory (inventory trips only).
	Digest string `json:"digest,omitempty"`
	// Hosts are the hosts held back, sorted.
	Hosts []string `json:"hosts"`
	// Known is the number of hosts the comparison was made against (inventory trips).
	Known int       `json:"known,omitempty"`
	Since time.Time `json:"since"`
}

// maxUsedAcks bounds the used acknowledgements kept (IDs are unique per trip anyway).
const maxUsedAcks = 64

func newTrip(kind string, hosts []string, since time.Time) *Trip {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%d\n", kind, since.UnixNano())
	for _, n := range hosts {
		fmt.Fprintln(h, n)
	}
	return &Trip{ID: kind + "-" + hex.EncodeToString(h.Sum(nil))[:12], Hosts: hosts, Since: since}
}

func (g *GuardState) clone() *GuardState {
	c := &GuardState{
		Gone: maps.Clone(g.Gone), Removals: slices.Clone(g.Removals), Power: maps.Clone(g.Power),
		UsedAcks: slices.Clone(g.UsedAcks),
	}
	if g.Trip != nil {
		t := *g.Trip
		c.Trip = &t
	}
	if g.PowerTrip != nil {
		t := *g.PowerTrip
		c.PowerTrip = &t
	}
	if g.Storm != nil {
		st := *g.Storm
		if st.Ended != nil {
			e := *st.Ended
			st.Ended = &e
		}
		c.Storm = &st
	}
	if c.Gone == nil {
		c.Gone = map[string]Removal{}
	}
	if c.Power == nil {
		c.Power = map[string]Removal{}
	}
	return c
}

func (g *GuardState) used(id string) bool { return slices.Contains(g.UsedAcks, id) }

func (g *GuardState) use(id string) {
	g.UsedAcks = append(g.UsedAcks, id)
	if n := len(g.UsedAcks); n > maxUsedAcks {
		g.UsedAcks = slices.Clone(g.UsedAcks[n-maxUsedAcks:])
	}
}

// withinWindow counts the removals accepted within limits since cutoff.
func withinWindow(rs []Removal, cutoff time.Time) int {
	n := 0
	for _, r := range rs {
		if r.By == byLimits && r.At.After(cutoff) {
			n++
		}
	}
	return n
}

func equalState(a, b *GuardState) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// StateStore keeps the GuardState and reads acknowledgements written next to it.
// Implementations honor ctx's deadline.
type StateStore interface {
	// Load returns the saved state (empty when none was saved yet) and the
	// acknowledgements found in the store.
	Load(ctx context.Context) (*GuardState, []string, error)
	// Save replaces the state. It fails rather than overwrite a state saved by another
	// writer since the last Load.
	Save(ctx context.Context, st *GuardState) error
	// String names the store for messages.
	String() string
}

// ErrStateConflict: another writer saved the state since it was loaded.
var ErrStateConflict = errors.New("deletion guard state changed by another writer")

// MemoryState is a StateStore in memory, for a process without a cluster client and
// for tests. It is safe for concurrent use.
type MemoryState struct {
	mu   sync.Mutex
	data []byte
	acks []string
}

// Load implements StateStore.
func (m *MemoryState) Load(context.Context) (*GuardState, []string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := &GuardState{}
	if m.data != nil {
		if err := json.Unmarshal(m.data, st); err != nil {
			return nil, nil, err
		}
	}
	return st, slices.Clone(m.acks), nil
}

// Save implements StateStore.
func (m *MemoryState) Save(_ context.Context, st *GuardState) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data = data
	return nil
}

// Acknowledge adds an acknowledgement, as the ConfigMap's annotation would.
func (m *MemoryState) Acknowledge(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acks = append(m.acks, id)
}

func (m *MemoryState) String() string { return "memory" }

// ConfigMap names and keys of the persisted guard state.
const (
	// StateConfigMapName is the ConfigMap that holds the guard state (the provider
	// keeps it in namespace baremetal-ccm).
	StateConfigMapName = "baremetal-ccm-deletion-guard"
	// StateKey is the data key holding the state as JSON.
	StateKey = "state.json"
	// AnnotationAcknowledge on that ConfigMap holds acknowledgements (IDs separated by
	// commas or spaces), so an operator can acknowledge once for every replica:
	// kubectl -n baremetal-ccm annotate configmap baremetal-ccm-deletion-guard
	// baremetal-ccm.io/acknowledge=<id> --overwrite
	AnnotationAcknowledge = "baremetal-ccm.io/acknowledge"
)

// ConfigMapState keeps the GuardState in a ConfigMap. Save uses the resourceVersion
// of the last Load, so a replica that was not the writer (a paused former leader)
// cannot overwrite what the current one saved.
type ConfigMapState struct {
	Client    kubernetes.Interface
	Namespace string

	mu sync.Mutex
	rv string // resourceVersion of the last Load ("" : the ConfigMap did not exist)
}

// Load implements StateStore.
func (c *ConfigMapState) Load(ctx context.Context) (*GuardState, []string, error) {
	cm, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Get(ctx, StateConfigMapName, metav1.GetOptions{})
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case apierrors.IsNotFound(err):
		c.rv = ""
		return &GuardState{}, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading ConfigMap %s: %w", c, err)
	}
	c.rv = cm.ResourceVersion
	st := &GuardState{}
	if data := cm.Data[StateKey]; data != "" {
		if err := json.Unmarshal([]byte(data), st); err != nil {
			return nil, nil, fmt.Errorf("ConfigMap %s key %s is not a valid guard state (%w); it is written by the CCM only: restore it or delete the key to start over (the guard then compares the inventory with the Nodes again)", c, StateKey, err)
		}
	}
	return st, splitAcks(cm.Annotations[AnnotationAcknowledge]), nil
}

// Save implements StateStore.
func (c *ConfigMapState) Save(ctx context.Context, st *GuardState) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cms := c.Client.CoreV1().ConfigMaps(c.Namespace)
	var cm *v1.ConfigMap
	if c.rv == "" {
		cm, err = cms.Create(ctx, &v1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: StateConfigMapName, Namespace: c.Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "baremetal-ccm"}},
			Data: map[string]string{StateKey: string(data)},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%w: ConfigMap %s was created meanwhile", ErrStateConflict, c)
		}
	} else {
		cm, err = cms.Get(ctx, StateConfigMapName, metav1.GetOptions{ResourceVersion: c.rv})
		if err == nil {
			cm = cm.DeepCopy()
			cm.ResourceVersion = c.rv
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[StateKey] = string(data)
			cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: %w", ErrStateConflict, err)
		}
	}
	if err != nil {
		return fmt.Errorf("saving ConfigMap %s: %w", c, err)
	}
	c.rv = cm.ResourceVersion
	return nil
}

func (c *ConfigMapState) String() string { return c.Namespace + "/" + StateConfigMapName }

func splitAcks(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
}
