package routes

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
)

const (
	tbl   = 254
	proto = 196
)

func node(name string, cidrs []string, ips ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name)}}
	n.Spec.PodCIDRs = cidrs
	if len(cidrs) > 0 {
		n.Spec.PodCIDR = cidrs[0]
	}
	n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeHostName, Address: name})
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	return n
}

func ours(dst, gw string) string { return "254/196 " + dst + " via " + gw }

func TestMirrorReconcile(t *testing.T) {
	cluster := []*v1.Node{
		node("self", []string{"10.244.0.0/24", "fd00:244::/64"}, "192.0.2.1", "2001:db8::1"),
		node("a", []string{"10.244.1.0/24", "fd00:244:0:1::/64"}, "192.0.2.11", "2001:db8::11"),
		node("b", []string{"10.244.2.0/24"}, "192.0.2.12"),
	}
	allOurs := []string{
		ours("10.244.1.0/24", "192.0.2.11"), ours("fd00:244:0:1::/64", "2001:db8::11"),
		ours("10.244.2.0/24", "192.0.2.12"),
	}
	tests := []struct {
		name      string
		self      string
		nodes     []*v1.Node
		present   func(f *fakeNetlink)
		want      []string // whole kernel state afterwards
		res       Result
		errIs     []error
		errSubstr []string
		noWrites  bool
	}{
		{
			name: "empty kernel: add all, dual stack, self skipped by name", self: "self", nodes: cluster,
			want: allOurs,
			res:  Result{Desired: 3, Added: 3, SkippedSelf: 2},
		},
		{
			name: "self skipped by its own address without a node name", nodes: cluster,
			want: allOurs,
			res:  Result{Desired: 3, Added: 3, SkippedSelf: 2},
		},
		{
			name: "nothing changed: no writes", self: "self", nodes: cluster,
			present: func(f *fakeNetlink) {
				f.put(tbl, proto, "10.244.1.0/24", "192.0.2.11")
				f.put(tbl, proto, "fd00:244:0:1::/64", "2001:db8::11")
				f.put(tbl, proto, "10.244.2.0/24", "192.0.2.12")
			},
			want:     allOurs,
			res:      Result{Desired: 3, Present: 3, Unchanged: 3, SkippedSelf: 2},
			noWrites: true,
		},
		{
			name: "changed via, stale deleted, foreign protocol and table untouched", self: "self", nodes: cluster,
			present: func(f *fakeNetlink) {
				f.put(tbl, proto, "10.244.1.0/24", "192.0.2.99") // a's old address
				f.put(tbl, proto, "10.244.9.0/24", "192.0.2.19") // node gone
				f.put(tbl, proto, "fd00:244:0:9::/64", "2001:db8::19")
				f.put(tbl, 4, "10.99.0.0/16", "192.0.2.50")      // admin's static route
				f.put(100, proto, "10.244.2.0/24", "192.0.2.77") // our protocol, other table
			},
			want: append(slices.Clone(allOurs), "254/4 10.99.0.0/16 via 192.0.2.50", "100/196 10.244.2.0/24 via 192.0.2.77"),
			res:  Result{Desired: 3, Present: 3, Added: 2, Updated: 1, Deleted: 2, SkippedSelf: 2},
		},
		{
			name: "foreign route holding a destination is refused and kept", self: "self", nodes: cluster,
			present: func(f *fakeNetlink) { f.put(tbl, 12, "10.244.2.0/24", "192.0.2.50") }, // bird
			want:    []string{ours("10.244.1.0/24", "192.0.2.11"), ours("fd00:244:0:1::/64", "2001:db8::11"), "254/12 10.244.2.0/24 via 192.0.2.50"},
			res:     Result{Desired: 3, Added: 2, Failed: 1, SkippedSelf: 2},
			errIs:   []error{ErrForeignRoute}, errSubstr: []string{`node "b"`, "10.244.2.0/24", "protocol 12"},
		},
		{
			name: "node without an InternalIP of the family: error, the rest proceeds", self: "self",
			nodes: []*v1.Node{node("v4only", []string{"10.244.3.0/24", "fd00:244:0:3::/64"}, "192.0.2.13"), cluster[2]},
			want:  []string{ours("10.244.3.0/24", "192.0.2.13"), ours("10.244.2.0/24", "192.0.2.12")},
			res:   Result{Desired: 2, Added: 2, Failed: 1},
			errIs: []error{ErrNoNodeAddress}, errSubstr: []string{`node "v4only"`, "fd00:244:0:3::/64", "IPv6 InternalIP"},
		},
		{
			name: "dump interrupted twice is retried", self: "self", nodes: cluster,
			present: func(f *fakeNetlink) {
				f.put(tbl, proto, "10.244.1.0/24", "192.0.2.11")
				f.put(tbl, proto, "fd00:244:0:1::/64", "2001:db8::11")
				f.interrupt = 2
			},
			want: allOurs,
			res:  Result{Desired: 3, Present: 2, Added: 1, Unchanged: 2, SkippedSelf: 2},
		},
		{
			name: "dump interrupted every time: error, nothing changed", self: "self", nodes: cluster,
			present:  func(f *fakeNetlink) { f.interrupt = 100 },
			res:      Result{SkippedSelf: 2},
			errIs:    []error{netlink.ErrDumpInterrupted},
			noWrites: true,
		},
		{
			name: "netlink errors are collected per route", self: "self", nodes: cluster,
			present: func(f *fakeNetlink) { f.failAdd[mustPrefix("10.244.1.0/24")] = syscall.ENOBUFS },
			want:    []string{ours("fd00:244:0:1::/64", "2001:db8::11"), ours("10.244.2.0/24", "192.0.2.12")},
			res:     Result{Desired: 3, Added: 2, Failed: 1, SkippedSelf: 2},
			errIs:   []error{syscall.ENOBUFS}, errSubstr: []string{`node "a"`, "10.244.1.0/24"},
		},
		{
			name: "off-link gateway skipped, not an error", self: "self",
			nodes: []*v1.Node{cluster[1], node("other-rack", []string{"10.244.5.0/24"}, "198.51.100.5")},
			want:  []string{ours("10.244.1.0/24", "192.0.2.11"), ours("fd00:244:0:1::/64", "2001:db8::11")},
			res:   Result{Desired: 2, Added: 2, SkippedOffLink: 1},
		},
		{
			name: "off-link after an address change: the old route goes", self: "self",
			nodes:   []*v1.Node{node("moved", []string{"10.244.5.0/24"}, "198.51.100.5")},
			present: func(f *fakeNetlink) { f.put(tbl, proto, "10.244.5.0/24", "192.0.2.15") },
			res:     Result{Present: 1, Deleted: 1, SkippedOffLink: 1},
		},
		{
			name: "two nodes claim one CIDR: the first name keeps it", self: "self",
			nodes:     []*v1.Node{node("z", []string{"10.244.1.0/24"}, "192.0.2.26"), node("y", []string{"10.244.1.0/24"}, "192.0.2.25")},
			want:      []string{ours("10.244.1.0/24", "192.0.2.25")},
			res:       Result{Desired: 1, Added: 1, Failed: 1},
			errSubstr: []string{`node "z"`, `claimed by node "y"`},
		},
		{
			name: "bad CIDR is an error", self: "self",
			nodes: []*v1.Node{node("bad", []string{"10.244.1.0/33"}, "192.0.2.26")},
			res:   Result{Failed: 1}, errSubstr: []string{`node "bad"`, "10.244.1.0/33"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFake("192.0.2.1/24", "2001:db8::1/64")
			if tt.present != nil {
				tt.present(f)
			}
			f.writes = 0
			k, err := NewKernel(f, tbl, proto)
			if err != nil {
				t.Fatal(err)
			}
			m := NewMirror(k, MirrorOptions{NodeName: tt.self})
			res, err := m.Reconcile(ctx, tt.nodes)
			if res != tt.res {
				t.Errorf("result = %+v\n    want %+v", res, tt.res)
			}
			if len(tt.errIs)+len(tt.errSubstr) == 0 && err != nil {
				t.Errorf("unexpected error: %v", err)
			}
			if len(tt.errIs)+len(tt.errSubstr) > 0 && err == nil {
				t.Error("no error")
			}
			for _, target := range tt.errIs {
				if !errors.Is(err, target) {
					t.Errorf("error %v does not wrap %v", err, target)
				}
			}
			for _, s := range tt.errSubstr {
				if err != nil && !strings.Contains(err.Error(), s) {
					t.Errorf("error does not mention %q: %v", s, err)
				}
			}
			got := f.state()
			want := map[string]bool{}
			for _, w := range tt.want {
				want[w] = true
			}
			if !maps.Equal(got, want) {
				t.Errorf("kernel = %v\n  want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
			if tt.noWrites && f.writes != 0 {
				t.Errorf("%d writes, want none", f.writes)
			}
		})
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestMirrorRepairsDriftAndIsIdempotent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFake("192.0.2.1/24")
	k, _ := NewKernel(f, tbl, proto)
	m := NewMirror(k, MirrorOptions{NodeName: "self"})
	nodes := []*v1.Node{node("a", []string{"10.244.1.0/24"}, "192.0.2.11"), node("b", []string{"10.244.2.0/24"}, "192.0.2.12")}
	if _, err := m.Reconcile(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	// Someone deletes a route by hand.
	f.mu.Lock()
	f.routes = f.routes[:1]
	f.mu.Unlock()
	res, err := m.Reconcile(ctx, nodes)
	if err != nil || res.Added != 1 || res.Unchanged != 1 {
		t.Fatalf("repair: %+v, %v", res, err)
	}
	f.writes = 0
	res, err = m.Reconcile(ctx, nodes)
	if err != nil || res.Changed() || f.writes != 0 {
		t.Fatalf("second pass: %+v, %v, %d writes", res, err, f.writes)
	}
	// Node deleted: its route goes.
	res, err = m.Reconcile(ctx, nodes[:1])
	if err != nil || res.Deleted != 1 || len(f.state()) != 1 {
		t.Fatalf("delete: %+v, %v, %v", res, err, f.state())
	}
}

func TestMirrorStopsWhenContextEnds(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	f := newFake("192.0.2.1/24")
	k, _ := NewKernel(f, tbl, proto)
	_, err := NewMirror(k, MirrorOptions{}).Reconcile(ctx, []*v1.Node{node("a", []string{"10.244.1.0/24"}, "192.0.2.11")})
	if !errors.Is(err, context.Canceled) || f.writes != 0 {
		t.Fatalf("err = %v, writes = %d", err, f.writes)
	}
}

func TestCheckAccess(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFake("192.0.2.1/24")
	f.put(tbl, 4, "10.0.0.0/8", "192.0.2.9")
	k, _ := NewKernel(f, tbl, proto)
	if err := k.CheckAccess(ctx); err != nil {
		t.Fatalf("allowed: %v", err)
	}
	if len(f.state()) != 1 {
		t.Fatal("the probe changed the kernel")
	}
	f.denied = true
	err := k.CheckAccess(ctx)
	if !errors.Is(err, ErrNoCapability) || !strings.Contains(err.Error(), "CAP_NET_ADMIN") {
		t.Fatalf("denied: %v", err)
	}
}

func TestNewKernelRefusesReservedValues(t *testing.T) {
	f := newFake()
	for _, c := range [][2]int{{0, 196}, {255, 196}, {253, 196}, {254, 2}, {254, 256}} {
		if _, err := NewKernel(f, c[0], c[1]); err == nil {
			t.Errorf("NewKernel(table %d, protocol %d) succeeded", c[0], c[1])
		}
	}
}
