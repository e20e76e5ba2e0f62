package redfish

import (
	"fmt"
	"time"
)

// PowerState is a Redfish Resource.PowerState value.
type PowerState string

// Power states a ComputerSystem reports.
const (
	PowerOn     PowerState = "On"
	PowerOff    PowerState = "Off"
	PoweringOn  PowerState = "PoweringOn"
	PoweringOff PowerState = "PoweringOff"
)

// ResetType is a Redfish Resource.ResetType value (the body of
// ComputerSystem.Reset).
type ResetType string

// The reset types the emulator understands: all of DSP8010 Resource.ResetType
// that concern a host's power.
const (
	ResetOn               ResetType = "On"
	ResetForceOn          ResetType = "ForceOn"
	ResetForceOff         ResetType = "ForceOff"
	ResetGracefulShutdown ResetType = "GracefulShutdown"
	ResetForceRestart     ResetType = "ForceRestart"
	ResetGracefulRestart  ResetType = "GracefulRestart"
	ResetPowerCycle       ResetType = "PowerCycle"
	ResetNmi              ResetType = "Nmi"
	ResetPushPowerButton  ResetType = "PushPowerButton"
)

// AllResetTypes lists every ResetType, in the order the emulator advertises
// them in ResetType@Redfish.AllowableValues by default.
var AllResetTypes = []ResetType{
	ResetOn, ResetForceOff, ResetGracefulShutdown, ResetForceRestart,
	ResetGracefulRestart, ResetPowerCycle, ResetNmi, ResetPushPowerButton, ResetForceOn,
}

func validResetType(t ResetType) bool {
	for _, k := range AllResetTypes {
		if k == t {
			return true
		}
	}
	return false
}

// phase is a transitional power state that lasts until a given time.
type phase struct {
	state PowerState
	until time.Time
}

// power is the host's power state machine. It is evaluated lazily against the
// clock (no timers, no goroutines): a transition is a list of phases followed
// by a final state. It is not safe for concurrent use; the BMC's mutex guards it.
type power struct {
	phases []phase
	final  PowerState
	gen    uint64 // bumped on every accepted change, feeds the ETag
}

// current returns the state at now, dropping phases that have ended.
func (p *power) current(now time.Time) PowerState {
	for len(p.phases) > 0 && !now.Before(p.phases[0].until) {
		p.phases = p.phases[1:]
	}
	if len(p.phases) > 0 {
		return p.phases[0].state
	}
	return p.final
}

// set forces a steady state at once, cancelling any transition.
func (p *power) set(s PowerState) {
	p.phases = nil
	p.final = s
	p.gen++
}

// errConflict is returned by reset when strict mode rejects a reset that
// would not change anything.
type errConflict struct{ msg string }

func (e errConflict) Error() string { return e.msg }

// reset applies a reset. The transition starts from the state the host is
// heading to (a reset during a transition replaces the rest of it). With a
// zero delay the new state is immediate; otherwise every step through
// PoweringOn or PoweringOff lasts delay. In strict mode a reset that changes
// nothing (On when on, ForceOff when off, a restart or NMI when off) is an
// errConflict, as iDRAC answers 409; otherwise it is a successful no-op.
func (p *power) reset(t ResetType, now time.Time, delay time.Duration, strict bool) error {
	p.current(now)
	from := p.final
	on := from == PowerOn
	var steps []PowerState // transitional states, then the final one
	switch t {
	case ResetOn, ResetForceOn:
		if !on {
			steps = []PowerState{PoweringOn, PowerOn}
		}
	case ResetForceOff, ResetGracefulShutdown:
		if on {
			steps = []PowerState{PoweringOff, PowerOff}
		}
	case ResetPushPowerButton:
		if on {
			steps = []PowerState{PoweringOff, PowerOff}
		} else {
			steps = []PowerState{PoweringOn, PowerOn}
		}
	case ResetForceRestart, ResetGracefulRestart:
		if on {
			steps = []PowerState{PoweringOff, PoweringOn, PowerOn}
		}
	case ResetPowerCycle:
		if on {
			steps = []PowerState{PoweringOff, PoweringOn, PowerOn}
		} else {
			steps = []PowerState{PoweringOn, PowerOn}
		}
	case ResetNmi:
		if !on && strict {
			return errConflict{fmt.Sprintf("cannot send an NMI: the system is %s", from)}
		}
		return nil
	default:
		return fmt.Errorf("unknown reset type %q", t)
	}
	if steps == nil {
		if strict {
			return errConflict{fmt.Sprintf("the system is already %s: reset %s would change nothing", from, t)}
		}
		return nil
	}
	p.phases = nil
	if delay > 0 {
		at := now
		for _, s := range steps[:len(steps)-1] {
			at = at.Add(delay)
			p.phases = append(p.phases, phase{state: s, until: at})
		}
	}
	p.final = steps[len(steps)-1]
	p.gen++
	return nil
}
