package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
)

// ErrRemediationStorm: more Nodes are unhealthy than Guard.MaxUnhealthy allows, or were
// until less than Guard.StormCooldown ago; every power-based action waits, without an
// acknowledgement, until the storm and its cooldown are over.
var ErrRemediationStorm = errors.New("remediation storm")

// ErrStormCooldown wraps ErrRemediationStorm: the storm is over, its cooldown holds.
var ErrStormCooldown = fmt.Errorf("%w cooldown", ErrRemediationStorm)

// Event reasons of the remediation storm gate (on the Inventory).
const (
	ReasonStormStarted = "RemediationStormStarted"
	ReasonStormOver    = "RemediationStormOver"
	ReasonStormEnded   = "RemediationStormEnded"
)

// Storm is a remediation storm, saved in the GuardState so a leader change keeps it:
// more Nodes unhealthy than the limit since Since; Ended is set when the count dropped
// to the limit or below, and the power-based actions stay held until Ended plus the
// cooldown.
type Storm struct {
	Since time.Time  `json:"since"`
	Ended *time.Time `json:"ended,omitempty"`
	// Unhealthy, Matched and Max are the counts when the storm started.
	Unhealthy int `json:"unhealthy"`
	Matched   int `json:"matched"`
	Max       int `json:"max"`
}

// MaxUnhealthy resolves a count or a percent ("30%", rounded down) of matched Nodes.
func MaxUnhealthy(limit intstr.IntOrString, matched int) (int, error) {
	return intstr.GetScaledValueFromIntOrPercent(&limit, matched, false)
}

// stormNext is the storm after a count of unhealthy of matched Nodes against max (max
// < 0: no limit configured), and what changed ("" when nothing did).
func stormNext(cur *Storm, unhealthy, matched, max int, now time.Time, cooldown time.Duration) (*Storm, string) {
	over := max >= 0 && unhealthy > max
	switch {
	case max < 0:
		if cur != nil {
			return nil, ReasonStormEnded // the limit is no longer configured
		}
		return nil, ""
	case cur == nil || cur.Ended != nil && over:
		if !over {
			return nil, ""
		}
		return &Storm{Since: now, Unhealthy: unhealthy, Matched: matched, Max: max}, ReasonStormStarted
	case cur.Ended == nil:
		if over {
			return cur, ""
		}
		c := *cur
		c.Ended = &now
		return &c, ReasonStormOver
	case now.Sub(*cur.Ended) >= cooldown:
		return nil, ReasonStormEnded
	}
	return cur, ""
}

// holdErr says why a storm holds power-based actions (nil: none does). Its message
// depends only on the saved storm, so conditions written from it change only with it.
func (s *Store) holdErr(st *Storm) error {
	if st == nil || s.guard.MaxUnhealthy == nil {
		return nil
	}
	if st.Ended == nil {
		return fmt.Errorf("%w since %s: %d of %d Nodes were unhealthy, more than instances.maxUnhealthy %s (%d); no power-based action (out-of-service taint, deleteAfter) until at most %d are, and then for instances.stormCooldown (%s)",
			ErrRemediationStorm, st.Since.UTC().Format(time.RFC3339), st.Unhealthy, st.Matched, s.guard.MaxUnhealthy.String(), st.Max, st.Max, s.guard.StormCooldown)
	}
	return fmt.Errorf("%w: the storm was over at %s; power-based actions resume at %s (instances.stormCooldown %s)",
		ErrStormCooldown, st.Ended.UTC().Format(time.RFC3339), st.Ended.Add(s.guard.StormCooldown).UTC().Format(time.RFC3339), s.guard.StormCooldown)
}

// RemediationHold returns an error wrapping ErrRemediationStorm while a remediation
// storm or its cooldown holds every power-based action, as this replica last saved or
// loaded the state; nil otherwise (also outside a leadership term). It never waits.
func (s *Store) RemediationHold() error {
	if s.lead.Load() == nil {
		return nil
	}
	st := s.status.Load()
	return s.holdErr(st.storm)
}

// ObserveHealth tells the leader's Store how many Nodes are unhealthy (not Ready, not
// in maintenance) of the matched ones (initialized Nodes of inventory hosts); the power
// monitor calls it on every pass. With Guard.MaxUnhealthy set, more unhealthy Nodes
// than it allows start a remediation storm; dropping to the limit or below ends it,
// and the actions resume Guard.StormCooldown later. Each change is saved in the
// GuardState (read first, so a leader change keeps it) and announced by an event and
// a log line; passes that change nothing only set the gauges, decided without the
// Store's lock (which grants hold across state calls), so a power monitor pass never
// waits for them. Outside a leadership term, or before the state was loaded, it does
// nothing.
func (s *Store) ObserveHealth(ctx context.Context, unhealthy, matched int) error {
	max := -1
	if s.guard.MaxUnhealthy != nil {
		m, err := MaxUnhealthy(*s.guard.MaxUnhealthy, matched)
		if err != nil {
			return fmt.Errorf("instances.maxUnhealthy %s: %w", s.guard.MaxUnhealthy.String(), err)
		}
		max = m
		unhealthyGauge.Set(float64(unhealthy))
		maxUnhealthyGauge.Set(float64(max))
	}
	now := s.clock.Now()
	// Most passes change nothing: decided from the published state, without the
	// Store's lock, which power-budget grants hold across state calls; a pass of the
	// power monitor never waits for them then.
	if st := s.status.Load(); s.lead.Load() == nil || st == nil {
		return nil
	} else if _, what := stormNext(st.storm, unhealthy, matched, max, now, s.guard.StormCooldown); what == "" {
		stormGauge.Set(boolGauge(st.storm != nil && max >= 0))
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.lead.Load()
	if t == nil || t.ctx.Err() != nil || s.gs == nil || s.stateErr != nil {
		return nil
	}
	if _, what := stormNext(s.gs.Storm, unhealthy, matched, max, now, s.guard.StormCooldown); what == "" {
		stormGauge.Set(boolGauge(s.gs.Storm != nil && max >= 0))
		return nil
	}
	_, gs, err := t.load(ctx)
	if err != nil {
		return err
	}
	next, what := stormNext(gs.Storm, unhealthy, matched, max, now, s.guard.StormCooldown)
	if what != "" {
		gs.Storm = next
		if err := t.save(ctx, gs); err != nil {
			return fmt.Errorf("%w: cannot save its state to %s: %w", ErrDeletionGuard, t.State, err)
		}
	}
	prev := s.gs.Storm
	s.gs = gs
	s.publish()
	stormGauge.Set(boolGauge(gs.Storm != nil && max >= 0))
	if what == "" {
		return nil
	}
	logger := klog.FromContext(ctx)
	switch what {
	case ReasonStormStarted:
		logger.Info("Remediation storm: every power-based action is held", "event", "remediationStormStarted", "unhealthy", unhealthy, "matched", matched, "maxUnhealthy", max)
		s.eventf(v1.EventTypeWarning, what, "%d of %d Nodes are unhealthy, more than instances.maxUnhealthy %s (%d): no power-based action (out-of-service taint, deleteAfter) until at most %d are, and then for instances.stormCooldown (%s). The Nodes held carry the condition RemediationHeld.",
			unhealthy, matched, s.guard.MaxUnhealthy.String(), max, max, s.guard.StormCooldown)
	case ReasonStormOver:
		logger.Info("Remediation storm over: power-based actions resume after the cooldown", "event", "remediationStormOver", "unhealthy", unhealthy, "matched", matched, "resumeAt", now.Add(s.guard.StormCooldown))
		s.eventf(v1.EventTypeNormal, what, "%d of %d Nodes are unhealthy, at most instances.maxUnhealthy (%d): power-based actions resume at %s, after instances.stormCooldown (%s).",
			unhealthy, matched, max, now.Add(s.guard.StormCooldown).UTC().Format(time.RFC3339), s.guard.StormCooldown)
	case ReasonStormEnded:
		since := ""
		if prev != nil {
			since = " (it started at " + prev.Since.UTC().Format(time.RFC3339) + ")"
		}
		logger.Info("Remediation storm cooldown over: power-based actions resume", "event", "remediationStormEnded")
		s.eventf(v1.EventTypeNormal, what, "The remediation storm%s and its cooldown are over: power-based actions resume.", since)
	}
	return nil
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
