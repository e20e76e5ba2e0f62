package ipam

import (
	"errors"
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// TestPropertyNoDoubleAssignment runs random Assign/Release/restart sequences
// (restart = a new Allocator, possibly with changed pools, primed from every
// Service's current IPs in random order, then every Service re-assigned in random
// order) and checks after every step that no IP is held by two Services unless
// they share compatibly, that the internal indexes agree, and that a restart
// keeps every IP still valid.
func TestPropertyNoDoubleAssignment(t *testing.T) {
	poolSets := [][]config.AddressPool{
		{
			buggy(mkPool("small", "10.0.0.254-10.0.1.3")),
			mkPool("dual", "10.0.2.0/29", "2001:db8::/125"),
			prio(inNS(mkPool("team", "10.0.3.0/30"), "team"), -1),
			noAuto(mkPool("manual", "10.0.4.0/30", "2001:db8:4::/126")),
			mkPool("v6", "2001:db8:6::/126"),
		},
		{ // ranges shrunk and moved: some IPs fall out of every pool
			mkPool("small", "10.0.1.0/31"),
			mkPool("dual", "10.0.2.4/30", "2001:db8::/126"),
			mkPool("team", "10.0.3.0/31"),
			noAuto(mkPool("manual", "10.0.4.0/30")),
			mkPool("v6", "2001:db8:6::/127"),
		},
	}
	var candidateIPs []netip.Addr
	for _, s := range []string{"10.0.0.255", "10.0.1.1", "10.0.2.3", "10.0.3.1", "10.0.4.2", "2001:db8::2", "2001:db8:4::1", "2001:db8:6::1", "192.0.2.1"} {
		candidateIPs = append(candidateIPs, netip.MustParseAddr(s))
	}
	famChoices := [][]v1.IPFamily{v4, v4, v6, v46, v64}

	for seed := int64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			randReq := func(key string) Request {
				r := Request{Namespace: "default", Families: famChoices[rng.Intn(len(famChoices))]}
				if key[0] == 't' {
					r.Namespace = "team"
				}
				r.RequireAll = len(r.Families) == 2 && rng.Intn(2) == 0
				if rng.Intn(4) == 0 {
					r.Pool = []string{"small", "dual", "team", "manual", "v6", "nope"}[rng.Intn(6)]
				}
				if rng.Intn(5) == 0 {
					ip := candidateIPs[rng.Intn(len(candidateIPs))]
					if containsFamily(r.Families, familyOf(ip)) {
						r.IPs = []netip.Addr{ip}
					}
				}
				if rng.Intn(2) == 0 {
					r.SharingKey = []string{"a", "b"}[rng.Intn(2)]
				}
				r.Ports = []Port{{Protocol: []v1.Protocol{"TCP", "UDP"}[rng.Intn(2)], Port: int32(80 + rng.Intn(3))}}
				r.Local = rng.Intn(3) == 0
				if r.Local {
					r.Selector = map[string]string{"app": []string{"x", "y"}[rng.Intn(2)]}
				}
				return r
			}
			keys := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "t0", "t1", "t2"}
			poolIdx := 0
			a, err := New(poolSets[poolIdx])
			if err != nil {
				t.Fatal(err)
			}
			status := map[string][]netip.Addr{} // what each Service's status says
			reqs := map[string]Request{}        // the request that produced it
			stale := map[string]bool{}          // reqs[k] failed after pools changed
			for op := 0; op < 300; op++ {
				switch n := rng.Intn(20); {
				case n < 13: // assign (maybe a changed request)
					key := keys[rng.Intn(len(keys))]
					req, ok := reqs[key]
					if !ok || rng.Intn(3) == 0 {
						req = randReq(key)
					}
					got, err := a.Assign(key, req, status[key])
					if err != nil {
						if !isSentinel(err) {
							t.Fatalf("op %d: unexpected error %v", op, err)
						}
						if as, _ := a.Assigned(key); !slices.Equal(as.IPs, status[key]) {
							t.Fatalf("op %d: failed Assign changed %s: %v -> %v", op, key, status[key], as.IPs)
						}
						continue
					}
					again, err := a.Assign(key, req, got.IPs)
					if err != nil || !slices.Equal(again.IPs, got.IPs) {
						t.Fatalf("op %d: Assign not idempotent for %s: %v then %v (%v)", op, key, got.IPs, again.IPs, err)
					}
					status[key], reqs[key] = got.IPs, req
					delete(stale, key)
				case n < 17:
					key := keys[rng.Intn(len(keys))]
					a.Release(key)
					delete(status, key)
					delete(reqs, key)
				default: // restart, sometimes with other pools
					flipped := rng.Intn(2) == 0
					if flipped {
						poolIdx = 1 - poolIdx
					}
					a, err = New(poolSets[poolIdx])
					if err != nil {
						t.Fatal(err)
					}
					order := rng.Perm(len(keys))
					for _, i := range order {
						if k := keys[i]; len(status[k]) > 0 {
							if err := a.Prime(k, reqs[k], status[k]); err != nil {
								t.Fatalf("op %d: priming %s with %v: %v", op, k, status[k], err)
							}
						}
					}
					checkInvariants(t, a)
					for _, i := range rng.Perm(len(keys)) {
						k := keys[i]
						if _, ok := reqs[k]; !ok {
							continue
						}
						got, err := a.Assign(k, reqs[k], status[k])
						if err != nil {
							if !isSentinel(err) || !flipped && !stale[k] {
								t.Fatalf("op %d: re-assigning %s after a restart: %v", op, k, err)
							}
							stale[k] = true
							continue // keeps its primed IPs, like a Service left pending
						}
						// With unchanged pools a restart keeps every IP (PreferDualStack
						// may gain a family that became free).
						if !flipped && !stale[k] && !subset(status[k], got.IPs) {
							t.Fatalf("op %d: restart moved %s from %v to %v", op, k, status[k], got.IPs)
						}
						status[k] = got.IPs
						delete(stale, k)
					}
				}
				checkInvariants(t, a)
				for k, ips := range status {
					if as, ok := a.Assigned(k); !ok || !slices.Equal(as.IPs, ips) {
						t.Fatalf("op %d: %s holds %v, status says %v", op, k, as.IPs, ips)
					}
				}
			}
		})
	}
}

func subset(small, big []netip.Addr) bool {
	for _, ip := range small {
		if !slices.Contains(big, ip) {
			return false
		}
	}
	return true
}

func isSentinel(err error) bool {
	for _, s := range []error{ErrBadAnnotation, ErrUnknownPool, ErrPoolExhausted, ErrNotInPool, ErrIPInUse, ErrSharingConflict, ErrNotAllowed, ErrFamilyUnavailable} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// TestRestartKeepsEveryIP fills pools with random Services, then restarts with the
// same pools (priming in random order): every Service must get exactly the IPs it
// had, and pending Services assigned after priming never get a primed IP.
func TestRestartKeepsEveryIP(t *testing.T) {
	pools := []config.AddressPool{buggy(mkPool("p", "10.0.0.0/26", "2001:db8::/122")), mkPool("q", "10.0.1.0/28")}
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		a, err := New(pools)
		if err != nil {
			t.Fatal(err)
		}
		status := map[string][]netip.Addr{}
		reqs := map[string]Request{}
		for i := range 150 {
			key := fmt.Sprintf("ns/s%d", i)
			req := Request{Namespace: "ns", Families: [][]v1.IPFamily{v4, v6, v46}[rng.Intn(3)], Ports: tcp(int32(rng.Intn(4)))}
			if rng.Intn(3) == 0 {
				req.SharingKey = "k"
			}
			got, err := a.Assign(key, req, nil)
			if err == nil {
				status[key], reqs[key] = got.IPs, req
			}
			if rng.Intn(4) == 0 {
				victim := fmt.Sprintf("ns/s%d", rng.Intn(i+1))
				a.Release(victim)
				delete(status, victim)
			}
		}
		b, err := New(pools)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range status {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		held := map[netip.Addr]bool{}
		for _, k := range keys {
			if err := b.Prime(k, reqs[k], status[k]); err != nil {
				t.Fatalf("seed %d: Prime %s: %v", seed, k, err)
			}
			for _, ip := range status[k] {
				held[ip] = true
			}
		}
		// A pending Service first: it must not get a primed IP.
		if got, err := b.Assign("ns/pending", Request{Namespace: "ns"}, nil); err == nil {
			for _, ip := range got.IPs {
				if held[ip] {
					t.Fatalf("seed %d: pending Service got primed IP %s", seed, ip)
				}
			}
		}
		for _, k := range keys {
			got, err := b.Assign(k, reqs[k], status[k])
			if err != nil || !slices.Equal(got.IPs, status[k]) {
				t.Fatalf("seed %d: %s after restart: %v, %v; had %v", seed, k, got.IPs, err, status[k])
			}
		}
		checkInvariants(t, b)
	}
}
