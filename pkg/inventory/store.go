package inventory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Store errors, wrapped by what View, GoneAllowed and TakePowerBudget return.
var (
	// ErrNotLoaded: no inventory has been loaded successfully yet.
	ErrNotLoaded = errors.New("inventory not loaded yet")
	// ErrReloadFailing: the latest reload failed; the last good inventory is served for
	// metadata but no host is reported gone until a reload succeeds.
	ErrReloadFailing = errors.New("inventory reload failing")
	// ErrDeletionGuard: the deletion guard holds a change back, has not compared the
	// inventory with the cluster yet, or cannot reach its state; no host is reported
	// gone until that is resolved.
	ErrDeletionGuard = errors.New("inventory deletion guard")
	// ErrNotAccepted: the host is not in the inventory, but its removal was never
	// accepted by the guard (within limits or acknowledged).
	ErrNotAccepted = errors.New("host removal not accepted by the deletion guard")
	// ErrPowerBudget: the power-off budget over its window is used up (or another
	// control-plane host holds the window's grant); the action waits for an
	// acknowledgement.
	ErrPowerBudget = errors.New("power-off budget used up")
	// ErrMaintenance: the host is in maintenance in the accepted or the latest
	// inventory, so no power-based action applies to it.
	ErrMaintenance = errors.New("host in maintenance")
	// ErrNowWaiting is wrapped, beside ErrPowerBudget, by the first refusal of a host:
	// callers record their event then, not on every retry.
	ErrNowWaiting = errors.New("now waiting for an acknowledgement")
)

// Event reasons recorded by the Store.
const (
	ReasonLoaded            = "InventoryLoaded"
	ReasonReloadFailed      = "InventoryReloadFailed"
	ReasonGuardTripped      = "DeletionGuardTripped"
	ReasonGuardCleared      = "DeletionGuardCleared"
	ReasonSettling          = "InventoryShrinkSettling"
	ReasonPowerBudget       = "PowerOffBudgetExceeded"
	ReasonPowerBudgetAcked  = "PowerOffBudgetAcknowledged"
	ReasonGuardStateFailing = "DeletionGuardStateUnavailable"
)

// Trip kinds (the prefix of a Trip's ID).
const (
	tripInventory = "inventory"
	tripPower     = "power"
)

// EventSink records events about the inventory. Implementations must not block.
type EventSink interface {
	Eventf(eventType, reason, messageFmt string, args ...any)
}

// NodeHostsFunc returns the host names that existing Nodes reference through their
// baremetal:// providerIDs; ok is false while that is not known yet (informers not
// synced).
type NodeHostsFunc func() (hosts []string, ok bool)

// Guard configures the deletion guard and the power-off budget.
type Guard struct {
	// MaxHosts and MaxPercent: more hosts reported gone within Window than MaxHosts,
	// or than MaxPercent of the hosts known at the window's start, trips the guard.
	MaxHosts   int
	MaxPercent int
	// Window is the sliding window of MaxHosts and MaxPercent. Zero: one hour.
	Window time.Duration
	// SettleTime: a document that would report hosts gone must be seen unchanged this
	// long, and by at least two fetches, before any of them is reported gone.
	SettleTime time.Duration
	// AckFile is read on every reload; it may hold trip IDs (inventory or power) to
	// acknowledge. The state store's annotation is read as well.
	AckFile string
	// PowerMaxHosts hosts may be granted a power-based action within PowerWindow.
	// Zero: every such action needs an acknowledgement.
	PowerMaxHosts int
	PowerWindow   time.Duration
	// MaxUnhealthy, when set, is how many of the matched Nodes (a count, or a percent
	// such as "30%", rounded down) may be unhealthy before a remediation storm holds
	// every power-based action (see ObserveHealth); StormCooldown is how long they
	// stay held after the count dropped to the limit or below.
	MaxUnhealthy  *intstr.IntOrString
	StormCooldown time.Duration
	// Parse parses a fetched document; nil is Parse.
	Parse func([]byte) (*View, error)
}

// DefaultWindow is Guard.Window's and Guard.PowerWindow's default.
const DefaultWindow = time.Hour

// stateTimeout bounds one load or save of the guard state.
const stateTimeout = 10 * time.Second

// Store keeps the current inventory View and the deletion guard. It reloads from its
// Source, keeps the last good View when a reload fails or a change is held back, and
// says why through logs, events and metrics.
//
// Lifetimes: the Store, its reload loop (Run) and the View it serves live for the
// process, on every replica (the agent reads its host's rack peers from it, the
// leader's controllers its hosts). The deletion guard's decisions and the power-off
// budget's grants belong to a leadership term (Lead): only within one does the Store
// read or write its state, accept a document, report a host gone or grant a
// power-based action; the term's end cancels its state calls and forgets what it
// decided, and the next term starts like a new leader (from the saved state).
//
// What serves lookups (View): the first valid document; then a document that takes no
// protection away from the one in use (it only adds hosts, or changes what no safety
// rule reads, such as labels) at once; a document the guard accepts in a term; and, on
// a replica that does not lead, a document that removes no host once it has settled.
// A document that fails to fetch or parse, or that takes hosts away without the
// guard's acceptance, never replaces the one in use.
//
// Guarantees (a property test drives random inventories, restarts and
// acknowledgements through them):
//   - A host is reported gone (GoneAllowed is nil) only when its removal was accepted:
//     within MaxHosts/MaxPercent over the sliding Window, counted against every host
//     the accepted inventory or a Node references, or by an acknowledgement of a trip
//     listing it. Acceptances and the window live in the StateStore, loaded before and
//     saved before any decision, so a restart or a leader change forgets nothing.
//   - A document that would report hosts gone is used only after it was seen unchanged
//     for SettleTime and by two fetches (a file read mid-write is never acted on).
//   - A trip clears only by its acknowledgement (once: a used ID never applies again)
//     or by an inventory that holds its hosts again; editing the document otherwise
//     (a comment) keeps it. While a trip stands no host is reported gone.
//   - Nothing is reported gone while the latest reload failed, before the inventory
//     was compared with the Nodes, while the state store cannot be read or written, or
//     outside a leadership term; no state is read or saved outside a term, nor saved
//     when the term's fence refuses; every grant reads the saved state first.
//
// View and GoneAllowed never wait for the Source or the StateStore.
type Store struct {
	src    Source
	guard  Guard
	events EventSink
	clock  clock.PassiveClock

	view atomic.Pointer[View]
	// lead is the current leadership term, nil outside one (see Lead).
	lead atomic.Pointer[term]

	reloadMu sync.Mutex // serializes reloads; held across Fetch
	// mu guards the fields below. It is held across StateStore calls (bounded by
	// stateTimeout), never across a Fetch.
	mu           sync.Mutex
	loadErr      error // of the latest reload
	docErr       error // of the latest document fetched (an unchanged source repeats it)
	lastEvErr    string
	accepted     *View     // the latest document the guard accepted; nil before one is
	latest       *View     // the latest valid document fetched
	latestSeen   time.Time // when latest's digest was first fetched
	latestPolls  int       // fetches that returned latest's digest
	settling     string    // digest whose settling was announced
	powerEventID string    // the power trip whose event was recorded last
	gs           *GuardState
	stateErr     error
	status       atomic.Pointer[status]
}

type status struct {
	loadErr error
	// why is non-empty while nothing may be reported gone for a reason of the guard
	// (not compared with the Nodes yet, state unavailable).
	why       string
	trip      *Trip
	gone      map[string]Removal
	powerTrip *Trip
	storm     *Storm
}

// NewStore returns a Store that has loaded nothing yet and decides nothing until Lead;
// call Reload or Run.
func NewStore(src Source, guard Guard, events EventSink, clk clock.PassiveClock) *Store {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if guard.Window <= 0 {
		guard.Window = DefaultWindow
	}
	if guard.PowerWindow <= 0 {
		guard.PowerWindow = DefaultWindow
	}
	if guard.Parse == nil {
		guard.Parse = Parse
	}
	s := &Store{src: src, guard: guard, events: events, clock: clk}
	s.status.Store(&status{why: "the inventory has not been compared with the cluster's Nodes yet"})
	registerMetrics()
	return s
}

// Source returns the Store's source.
func (s *Store) Source() Source { return s.src }

// View returns the inventory that serves lookups (see Store: the last good one, or at a
// start the first one that loaded). It wraps ErrNotLoaded when none has loaded.
func (s *Store) View() (*View, error) {
	if v := s.view.Load(); v != nil {
		return v, nil
	}
	st := s.status.Load()
	if st.loadErr != nil {
		return nil, fmt.Errorf("%w from %s: %w", ErrNotLoaded, s.src, st.loadErr)
	}
	return nil, fmt.Errorf("%w from %s", ErrNotLoaded, s.src)
}

// GoneAllowed returns nil when host may be reported gone: its removal (absent from or
// decommissioned in the inventory) was accepted by the guard, the latest reload
// succeeded, and no change is held back. Otherwise it returns an error wrapping
// ErrNotLoaded, ErrReloadFailing, ErrDeletionGuard or ErrNotAccepted that says what
// to do.
func (s *Store) GoneAllowed(host string) error {
	if err := s.Ready(); err != nil {
		return err
	}
	st := s.status.Load()
	if _, ok := st.gone[host]; !ok {
		return fmt.Errorf("%w: host %q is not in inventory %s, but the guard has not accepted its removal yet (it is compared at the next reload, within %s)",
			ErrNotAccepted, host, s.viewDigest(), s.src.Interval())
	}
	return nil
}

// Ready returns nil when the Store may back a destructive decision at all: it leads a
// term (Lead), an inventory loaded, the latest reload succeeded, the guard compared it
// with the cluster and can read and write its state, and no inventory change is held
// back.
// Otherwise its error wraps ErrNotLoaded, ErrReloadFailing or ErrDeletionGuard and
// says what to do.
func (s *Store) Ready() error {
	if _, err := s.View(); err != nil {
		return err
	}
	st := s.status.Load()
	if st.loadErr != nil {
		return fmt.Errorf("%w: %w; no Node is reported gone until %s loads again", ErrReloadFailing, st.loadErr, s.src)
	}
	if !s.Leading() { // at once when the term's context ends, before its end is published
		return fmt.Errorf("%w: %w; no Node is reported gone here", ErrDeletionGuard, errNotLeading)
	}
	if st.why != "" {
		return fmt.Errorf("%w: %s; no Node is reported gone until it is", ErrDeletionGuard, st.why)
	}
	if t := st.trip; t != nil {
		return fmt.Errorf("%w tripped: inventory %s would report %d of %d known hosts gone (%s); %s",
			ErrDeletionGuard, t.Digest, len(t.Hosts), t.Known, summarize(t.Hosts, 5), s.ackHint(t))
	}
	return nil
}

// Trip returns the held inventory change, or nil.
func (s *Store) Trip() *Trip { return s.status.Load().trip }

// PowerTrip returns the hosts waiting for the power-off budget, or nil.
func (s *Store) PowerTrip() *Trip { return s.status.Load().powerTrip }

// Run reloads now and then every Source interval until ctx is done.
func (s *Store) Run(ctx context.Context) {
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		_ = s.Reload(ctx)
	}, s.src.Interval(), 0.1, true)
}

// Reload fetches the document once, applies the acknowledgements found, and lets the
// guard decide on the latest document. It returns the fetch or parse error (the
// previous View stays in use); a held change is not an error.
func (s *Store) Reload(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("source", s.src.String())
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()

	start := s.clock.Now()
	data, unchanged, err := s.src.Fetch(ctx)
	fetched := err == nil && !unchanged
	var cand *View
	if fetched {
		cand, err = s.guard.Parse(data) // outside s.mu: parsing a large document takes a while
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.publish()
	now := s.clock.Now()
	switch {
	case fetched:
		s.docErr = err
		if err != nil {
			// The source changed: whatever it serves next has to settle anew, even
			// the document it served before (a shrunk document, then a half-written
			// one, then the shrunk one again was not "unchanged" all along).
			s.latestSeen, s.latestPolls = now, 0
		}
		if err == nil {
			if s.latest == nil || s.latest.Digest() != cand.Digest() {
				s.latest, s.latestSeen, s.latestPolls = cand, now, 0
			}
			s.latestPolls++
		}
	case err == nil: // unchanged: the document's verdict stands
		err = s.docErr
		if err == nil && s.latest != nil {
			s.latestPolls++
		}
	}
	loadDuration.Observe(s.clock.Since(start).Seconds())
	if err != nil {
		s.loadErr = err
		reloads.WithLabelValues("error").Inc()
		lastReloadFailed.Set(1)
		logger.Error(err, "Inventory reload failed; keeping the last good inventory", "event", "inventoryReloadFailed", "lastGood", s.viewDigest())
		if msg := err.Error(); msg != s.lastEvErr {
			s.lastEvErr = msg
			s.eventf(v1.EventTypeWarning, ReasonReloadFailed, "Reloading inventory from %s failed: %v. Keeping the last good inventory (%s); no Node is reported gone until it loads again.", s.src, err, s.viewDigest())
		}
		return err
	}
	if unchanged || !fetched {
		reloads.WithLabelValues("unchanged").Inc()
	}
	if s.loadErr != nil {
		logger.Info("Inventory reload recovered", "event", "inventoryReloadRecovered")
	}
	s.loadErr, s.lastEvErr = nil, ""
	lastReloadFailed.Set(0)
	lastSuccess.Set(float64(now.Unix()))
	s.serveLatest(now)
	s.decide(ctx, now)
	return nil
}

// serveLatest puts the latest document in use for lookups when that takes nothing
// away: when none is in use, when it takes no protection away from the one in use,
// or, while this replica does not lead (no guard decides here), when it removes no
// host and has settled. Everything else waits for the guard of a term (decide). It
// runs with s.mu held.
func (s *Store) serveLatest(now time.Time) {
	latest, cur := s.latest, s.view.Load()
	if latest == nil || cur != nil && cur.Digest() == latest.Digest() {
		return
	}
	switch {
	case cur == nil:
	case reducesProtection(cur, latest) == "":
	case s.lead.Load() == nil && s.settled(now) && len(removedHosts(cur, latest)) == 0:
	default:
		return
	}
	s.install(latest)
}

// settled reports whether the latest document was seen unchanged for SettleTime and
// by two fetches. It runs with s.mu held.
func (s *Store) settled(now time.Time) bool {
	return now.Sub(s.latestSeen) >= s.guard.SettleTime && s.latestPolls >= 2
}

// decide loads the guard state, applies acknowledgements, compares the latest
// document with what the cluster knows, and saves the result before anything in it
// can be acted on. It runs with s.mu held.
func (s *Store) decide(ctx context.Context, now time.Time) {
	logger := klog.FromContext(ctx).WithValues("source", s.src.String())
	t := s.lead.Load()
	if s.latest == nil || t == nil || t.ctx.Err() != nil {
		return // nothing valid fetched yet, or not leading: the guard does not decide
	}
	nodeHosts, ok := t.NodeHosts()
	if !ok {
		s.stateErr = errors.New("the inventory has not been compared with the cluster's Nodes yet (Node informer not synced)")
		return
	}
	store := t.State
	lctx, cancel := t.callContext(ctx)
	defer cancel()
	loaded, storeAcks, err := store.Load(lctx)
	if err != nil {
		if t.ctx.Err() != nil {
			s.notLeading(ctx, fmt.Errorf("%w: its leadership term ended", errFenced))
			return
		}
		s.stateFailed(ctx, fmt.Errorf("cannot read the deletion guard state from %s: %w", store, err))
		return
	}
	gs := loaded.clone()
	// Events about changes of the state are recorded once it is saved: a change that
	// could not be saved did not happen.
	var pending []func()
	acks := append(s.readAck(ctx), storeAcks...)
	s.applyAcks(ctx, gs, acks, now, &pending)
	s.prune(gs, nodeHosts, now)

	latest := s.latest
	gone, known := s.compare(gs, s.accepted, latest, nodeHosts)
	reduced := reducesProtection(s.accepted, latest)
	install := false
	switch {
	case (len(gone) > 0 || reduced != "") && !s.settled(now):
		// A document that would report hosts gone, or take protection away (a host
		// out of maintenance, another systemUUID or BMC), may have been read
		// mid-write: it is used once it has been seen unchanged for a while.
		if s.settling != latest.Digest() {
			s.settling = latest.Digest()
			settlingGauge.Set(1)
			what := fmt.Sprintf("would report %d hosts gone (%s)", len(gone), summarize(gone, 10))
			if len(gone) == 0 {
				what = "changes " + reduced
			}
			logger.Info("Inventory changed what protects hosts: waiting for it to settle", "event", "inventorySettling",
				"digest", latest.Digest(), "gone", len(gone), "change", reduced, "settleTime", s.guard.SettleTime)
			s.eventf(v1.EventTypeNormal, ReasonSettling, "Inventory %s from %s %s; it is used once it has been unchanged for %s and two reloads.",
				latest.Digest(), s.src, what, s.guard.SettleTime)
		}
	case len(gone) == 0:
		install = true
		s.settleDone()
		if t := gs.Trip; t != nil {
			pending = append(pending, func() { s.cleared(ctx, t, "an inventory that holds its hosts again was loaded") })
			gs.Trip = nil
		}
	default:
		s.settleDone()
		cutoff := now.Add(-s.guard.Window)
		inWindow := withinWindow(gs.Removals, cutoff)
		total := inWindow + len(gone)
		population := known + inWindow
		// A standing trip clears only by its acknowledgement or once its hosts are
		// back: a document that still lacks any of them stays held, whatever the window.
		stillHeld := gs.Trip != nil && slices.ContainsFunc(gone, func(h string) bool { return slices.Contains(gs.Trip.Hosts, h) })
		if !stillHeld && total <= s.guard.MaxHosts && total*100 <= s.guard.MaxPercent*population {
			install = true
			for _, h := range gone {
				r := Removal{Host: h, At: now, By: byLimits}
				gs.Gone[h] = r
				gs.Removals = append(gs.Removals, r)
			}
			if t := gs.Trip; t != nil {
				pending = append(pending, func() { s.cleared(ctx, t, "an inventory within the limits was loaded") })
				gs.Trip = nil
			}
			break
		}
		if gs.Trip == nil || !slices.Equal(gs.Trip.Hosts, gone) {
			since := now
			if gs.Trip != nil {
				since = gs.Trip.Since
			}
			gs.Trip = newTrip(tripInventory, gone, since)
		}
		gs.Trip.Digest, gs.Trip.Known = latest.Digest(), known
	}

	if gs.Trip != nil {
		// Publish the trip before saving it: what is published may be stricter than
		// what is saved, never laxer (GoneAllowed reads the published status
		// without waiting for the save).
		st := *s.status.Load()
		st.trip = gs.Trip
		s.status.Store(&st)
	}
	if !equalState(loaded, gs) {
		if err := t.save(ctx, gs); err != nil {
			if errors.Is(err, errFenced) || t.ctx.Err() != nil {
				s.notLeading(ctx, fmt.Errorf("%w: %w", errFenced, err))
			} else {
				s.stateFailed(ctx, fmt.Errorf("cannot save the deletion guard state to %s: %w", store, err))
			}
			return
		}
	}
	prevTrip := s.gs.tripOrNil()
	s.gs, s.stateErr = gs, nil
	for _, f := range pending {
		f()
	}
	if gs.Trip != nil && (prevTrip == nil || prevTrip.ID != gs.Trip.ID) {
		s.tripped(ctx, gs.Trip)
	}
	if install && (s.accepted == nil || s.accepted.Digest() != latest.Digest()) {
		reloads.WithLabelValues("loaded").Inc()
		s.accepted = latest
		s.install(latest)
		newly := len(gone)
		logger.Info("Inventory loaded", "event", "inventoryLoaded", "digest", latest.Digest(), "hosts", latest.Len(), "reportedGone", newly)
		s.eventf(v1.EventTypeNormal, ReasonLoaded, "Loaded inventory %s from %s: %d hosts; hosts newly reported gone: %d%s.",
			latest.Digest(), s.src, latest.Len(), newly, listSuffix(gone))
	} else if gs.Trip != nil {
		reloads.WithLabelValues("guarded").Inc()
	}
	windowGauge.Set(float64(withinWindow(gs.Removals, now.Add(-s.guard.Window))))
	// One event per reload at most for the power-off budget's waiting hosts, naming
	// the trip's current ID (hosts joining change it): a burst of hosts powered off at
	// once must not exhaust the event rate of the Inventory reference.
	if t := gs.PowerTrip; t != nil && t.ID != s.powerEventID {
		s.powerEventID = t.ID
		s.eventf(v1.EventTypeWarning, ReasonPowerBudget, "Power-off budget used up (%d hosts within %s, instances.powerOffBudget): the power-based actions (deleteAfter, out-of-service) of %d hosts wait (%s). %s",
			s.guard.PowerMaxHosts, s.guard.PowerWindow, len(t.Hosts), summarize(t.Hosts, 10), s.ackHint(t))
	}
	powerWaitingGauge.Set(float64(len(gs.PowerTrip.hostsOrNil())))
}

// reducesProtection says what latest changes, compared with the accepted inventory,
// that takes protection away from a host: it leaves maintenance, or its systemUUID,
// BMC or addresses change (what the identity checks and the matching rely on), or it
// is absent or decommissioned. "" when nothing does. Before any inventory was accepted
// (after a start) everything is new: "the inventory in use since the start".
func reducesProtection(accepted, latest *View) string {
	if accepted == nil {
		return "the inventory in use since the start"
	}
	if accepted.Digest() == latest.Digest() {
		return ""
	}
	var changed []string
	accepted.Hosts(func(a *Host) {
		if what := protectionLost(a, latest); what != "" {
			changed = append(changed, a.Name+" ("+what+")")
		}
	})
	if len(changed) == 0 {
		return ""
	}
	slices.Sort(changed)
	return fmt.Sprintf("%d hosts: %s", len(changed), summarize(changed, 5))
}

// removedHosts returns the hosts of cur that latest lacks or decommissions.
func removedHosts(cur, latest *View) []string {
	var out []string
	cur.Hosts(func(a *Host) {
		if protectionLost(a, latest) == lostRemoved {
			out = append(out, a.Name)
		}
	})
	return out
}

const lostRemoved = "removed"

// protectionLost says what latest takes away from host a of another document: it is
// removed (absent or newly decommissioned), out of maintenance, or its systemUUID, BMC
// or addresses changed; "" when nothing.
func protectionLost(a *Host, latest *View) string {
	l, ok := latest.Host(a.Name)
	switch {
	case !ok || (l.Gone() && !a.Gone()):
		return lostRemoved
	case a.State == StateMaintenance && l.State != StateMaintenance:
		return "out of maintenance"
	case a.SystemUUID != l.SystemUUID:
		return "systemUUID"
	case !reflect.DeepEqual(a.BMC, l.BMC):
		return "bmc"
	case !reflect.DeepEqual(a.Addresses, l.Addresses):
		return "addresses"
	}
	return ""
}

func (g *GuardState) tripOrNil() *Trip {
	if g == nil {
		return nil
	}
	return g.Trip
}

// compare returns the hosts latest would newly report gone: those the cluster knows
// (active or in maintenance in base, referenced by a Node, or listed by the standing
// trip) that latest lacks or
// decommissions, less those already accepted as gone; and how many hosts are known.
func (s *Store) compare(gs *GuardState, base, latest *View, nodeHosts []string) (gone []string, known int) {
	ref := map[string]struct{}{}
	if base != nil {
		base.Hosts(func(h *Host) {
			if !h.Gone() {
				ref[h.Name] = struct{}{}
			}
		})
	}
	for _, id := range nodeHosts {
		ref[id] = struct{}{}
	}
	if gs.Trip != nil {
		// The hosts a standing trip lists were known when it was raised; they stay
		// known (after a restart the accepted inventory is not remembered), so the
		// trip keeps its ID and its acknowledgement keeps applying.
		for _, id := range gs.Trip.Hosts {
			ref[id] = struct{}{}
		}
	}
	for id := range ref {
		if _, ok := gs.Gone[id]; ok {
			delete(ref, id) // accepted already, and counted in the window if recent
			continue
		}
		if h, ok := latest.Host(id); !ok || h.Gone() {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	return gone, len(ref)
}

// prune forgets what no longer matters: removals out of the window; accepted removals
// of hosts back in the latest inventory, or that no Node references any more and are
// out of the window; power grants out of their window.
func (s *Store) prune(gs *GuardState, nodeHosts []string, now time.Time) {
	cutoff := now.Add(-s.guard.Window)
	gs.Removals = slices.DeleteFunc(gs.Removals, func(r Removal) bool { return !r.At.After(cutoff) })
	referenced := make(map[string]bool, len(nodeHosts))
	for _, h := range nodeHosts {
		referenced[h] = true
	}
	for h, r := range gs.Gone {
		back := false
		if s.latest != nil {
			if lh, ok := s.latest.Host(h); ok && !lh.Gone() {
				back = true
			}
		}
		if back || (!referenced[h] && !r.At.After(cutoff)) {
			delete(gs.Gone, h)
		}
	}
	pcut := now.Add(-s.guard.PowerWindow)
	for h, r := range gs.Power {
		if !r.At.After(pcut) {
			delete(gs.Power, h)
		}
	}
}

// applyAcks applies an acknowledgement of the current inventory or power trip: its
// hosts are accepted (as gone, or granted their power-based action), the trip clears,
// and the ID is used up.
// Its log lines and events are appended to pending, for when the state is saved.
func (s *Store) applyAcks(ctx context.Context, gs *GuardState, acks []string, now time.Time, pending *[]func()) {
	logger := klog.FromContext(ctx)
	for _, id := range acks {
		if gs.used(id) {
			continue
		}
		switch {
		case gs.Trip != nil && gs.Trip.ID == id:
			t := gs.Trip
			for _, h := range t.Hosts {
				gs.Gone[h] = Removal{Host: h, At: now, By: "acknowledgement " + id}
			}
			gs.use(id)
			*pending = append(*pending, func() {
				logger.Info("Held inventory change acknowledged", "event", "deletionGuardAcknowledged", "id", id, "hosts", len(t.Hosts))
				s.cleared(ctx, t, fmt.Sprintf("acknowledgement %s accepted the removal of %d hosts (%s)", id, len(t.Hosts), summarize(t.Hosts, 10)))
			})
			gs.Trip = nil
		case gs.PowerTrip != nil && gs.PowerTrip.ID == id:
			t := gs.PowerTrip
			for _, h := range t.Hosts {
				gs.Power[h] = Removal{Host: h, At: now, By: "acknowledgement " + id}
			}
			gs.use(id)
			*pending = append(*pending, func() {
				logger.Info("Power-off budget acknowledged", "event", "powerBudgetAcknowledged", "id", id, "hosts", len(t.Hosts))
				s.eventf(v1.EventTypeNormal, ReasonPowerBudgetAcked, "Acknowledgement %s released the power-based actions (deleteAfter, out-of-service) of %d hosts: %s.",
					id, len(t.Hosts), summarize(t.Hosts, 10))
			})
			gs.PowerTrip = nil
		}
	}
}

// TakePowerBudget asks for host's power-based action (kind: "deleteAfter" or
// "outOfService"). It returns nil when the saved state shows the host holding a grant
// within the power window, or when one is left in the budget (the grant is saved before
// it returns); otherwise the host joins the hosts waiting for an acknowledgement and
// the error wraps ErrPowerBudget and says how to acknowledge. Only the leader grants:
// outside a leadership term, or when the term's fence refuses, the error wraps
// ErrDeletionGuard. It first requires Ready (a held inventory change or a failing
// reload stops power-based actions too), checked again under the Store's lock and
// against the state it loads first, every time (a trip saved by another writer
// counts), and an inventory that settled since the term started; errors reading or
// saving the state wrap ErrDeletionGuard: no action without a saved grant. A host in
// maintenance in the accepted or the latest inventory is refused with ErrMaintenance.
// controlPlane says the host runs a control-plane Node: such a host gets a grant only
// while no other control-plane host holds one within the power window (one at a time,
// so fencing never takes two members of the control plane, and etcd's quorum, at
// once); otherwise it waits like a host beyond the budget.
func (s *Store) TakePowerBudget(ctx context.Context, host, kind string, controlPlane bool) error {
	if err := s.Ready(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.lead.Load()
	now := s.clock.Now()
	// Again under the lock: a reload may have decided meanwhile.
	switch {
	case t == nil || t.ctx.Err() != nil:
		return fmt.Errorf("%w: %w; no power-based action here", ErrDeletionGuard, errNotLeading)
	case s.loadErr != nil:
		return fmt.Errorf("%w: %w; no power-based action until %s loads again", ErrReloadFailing, s.loadErr, s.src)
	case s.stateErr != nil || s.gs == nil:
		return fmt.Errorf("%w: its state is not known yet; no power-based action until it is", ErrDeletionGuard)
	case s.gs.Trip != nil:
		return fmt.Errorf("%w tripped: no power-based action while an inventory change is held (%s)", ErrDeletionGuard, s.gs.Trip.ID)
	case s.accepted == nil:
		return fmt.Errorf("%w: no inventory has settled since this replica started leading (deletionGuard.settleTime); no power-based action until one has", ErrDeletionGuard)
	}
	// Maintenance exempts a host when either the accepted or the latest document says
	// so: a document that puts a host into maintenance protects it at once, even while
	// it settles.
	for _, v := range []*View{s.accepted, s.latest} {
		if v == nil {
			continue
		}
		if h, ok := v.Host(host); ok && h.State == StateMaintenance {
			return fmt.Errorf("%w: host %q is in maintenance in inventory %s", ErrMaintenance, host, v.Digest())
		}
	}
	// A remediation storm holds every action, with no acknowledgement; a host already
	// waiting keeps waiting until an acknowledgement, which only a reload applies: a
	// refusal needs no read of the state. A grant always does.
	if err := s.holdErr(s.gs.Storm); err != nil {
		return err
	}
	if pt := s.gs.PowerTrip; pt != nil && slices.Contains(pt.Hosts, host) {
		return fmt.Errorf("%w: %d hosts wait (%s); %s", ErrPowerBudget, len(pt.Hosts), summarize(pt.Hosts, 5), s.ackHint(pt))
	}
	loaded, gs, err := t.load(ctx)
	if err != nil {
		return err
	}
	if gs.Trip != nil {
		// Saved by another writer (this replica's view of the state is behind).
		return fmt.Errorf("%w tripped: no power-based action while an inventory change is held (%s)", ErrDeletionGuard, gs.Trip.ID)
	}
	if err := s.holdErr(gs.Storm); err != nil {
		return err
	}
	result, newWait := s.grant(gs, host, controlPlane, now)
	if !equalState(loaded, gs) {
		if err := t.save(ctx, gs); err != nil {
			return fmt.Errorf("%w: cannot save its state to %s: %w", ErrDeletionGuard, t.State, err)
		}
	} else if err := t.checkBounded(ctx); err != nil {
		// A grant held already: still only the leader acts on it.
		return fmt.Errorf("%w: %w", ErrDeletionGuard, err)
	}
	s.gs = gs
	powerWaitingGauge.Set(float64(len(gs.PowerTrip.hostsOrNil())))
	s.publish()
	if newWait {
		result = fmt.Errorf("%w: %w", ErrNowWaiting, result)
		klog.FromContext(ctx).Info("Power-off budget used up: the action waits for an acknowledgement", "event", "powerBudgetExceeded",
			"host", host, "kind", kind, "id", gs.PowerTrip.ID, "waiting", len(gs.PowerTrip.Hosts))
	}
	return result
}

// grant applies the power-off budget to host in gs, the state just loaded: nil when
// host holds a grant within the power window or one is left (added to gs), else an
// error wrapping ErrPowerBudget with the host added to the waiting hosts (newWait:
// it was not among them).
func (s *Store) grant(gs *GuardState, host string, controlPlane bool, now time.Time) (result error, newWait bool) {
	pcut := now.Add(-s.guard.PowerWindow)
	if r, ok := gs.Power[host]; ok && r.At.After(pcut) {
		return nil, false
	}
	used := 0
	var cpHolder string
	for h, r := range gs.Power {
		if r.By == byLimits && r.At.After(pcut) {
			used++
		}
		if r.ControlPlane && r.At.After(pcut) && (cpHolder == "" || h < cpHolder) {
			cpHolder = h
		}
	}
	var why string
	switch {
	case controlPlane && cpHolder != "":
		why = fmt.Sprintf("control-plane host %q holds a power-based grant since %s: one control-plane host at a time within %s",
			cpHolder, gs.Power[cpHolder].At.UTC().Format(time.RFC3339), s.guard.PowerWindow)
	case used < s.guard.PowerMaxHosts:
		gs.Power[host] = Removal{Host: host, At: now, By: byLimits, ControlPlane: controlPlane}
		powerUsedGauge.Set(float64(used + 1))
		return nil, false
	default:
		why = fmt.Sprintf("%d of %d hosts used within %s", used, s.guard.PowerMaxHosts, s.guard.PowerWindow)
	}
	waiting := []string{host}
	since := now
	if t := gs.PowerTrip; t != nil {
		since = t.Since
		waiting = t.Hosts
		if !slices.Contains(waiting, host) {
			waiting = append(slices.Clone(waiting), host)
			slices.Sort(waiting)
			newWait = true
		}
	} else {
		newWait = true
	}
	if newWait {
		gs.PowerTrip = newTrip(tripPower, waiting, since)
	}
	return fmt.Errorf("%w: %s; %d hosts wait (%s); %s",
		ErrPowerBudget, why, len(gs.PowerTrip.Hosts), summarize(gs.PowerTrip.Hosts, 5), s.ackHint(gs.PowerTrip)), newWait
}

func (t *Trip) hostsOrNil() []string {
	if t == nil {
		return nil
	}
	return t.Hosts
}

// ackHint says how to acknowledge a trip.
func (s *Store) ackHint(t *Trip) string {
	hint := fmt.Sprintf("to accept exactly this, acknowledge %s", t.ID)
	var cm *ConfigMapState
	if lt := s.lead.Load(); lt != nil {
		cm, _ = lt.State.(*ConfigMapState)
	}
	if cm != nil {
		hint += fmt.Sprintf(": kubectl -n %s annotate configmap %s %s=%s --overwrite", cm.Namespace, StateConfigMapName, AnnotationAcknowledge, t.ID)
		if s.guard.AckFile != "" {
			hint += " (or write it to " + s.guard.AckFile + " on the leader's host)"
		}
	} else if s.guard.AckFile != "" {
		hint += fmt.Sprintf(": echo %s > %s", t.ID, s.guard.AckFile)
	}
	return hint
}

func (s *Store) settleDone() {
	s.settling = ""
	settlingGauge.Set(0)
}

func (s *Store) stateFailed(ctx context.Context, err error) {
	klog.FromContext(ctx).Error(err, "Deletion guard state unavailable: no host is reported gone", "event", "deletionGuardStateFailing")
	if s.stateErr == nil || s.stateErr.Error() != err.Error() {
		s.eventf(v1.EventTypeWarning, ReasonGuardStateFailing, "%v. No Node is reported gone and no power-based action is taken until it is readable and writable again.", err)
	}
	s.stateErr = err
}

func (s *Store) install(v *View) {
	s.view.Store(v)
	counts := map[State]int{StateActive: 0, StateMaintenance: 0, StateDecommissioned: 0}
	v.Hosts(func(h *Host) { counts[h.State]++ })
	for st, n := range counts {
		hostsGauge.WithLabelValues(string(st)).Set(float64(n))
	}
}

func (s *Store) tripped(ctx context.Context, t *Trip) {
	guardTripped.Set(1)
	guardHeld.Set(float64(len(t.Hosts)))
	klog.FromContext(ctx).Info("Deletion guard tripped: keeping the last good inventory and reporting no host gone",
		"event", "deletionGuardTripped", "id", t.ID, "digest", t.Digest, "gone", len(t.Hosts), "known", t.Known,
		"maxRemovedHosts", s.guard.MaxHosts, "maxRemovedPercent", s.guard.MaxPercent, "window", s.guard.Window)
	s.eventf(v1.EventTypeWarning, ReasonGuardTripped,
		"Inventory %s from %s would report %d of %d known hosts gone (%s), more than the deletion guard allows (maxRemovedHosts %d, maxRemovedPercent %d within %s, counting %d removals already accepted in that window). No Node is reported gone; the last good inventory (%s) stays in use. If this is intended, %s",
		t.Digest, s.src, len(t.Hosts), t.Known, summarize(t.Hosts, 10), s.guard.MaxHosts, s.guard.MaxPercent, s.guard.Window,
		withinWindow(s.gs.Removals, s.clock.Now().Add(-s.guard.Window)), s.viewDigest(), s.ackHint(t))
}

func (s *Store) cleared(ctx context.Context, t *Trip, why string) {
	klog.FromContext(ctx).Info("Deletion guard cleared", "event", "deletionGuardCleared", "id", t.ID, "why", why)
	s.eventf(v1.EventTypeNormal, ReasonGuardCleared, "Deletion guard %s (inventory %s) cleared: %s.", t.ID, t.Digest, why)
}

// readAck returns the acknowledgements in the ack file.
func (s *Store) readAck(ctx context.Context) []string {
	if s.guard.AckFile == "" {
		return nil
	}
	data, err := os.ReadFile(s.guard.AckFile)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			klog.FromContext(ctx).Error(err, "Cannot read the deletion guard acknowledgement file", "ackFile", s.guard.AckFile)
		}
		return nil
	}
	return splitAcks(string(data))
}

func (s *Store) publish() {
	st := &status{loadErr: s.loadErr}
	switch {
	case s.stateErr != nil:
		st.why = s.stateErr.Error()
	case s.gs == nil:
		st.why = "the inventory has not been compared with the cluster's Nodes yet"
	default:
		st.trip, st.gone, st.powerTrip, st.storm = s.gs.Trip, s.gs.Gone, s.gs.PowerTrip, s.gs.Storm
	}
	if st.trip == nil {
		guardTripped.Set(0)
		guardHeld.Set(0)
	}
	s.status.Store(st)
}

func (s *Store) viewDigest() string {
	if v := s.view.Load(); v != nil {
		return fmt.Sprintf("%s, %d hosts", v.Digest(), v.Len())
	}
	return "none loaded yet"
}

func (s *Store) eventf(eventType, reason, format string, args ...any) {
	if s.events != nil {
		s.events.Eventf(eventType, reason, format, args...)
	}
}

func summarize(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

func listSuffix(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " (" + summarize(names, 10) + ")"
}
