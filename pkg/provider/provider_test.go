package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2/ktesting"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

func TestFactory(t *testing.T) {
	if _, err := Factory(nil); err == nil || !strings.Contains(err.Error(), "--cloud-config") {
		t.Fatalf("Factory(nil) = %v, want an error naming --cloud-config", err)
	}
	_, err := Factory(strings.NewReader("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\n"))
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("Factory(invalid) = %v, want config.ErrInvalid", err)
	}
	c, err := Factory(strings.NewReader("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory: {file: {path: /nonexistent/inventory.yaml}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Implemented interfaces answer true; the rest nil, false (never nil, true).
	if i, ok := c.InstancesV2(); !ok || i == nil {
		t.Error("InstancesV2 not implemented")
	}
	for name, f := range map[string]func() (any, bool){
		"LoadBalancer": func() (any, bool) { v, ok := c.LoadBalancer(); return v, ok },
		"Instances":    func() (any, bool) { v, ok := c.Instances(); return v, ok },
		"Zones":        func() (any, bool) { v, ok := c.Zones(); return v, ok },
		"Clusters":     func() (any, bool) { v, ok := c.Clusters(); return v, ok },
		"Routes":       func() (any, bool) { v, ok := c.Routes(); return v, ok },
	} {
		if _, ok := f(); ok {
			t.Errorf("%s: ok = true for an unimplemented interface", name)
		}
	}
	if c.ProviderName() != "baremetal" || !c.HasClusterID() {
		t.Error("ProviderName/HasClusterID")
	}
}

func TestRegister(t *testing.T) {
	Register()
	if !cloudprovider.IsCloudProvider(Name) {
		t.Fatal("provider not registered")
	}
}

type fakeBuilder struct{ client kubernetes.Interface }

func (f fakeBuilder) Config(string) (*rest.Config, error)         { return &rest.Config{}, nil }
func (f fakeBuilder) ConfigOrDie(string) *rest.Config             { return &rest.Config{} }
func (f fakeBuilder) Client(string) (kubernetes.Interface, error) { return f.client, nil }
func (f fakeBuilder) ClientOrDie(string) kubernetes.Interface     { return f.client }

// TestWiring: Start (the process's) loads the inventory before returning;
// Initialize records events through the API; SetInformers lets the deletion guard see
// the Nodes, so hosts that vanished while the CCM was down are not reported gone.
func TestWiring(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(inv, []byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts: [{name: h1}, {name: h2}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Factory(strings.NewReader(fmt.Sprintf("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory: {file: {path: %s, pollInterval: 1s}, deletionGuard: {acknowledgeFile: %s/ack, settleTime: 0s}}\n", inv, dir)))
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, h := range []string{"h1", "h2", "h3", "h4"} { // h3, h4 vanished while we were down
		objs = append(objs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: h}, Spec: v1.NodeSpec{ProviderID: "baremetal://" + h}})
	}
	client := fake.NewClientset(objs...)
	stop := make(chan struct{})
	defer close(stop)

	c.(*Cloud).Start(wait.ContextForChannel(stop))
	if _, err := c.(*Cloud).Store().View(); err != nil {
		t.Fatalf("Start returned before the inventory loaded: %v", err)
	}
	c.Initialize(fakeBuilder{client}, stop)
	factory := informers.NewSharedInformerFactory(client, 0)
	c.(cloudprovider.InformerUser).SetInformers(factory)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	inst, _ := c.InstancesV2()
	_, ctx := ktesting.NewTestContext(t)
	gone := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h3"}, Spec: v1.NodeSpec{ProviderID: "baremetal://h3"}}
	if _, err := inst.InstanceExists(ctx, gone); !errors.Is(err, inventory.ErrDeletionGuard) {
		t.Fatalf("InstanceExists(h3) = %v, want the deletion guard to hold (2 of 4 Node hosts missing)", err)
	}
	// The guard's event reaches the API, on the Inventory reference in kube-system.
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, _ := client.CoreV1().Events("kube-system").List(context.Background(), metav1.ListOptions{})
		var reasons []string
		for _, e := range evs.Items {
			reasons = append(reasons, e.InvolvedObject.Kind+"/"+e.Reason)
		}
		if slices.Contains(reasons, "Inventory/"+inventory.ReasonGuardTripped) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no DeletionGuardTripped event on the Inventory; events: %v", reasons)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The trip is kept in the cluster, where a restarted or new leader finds it.
	cm, err := client.CoreV1().ConfigMaps(GuardStateNamespace).Get(context.Background(), inventory.StateConfigMapName, metav1.GetOptions{})
	if err != nil || !strings.Contains(cm.Data[inventory.StateKey], `"hosts":["h3","h4"]`) {
		t.Fatalf("guard state ConfigMap: %v %v", cm, err)
	}
}
