package redfish

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestResetChangesPowerState(t *testing.T) {
	for _, tc := range []struct {
		reset    ResetType
		from, to PowerState
	}{
		{ResetOn, PowerOff, PowerOn},
		{ResetOn, PowerOn, PowerOn},
		{ResetForceOn, PowerOff, PowerOn},
		{ResetForceOff, PowerOn, PowerOff},
		{ResetForceOff, PowerOff, PowerOff},
		{ResetGracefulShutdown, PowerOn, PowerOff},
		{ResetPushPowerButton, PowerOn, PowerOff},
		{ResetPushPowerButton, PowerOff, PowerOn},
		{ResetForceRestart, PowerOn, PowerOn},
		{ResetGracefulRestart, PowerOn, PowerOn},
		{ResetPowerCycle, PowerOn, PowerOn},
		{ResetPowerCycle, PowerOff, PowerOn},
		{ResetNmi, PowerOn, PowerOn},
	} {
		t.Run(string(tc.reset)+"/from"+string(tc.from), func(t *testing.T) {
			b := startBMC(t, Options{InitialPowerState: tc.from})
			c := client(t, b)
			if got := powerState(t, c, b); got != tc.from {
				t.Fatalf("initial power %s", got)
			}
			resp, data := resetSystem(t, c, b, tc.reset)
			if resp.StatusCode != http.StatusNoContent {
				t.Fatalf("reset: %d %s", resp.StatusCode, data)
			}
			if got := powerState(t, c, b); got != tc.to {
				t.Fatalf("after %s from %s: GET says %s, want %s", tc.reset, tc.from, got, tc.to)
			}
			if got := b.PowerState(); got != tc.to {
				t.Fatalf("PowerState() = %s, want %s", got, tc.to)
			}
			if got := b.Resets(); !slices.Equal(got, []ResetType{tc.reset}) {
				t.Fatalf("Resets() = %v", got)
			}
		})
	}
}

func TestResetThroughSessionAndChassis(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	tok, _ := login(t, c, b)
	resp, data := do(t, c, b, http.MethodPost, b.SystemPath()+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, token(tok))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset: %d %s", resp.StatusCode, data)
	}
	_, data = do(t, c, b, http.MethodGet, chassisPath+"/1", nil, token(tok))
	if decode(t, data)["PowerState"] != "Off" {
		t.Fatalf("chassis: %s", data)
	}
}

func TestResetTransition(t *testing.T) {
	clk := newFakeClock()
	b := startBMCWithClock(t, Options{TransitionDelay: 10 * time.Second}, clk)
	c := client(t, b)

	resetSystem(t, c, b, ResetForceOff)
	if got := powerState(t, c, b); got != PoweringOff {
		t.Fatalf("just after ForceOff: %s", got)
	}
	clk.Advance(9 * time.Second)
	if got := powerState(t, c, b); got != PoweringOff {
		t.Fatalf("9s after ForceOff: %s", got)
	}
	clk.Advance(time.Second)
	if got := powerState(t, c, b); got != PowerOff {
		t.Fatalf("10s after ForceOff: %s", got)
	}

	resetSystem(t, c, b, ResetOn)
	if got := powerState(t, c, b); got != PoweringOn {
		t.Fatalf("just after On: %s", got)
	}
	clk.Advance(10 * time.Second)
	if got := powerState(t, c, b); got != PowerOn {
		t.Fatalf("10s after On: %s", got)
	}

	// A restart goes down and up again.
	resetSystem(t, c, b, ResetForceRestart)
	var seen []PowerState
	for range 3 {
		seen = append(seen, powerState(t, c, b))
		clk.Advance(10 * time.Second)
	}
	if want := []PowerState{PoweringOff, PoweringOn, PowerOn}; !slices.Equal(seen, want) {
		t.Fatalf("restart went through %v, want %v", seen, want)
	}

	// A reset during a transition starts from where the host was heading.
	resetSystem(t, c, b, ResetForceOff)
	resetSystem(t, c, b, ResetOn) // heading Off: power back on
	if got := powerState(t, c, b); got != PoweringOn {
		t.Fatalf("On during PoweringOff: %s", got)
	}
	// SetPowerState cancels a transition.
	b.SetPowerState(PowerOff)
	if got := powerState(t, c, b); got != PowerOff {
		t.Fatalf("after SetPowerState(Off): %s", got)
	}
	clk.Advance(time.Hour)
	if got := powerState(t, c, b); got != PowerOff {
		t.Fatalf("the cancelled transition resumed: %s", got)
	}
}

// TestResetTransitionRealClock checks the transition against the real clock:
// it only waits for the end state (the deadline is a hang detector).
func TestResetTransitionRealClock(t *testing.T) {
	b := startBMC(t, Options{TransitionDelay: 20 * time.Millisecond})
	c := client(t, b)
	resetSystem(t, c, b, ResetGracefulShutdown)
	deadline := time.Now().Add(hangLimit)
	var seen []PowerState
	for {
		s := powerState(t, c, b)
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		if s == PowerOff {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never reached Off: %v", seen)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, s := range seen {
		if s != PoweringOff && s != PowerOff {
			t.Fatalf("unexpected state on the way down: %v", seen)
		}
	}
}

func TestSetPowerState(t *testing.T) {
	b := startBMC(t, Options{})
	c := client(t, b)
	tag := func() string {
		resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, basic(b.Username(), b.Password()))
		return resp.Header.Get("ETag")
	}
	before := tag()
	b.SetPowerState(PowerOff) // someone pulled the plug
	if got := powerState(t, c, b); got != PowerOff {
		t.Fatalf("GET after SetPowerState(Off): %s", got)
	}
	if tag() == before {
		t.Fatal("ETag did not change with the power state")
	}
	b.SetPowerState(PowerOn)
	if got := b.PowerState(); got != PowerOn {
		t.Fatalf("PowerState() = %s", got)
	}
	if len(b.Resets()) != 0 {
		t.Fatal("SetPowerState recorded a reset")
	}
}

func TestResetRefused(t *testing.T) {
	b := startBMC(t, Options{AllowedResetTypes: []ResetType{ResetOn, ResetForceOff}})
	c := client(t, b)
	act := b.SystemPath() + "/Actions/ComputerSystem.Reset"
	auth := basic(b.Username(), b.Password())
	for _, tc := range []struct {
		name string
		body any
		code string
	}{
		{"missing ResetType", map[string]string{}, ".ActionParameterMissing"},
		{"unknown ResetType", map[string]string{"ResetType": "Explode"}, ".ActionParameterNotSupported"},
		{"not allowed here", map[string]string{"ResetType": "GracefulShutdown"}, ".ActionParameterNotSupported"},
		{"not JSON", "ResetType=On", ".MalformedJSON"},
	} {
		resp, data := do(t, c, b, http.MethodPost, act, tc.body, auth)
		if resp.StatusCode != http.StatusBadRequest || !strings.HasSuffix(errorCode(t, data), tc.code) {
			t.Errorf("%s: %d %s", tc.name, resp.StatusCode, data)
		}
	}
	if b.PowerState() != PowerOn || len(b.Resets()) != 0 {
		t.Fatalf("a refused reset had an effect: %s %v", b.PowerState(), b.Resets())
	}
	_, data := do(t, c, b, http.MethodGet, b.SystemPath(), nil, auth)
	allowed := decode(t, data)["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)["ResetType@Redfish.AllowableValues"]
	if len(allowed.([]any)) != 2 {
		t.Fatalf("AllowableValues %v", allowed)
	}
}

func TestStrictReset(t *testing.T) {
	b := startBMC(t, Options{StrictReset: true})
	c := client(t, b)
	for _, rt := range []ResetType{ResetOn, ResetForceOn} {
		if resp, data := resetSystem(t, c, b, rt); resp.StatusCode != http.StatusConflict {
			t.Fatalf("%s when on: %d %s", rt, resp.StatusCode, data)
		}
	}
	if resp, _ := resetSystem(t, c, b, ResetForceOff); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("ForceOff when on: %d", resp.StatusCode)
	}
	for _, rt := range []ResetType{ResetForceOff, ResetGracefulShutdown, ResetForceRestart, ResetGracefulRestart, ResetNmi} {
		if resp, data := resetSystem(t, c, b, rt); resp.StatusCode != http.StatusConflict {
			t.Fatalf("%s when off: %d %s", rt, resp.StatusCode, data)
		}
	}
	if got := b.Resets(); !slices.Equal(got, []ResetType{ResetForceOff}) {
		t.Fatalf("Resets() = %v", got)
	}
}

func TestStrictETag(t *testing.T) {
	b := startBMC(t, Options{StrictETag: true})
	c := client(t, b)
	resp, _ := do(t, c, b, http.MethodGet, b.SystemPath(), nil, basic(b.Username(), b.Password()))
	stale := resp.Header.Get("ETag")
	b.SetPowerState(PowerOff) // changed behind the client's back
	if resp, data := resetSystem(t, c, b, ResetOn, header("If-Match", stale)); resp.StatusCode != http.StatusPreconditionFailed ||
		!strings.HasSuffix(errorCode(t, data), ".PreconditionFailed") {
		t.Fatalf("stale If-Match: %d %s", resp.StatusCode, data)
	}
	if b.PowerState() != PowerOff {
		t.Fatal("reset with a stale ETag took effect")
	}
	resp, _ = do(t, c, b, http.MethodGet, b.SystemPath(), nil, basic(b.Username(), b.Password()))
	if resp, data := resetSystem(t, c, b, ResetOn, header("If-Match", resp.Header.Get("ETag"))); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("fresh If-Match: %d %s", resp.StatusCode, data)
	}
	for _, h := range []reqOpt{header("If-Match", "*"), func(*http.Request) {}} {
		if resp, data := resetSystem(t, c, b, ResetForceOff, h); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("If-Match * or none: %d %s", resp.StatusCode, data)
		}
		b.SetPowerState(PowerOn)
	}
}
