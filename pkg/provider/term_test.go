package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bmc"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/informerscope"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
)

// termLab is one process of the provider: its Cloud, a fake API with three Nodes,
// the process's informers and a Redfish BMC for host h1.
type termLab struct {
	t      *testing.T
	ctx    context.Context
	cloud  *Cloud
	client *fake.Clientset
	root   *informerscope.Scope
	bmc    *redfish.BMC
	inv    string
	h1     *v1.Node
	h1Host string // h1's inventory entry, with its BMC

	mu     sync.Mutex
	writes int // saves of the guard's state
}

func newTermLab(t *testing.T) *termLab {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	dir := t.TempDir()
	b := redfish.StartForTest(t, redfish.Options{})
	ca, creds := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "creds")
	mustWrite(t, ca, string(b.CAPEM()))
	mustWrite(t, creds, fmt.Sprintf("username: %s\npassword: %s\n", b.Username(), b.Password()))
	l := &termLab{t: t, ctx: ctx, bmc: b, inv: filepath.Join(dir, "inventory.yaml")}
	l.h1Host = fmt.Sprintf("- {name: h1, bmc: {protocol: redfish, address: \"https://%s\", port: %s, credentialsFile: %s, caFile: %s}}\n",
		b.Host(), b.Port(), creds, ca)
	l.setHosts(l.h1Host + "- {name: h2}\n- {name: h3}\n")
	c, err := Factory(strings.NewReader(fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: %s, pollInterval: 1s}
  credentialsDir: %s
  deletionGuard: {acknowledgeFile: %s/ack, settleTime: 0s, maxRemovedHosts: 5, maxRemovedPercent: 100}
bmc: {callTimeout: 3s, cacheTTL: 1s, notReadyInterval: 1s}
`, l.inv, dir, dir)))
	if err != nil {
		t.Fatal(err)
	}
	l.cloud = c.(*Cloud)
	notReady := []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}
	var nodes []*v1.Node
	for _, h := range []string{"h1", "h2", "h3"} {
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: h}, Spec: v1.NodeSpec{ProviderID: "baremetal://" + h},
			Status: v1.NodeStatus{Conditions: notReady}})
	}
	l.h1 = nodes[0]
	l.client = fake.NewClientset(nodes[0], nodes[1], nodes[2])
	l.client.PrependReactor("*", "configmaps", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		if a.GetNamespace() == GuardStateNamespace && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			l.mu.Lock()
			l.writes++
			l.mu.Unlock()
		}
		return false, nil, nil
	})
	l.cloud.Start(ctx)
	l.root = informerscope.New(informers.NewSharedInformerFactory(l.client, 0))
	_ = l.root.Core().V1().Nodes().Informer()
	l.root.Start(ctx.Done())
	return l
}

func (l *termLab) setHosts(hosts string) {
	l.t.Helper()
	mustWrite(l.t, l.inv, "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n"+hosts)
}

func (l *termLab) guardWrites() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writes
}

// lead runs one term as the command does: Initialize, SetInformers with the term's
// scope, then end (the returned function) closes the stop channel, the scope and
// waits for the term's parts.
func (l *termLab) lead() (end func()) {
	stop := make(chan struct{})
	scope := l.root.Child()
	l.cloud.Initialize(fakeBuilder{l.client}, stop)
	l.cloud.SetInformers(scope)
	scope.Start(stop)
	return func() {
		close(stop)
		ctx, cancel := context.WithTimeout(l.ctx, 30*time.Second)
		defer cancel()
		if _, err := scope.Close(ctx); err != nil {
			l.t.Fatal(err)
		}
		if err := l.cloud.WaitTermEnd(ctx); err != nil {
			l.t.Fatal(err)
		}
	}
}

// shutdownWithin polls InstanceShutdown(h1) until it answers want.
func (l *termLab) shutdownWithin(term int, want bool) {
	l.t.Helper()
	inst, _ := l.cloud.InstancesV2()
	var last error
	err := wait.PollUntilContextTimeout(l.ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		off, err := inst.InstanceShutdown(ctx, l.h1)
		last = err
		return err == nil && off == want, nil
	})
	if err != nil {
		l.t.Fatalf("term %d: InstanceShutdown(h1) never answered %v: last error %v", term, want, last)
	}
}

// TestTermsOwnTheirParts: every term reads BMCs, shuts down hosts and decides on
// removals; after a term no BMC session is open, no BMC read and no guard state write
// happens, nothing is reported gone; goroutines do not grow from term to term.
func TestTermsOwnTheirParts(t *testing.T) {
	l := newTermLab(t)
	inst, _ := l.cloud.InstancesV2()
	hosts := l.h1Host + "- {name: h3}\n" // h2 leaves the inventory in term 1
	var goroutines []int
	for term := 1; term <= 4; term++ {
		end := l.lead()
		// BMC reads: the power state follows the BMC in every term.
		l.bmc.SetPowerState(redfish.PowerOff)
		l.shutdownWithin(term, true)
		l.bmc.SetPowerState(redfish.PowerOn)
		l.shutdownWithin(term, false)
		// A guard decision: h2 leaves the inventory (term 1) and is reported gone.
		if term == 1 {
			l.setHosts(hosts)
		}
		if err := wait.PollUntilContextTimeout(l.ctx, 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			return l.cloud.Store().GoneAllowed("h2") == nil, nil
		}); err != nil {
			t.Fatalf("term %d: h2 not reported gone: %v", term, l.cloud.Store().GoneAllowed("h2"))
		}
		end()

		if n := l.bmc.ActiveSessions(); n != 0 {
			t.Errorf("term %d: %d BMC sessions open after the term", term, n)
		}
		time.Sleep(2100 * time.Millisecond) // the last reading is too old for InstanceShutdown
		if _, err := inst.InstanceShutdown(l.ctx, l.h1); !errors.Is(err, bmc.ErrNoTerm) {
			t.Errorf("term %d: InstanceShutdown between terms = %v, want no BMC read (ErrNoTerm)", term, err)
		}
		if err := l.cloud.Store().GoneAllowed("h2"); !errors.Is(err, inventory.ErrDeletionGuard) {
			t.Errorf("term %d: GoneAllowed(h2) between terms = %v, want ErrDeletionGuard", term, err)
		}
		// A change while not leading: read, served for lookups when it only adds, never
		// decided on or saved.
		writes := l.guardWrites()
		hosts += fmt.Sprintf("- {name: extra-%d}\n", term)
		l.setHosts(hosts)
		if err := l.cloud.Store().Reload(l.ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ := l.cloud.Store().View(); !hasHost(v, fmt.Sprintf("extra-%d", term)) {
			t.Errorf("term %d: a document that adds a host does not serve lookups between terms", term)
		}
		if n := l.guardWrites() - writes; n != 0 {
			t.Errorf("term %d: %d guard state writes between terms", term, n)
		}
		runtime.GC()
		time.Sleep(200 * time.Millisecond)
		goroutines = append(goroutines, runtime.NumGoroutine())
	}
	t.Logf("goroutines after each term: %v", goroutines)
	if goroutines[3] > goroutines[1] {
		t.Errorf("goroutines grew from %d after term 2 to %d after term 4", goroutines[1], goroutines[3])
	}
	if n := l.root.Handlers(); n != 0 {
		t.Errorf("%d event handlers left by the terms", n)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func hasHost(v *inventory.View, name string) bool {
	if v == nil {
		return false
	}
	_, ok := v.Host(name)
	return ok
}
