package inventory

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGuardProperty drives random sequences of inventories (hosts removed, restored,
// decommissioned, documents cut short), reloads, clock steps, restarts, leadership
// terms ending and starting again, Node registrations and deletions, and
// acknowledgements (current and stale) through the Store, and checks after every step, against a model kept by the test, that no host
// a Node references is reported gone unless:
//   - it was acknowledged (it was listed by a trip whose ID the test wrote), or
//   - it was removed within the limits: at most MaxHosts removals that were not
//     acknowledged become reportable within any Window, and only from a document that
//     lacks the host and was served unchanged for SettleTime and two reloads;
//
// and that nothing at all is reported gone while a trip stands.
func TestGuardProperty(t *testing.T) {
	const (
		hosts    = 14
		maxHosts = 3
		window   = time.Hour
		settle   = 10 * time.Second
	)
	for seed := range propertySeeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			f := newFixture(t, maxHosts, 100)
			f.guard.SettleTime = settle
			f.restart()
			universe := nodesFor(0, hosts)

			present := map[string]bool{} // in the served document and not decommissioned
			for _, h := range universe {
				present[h] = true
			}
			var (
				served      string
				servedAt    time.Time
				reloadsSeen int
				acked       = map[string]bool{}
				allowed     = map[string]bool{} // reportable at the last check
				accepted    = map[string]bool{} // became reportable since it was last in a reloaded document
				removalsAt  []time.Time         // not acknowledged, became reportable
				ops         []string
			)
			serve := func(doc string) {
				if doc != served {
					served, servedAt, reloadsSeen = doc, f.clock.Now(), 0
				}
				f.src.set(doc, nil)
			}
			render := func(cut bool) string {
				var b strings.Builder
				b.WriteString("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n")
				n := 0
				for i, h := range universe {
					if cut && n >= hosts/3 {
						break
					}
					if !present[h] && rng.IntN(2) == 0 {
						continue // absent rather than decommissioned
					}
					n++
					fmt.Fprintf(&b, "- name: %s\n  addresses: [{type: InternalIP, address: 10.1.0.%d}]\n", h, i+1)
					if !present[h] {
						b.WriteString("  state: decommissioned\n")
					}
				}
				return b.String()
			}
			f.setNodes(universe...)
			serve(render(false))
			_ = f.store.Reload(f.ctx)
			reloadsSeen++

			check := func() {
				t.Helper()
				trip := f.store.Trip()
				f.mu.Lock()
				nodes := slices.Clone(f.nodes)
				f.mu.Unlock()
				for _, h := range nodes {
					ok := f.store.GoneAllowed(h) == nil
					if ok && trip != nil {
						t.Fatalf("ops %v: %s reported gone while trip %s stands", ops, h, trip.ID)
					}
					if ok && !accepted[h] && !acked[h] {
						v, err := Parse([]byte(served))
						if err != nil {
							t.Fatalf("ops %v: served an invalid document: %v", ops, err)
						}
						sh, has := v.Host(h)
						lacks := !has || sh.Gone()
						if !lacks {
							t.Fatalf("ops %v: %s reported gone but the served document has it", ops, h)
						}
						if f.clock.Since(servedAt) < settle || reloadsSeen < 2 {
							t.Fatalf("ops %v: %s reported gone from a document served %s ago, %d reloads", ops, h, f.clock.Since(servedAt), reloadsSeen)
						}
						removalsAt = append(removalsAt, f.clock.Now())
					}
					allowed[h] = ok
					if ok {
						accepted[h] = true
					}
				}
				cut := f.clock.Now().Add(-window)
				n := 0
				for _, at := range removalsAt {
					if at.After(cut) {
						n++
					}
				}
				if n > maxHosts {
					t.Fatalf("ops %v: %d removals within the window, limit %d", ops, n, maxHosts)
				}
			}

			for range 60 {
				switch op := rng.IntN(10); op {
				case 0, 1: // remove or decommission some hosts
					for range 1 + rng.IntN(5) {
						present[universe[rng.IntN(hosts)]] = false
					}
					serve(render(false))
					ops = append(ops, "remove")
				case 2: // restore some
					for range 1 + rng.IntN(5) {
						present[universe[rng.IntN(hosts)]] = true
					}
					serve(render(false))
					ops = append(ops, "restore")
				case 3: // a document read mid-write
					serve(render(true))
					ops = append(ops, "cut")
				case 4: // a comment
					serve(served + "# edit " + fmt.Sprint(rng.IntN(1000)) + "\n")
					ops = append(ops, "comment")
				case 5: // restart, or the leadership term ends and a later one starts
					if rng.IntN(2) == 0 {
						f.restart()
						ops = append(ops, "restart")
						break
					}
					f.endTerm()
					for range 1 + rng.IntN(3) {
						_ = f.store.Reload(f.ctx)
						reloadsSeen++
						f.clock.Step(time.Duration(rng.IntN(8)) * time.Second)
						for _, h := range universe {
							if f.store.GoneAllowed(h) == nil {
								t.Fatalf("ops %v: %s reported gone outside a leadership term", ops, h)
							}
						}
					}
					f.lead(f.state)
					ops = append(ops, "new-term")
				case 6: // acknowledge the current trip, or a stale ID
					if tr := f.store.Trip(); tr != nil && rng.IntN(3) > 0 {
						for _, h := range tr.Hosts {
							acked[h] = true
						}
						_ = os.WriteFile(f.ack, []byte(tr.ID), 0o600)
						ops = append(ops, "ack")
					} else {
						_ = os.WriteFile(f.ack, []byte("inventory-000000000000"), 0o600)
						ops = append(ops, "stale-ack")
					}
				case 7: // the lifecycle controller deletes reportable Nodes; kubelets register
					var keep []string
					f.mu.Lock()
					for _, h := range f.nodes {
						if !allowed[h] {
							keep = append(keep, h)
						}
					}
					f.mu.Unlock()
					if h := universe[rng.IntN(hosts)]; present[h] && !slices.Contains(keep, h) {
						keep = append(keep, h)
					}
					f.setNodes(keep...)
					ops = append(ops, "nodes")
				default: // time passes, reloads happen
					f.clock.Step(time.Duration(rng.IntN(20)) * time.Minute / 4)
					ops = append(ops, "step")
				}
				for range 1 + rng.IntN(3) {
					_ = f.store.Reload(f.ctx)
					reloadsSeen++
					if v, err := Parse([]byte(served)); err == nil {
						for _, h := range universe {
							if vh, ok := v.Host(h); ok && !vh.Gone() {
								accepted[h], acked[h] = false, false
							}
						}
					}
					f.clock.Step(time.Duration(rng.IntN(8)) * time.Second)
					check()
				}
			}
		})
	}
}
