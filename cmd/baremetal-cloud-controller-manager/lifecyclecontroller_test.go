package main

import (
	"context"
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/controllers/nodelifecycle"
	fakecloud "k8s.io/cloud-provider/fake"
	"k8s.io/cloud-provider/names"
)

func lifecycleNode(name string, ready v1.ConditionStatus, shutdownTaint bool) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: "baremetal://" + name}}
	if ready != "" {
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: ready}}
	}
	if shutdownTaint {
		n.Spec.Taints = []v1.Taint{{Key: cloudproviderapi.TaintNodeShutdown, Effect: v1.TaintEffectNoSchedule}}
	}
	return n
}

// The upstream lifecycle controller, given the attention lister, does to every Node
// what it does with the full list: it removes the shutdown taint of Ready Nodes,
// looks up (and here taints) every Node not Ready, and touches no other Node, asking
// the cloud about none of them.
func TestLifecycleControllerSeesOnlyNodesItActsOn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	nodes := []*v1.Node{
		lifecycleNode("ready", v1.ConditionTrue, false),
		lifecycleNode("ready-tainted", v1.ConditionTrue, true),
		lifecycleNode("not-ready", v1.ConditionFalse, false),
		lifecycleNode("unknown", v1.ConditionUnknown, false),
		lifecycleNode("no-condition", "", false),
	}
	// Only the first Ready condition counts, as upstream reads it.
	twice := lifecycleNode("ready-then-false", v1.ConditionTrue, false)
	twice.Status.Conditions = append(twice.Status.Conditions, v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse})
	nodes = append(nodes, twice)
	client := fake.NewClientset()
	for _, n := range nodes {
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := attentionNodeInformer{factory.Core().V1().Nodes()}
	informer.Informer()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel() // before Shutdown, which waits for the informers to stop
	factory.WaitForCacheSync(ctx.Done())

	listed, err := informer.Lister().List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range listed {
		got = append(got, n.Name)
	}
	slices.Sort(got)
	if want := []string{"no-condition", "not-ready", "ready-tainted", "unknown"}; !slices.Equal(got, want) {
		t.Errorf("attention list %v, want %v", got, want)
	}
	if n, err := informer.Lister().Get("ready"); err != nil || n.Name != "ready" {
		t.Errorf("Get(ready) = %v, %v: Get must see every Node", n, err)
	}

	cloud := &fakecloud.Cloud{EnableInstancesV2: true, ExistsByProviderID: true, NodeShutdown: true}
	c, err := nodelifecycle.NewCloudNodeLifecycleController(informer, client, cloud, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	c.MonitorNodes(ctx)
	actions := client.Actions()

	shutdown := func(name string) bool {
		n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == cloudproviderapi.TaintNodeShutdown })
	}
	for name, want := range map[string]bool{"ready": false, "ready-tainted": false, "not-ready": true, "unknown": true, "no-condition": true, "ready-then-false": false} {
		if got := shutdown(name); got != want {
			t.Errorf("%s: shutdown taint %v after a monitor pass, want %v", name, got, want)
		}
	}
	var calls int
	for _, call := range cloud.Calls {
		if call == "instance-exists" || call == "instance-shutdown" {
			calls++
		}
	}
	if calls != 6 {
		t.Errorf("cloud calls %v: want an existence and a shutdown check for each of the 3 Nodes not Ready", cloud.Calls)
	}
	for _, a := range actions {
		if a.GetVerb() != "get" && a.GetVerb() != "patch" && a.GetVerb() != "update" {
			continue
		}
		var name string
		switch a := a.(type) {
		case interface{ GetName() string }: // get, patch
			name = a.GetName()
		case k8stesting.UpdateAction:
			if n, ok := a.GetObject().(*v1.Node); ok {
				name = n.Name
			}
		}
		if name == "ready" || name == "ready-then-false" {
			t.Errorf("the monitor pass touched %s (%s), a Ready Node without the taint", name, a.GetVerb())
		}
	}
}

// The lifecycle and service controllers are ours; every other is upstream's.
func TestControllerConstructors(t *testing.T) {
	m := controllerConstructors()
	if len(m) != len(app.DefaultInitFuncConstructors) {
		t.Errorf("%d controllers, upstream has %d", len(m), len(app.DefaultInitFuncConstructors))
	}
	ptr := func(f any) uintptr { return reflect.ValueOf(f).Pointer() }
	for name, up := range app.DefaultInitFuncConstructors {
		ours := name == names.CloudNodeLifecycleController || name == names.ServiceLBController
		if same := ptr(m[name].Constructor) == ptr(up.Constructor); same == ours {
			t.Errorf("%s: upstream constructor %v, want %v", name, same, !ours)
		}
	}
}
