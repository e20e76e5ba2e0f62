package metallb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const serviceConfig = `loadBalancer:
  announcer: metallb
  pools:
  - {name: dual, addresses: [192.0.2.0/24, "2001:db8::/120"]}
  - {name: v6, addresses: ["2001:db8:1::/120"]}
`

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func TestAnnotations(t *testing.T) {
	s, err := NewServices(nil, parseConfig(t, serviceConfig).LoadBalancer, nil)
	if err != nil {
		t.Fatal(err)
	}
	shared := &v1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"baremetal-ccm.io/allow-shared-ip": "web"}}}
	withSpecIP := &v1.Service{Spec: v1.ServiceSpec{LoadBalancerIP: "192.0.2.9"}}
	str := func(p *string) string {
		if p == nil {
			return "<absent>"
		}
		return *p
	}
	for _, tc := range []struct {
		name                string
		svc                 *v1.Service
		ips                 []netip.Addr
		wantIPs, wantPool   string
		wantShared          string
		wantNotAnnounceable bool
	}{
		{name: "dual stack in one pool", svc: shared, ips: addrs("192.0.2.9", "2001:db8::9"),
			wantIPs: "192.0.2.9,2001:db8::9", wantPool: "baremetal-ccm-dual", wantShared: "web"},
		{name: "no IPs", svc: shared, wantIPs: "<absent>", wantPool: "<absent>", wantShared: "<absent>"},
		{name: "pools split", svc: &v1.Service{}, ips: addrs("192.0.2.9", "2001:db8:1::9"),
			wantIPs: "192.0.2.9,2001:db8:1::9", wantPool: "<absent>", wantShared: "<absent>", wantNotAnnounceable: true},
		{name: "outside every pool", svc: &v1.Service{}, ips: addrs("203.0.113.1"),
			wantIPs: "203.0.113.1", wantPool: "<absent>", wantShared: "<absent>", wantNotAnnounceable: true},
		{name: "spec.loadBalancerIP", svc: withSpecIP, ips: addrs("192.0.2.9"),
			wantIPs: "<absent>", wantPool: "baremetal-ccm-dual", wantShared: "<absent>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Annotations(tc.svc, tc.ips)
			if errors.Is(err, ErrNotAnnounceable) != tc.wantNotAnnounceable {
				t.Errorf("err = %v, want ErrNotAnnounceable: %v", err, tc.wantNotAnnounceable)
			}
			if g := str(got[AnnotationLoadBalancerIPs]); g != tc.wantIPs {
				t.Errorf("loadBalancerIPs = %s, want %s", g, tc.wantIPs)
			}
			if g := str(got[AnnotationAddressPool]); g != tc.wantPool {
				t.Errorf("address-pool = %s, want %s", g, tc.wantPool)
			}
			if g := str(got[AnnotationAllowSharedIP]); g != tc.wantShared {
				t.Errorf("allow-shared-ip = %s, want %s", g, tc.wantShared)
			}
		})
	}
}

func TestEnsureAndDeletePatchWithoutMutating(t *testing.T) {
	ctx := context.Background()
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web",
		Annotations: map[string]string{"keep": "me", AnnotationAddressPool: "stale"}}}
	client := fake.NewClientset(svc.DeepCopy())
	s, err := NewServices(client, parseConfig(t, serviceConfig).LoadBalancer, nil)
	if err != nil {
		t.Fatal(err)
	}
	orig := svc.DeepCopy()
	written, err := s.Ensure(ctx, svc, addrs("192.0.2.9"))
	if err != nil {
		t.Fatal(err)
	}
	if svc.Annotations[AnnotationAddressPool] != "stale" || len(svc.Annotations) != len(orig.Annotations) {
		t.Errorf("Ensure mutated its argument: %v", svc.Annotations)
	}
	got, err := client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[AnnotationLoadBalancerIPs] != "192.0.2.9" || got.Annotations[AnnotationAddressPool] != "baremetal-ccm-dual" || got.Annotations["keep"] != "me" {
		t.Errorf("annotations after Ensure = %v", got.Annotations)
	}
	if fmt.Sprint(written.Annotations) != fmt.Sprint(got.Annotations) {
		t.Errorf("Ensure returned annotations %v, the Service has %v", written.Annotations, got.Annotations)
	}
	if a := client.Actions(); len(a) != 2 || a[0].GetVerb() != "patch" {
		t.Errorf("Ensure made calls %v, want one patch", a)
	}

	// Already in place: no call, the Service given back.
	client.ClearActions()
	if out, err := s.Ensure(ctx, got, addrs("192.0.2.9")); err != nil || out != got {
		t.Fatalf("Ensure with nothing to change = %v, %v; want the Service it was given", out, err)
	}
	if a := client.Actions(); len(a) != 0 {
		t.Errorf("Ensure with nothing to change made calls %v", a)
	}

	if _, err := s.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	got, err = client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ownedAnnotations {
		if _, ok := got.Annotations[k]; ok {
			t.Errorf("Delete left %s", k)
		}
	}
	if got.Annotations["keep"] != "me" {
		t.Errorf("Delete removed a foreign annotation: %v", got.Annotations)
	}

	// Deleting from a Service that is gone is fine.
	gone := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gone",
		Annotations: map[string]string{AnnotationLoadBalancerIPs: "192.0.2.1"}}}
	if out, err := s.Delete(ctx, gone); err != nil || out != nil {
		t.Errorf("Delete on a missing Service = %v, %v; want nil, nil", out, err)
	}
}

// TestWritesAreFencedAndConditional: every annotation write asks the fence right
// before it (a replica that no longer leads writes nothing) and carries the
// resourceVersion of the Service it was given as a precondition.
func TestWritesAreFencedAndConditional(t *testing.T) {
	ctx := context.Background()
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", ResourceVersion: "7",
		Annotations: map[string]string{AnnotationLoadBalancerIPs: "192.0.2.1"}}}
	client := fake.NewClientset(svc.DeepCopy())
	var bodies []string
	client.PrependReactor("patch", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		bodies = append(bodies, string(a.(k8stesting.PatchAction).GetPatch()))
		return false, nil, nil
	})
	errNotLeader := errors.New("not the leader")
	leading := true
	checks := 0
	fence := func(context.Context) error {
		checks++
		if !leading {
			return errNotLeader
		}
		return nil
	}
	s, err := NewServices(client, parseConfig(t, serviceConfig).LoadBalancer, fence)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ensure(ctx, svc, addrs("192.0.2.9")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if checks != 2 || len(bodies) != 2 {
		t.Fatalf("%d fence checks for %d writes, want 2 and 2", checks, len(bodies))
	}
	for _, b := range bodies {
		if !strings.Contains(b, `"resourceVersion":"7"`) {
			t.Errorf("patch %s has no resourceVersion precondition", b)
		}
	}

	leading = false
	if _, err := s.Ensure(ctx, svc, addrs("192.0.2.10")); !errors.Is(err, errNotLeader) {
		t.Errorf("Ensure after the fence closed = %v, want its error", err)
	}
	if _, err := s.Delete(ctx, svc); !errors.Is(err, errNotLeader) {
		t.Errorf("Delete after the fence closed = %v, want its error", err)
	}
	if len(bodies) != 2 {
		t.Errorf("%d writes after the fence closed", len(bodies)-2)
	}
}
