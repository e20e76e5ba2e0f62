package bmc

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
)

// TestConcurrentLifecycleSyncs (issue 26): cloud-provider v0.37 runs InstanceExists and
// InstanceShutdown in parallel, --concurrent-node-lifecycle-syncs of them (the
// package sets 16). Here 16 workers each walk every NotReady host of two blade
// enclosures (8 blades behind each BMC) for several rounds, asking the Service as
// InstanceShutdown does (Recent with a short wait) and as the power monitor does
// (PowerState), under -race. Per BMC: one login and one session (ended by Close:
// StartForTest checks), and per blade at most one GET of its system per round (the
// cache and the coalescing hold under concurrency), plus the first choice's.
func TestConcurrentLifecycleSyncs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const workers, bladesPerBMC, rounds = 16, 8, 4
	ca, err := redfish.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	var bmcs []*redfish.BMC
	var targets []Target
	for e := range 2 {
		var specs []redfish.SystemSpec
		for i := range bladesPerBMC {
			st := redfish.PowerOn
			if i%2 == 1 {
				st = redfish.PowerOff
			}
			specs = append(specs, redfish.SystemSpec{ID: fmt.Sprintf("Blade%d", i+1), InitialPowerState: st})
		}
		b := startRedfish(t, redfish.Options{CA: ca, Systems: specs})
		bmcs = append(bmcs, b)
		base := redfishTarget(t, b, b.Password()) // one credentials and CA file per enclosure
		for i, sp := range specs {
			tgt := base
			tgt.Host, tgt.System = fmt.Sprintf("enc%d-blade%d", e, i+1), sp.ID
			targets = append(targets, tgt)
		}
	}
	s := NewSessions(nil, time.Minute)
	clk := clocktesting.NewFakePassiveClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := DefaultConfig() // CacheTTL 5 s, CallTimeout 10 s, MaxConcurrent 32
	svc := NewService(s, cfg, clk)

	errs := make(chan error, workers*len(targets)*2*rounds)
	for round := range rounds {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range targets {
					tgt := targets[(i+w)%len(targets)] // each worker starts elsewhere
					wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					r, err := svc.Recent(wctx, tgt, cfg.CacheTTL)
					cancel()
					if err == nil {
						_, err = svc.PowerState(ctx, tgt)
					}
					if err == nil && r.State != PowerOn && r.State != PowerOff {
						err = fmt.Errorf("%s: state %s", tgt.Host, r.State)
					}
					if err != nil {
						errs <- fmt.Errorf("round %d, %s: %w", round, tgt.Host, err)
					}
				}
			})
		}
		wg.Wait()
		clk.SetTime(clk.Now().Add(cfg.CacheTTL)) // every reading is due again
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for e, b := range bmcs {
		logins := b.RequestCount(http.MethodPost, "/redfish/v1/SessionService/Sessions")
		var reads, most int
		for i := range bladesPerBMC {
			n := b.RequestCount(http.MethodGet, fmt.Sprintf("/redfish/v1/Systems/Blade%d", i+1))
			reads += n
			most = max(most, n)
		}
		t.Logf("BMC %d: %d logins, %d sessions created, %d open, %d system reads (%d rounds x %d blades, %d workers)",
			e, logins, b.SessionsCreated(), b.ActiveSessions(), reads, rounds, bladesPerBMC, workers)
		if logins != 1 || b.SessionsCreated() != 1 || b.ActiveSessions() != 1 {
			t.Errorf("BMC %d: %d logins, %d sessions created, %d open; want 1, 1, 1", e, logins, b.SessionsCreated(), b.ActiveSessions())
		}
		if most > rounds+1 {
			t.Errorf("BMC %d: a blade's system was read %d times in %d rounds, want at most %d", e, most, rounds, rounds+1)
		}
	}
	s.Close(ctx, 5*time.Second)
	for e, b := range bmcs {
		if b.ActiveSessions() != 0 || b.SessionsDeleted() != 1 {
			t.Errorf("BMC %d after Close: %d open, %d deleted; want 0, 1", e, b.ActiveSessions(), b.SessionsDeleted())
		}
	}
}
