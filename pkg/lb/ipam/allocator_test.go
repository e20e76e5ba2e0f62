package ipam

import (
	"errors"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

func mkPool(name string, addrs ...string) config.AddressPool {
	return config.AddressPool{Name: name, Addresses: addrs}
}

func noAuto(p config.AddressPool) config.AddressPool {
	f := false
	p.AutoAssign = &f
	return p
}

func prio(p config.AddressPool, n int32) config.AddressPool { p.Priority = n; return p }

func buggy(p config.AddressPool) config.AddressPool { p.AvoidBuggyIPs = true; return p }

func inNS(p config.AddressPool, ns ...string) config.AddressPool { p.Namespaces = ns; return p }

func withSel(p config.AddressPool, l map[string]string) config.AddressPool {
	p.ServiceSelector = &metav1.LabelSelector{MatchLabels: l}
	return p
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

var (
	v4   = []v1.IPFamily{v1.IPv4Protocol}
	v6   = []v1.IPFamily{v1.IPv6Protocol}
	v46  = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	v64  = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
	tcp  = func(ps ...int32) []Port { return portsOf(v1.ProtocolTCP, ps...) }
	udp  = func(ps ...int32) []Port { return portsOf(v1.ProtocolUDP, ps...) }
	anyN = "default"
)

func portsOf(proto v1.Protocol, ps ...int32) []Port {
	var out []Port
	for _, p := range ps {
		out = append(out, Port{Protocol: proto, Port: p})
	}
	return out
}

// step is one operation of a table case, run in order on one Allocator.
type step struct {
	key      string
	req      Request
	current  []string
	release  bool
	prime    bool
	wantIPs  []string // nil: don't check
	wantPool []string
	wantOOP  []string
	wantErr  error
}

type allocCase struct {
	name  string
	pools []config.AddressPool
	steps []step
}

func runCases(t *testing.T, cases []allocCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.pools)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				if s.req.Namespace == "" {
					s.req.Namespace = anyN
				}
				if s.release {
					a.Release(s.key)
					continue
				}
				var got Assignment
				if s.prime {
					err = a.Prime(s.key, s.req, addrs(s.current...))
					got, _ = a.Assigned(s.key)
				} else {
					got, err = a.Assign(s.key, s.req, addrs(s.current...))
				}
				if s.wantErr != nil {
					if !errors.Is(err, s.wantErr) {
						t.Fatalf("step %d (%s): err = %v, want %v", i, s.key, err, s.wantErr)
					}
					if !strings.Contains(err.Error(), s.key) {
						t.Errorf("step %d: error does not name the service %q: %v", i, s.key, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d (%s): %v", i, s.key, err)
				}
				if s.wantIPs != nil && !slices.Equal(got.IPs, addrs(s.wantIPs...)) {
					t.Fatalf("step %d (%s): IPs = %v, want %v", i, s.key, got.IPs, s.wantIPs)
				}
				if s.wantPool != nil && !slices.Equal(got.Pools, s.wantPool) {
					t.Errorf("step %d (%s): pools = %v, want %v", i, s.key, got.Pools, s.wantPool)
				}
				if !slices.Equal(got.OutOfPool, addrs(s.wantOOP...)) {
					t.Errorf("step %d (%s): OutOfPool = %v, want %v", i, s.key, got.OutOfPool, s.wantOOP)
				}
				if again, ok := a.Assigned(s.key); ok != (len(got.IPs) > 0) || !slices.Equal(again.IPs, got.IPs) {
					t.Errorf("step %d (%s): Assigned = %v, %v; want %v", i, s.key, again.IPs, ok, got.IPs)
				}
			}
			checkInvariants(t, a)
		})
	}
}

func TestAllocation(t *testing.T) {
	runCases(t, []allocCase{
		{
			name:  "lowest free address of a CIDR, then the next",
			pools: []config.AddressPool{mkPool("p", "10.0.0.0/30")},
			steps: []step{
				{key: "a", wantIPs: []string{"10.0.0.0"}, wantPool: []string{"p"}},
				{key: "b", wantIPs: []string{"10.0.0.1"}},
			},
		},
		{
			name:  "ranges in the order the pool lists them (as MetalLB), lowest first within each",
			pools: []config.AddressPool{mkPool("p", "10.0.1.5-10.0.1.5", "10.0.0.9 - 10.0.0.10")},
			steps: []step{
				{key: "a", wantIPs: []string{"10.0.1.5"}},
				{key: "b", wantIPs: []string{"10.0.0.9"}},
				{key: "c", wantIPs: []string{"10.0.0.10"}},
				{key: "d", wantErr: ErrPoolExhausted},
			},
		},
		{
			name:  "avoidBuggyIPs skips .0 and .255",
			pools: []config.AddressPool{buggy(mkPool("p", "10.0.0.254-10.0.1.1"))},
			steps: []step{
				{key: "a", wantIPs: []string{"10.0.0.254"}},
				{key: "b", wantIPs: []string{"10.0.1.1"}},
				{key: "c", wantErr: ErrPoolExhausted},
				{key: "d", req: Request{IPs: addrs("10.0.1.0")}, wantErr: ErrNotInPool},
			},
		},
		{
			name:  "idempotent: the same request keeps the same IP",
			pools: []config.AddressPool{mkPool("p", "10.0.0.0/29")},
			steps: []step{
				{key: "a", wantIPs: []string{"10.0.0.0"}},
				{key: "b", wantIPs: []string{"10.0.0.1"}},
				{key: "a", wantIPs: []string{"10.0.0.0"}},
				{key: "a", current: []string{"10.0.0.0"}, wantIPs: []string{"10.0.0.0"}},
			},
		},
		{
			name:  "a freed address is reused lowest first",
			pools: []config.AddressPool{mkPool("p", "10.0.0.0/29")},
			steps: []step{
				{key: "a", wantIPs: []string{"10.0.0.0"}},
				{key: "b", wantIPs: []string{"10.0.0.1"}},
				{key: "c", wantIPs: []string{"10.0.0.2"}},
				{key: "c", release: true},
				{key: "a", release: true},
				{key: "d", wantIPs: []string{"10.0.0.0"}},
				{key: "e", wantIPs: []string{"10.0.0.2"}},
				{key: "f", wantIPs: []string{"10.0.0.3"}},
			},
		},
		{
			name:  "requested IP; a later auto-assignment skips it",
			pools: []config.AddressPool{mkPool("p", "10.0.0.0/29")},
			steps: []step{
				{key: "a", req: Request{IPs: addrs("10.0.0.1")}, wantIPs: []string{"10.0.0.1"}},
				{key: "b", wantIPs: []string{"10.0.0.0"}},
				{key: "c", wantIPs: []string{"10.0.0.2"}},
				{key: "d", req: Request{IPs: addrs("10.0.0.1")}, wantErr: ErrIPInUse},
				{key: "e", req: Request{IPs: addrs("192.0.2.1")}, wantErr: ErrNotInPool},
			},
		},
		{
			name:  "pool choice: priority, then name; named pool; autoAssign false",
			pools: []config.AddressPool{mkPool("b", "10.0.2.0/30"), mkPool("a", "10.0.1.0/30"), prio(mkPool("z", "10.0.0.0/30"), 5), prio(mkPool("neg", "10.0.3.0/30"), -1), noAuto(prio(mkPool("manual", "10.0.9.0/30"), -9))},
			steps: []step{
				{key: "1", wantIPs: []string{"10.0.3.0"}, wantPool: []string{"neg"}},
				{key: "2", req: Request{Pool: "z"}, wantIPs: []string{"10.0.0.0"}, wantPool: []string{"z"}},
				{key: "3", req: Request{Pool: "manual"}, wantIPs: []string{"10.0.9.0"}},
				{key: "4", req: Request{IPs: addrs("10.0.9.3")}, wantIPs: []string{"10.0.9.3"}, wantPool: []string{"manual"}},
				{key: "5", req: Request{Pool: "nope"}, wantErr: ErrUnknownPool},
				{key: "6", req: Request{Pool: "a", IPs: addrs("10.0.2.1")}, wantErr: ErrNotInPool},
				{key: "7", req: Request{Pool: "a", IPs: addrs("10.0.1.2")}, wantIPs: []string{"10.0.1.2"}},
			},
		},
		{
			name:  "equal priority in name order, spilling to the next pool when full",
			pools: []config.AddressPool{mkPool("b", "10.0.2.0/31"), mkPool("a", "10.0.1.0/31")},
			steps: []step{
				{key: "1", wantIPs: []string{"10.0.1.0"}},
				{key: "2", wantIPs: []string{"10.0.1.1"}},
				{key: "3", wantIPs: []string{"10.0.2.0"}, wantPool: []string{"b"}},
			},
		},
		{
			name:  "changing the request moves the Service and releases the old IP",
			pools: []config.AddressPool{mkPool("a", "10.0.1.0/30"), mkPool("b", "10.0.2.0/30")},
			steps: []step{
				{key: "s", wantIPs: []string{"10.0.1.0"}},
				{key: "s", req: Request{Pool: "b"}, current: []string{"10.0.1.0"}, wantIPs: []string{"10.0.2.0"}},
				{key: "t", wantIPs: []string{"10.0.1.0"}},
				{key: "s", req: Request{IPs: addrs("10.0.2.3")}, wantIPs: []string{"10.0.2.3"}},
				{key: "u", req: Request{Pool: "b"}, wantIPs: []string{"10.0.2.0"}},
			},
		},
		{
			name:  "a failed change leaves the Service as it was",
			pools: []config.AddressPool{mkPool("a", "10.0.1.0/31")},
			steps: []step{
				{key: "s", wantIPs: []string{"10.0.1.0"}},
				{key: "s", req: Request{Pool: "gone"}, wantErr: ErrUnknownPool},
				{key: "s", req: Request{IPs: addrs("10.9.9.9")}, wantErr: ErrNotInPool},
				{key: "t", wantIPs: []string{"10.0.1.1"}},
				{key: "u", wantErr: ErrPoolExhausted},
				{key: "s", wantIPs: []string{"10.0.1.0"}},
			},
		},
		{
			name:  "exhausted, then a release makes room",
			pools: []config.AddressPool{mkPool("a", "10.0.1.7/32")},
			steps: []step{
				{key: "s", wantIPs: []string{"10.0.1.7"}},
				{key: "t", wantErr: ErrPoolExhausted},
				{key: "s", release: true},
				{key: "t", wantIPs: []string{"10.0.1.7"}},
			},
		},
		{
			name:  "bad requests",
			pools: []config.AddressPool{mkPool("a", "10.0.1.0/30", "2001:db8::/126")},
			steps: []step{
				{key: "s", req: Request{Families: v4, IPs: addrs("2001:db8::1")}, wantErr: ErrBadAnnotation},
				{key: "s", req: Request{Families: v46, IPs: addrs("10.0.1.1", "10.0.1.2")}, wantErr: ErrBadAnnotation},
				{key: "s", req: Request{Families: []v1.IPFamily{"IPv5"}}, wantErr: ErrBadAnnotation},
				{key: "s", req: Request{Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv4Protocol}}, wantErr: ErrBadAnnotation},
			},
		},
	})
}

func TestSharing(t *testing.T) {
	one := []config.AddressPool{mkPool("p", "10.0.0.0/31")}
	runCases(t, []allocCase{
		{
			name:  "same key, disjoint ports: auto-assignment joins the shared IP",
			pools: one,
			steps: []step{
				{key: "a", req: Request{SharingKey: "k", Ports: tcp(80)}, wantIPs: []string{"10.0.0.0"}},
				{key: "b", req: Request{SharingKey: "k", Ports: tcp(443)}, wantIPs: []string{"10.0.0.0"}},
				{key: "c", req: Request{SharingKey: "k", Ports: udp(80)}, wantIPs: []string{"10.0.0.0"}},
				{key: "d", wantIPs: []string{"10.0.0.1"}},
			},
		},
		{
			name:  "same key, port clash: auto-assignment takes another IP; explicit is a conflict",
			pools: one,
			steps: []step{
				{key: "a", req: Request{SharingKey: "k", Ports: tcp(80)}, wantIPs: []string{"10.0.0.0"}},
				{key: "b", req: Request{SharingKey: "k", Ports: tcp(80)}, wantIPs: []string{"10.0.0.1"}},
				{key: "c", req: Request{SharingKey: "k", Ports: tcp(80, 8080), IPs: addrs("10.0.0.0")}, wantErr: ErrSharingConflict},
				{key: "c", req: Request{SharingKey: "k", Ports: tcp(8080), IPs: addrs("10.0.0.0")}, wantIPs: []string{"10.0.0.0"}},
			},
		},
		{
			name:  "different or missing keys are IP in use",
			pools: one,
			steps: []step{
				{key: "a", req: Request{SharingKey: "k", Ports: tcp(80)}, wantIPs: []string{"10.0.0.0"}},
				{key: "b", req: Request{SharingKey: "other", Ports: tcp(443), IPs: addrs("10.0.0.0")}, wantErr: ErrIPInUse},
				{key: "b", req: Request{Ports: tcp(443), IPs: addrs("10.0.0.0")}, wantErr: ErrIPInUse},
				{key: "c", req: Request{Ports: tcp(443)}, wantIPs: []string{"10.0.0.1"}},
				{key: "d", req: Request{SharingKey: "k", Ports: tcp(443), IPs: addrs("10.0.0.1")}, wantErr: ErrIPInUse},
			},
		},
		{
			name:  "traffic policies: Local with Cluster conflicts, Local needs the same selector",
			pools: []config.AddressPool{mkPool("p", "10.0.0.0/30")},
			steps: []step{
				{key: "a", req: Request{SharingKey: "k", Ports: tcp(80), Local: true, Selector: map[string]string{"app": "x"}}, wantIPs: []string{"10.0.0.0"}},
				{key: "b", req: Request{SharingKey: "k", Ports: tcp(81), IPs: addrs("10.0.0.0")}, wantErr: ErrSharingConflict},
				{key: "b", req: Request{SharingKey: "k", Ports: tcp(81), Local: true, Selector: map[string]string{"app": "y"}, IPs: addrs("10.0.0.0")}, wantErr: ErrSharingConflict},
				{key: "b", req: Request{SharingKey: "k", Ports: tcp(81), Local: true, Selector: map[string]string{"app": "x"}, IPs: addrs("10.0.0.0")}, wantIPs: []string{"10.0.0.0"}},
				{key: "c", req: Request{SharingKey: "k", Ports: tcp(82)}, wantIPs: []string{"10.0.0.1"}},
				{key: "d", req: Request{SharingKey: "k", Ports: tcp(83)}, wantIPs: []string{"10.0.0.1"}},
			},
		},
		{
			name:  "a shared IP is freed when its last holder leaves",
			pools: []config.AddressPool{mkPool("p", "10.0.0.0/32")},
			steps: []step{
				{key: "a", req: Request{SharingKey: "k", Ports: tcp(80)}, wantIPs: []string{"10.0.0.0"}},
				{key: "b", req: Request{SharingKey: "k", Ports: tcp(443)}, wantIPs: []string{"10.0.0.0"}},
				{key: "a", release: true},
				{key: "c", wantErr: ErrPoolExhausted},
				{key: "b", release: true},
				{key: "c", wantIPs: []string{"10.0.0.0"}},
			},
		},
		{
			name:  "a sole holder may change its key; a holder among others moves",
			pools: []config.AddressPool{mkPool("p", "10.0.0.0/30")},
			steps: []step{
				{key: "a", wantIPs: []string{"10.0.0.0"}},
				{key: "a", req: Request{SharingKey: "k", Ports: tcp(80)}, wantIPs: []string{"10.0.0.0"}},
				{key: "b", req: Request{SharingKey: "k", Ports: tcp(81)}, wantIPs: []string{"10.0.0.0"}},
				{key: "b", req: Request{SharingKey: "j", Ports: tcp(81)}, wantIPs: []string{"10.0.0.1"}},
				{key: "a", req: Request{SharingKey: "k", Ports: tcp(81)}, wantIPs: []string{"10.0.0.0"}},
			},
		},
		{
			name:  "dual-stack Services share both addresses",
			pools: []config.AddressPool{mkPool("p", "10.0.0.0/30", "2001:db8::/126")},
			steps: []step{
				{key: "a", req: Request{Families: v46, RequireAll: true, SharingKey: "k", Ports: tcp(80)}, wantIPs: []string{"10.0.0.0", "2001:db8::"}},
				{key: "b", req: Request{Families: v64, RequireAll: true, SharingKey: "k", Ports: tcp(53)}, wantIPs: []string{"2001:db8::", "10.0.0.0"}},
			},
		},
	})
}

func TestFamilies(t *testing.T) {
	dual := mkPool("dual", "10.0.0.0/30", "2001:db8::/126")
	only4 := mkPool("only4", "10.0.4.0/30")
	only6 := mkPool("only6", "2001:db8:6::/126")
	runCases(t, []allocCase{
		{
			name:  "single stack IPv6",
			pools: []config.AddressPool{only4, only6},
			steps: []step{{key: "a", req: Request{Families: v6}, wantIPs: []string{"2001:db8:6::"}, wantPool: []string{"only6"}}},
		},
		{
			name:  "dual stack comes from one pool, in the Service's family order",
			pools: []config.AddressPool{only4, only6, prio(dual, 10)},
			steps: []step{
				{key: "a", req: Request{Families: v64, RequireAll: true}, wantIPs: []string{"2001:db8::", "10.0.0.0"}, wantPool: []string{"dual", "dual"}},
				{key: "b", req: Request{Families: v46}, wantIPs: []string{"10.0.0.1", "2001:db8::1"}},
			},
		},
		{
			name:  "RequireDualStack without a pool of both families",
			pools: []config.AddressPool{only4, only6},
			steps: []step{{key: "a", req: Request{Families: v46, RequireAll: true}, wantErr: ErrFamilyUnavailable}},
		},
		{
			name:  "RequireDualStack with the dual pool's IPv6 exhausted",
			pools: []config.AddressPool{mkPool("d", "10.0.0.0/30", "2001:db8::/128")},
			steps: []step{
				{key: "a", req: Request{Families: v6}, wantIPs: []string{"2001:db8::"}},
				{key: "b", req: Request{Families: v46, RequireAll: true}, wantErr: ErrPoolExhausted},
				{key: "c", req: Request{Families: v46}, wantIPs: []string{"10.0.0.0"}},
			},
		},
		{
			name:  "PreferDualStack falls back to the first family, then the second",
			pools: []config.AddressPool{only4, mkPool("small6", "2001:db8:7::/128")},
			steps: []step{
				{key: "a", req: Request{Families: v46}, wantIPs: []string{"10.0.4.0"}},
				{key: "b", req: Request{Families: v64}, wantIPs: []string{"2001:db8:7::"}},
				{key: "c", req: Request{Families: v64}, wantIPs: []string{"10.0.4.1"}},
			},
		},
		{
			name:  "no pool of the family",
			pools: []config.AddressPool{only4},
			steps: []step{{key: "a", req: Request{Families: v6}, wantErr: ErrFamilyUnavailable}},
		},
		{
			name:  "PreferDualStack with a kept IPv4 adds IPv6 from the same pool",
			pools: []config.AddressPool{only6, dual},
			steps: []step{
				{key: "a", req: Request{Families: v46}, current: []string{"10.0.0.2"}, wantIPs: []string{"10.0.0.2", "2001:db8::"}},
			},
		},
		{
			name:  "requested IPv4 plus an auto-assigned IPv6 from its pool",
			pools: []config.AddressPool{only6, dual},
			steps: []step{
				{key: "a", req: Request{Families: v46, RequireAll: true, IPs: addrs("10.0.0.3")}, wantIPs: []string{"10.0.0.3", "2001:db8::"}},
			},
		},
		{
			name:  "RequireDualStack keeps a working IPv4 and takes IPv6 from another pool",
			pools: []config.AddressPool{only4, only6},
			steps: []step{
				{key: "a", req: Request{Families: v46, RequireAll: true}, current: []string{"10.0.4.1"}, wantIPs: []string{"10.0.4.1", "2001:db8:6::"}},
			},
		},
		{
			name:  "a current IP of a family no longer requested is released",
			pools: []config.AddressPool{dual},
			steps: []step{
				{key: "a", req: Request{Families: v46}, wantIPs: []string{"10.0.0.0", "2001:db8::"}},
				{key: "a", req: Request{Families: v6}, wantIPs: []string{"2001:db8::"}},
				{key: "b", wantIPs: []string{"10.0.0.0"}},
			},
		},
	})
}

func TestRestrictions(t *testing.T) {
	runCases(t, []allocCase{
		{
			name:  "namespaces",
			pools: []config.AddressPool{prio(inNS(mkPool("team", "10.0.1.0/30"), "team-a"), -1), mkPool("open", "10.0.2.0/30")},
			steps: []step{
				{key: "team-a/s", req: Request{Namespace: "team-a"}, wantIPs: []string{"10.0.1.0"}},
				{key: "other/s", req: Request{Namespace: "other"}, wantIPs: []string{"10.0.2.0"}},
				{key: "other/t", req: Request{Namespace: "other", Pool: "team"}, wantErr: ErrNotAllowed},
				{key: "other/u", req: Request{Namespace: "other", IPs: addrs("10.0.1.3")}, wantErr: ErrNotAllowed},
			},
		},
		{
			name:  "service selector",
			pools: []config.AddressPool{withSel(mkPool("sel", "10.0.1.0/30"), map[string]string{"tier": "edge"})},
			steps: []step{
				{key: "a", req: Request{Labels: map[string]string{"tier": "edge"}}, wantIPs: []string{"10.0.1.0"}},
				{key: "b", req: Request{Labels: map[string]string{"tier": "core"}}, wantErr: ErrNotAllowed},
				{key: "c", wantErr: ErrNotAllowed},
			},
		},
		{
			name:  "a kept IP in a pool that no longer admits the Service moves",
			pools: []config.AddressPool{inNS(mkPool("team", "10.0.1.0/30"), "team-a"), mkPool("open", "10.0.2.0/30")},
			steps: []step{
				{key: "x/s", req: Request{Namespace: "x"}, current: []string{"10.0.1.1"}, wantIPs: []string{"10.0.2.0"}},
			},
		},
		{
			name:  "only manual pools",
			pools: []config.AddressPool{noAuto(mkPool("m", "10.0.1.0/30"))},
			steps: []step{
				{key: "a", wantErr: ErrNotAllowed},
				{key: "a", req: Request{Pool: "m"}, wantIPs: []string{"10.0.1.0"}},
				{key: "a", wantIPs: []string{"10.0.1.0"}}, // kept, like MetalLB
			},
		},
	})
}

func TestOutOfPoolAndPriming(t *testing.T) {
	runCases(t, []allocCase{
		{
			name:  "an IP no longer in any pool is kept and reported",
			pools: []config.AddressPool{mkPool("p", "10.0.0.0/30")},
			steps: []step{
				{key: "a", current: []string{"192.0.2.7"}, wantIPs: []string{"192.0.2.7"}, wantPool: []string{""}, wantOOP: []string{"192.0.2.7"}},
				{key: "a", wantIPs: []string{"192.0.2.7"}, wantOOP: []string{"192.0.2.7"}},
				{key: "b", req: Request{IPs: addrs("192.0.2.8")}, current: []string{"192.0.2.8"}, wantIPs: []string{"192.0.2.8"}, wantOOP: []string{"192.0.2.8"}},
				{key: "c", req: Request{IPs: addrs("192.0.2.7")}, wantErr: ErrNotInPool},
				// d's status shows a's IP (a stale view somewhere): d keeps its status,
				// an error says why, nothing moves.
				{key: "d", current: []string{"192.0.2.7"}, wantErr: ErrHeldElsewhere},
				{key: "a", req: Request{Pool: "typo"}, wantErr: ErrUnknownPool},
				{key: "a", wantIPs: []string{"192.0.2.7"}, wantOOP: []string{"192.0.2.7"}},
			},
		},
		{
			name:  "a current IP in another pool than the named one moves",
			pools: []config.AddressPool{mkPool("a", "10.0.1.0/30"), mkPool("b", "10.0.2.0/30")},
			steps: []step{
				{key: "s", req: Request{Pool: "b"}, current: []string{"10.0.1.2"}, wantIPs: []string{"10.0.2.0"}},
			},
		},
		{
			name:  "primed IPs are never handed out; a priming conflict keeps the first",
			pools: []config.AddressPool{mkPool("p", "10.0.0.0/30")},
			steps: []step{
				{key: "new", prime: true}, // no current IPs: nothing held
				{key: "b", prime: true, current: []string{"10.0.0.0"}, wantIPs: []string{"10.0.0.0"}},
				{key: "c", prime: true, current: []string{"10.0.0.2", "10.0.0.3"}, wantIPs: []string{"10.0.0.2"}},
				{key: "d", prime: true, current: []string{"10.0.0.0"}, wantErr: ErrIPInUse},
				{key: "s1", prime: true, req: Request{SharingKey: "k", Ports: tcp(80)}, current: []string{"192.0.2.1"}, wantIPs: []string{"192.0.2.1"}, wantOOP: []string{"192.0.2.1"}},
				{key: "s2", prime: true, req: Request{SharingKey: "k", Ports: tcp(80)}, current: []string{"192.0.2.1"}, wantErr: ErrSharingConflict},
				{key: "s3", prime: true, req: Request{SharingKey: "k", Ports: tcp(81)}, current: []string{"192.0.2.1"}, wantIPs: []string{"192.0.2.1"}, wantOOP: []string{"192.0.2.1"}},
				{key: "e", prime: true, req: Request{Families: []v1.IPFamily{"bogus"}}, current: []string{"198.51.100.1"}, wantIPs: []string{"198.51.100.1"}, wantPool: []string{""}, wantOOP: []string{"198.51.100.1"}},
				{key: "b", prime: true, current: []string{"10.0.0.3"}, wantIPs: []string{"10.0.0.0"}}, // already held: unchanged
				{key: "new", wantIPs: []string{"10.0.0.1"}},
				{key: "d", current: []string{"10.0.0.0"}, wantErr: ErrHeldElsewhere}, // lost the priming conflict: never moved silently
				{key: "b", current: []string{"10.0.0.0"}, wantIPs: []string{"10.0.0.0"}},
			},
		},
	})
}

func TestNewRejectsBadPools(t *testing.T) {
	for name, pools := range map[string][]config.AddressPool{
		"overlap":   {mkPool("a", "10.0.0.0/24"), mkPool("b", "10.0.0.128/25")},
		"duplicate": {mkPool("a", "10.0.0.0/24"), mkPool("a", "10.0.1.0/24")},
		"garbage":   {mkPool("a", "ten")},
	} {
		if _, err := New(pools); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

func TestUsageAndPoolOf(t *testing.T) {
	pools := []config.AddressPool{
		buggy(mkPool("b", "10.1.0.0/24", "10.2.0.0/16")),
		mkPool("r", "10.3.0.10-10.3.0.19", "2001:db8::/120"),
		mkPool("huge", "2001:db8:1::/64", "2001:db9::/48"),
		{Name: "c", Addresses: []string{"10.4.0.0/30"}, Communities: []string{"no-export"}},
	}
	a, err := New(pools)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Assign("x", Request{Pool: "b"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Assign("y", Request{Pool: "huge", Families: v6}, nil); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"s1", "s2"} {
		if _, err := a.Assign(k, Request{Pool: "r", SharingKey: "k", Ports: tcp(int32(len(k) + int(k[1])))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := []PoolUsage{
		{Pool: "b", Family: v1.IPv4Protocol, Size: 254 + 65536 - 512, Used: 1},
		{Pool: "c", Family: v1.IPv4Protocol, Size: 4},
		{Pool: "huge", Family: v1.IPv6Protocol, Size: math.MaxUint64, Used: 1},
		{Pool: "r", Family: v1.IPv4Protocol, Size: 10, Used: 1},
		{Pool: "r", Family: v1.IPv6Protocol, Size: 256},
	}
	if got := a.Usage(); !slices.Equal(got, want) {
		t.Errorf("Usage =\n%v\nwant\n%v", got, want)
	}
	if p, ok := a.PoolOf(netip.MustParseAddr("10.4.0.3")); !ok || p.Name != "c" || p.Communities[0] != "no-export" {
		t.Errorf("PoolOf(10.4.0.3) = %v, %v", p, ok)
	}
	for _, s := range []string{"10.1.0.255", "10.4.0.4", "2001:db8::100", "::ffff:10.9.0.0"} {
		if p, ok := a.PoolOf(netip.MustParseAddr(s)); ok {
			t.Errorf("PoolOf(%s) = %s, want none", s, p.Name)
		}
	}
	if p, ok := a.PoolOf(netip.MustParseAddr("::ffff:10.4.0.1")); !ok || p.Name != "c" {
		t.Errorf("PoolOf(IPv4-mapped 10.4.0.1) = %v, %v", p, ok)
	}
	a.Release("s1")
	a.Release("y")
	a.Release("never-assigned")
	if u := a.Usage(); u[3].Used != 1 || u[2].Used != 0 {
		t.Errorf("after releases: %v", u)
	}
}

// TestHugeIPv6Pool checks that a /48 pool is not materialized and that explicit
// IPs far into it work.
func TestHugeIPv6Pool(t *testing.T) {
	a, err := New([]config.AddressPool{mkPool("h", "2001:db8::/32")})
	if err != nil {
		t.Fatal(err)
	}
	far := netip.MustParseAddr("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")
	got, err := a.Assign("far", Request{Families: v6, IPs: []netip.Addr{far}}, nil)
	if err != nil || got.IPs[0] != far {
		t.Fatalf("Assign far = %v, %v", got, err)
	}
	for i, want := range []string{"2001:db8::", "2001:db8::1", "2001:db8::2"} {
		got, err := a.Assign(string(rune('a'+i)), Request{Families: v6}, nil)
		if err != nil || got.IPs[0] != netip.MustParseAddr(want) {
			t.Fatalf("Assign = %v, %v; want %s", got, err, want)
		}
	}
	a.Release("far")
	if u := a.Usage(); u[0].Used != 3 {
		t.Errorf("Usage = %v", u)
	}
}

func TestConcurrentUse(t *testing.T) {
	a, err := New([]config.AddressPool{mkPool("p", "10.0.0.0/22")})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				key := string(rune('a'+g)) + "/" + string(rune('0'+i%10))
				if _, err := a.Assign(key, Request{}, nil); err != nil {
					t.Error(err)
					return
				}
				_ = a.Usage()
				if i%3 == 0 {
					a.Release(key)
				}
			}
		}()
	}
	wg.Wait()
	checkInvariants(t, a)
}

// checkInvariants verifies the allocator's internal state against what its
// Services hold: every IP is held only by compatible holders; usage counts and
// the free index agree.
func checkInvariants(t *testing.T, a *Allocator) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	holders := map[netip.Addr][]*svcAlloc{}
	for key, s := range a.svcs {
		if s.key != key {
			t.Fatalf("svc %q stored under %q", s.key, key)
		}
		seen := map[netip.Addr]bool{}
		for _, ip := range s.ips {
			if seen[ip] {
				t.Fatalf("%s holds %s twice", key, ip)
			}
			seen[ip] = true
			holders[ip] = append(holders[ip], s)
		}
	}
	if len(holders) != len(a.ips) {
		t.Fatalf("%d IPs held by services, %d in the IP map", len(holders), len(a.ips))
	}
	var used [][2]uint64
	for range a.pools {
		used = append(used, [2]uint64{})
	}
	oop := 0
	for ip, hs := range holders {
		u := a.ips[ip]
		if u == nil || len(u.holders) != len(hs) {
			t.Fatalf("%s: holders %d in map, %d by services", ip, len(u.holders), len(hs))
		}
		if u.rng != a.rangeOf(ip) {
			t.Fatalf("%s: range mismatch", ip)
		}
		if u.rng == nil {
			oop++
		} else {
			used[slices.Index(a.pools, u.rng.pool)][u.rng.family]++
		}
		for i, h := range hs {
			if len(hs) > 1 && (h.share.sharing == "" || h.share.sharing != u.sharing || h.share.local != u.local || h.share.backend != u.backend) {
				t.Fatalf("%s shared by incompatible services %s (%+v vs ip %q/%v/%q)", ip, h.key, h.share, u.sharing, u.local, u.backend)
			}
			for _, o := range hs[i+1:] {
				for _, p := range h.share.ports {
					if slices.Contains(o.share.ports, p) {
						t.Fatalf("%s: port %s used by %s and %s", ip, p, h.key, o.key)
					}
				}
			}
		}
		if u.sharing != "" {
			if _, ok := a.shared[u.sharing][ip]; !ok {
				t.Fatalf("%s missing from the sharing index of %q", ip, u.sharing)
			}
		}
	}
	for k, m := range a.shared {
		for ip := range m {
			if u := a.ips[ip]; u == nil || u.sharing != k {
				t.Fatalf("stale sharing index entry %q -> %s", k, ip)
			}
		}
	}
	if oop != a.outOfPool {
		t.Fatalf("outOfPool = %d, counted %d", a.outOfPool, oop)
	}
	for i, p := range a.pools {
		if p.used != used[i] {
			t.Fatalf("pool %s used = %v, counted %v", p.name, p.used, used[i])
		}
		for _, rs := range p.ranges {
			for _, r := range rs {
				// Every tracked offset below next is in use or in the heap; stale
				// flags match the heap.
				inHeap := map[uint64]int{}
				for _, off := range r.heap {
					inHeap[off]++
					if inHeap[off] > 1 {
						t.Fatalf("pool %s: offset %d twice in the heap", p.name, off)
					}
					if u := a.ips[r.addr(off)]; u != nil && !u.stale {
						t.Fatalf("pool %s: %s in use and in the heap but not flagged stale", p.name, r.addr(off))
					}
				}
				if r.next <= 1<<16 {
					for off := uint64(0); off < r.next; off++ {
						ip := r.addr(off)
						if a.ips[ip] == nil && inHeap[off] == 0 && !(r.avoidBuggy && isBuggy(ip)) {
							t.Fatalf("pool %s: %s is free below next but not in the heap", p.name, ip)
						}
						if u := a.ips[ip]; u != nil && u.stale != (inHeap[off] > 0) {
							t.Fatalf("pool %s: %s stale = %v, in heap %v", p.name, ip, u.stale, inHeap[off] > 0)
						}
					}
				}
			}
		}
	}
}

// SetPools changes the pools under the Services: every address held stays held (in a
// pool of the new set, or in none), the new pools serve at once, a bad set changes
// nothing.
func TestSetPools(t *testing.T) {
	a, err := New([]config.AddressPool{mkPool("a", "10.0.0.0/31")})
	if err != nil {
		t.Fatal(err)
	}
	assign := func(key string, req Request) Assignment {
		t.Helper()
		as, err := a.Assign(key, req, nil)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return as
	}
	s1 := assign("ns/s1", Request{})
	s2 := assign("ns/s2", Request{SharingKey: "k", Ports: tcp(80), IPs: addrs("10.0.0.1")})
	s3 := assign("ns/s3", Request{SharingKey: "k", Ports: tcp(81), IPs: addrs("10.0.0.1")})
	if s1.IPs[0] != netip.MustParseAddr("10.0.0.0") || s2.IPs[0] != s3.IPs[0] {
		t.Fatalf("setup: %v %v %v", s1, s2, s3)
	}
	// Grow a, add b: everything stays, b serves.
	if err := a.SetPools([]config.AddressPool{mkPool("a", "10.0.0.0/30"), noAuto(mkPool("b", "10.0.1.0/30"))}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"ns/s1": "10.0.0.0", "ns/s2": "10.0.0.1", "ns/s3": "10.0.0.1"} {
		if as, ok := a.Assigned(key); !ok || as.IPs[0].String() != want || as.Pools[0] != "a" {
			t.Errorf("%s after growing: %+v, %v; want %s in a", key, as, ok, want)
		}
	}
	if as := assign("ns/new", Request{}); as.IPs[0].String() != "10.0.0.2" {
		t.Errorf("auto-assign after growing: %v, want 10.0.0.2 (the held ones stay held)", as.IPs)
	}
	if as := assign("ns/b", Request{Pool: "b"}); as.IPs[0].String() != "10.0.1.0" || as.Pools[0] != "b" {
		t.Errorf("the new pool: %+v", as)
	}
	// A sharing conflict is still one.
	if _, err := a.Assign("ns/s4", Request{SharingKey: "k", Ports: tcp(80), IPs: addrs("10.0.0.1")}, nil); !errors.Is(err, ErrSharingConflict) {
		t.Errorf("sharing after SetPools: %v", err)
	}
	// Overlapping pools: an error, nothing changes.
	if err := a.SetPools([]config.AddressPool{mkPool("a", "10.0.0.0/30"), mkPool("c", "10.0.0.2/31")}); err == nil {
		t.Error("overlapping pools accepted")
	}
	if _, ok := a.PoolOf(netip.MustParseAddr("10.0.1.1")); !ok {
		t.Error("a rejected SetPools changed the pools")
	}
	// a removed: its Services keep their addresses, in no pool.
	if err := a.SetPools([]config.AddressPool{noAuto(mkPool("b", "10.0.1.0/30"))}); err != nil {
		t.Fatal(err)
	}
	if as, ok := a.Assigned("ns/s1"); !ok || as.IPs[0].String() != "10.0.0.0" || as.Pools[0] != "" {
		t.Errorf("s1 after its pool left: %+v, %v", as, ok)
	}
	if n := a.OutOfPool(); n != 3 {
		t.Errorf("OutOfPool = %d, want 3 (10.0.0.0-10.0.0.2)", n)
	}
	checkInvariants(t, a)
}

// SetPoolsKeeping refuses a set that leaves out an address held in a pool, atomically
// with Assign; growing or keeping everything is fine.
func TestSetPoolsKeeping(t *testing.T) {
	a, err := New([]config.AddressPool{mkPool("a", "10.0.0.0/30")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Assign("ns/s", Request{}, nil); err != nil {
		t.Fatal(err)
	}
	err = a.SetPoolsKeeping([]config.AddressPool{mkPool("a", "10.0.0.2/31")})
	if !errors.Is(err, ErrWouldStrand) || !strings.Contains(err.Error(), "10.0.0.0") {
		t.Errorf("stranding 10.0.0.0: %v", err)
	}
	if as, _ := a.Assigned("ns/s"); as.Pools[0] != "a" {
		t.Errorf("a refused set changed the pools: %+v", as)
	}
	if err := a.SetPoolsKeeping([]config.AddressPool{mkPool("a", "10.0.0.0/29"), mkPool("b", "10.0.1.0/30")}); err != nil {
		t.Errorf("growing: %v", err)
	}
	if got := a.Addresses(); len(got) != 1 || got[0].String() != "10.0.0.0" {
		t.Errorf("Addresses = %v", got)
	}
}
