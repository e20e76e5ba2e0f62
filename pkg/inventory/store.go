package inventory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Store errors, wrapped by what View and DeletionAllowed return.
var (
	// ErrNotLoaded: no inventory has been loaded successfully yet.
	ErrNotLoaded = errors.New("inventory not loaded yet")
	// ErrReloadFailing: the latest reload failed; the last good inventory is served for
	// metadata but no host is reported gone until a reload succeeds.
	ErrReloadFailing = errors.New("inventory reload failing")
	// ErrDeletionGuard: the deletion guard is tripped; no host is reported gone until
	// the held inventory is acknowledged or replaced.
	ErrDeletionGuard = errors.New("inventory deletion guard tripped")
)

// Event reasons recorded by the Store.
const (
	ReasonLoaded       = "InventoryLoaded"
	ReasonReloadFailed = "InventoryReloadFailed"
	ReasonGuardTripped = "DeletionGuardTripped"
	ReasonGuardCleared = "DeletionGuardCleared"
)

// EventSink records events about the inventory. Implementations must not block.
type EventSink interface {
	Eventf(eventType, reason, messageFmt string, args ...any)
}

// NodeHostsFunc returns the host names that existing Nodes reference through their
// baremetal:// providerIDs; ok is false while that is not known yet (informers not
// synced).
type NodeHostsFunc func() (hosts []string, ok bool)

// Guard configures the deletion guard.
type Guard struct {
	// MaxHosts and MaxPercent: a change that reports more hosts gone than MaxHosts, or
	// more than MaxPercent of the known hosts, trips the guard.
	MaxHosts   int
	MaxPercent int
	// AckFile is read on every reload; when it holds the digest of the held inventory,
	// that inventory is accepted.
	AckFile string
}

// Trip describes a tripped deletion guard.
type Trip struct {
	// Digest identifies the held inventory; writing it to the ack file accepts it.
	Digest string
	// Gone are the hosts the held inventory would report gone, sorted.
	Gone []string
	// Known is the number of hosts the comparison was made against.
	Known int
	Since time.Time
}

// Store keeps the current inventory View. It reloads from its Source, keeps the last
// good View when a reload fails or trips the deletion guard, and says why through logs,
// events and metrics. View and DeletionAllowed are safe for concurrent use and never
// wait for the Source.
type Store struct {
	src    Source
	guard  Guard
	events EventSink
	clock  clock.PassiveClock

	view      atomic.Pointer[View]
	nodeHosts atomic.Pointer[NodeHostsFunc]

	reloadMu    sync.Mutex // serializes reloads; held across Fetch
	mu          sync.Mutex // guards the fields below; never held across I/O on the Source
	loadErr     error      // of the latest reload
	docErr      error      // of the latest document fetched (an unchanged source repeats it)
	lastEvErr   string
	trip        *Trip
	pending     *View // held by the guard; nil when the view itself is held (first load)
	nodeChecked bool  // the view has been checked against the Nodes
	status      atomic.Pointer[status]
}

type status struct {
	loadErr error
	trip    *Trip
	// unverified: the view has not been compared with the Nodes yet although a
	// NodeHostsFunc is set.
	unverified bool
}

// NewStore returns a Store that has loaded nothing yet; call Reload or Run.
func NewStore(src Source, guard Guard, events EventSink, clk clock.PassiveClock) *Store {
	if clk == nil {
		clk = clock.RealClock{}
	}
	s := &Store{src: src, guard: guard, events: events, clock: clk}
	s.status.Store(&status{})
	registerMetrics()
	return s
}

// SetNodeHosts gives the Store a way to see which hosts existing Nodes reference, so
// the deletion guard also protects against an inventory that lost hosts while the
// process was not running.
func (s *Store) SetNodeHosts(fn NodeHostsFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodeHosts.Store(&fn)
	s.publish()
}

// Source returns the Store's source.
func (s *Store) Source() Source { return s.src }

// View returns the current inventory: the last one that loaded and passed the guard
// (or, before any such, the first one that loaded). It wraps ErrNotLoaded when none
// has loaded.
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

// DeletionAllowed returns nil when the current View may be used to report hosts gone:
// it loaded, the latest reload succeeded, it has been compared with the hosts the Nodes
// reference (when SetNodeHosts was called), and the deletion guard is not tripped.
// Otherwise it returns an error wrapping ErrNotLoaded, ErrReloadFailing or
// ErrDeletionGuard that says what to do.
func (s *Store) DeletionAllowed(ctx context.Context) error {
	if _, err := s.View(); err != nil {
		return err
	}
	st := s.status.Load()
	if st.unverified {
		s.mu.Lock()
		s.checkNodes(ctx)
		s.publish()
		s.mu.Unlock()
		if st = s.status.Load(); st.unverified {
			return fmt.Errorf("%w: the inventory has not been compared with the cluster's Nodes yet (Node informer not synced); no Node is reported gone until it is", ErrDeletionGuard)
		}
	}
	if st.loadErr != nil {
		return fmt.Errorf("%w: %w; no Node is reported gone until %s loads again", ErrReloadFailing, st.loadErr, s.src)
	}
	if t := st.trip; t != nil {
		return fmt.Errorf("%w: inventory %s would report %d of %d known hosts gone (%s); to accept it, write %q to %s",
			ErrDeletionGuard, t.Digest, len(t.Gone), t.Known, summarize(t.Gone, 5), t.Digest, s.guard.AckFile)
	}
	return nil
}

// Trip returns the tripped guard, or nil.
func (s *Store) Trip() *Trip { return s.status.Load().trip }

// Run reloads now and then every Source interval until ctx is done.
func (s *Store) Run(ctx context.Context) {
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		_ = s.Reload(ctx)
	}, s.src.Interval(), 0.1, true)
}

// Reload fetches the document once and applies it. It returns the fetch or parse
// error (the previous View stays in use); a guarded inventory is not an error.
func (s *Store) Reload(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("source", s.src.String())
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()

	start := s.clock.Now()
	data, unchanged, err := s.src.Fetch(ctx)
	fetched := err == nil && !unchanged
	var cand *View
	if fetched {
		cand, err = Parse(data) // outside s.mu: parsing a large document takes a while
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.publish()
	switch {
	case fetched:
		s.docErr = err
		if err == nil {
			s.apply(ctx, cand)
		}
	case err == nil: // unchanged: the document's verdict stands
		err = s.docErr
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
	if unchanged {
		reloads.WithLabelValues("unchanged").Inc()
	}
	if s.loadErr != nil {
		logger.Info("Inventory reload recovered", "event", "inventoryReloadRecovered")
	}
	s.loadErr, s.lastEvErr = nil, ""
	lastReloadFailed.Set(0)
	lastSuccess.Set(float64(s.clock.Now().Unix()))
	s.checkAck(ctx)
	s.checkNodes(ctx)
	return nil
}

// apply installs a parsed candidate unless it trips the guard.
func (s *Store) apply(ctx context.Context, cand *View) {
	logger := klog.FromContext(ctx).WithValues("source", s.src.String(), "digest", cand.Digest())
	prev := s.view.Load()
	if prev != nil && prev.Digest() == cand.Digest() {
		reloads.WithLabelValues("unchanged").Inc()
		if s.pending != nil { // the held change was reverted to the inventory in use
			s.pending = nil
			s.clearTrip(ctx, "the source serves the inventory in use again")
		}
		return
	}
	nodeHosts, haveNodes := s.currentNodeHosts()
	gone, known := evaluate(prev, cand, nodeHosts)
	if s.exceeds(len(gone), known) && s.readAck(ctx) != cand.Digest() {
		reloads.WithLabelValues("guarded").Inc()
		if prev == nil {
			// Nothing else to serve: use it for metadata, report nothing gone.
			s.install(cand, haveNodes)
			s.pending = nil
		} else {
			s.pending = cand
		}
		s.setTrip(ctx, cand.Digest(), gone, known)
		return
	}
	reloads.WithLabelValues("loaded").Inc()
	s.install(cand, haveNodes)
	s.pending = nil
	s.clearTrip(ctx, "a new inventory within the limits was loaded")
	logger.Info("Inventory loaded", "event", "inventoryLoaded", "hosts", cand.Len(), "reportedGone", len(gone))
	s.eventf(v1.EventTypeNormal, ReasonLoaded, "Loaded inventory %s from %s: %d hosts; hosts newly reported gone: %d%s.",
		cand.Digest(), s.src, cand.Len(), len(gone), listSuffix(gone))
}

func (s *Store) install(v *View, nodeChecked bool) {
	s.view.Store(v)
	s.nodeChecked = nodeChecked
	counts := map[State]int{StateActive: 0, StateMaintenance: 0, StateDecommissioned: 0}
	v.Hosts(func(h *Host) { counts[h.State]++ })
	for st, n := range counts {
		hostsGauge.WithLabelValues(string(st)).Set(float64(n))
	}
}

// checkAck accepts the held inventory when the ack file names it.
func (s *Store) checkAck(ctx context.Context) {
	if s.trip == nil || s.readAck(ctx) != s.trip.Digest {
		return
	}
	logger := klog.FromContext(ctx)
	if s.pending != nil {
		s.install(s.pending, s.nodeChecked)
		s.pending = nil
	}
	logger.Info("Held inventory acknowledged by the operator", "event", "deletionGuardAcknowledged", "digest", s.trip.Digest, "ackFile", s.guard.AckFile)
	s.clearTrip(ctx, "the operator acknowledged it in "+s.guard.AckFile)
}

// checkNodes compares a View that was installed before the Nodes were known with the
// hosts the Nodes reference, so a restart cannot bypass the guard.
func (s *Store) checkNodes(ctx context.Context) {
	v := s.view.Load()
	if v == nil || s.nodeChecked {
		return
	}
	nodeHosts, ok := s.currentNodeHosts()
	if !ok {
		return
	}
	s.nodeChecked = true
	gone, known := evaluate(nil, v, nodeHosts)
	if s.trip == nil && s.exceeds(len(gone), known) && s.readAck(ctx) != v.Digest() {
		s.setTrip(ctx, v.Digest(), gone, known)
	}
}

func (s *Store) currentNodeHosts() ([]string, bool) {
	fn := s.nodeHosts.Load()
	if fn == nil {
		return nil, false
	}
	return (*fn)()
}

// evaluate returns the hosts that cand would report gone among the known ones, and how
// many were known. Known hosts are those active or in maintenance in prev, plus those
// Nodes reference (unless prev already reports them gone).
func evaluate(prev, cand *View, nodeHosts []string) (gone []string, known int) {
	ref := map[string]struct{}{}
	if prev != nil {
		prev.Hosts(func(h *Host) {
			if !h.Gone() {
				ref[h.Name] = struct{}{}
			}
		})
	}
	for _, id := range nodeHosts {
		if prev != nil {
			if h, ok := prev.Host(id); !ok || h.Gone() {
				continue
			}
		}
		ref[id] = struct{}{}
	}
	for id := range ref {
		if h, ok := cand.Host(id); !ok || h.Gone() {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	return gone, len(ref)
}

func (s *Store) exceeds(gone, known int) bool {
	if gone == 0 {
		return false
	}
	return gone > s.guard.MaxHosts || gone*100 > s.guard.MaxPercent*known
}

func (s *Store) setTrip(ctx context.Context, digest string, gone []string, known int) {
	if s.trip != nil && s.trip.Digest == digest {
		return
	}
	s.trip = &Trip{Digest: digest, Gone: gone, Known: known, Since: s.clock.Now()}
	guardTripped.Set(1)
	guardHeld.Set(float64(len(gone)))
	klog.FromContext(ctx).Info("Deletion guard tripped: keeping the last good inventory and reporting no host gone",
		"event", "deletionGuardTripped", "digest", digest, "gone", len(gone), "known", known,
		"maxRemovedHosts", s.guard.MaxHosts, "maxRemovedPercent", s.guard.MaxPercent, "ackFile", s.guard.AckFile)
	s.eventf(v1.EventTypeWarning, ReasonGuardTripped,
		"Inventory %s from %s would report %d of %d known hosts gone (%s), more than the deletion guard allows (maxRemovedHosts %d, maxRemovedPercent %d). No Node is reported gone; the last good inventory (%s) stays in use. If this is intended, run: echo %s > %s",
		digest, s.src, len(gone), known, summarize(gone, 10), s.guard.MaxHosts, s.guard.MaxPercent, s.viewDigest(), digest, s.guard.AckFile)
}

func (s *Store) clearTrip(ctx context.Context, why string) {
	if s.trip == nil {
		return
	}
	klog.FromContext(ctx).Info("Deletion guard cleared", "event", "deletionGuardCleared", "digest", s.trip.Digest, "why", why)
	s.eventf(v1.EventTypeNormal, ReasonGuardCleared, "Deletion guard for inventory %s cleared: %s.", s.trip.Digest, why)
	s.trip = nil
	guardTripped.Set(0)
	guardHeld.Set(0)
}

func (s *Store) readAck(ctx context.Context) string {
	if s.guard.AckFile == "" {
		return ""
	}
	data, err := os.ReadFile(s.guard.AckFile)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			klog.FromContext(ctx).Error(err, "Cannot read the deletion guard acknowledgement file", "ackFile", s.guard.AckFile)
		}
		return ""
	}
	return strings.TrimSpace(string(data))
}

func (s *Store) publish() {
	unverified := s.view.Load() != nil && !s.nodeChecked && s.nodeHosts.Load() != nil
	s.status.Store(&status{loadErr: s.loadErr, trip: s.trip, unverified: unverified})
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
