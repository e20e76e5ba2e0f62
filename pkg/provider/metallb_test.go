package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/cloud-provider/api"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/metallb"
)

// enforceResourceVersions makes client's Service patches behave as the API server's
// do, which the fake clientset does not: a patch whose metadata.resourceVersion is
// not the stored one is a Conflict, and each patch gives the Service a new
// resourceVersion.
func enforceResourceVersions(client *fake.Clientset) {
	gvr := v1.SchemeGroupVersion.WithResource("services")
	client.PrependReactor("patch", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		obj, err := client.Tracker().Get(gvr, pa.GetNamespace(), pa.GetName())
		if err != nil {
			return true, nil, err
		}
		cur := obj.(*v1.Service)
		var pre struct {
			Metadata struct {
				ResourceVersion *string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &pre); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		if rv := pre.Metadata.ResourceVersion; rv != nil && *rv != cur.ResourceVersion {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), cur.Name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		orig, err := json.Marshal(cur)
		if err != nil {
			return true, nil, err
		}
		patched, err := strategicpatch.StrategicMergePatch(orig, pa.GetPatch(), v1.Service{})
		if err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		next := &v1.Service{}
		if err := json.Unmarshal(patched, next); err != nil {
			return true, nil, err
		}
		n, _ := strconv.Atoi(cur.ResourceVersion)
		next.ResourceVersion = strconv.Itoa(n + 1)
		if err := client.Tracker().Update(gvr, next, next.Namespace); err != nil {
			return true, nil, err
		}
		return true, next.DeepCopy(), nil
	})
}

// statusPatch is the service controller's write (lbcontroller: the finalizer and the
// status in one patch of the status subresource, conditional on the resourceVersion
// of the Service it gave the balancer).
func statusPatch(ctx context.Context, client *fake.Clientset, svc *v1.Service, ingress string) error {
	body, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": svc.ResourceVersion},
		"status":   map[string]any{"loadBalancer": map[string]any{"ingress": []map[string]string{{"ip": ingress}}}},
	})
	_, err := client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

// metallbFixture is a Service at resourceVersion 7 in a fake API server that enforces
// resourceVersions, and the announcer for a pool holding 192.0.2.0/24.
func metallbFixture(t *testing.T) (*fake.Clientset, *v1.Service, metallbServices) {
	t.Helper()
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", ResourceVersion: "7",
		Annotations: map[string]string{"team": "a"}}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer}}
	client := fake.NewClientset(svc.DeepCopy())
	enforceResourceVersions(client)
	pools := &config.LoadBalancerConfig{Announcer: config.AnnouncerMetalLB, Pools: []config.AddressPool{{Name: "public", Addresses: []string{"192.0.2.0/24"}}}}
	services, err := metallb.NewServices(client, pools, nil)
	if err != nil {
		t.Fatal(err)
	}
	return client, svc, metallbServices{services}
}

// TestMetalLBAnnotationsThenStatus: the announcer writes MetalLB's annotations while
// the balancer assigns, then the service controller writes the status conditional on
// the resourceVersion of its copy of the Service. The announcer's own write must not
// make that patch conflict (it did, for every new Service: a re-prime, then a retry
// 5 s later); the same for the removal of the annotations before the finalizer goes.
func TestMetalLBAnnotationsThenStatus(t *testing.T) {
	ctx := context.Background()
	client, svc, an := metallbFixture(t)
	ips := []netip.Addr{netip.MustParseAddr("192.0.2.9")}
	if err := an.Ensure(ctx, svc, ips); err != nil {
		t.Fatal(err)
	}
	if err := statusPatch(ctx, client, svc, "192.0.2.9"); err != nil {
		t.Fatalf("the status patch after the annotations: %v, want no conflict", err)
	}
	got, err := client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[metallb.AnnotationLoadBalancerIPs] != "192.0.2.9" || got.Annotations["team"] != "a" || len(got.Status.LoadBalancer.Ingress) != 1 {
		t.Errorf("Service after both writes: annotations %v, status %v", got.Annotations, got.Status.LoadBalancer)
	}

	// Cleanup: the annotations go, then the status and finalizer, without a conflict.
	if err := an.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := statusPatch(ctx, client, got, ""); err != nil {
		t.Fatalf("the cleanup patch after the annotations were removed: %v, want no conflict", err)
	}
}

// TestMetalLBAnnotationsAreConditional: a Service changed since the balancer's copy
// was read is not written; the announcer asks for a retry with the new version
// (api.RetryError), not a failure event.
func TestMetalLBAnnotationsAreConditional(t *testing.T) {
	ctx := context.Background()
	client, svc, an := metallbFixture(t)
	stale := svc.DeepCopy()
	stale.ResourceVersion = "6"
	err := an.Ensure(ctx, stale, []netip.Addr{netip.MustParseAddr("192.0.2.9")})
	var re *api.RetryError
	if !apierrors.IsConflict(err) || !errors.As(err, &re) {
		t.Fatalf("Ensure on a stale copy = %v, want a Conflict wrapped in an api.RetryError", err)
	}
	got, _ := client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if _, ok := got.Annotations[metallb.AnnotationLoadBalancerIPs]; ok || got.ResourceVersion != "7" {
		t.Errorf("a stale copy was written: %v (resourceVersion %s)", got.Annotations, got.ResourceVersion)
	}
}
