//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/powermon"
	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestLeadershipTerms: ONE CCM process loses and regains the Lease three times. To
// lose it, the process is frozen (SIGSTOP) for longer than its lease while another
// contender (the test) takes the Lease, then resumed (SIGCONT): it finds the Lease
// held by someone else and ends its term; once that holder's lease expires it leads
// again. In every one of its four terms: BMC reads work (the power conditions follow
// the Redfish emulator), a powered-off NotReady host gets the shutdown taint and,
// past outOfServiceAfter, the out-of-service taint, released while it reads off, the
// deletion guard decides (a Node whose host left the inventory is deleted), an IP
// is assigned and an IPPool is accepted. Between terms it writes no guard state and keeps no BMC session. The
// goroutines and informer event handlers of term 4 are those of term 2.
func TestLeadershipTerms(t *testing.T) {
	const terms = 4
	bmcs, bmcHosts := redfishFleet(t, "tm-bmc", "10.85.0", 1, nil)
	bmc := bmcs[0]
	l := newLabNoCCM(t)
	// tm-gone-<k> leaves the inventory for term k to decide on.
	gone := func(k int) string { return fmt.Sprintf("tm-gone-%d", k) }
	goneIP := func(k int) string { return fmt.Sprintf("10.85.1.%d", k) }
	doc := func(removedUpTo int) string {
		var hs []host
		for k := removedUpTo + 1; k <= terms; k++ {
			hs = append(hs, host{name: gone(k), ip: goneIP(k)})
		}
		if len(hs) == 0 {
			return bmcHosts
		}
		return bmcHosts + strings.TrimPrefix(inventoryDoc(hs...), "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n")
	}
	l.setInventory(doc(0))
	ns := "terms-" + utilrand.String(6)
	if _, err := l.cp.Client.CoreV1().Namespaces().Create(l.ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropServices(l, ns) })
	l.writeConfig(", maxRemovedHosts: 10, maxRemovedPercent: 100",
		"bmc: {callTimeout: 3s, cacheTTL: 1s, notReadyInterval: 1s}\ninstances: {outOfServiceAfter: 1m}\nloadBalancer:\n  announcer: none\n  pools:\n  - {name: terms, addresses: [192.0.2.96/28]}\n")
	lease := "bccm-terms-" + utilrand.String(6)
	ccm := framework.StartCCM(t, l.cp, l.config, "--node-monitor-period=1s",
		"--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller",
		"--leader-elect=true", "--leader-elect-resource-name="+lease,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s")
	if err := ccm.WaitHealthy(l.ctx); err != nil {
		t.Fatal(err)
	}
	l.ccm = ccm
	l.createNode(framework.NodeSpec{Name: "tm-bmc-0", InternalIPs: []string{"10.85.0.1"}, Ready: ready(v1.ConditionTrue)})
	for k := 1; k <= terms; k++ {
		l.createNode(framework.NodeSpec{Name: gone(k), InternalIPs: []string{goneIP(k)}, Ready: ready(v1.ConditionTrue)})
	}
	for _, n := range l.nodes {
		l.waitInitialized(n)
	}
	for k := 1; k <= terms; k++ {
		// Their kubelets stop: deleted once their hosts leave the inventory.
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, gone(k), v1.ConditionUnknown); err != nil {
			t.Fatal(err)
		}
	}

	type sample struct{ goroutines, handlers int }
	var samples []sample
	for k := 1; k <= terms; k++ {
		waitLogCount(t, l, ccm, "Leading: starting the controllers", k)
		start := time.Now()
		// BMC reads: the power conditions and the shutdown taint follow the BMC.
		bmc.SetPowerState(redfish.PowerOff)
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, "tm-bmc-0", v1.ConditionUnknown); err != nil {
			t.Fatal(err)
		}
		l.waitTaint("tm-bmc-0", cloudproviderapi.TaintNodeShutdown, true)
		l.waitCondition("tm-bmc-0", powermon.ConditionPoweredOn, v1.ConditionFalse)
		// Off past outOfServiceAfter: the out-of-service taint goes on, and comes off
		// again while the host still reads off (the Node holds no pod).
		l.backdateOffSince("tm-bmc-0", 2*time.Minute)
		// The monitor marks the release before it removes the taint (so it is never
		// added again meanwhile): wait for both.
		l.waitAnnotation("tm-bmc-0", powermon.AnnotationOutOfService, powermon.OutOfServiceReleased)
		l.waitTaint("tm-bmc-0", v1.TaintNodeOutOfService, false)
		bmc.SetPowerState(redfish.PowerOn)
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, "tm-bmc-0", v1.ConditionTrue); err != nil {
			t.Fatal(err)
		}
		l.waitTaint("tm-bmc-0", cloudproviderapi.TaintNodeShutdown, false)
		l.waitCondition("tm-bmc-0", powermon.ConditionPoweredOn, v1.ConditionTrue)
		l.waitAnnotation("tm-bmc-0", powermon.AnnotationOutOfService, "")
		// A guard decision: tm-gone-<k> left the inventory (in the term, or while this
		// replica did not lead).
		l.setInventory(doc(k))
		l.waitDeleted(gone(k))
		if st := l.guardState(); st.Gone[gone(k)].Host == "" {
			t.Errorf("term %d: the guard state does not record %s as gone: %+v", k, gone(k), st.Gone)
		}
		// An IP.
		svc := fmt.Sprintf("term-%d", k)
		if _, err := l.cp.Client.CoreV1().Services(ns).Create(l.ctx, fenceService(ns, svc), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitServiceIP(t, l, ns, svc)
		// An IPPool: this term's leader accepts it.
		pools := versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig)).BaremetalCCMV1alpha1().IPPools()
		poolName := fmt.Sprintf("terms-%d-%s", k, strings.ToLower(utilrand.String(4)))
		t.Cleanup(func() { framework.DeleteIPPool(l.cp, poolName) })
		if _, err := pools.Create(l.ctx, &v1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: poolName},
			Spec: v1alpha1.IPPoolSpec{Addresses: []string{fmt.Sprintf("198.51.100.%d/30", 4*k)}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := framework.WaitFor(l.ctx, 30*time.Second, "term's leader to accept IPPool "+poolName, func(ctx context.Context) (bool, error) {
			p, err := pools.Get(ctx, poolName, metav1.GetOptions{})
			return err == nil && p.Status.Applied != nil && meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.PoolConditionAccepted), nil
		}); err != nil {
			t.Errorf("term %d: %v", k, err)
		}
		s := sample{goroutines: minMetric(t, l, ccm, "go_goroutines"), handlers: minMetric(t, l, ccm, "baremetal_ccm_informer_event_handlers")}
		samples = append(samples, s)
		t.Logf("term %d: BMC reads, shutdown taint, out-of-service taint and its release, guard decision and IP in %s; goroutines %d, event handlers %d",
			k, time.Since(start).Round(100*time.Millisecond), s.goroutines, s.handlers)
		if k == terms {
			break
		}

		// Lose the Lease: frozen past it while another contender takes it.
		state := guardStateVersion(t, l)
		ccm.Signal(syscall.SIGSTOP)
		time.Sleep(5 * time.Second)
		stealLease(t, l, lease, 6*time.Second)
		// The next term's host leaves the inventory while this replica does not lead:
		// nothing is decided on it until the replica leads again.
		l.setInventory(doc(k + 1))
		ccm.Signal(syscall.SIGCONT)
		waitLogCount(t, l, ccm, "lost the Lease", k)
		if line := lastLine(ccm.Log(), `"Term ended"`); line != "" {
			t.Logf("term %d: %s", k, line[strings.Index(line, `"Term ended"`):])
		}
		if n := minMetric(t, l, ccm, "baremetal_ccm_informer_event_handlers"); n != 0 {
			t.Errorf("term %d: %d event handlers left after the term (no agent runs: every handler is the term's)", k, n)
		}
		if err := framework.WaitFor(l.ctx, 10*time.Second, "BMC sessions logged out at the term's end", func(context.Context) (bool, error) {
			return bmc.ActiveSessions() == 0, nil
		}); err != nil {
			t.Errorf("term %d: %v (%d open)", k, err, bmc.ActiveSessions())
		}
		for strings.Count(ccm.Log(), "Leading: starting the controllers") < k+1 {
			if v := guardStateVersion(t, l); v != state {
				t.Errorf("term %d: the guard state was written (version %s, was %s) while the replica did not lead", k, v, state)
				break
			}
			if n, err := l.node(gone(k + 1)); err != nil || n == nil {
				t.Errorf("term %d: %s deleted while the replica did not lead: %v", k, gone(k+1), err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if len(samples) == terms {
		second, last := samples[1], samples[terms-1]
		t.Logf("term 2: %d goroutines, %d event handlers; term %d: %d goroutines, %d event handlers", second.goroutines, second.handlers, terms, last.goroutines, last.handlers)
		if last.handlers != second.handlers {
			t.Errorf("event handlers grew from %d (term 2) to %d (term %d)", second.handlers, last.handlers, terms)
		}
		if last.goroutines > second.goroutines+3 {
			t.Errorf("goroutines grew from %d (term 2) to %d (term %d)", second.goroutines, last.goroutines, terms)
		}
	}
}

// waitLogCount waits until the CCM's log holds msg at least n times.
func waitLogCount(t *testing.T, l *lab, c *framework.CCM, msg string, n int) {
	t.Helper()
	if err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("%q %d times in the CCM's log", msg, n), func(context.Context) (bool, error) {
		return strings.Count(c.Log(), msg) >= n, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// lastLine returns the last line of log that holds s, "" when none does.
func lastLine(log, s string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

// minMetric returns the least value of an unlabelled metric over six scrapes 500 ms
// apart (goroutines come and go with each call in flight), -1 when it is not served.
func minMetric(t *testing.T, l *lab, c *framework.CCM, name string) int {
	t.Helper()
	least := -1
	for i := range 6 {
		if i > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		m, err := c.Metrics(l.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(m, "\n") {
			v, ok := strings.CutPrefix(line, name+" ")
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			if least < 0 || int(f) < least {
				least = int(f)
			}
		}
	}
	return least
}

// stealLease makes the Lease held by another contender for d from now.
func stealLease(t *testing.T, l *lab, name string, d time.Duration) {
	t.Helper()
	leases := l.cp.Client.CoordinationV1().Leases("kube-system")
	lease, err := leases.Get(l.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity = ptr.To("e2e-other-contender")
	lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(d / time.Second))
	lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	if _, err := leases.Update(l.ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// guardStateVersion is the resourceVersion of the guard's state ConfigMap ("" when
// there is none).
func guardStateVersion(t *testing.T, l *lab) string {
	t.Helper()
	cm, err := l.cp.Client.CoreV1().ConfigMaps(framework.GuardStateNamespace).Get(l.ctx, framework.GuardStateName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm.ResourceVersion
}

// waitServiceIP waits until the Service has an ingress IP.
func waitServiceIP(t *testing.T, l *lab, ns, name string) {
	t.Helper()
	if err := framework.WaitFor(l.ctx, 30*time.Second, "an IP for "+ns+"/"+name, func(ctx context.Context) (bool, error) {
		s, err := l.cp.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) > 0, err
	}); err != nil {
		t.Fatal(err)
	}
}

// dropServices deletes the namespace's Services (without their finalizers: the CCM
// has stopped) and the namespace, so later tests' allocators do not count their IPs.
func dropServices(l *lab, ns string) {
	ctx := context.Background()
	svcs := l.cp.Client.CoreV1().Services(ns)
	if list, _ := svcs.List(ctx, metav1.ListOptions{}); list != nil {
		for _, s := range list.Items {
			_, _ = svcs.Patch(ctx, s.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = svcs.Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
	}
	_ = l.cp.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}
