//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/powermon"
	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/ipmi"
	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// redfishHosts starts n Redfish emulators sharing one CA and returns them with the
// inventory entries (name-i, InternalIP subnet.i+1) whose bmc blocks point at them over
// verified TLS, each with its own 0600 credentials file. wrongPassword(i) makes host i's
// credentials file hold a password its BMC refuses.
func redfishHosts(t *testing.T, name, subnet string, n int, wrongPassword func(int) bool) ([]*redfish.BMC, string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := redfish.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "bmc-ca.pem")
	writeFile(t, caFile, string(ca.PEM()))
	var bmcs []*redfish.BMC
	var hosts string
	for i := range n {
		pass := fmt.Sprintf("%s-%d-secret", name, i)
		b := redfish.NewBMC(redfish.Options{CA: ca, Username: "admin", Password: pass})
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		bmcs = append(bmcs, b)
		if wrongPassword != nil && wrongPassword(i) {
			pass = fmt.Sprintf("%s-%d-wrong", name, i)
		}
		creds := filepath.Join(dir, fmt.Sprintf("creds-%d", i))
		writeFile(t, creds, fmt.Sprintf("username: admin\npassword: %s\n", pass))
		if err := os.Chmod(creds, 0o600); err != nil {
			t.Fatal(err)
		}
		hosts += fmt.Sprintf("- name: %s-%d\n  addresses: [{type: InternalIP, address: %s.%d}]\n  bmc: {protocol: redfish, address: \"https://127.0.0.1\", port: %s, credentialsFile: %s, caFile: %s}\n",
			name, i, subnet, i+1, b.Port(), creds, caFile)
	}
	return bmcs, "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n" + hosts
}

// TestShutdownTaint: a Node whose BMC (the Redfish emulator, over TLS verified with its
// CA) reports the host off gets the shutdown taint once NotReady; powered on and Ready
// again, the taint goes. Hosts whose BMC hangs, refuses the credentials or is gone
// neither delay that nor get their NotReady Nodes tainted or deleted; they show
// BMCReachable=False and an event saying why, without credentials.
func TestShutdownTaint(t *testing.T) {
	// pw-0 works; pw-1 hangs; pw-2 refuses our credentials; pw-3 is gone (closed).
	const n = 4
	bmcs, inv := redfishHosts(t, "pw", "10.80.0", n, func(i int) bool { return i == 2 })
	hung := bmcs[1]

	l := newLabNoCCM(t)
	l.setInventory(inv)
	l.writeConfig("", "bmc: {callTimeout: 3s, cacheTTL: 1s, notReadyInterval: 1s}\n")
	l.startCCM(l.config)
	var names []string
	for i := range n {
		name := fmt.Sprintf("pw-%d", i)
		names = append(names, name)
		l.createNode(framework.NodeSpec{Name: name, InternalIPs: []string{fmt.Sprintf("10.80.0.%d", i+1)}, Ready: ready(v1.ConditionTrue)})
		l.waitInitialized(name)
	}

	hung.SetHang(true)
	t.Cleanup(func() { hung.SetHang(false) })
	bmcs[3].Close()                         // pw-3's BMC is unreachable
	bmcs[0].SetPowerState(redfish.PowerOff) // someone pulls the plug of pw-0
	for _, n := range names {
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, n, v1.ConditionUnknown); err != nil {
			t.Fatal(err)
		}
	}
	l.waitTaint("pw-0", cloudproviderapi.TaintNodeShutdown, true)
	// Visible to a person: conditions, events, and when the host was first seen off.
	l.waitCondition("pw-0", powermon.ConditionPoweredOn, v1.ConditionFalse)
	l.waitCondition("pw-0", powermon.ConditionBMCReachable, v1.ConditionTrue)
	l.waitEvent("default", "Node", "pw-0", powermon.ReasonPoweredOff)
	if n, err := l.node("pw-0"); err != nil || n.Annotations[powermon.AnnotationOffSince] == "" {
		t.Errorf("pw-0 lacks %s: %v", powermon.AnnotationOffSince, err)
	}
	for i, why := range map[int]string{1: "hung", 2: "credentials refused", 3: "unreachable"} {
		name := names[i]
		l.waitCondition(name, powermon.ConditionBMCReachable, v1.ConditionFalse)
		msg := l.waitEvent("default", "Node", name, powermon.ReasonBMCUnreachable)
		if strings.Contains(msg, "-secret") || strings.Contains(msg, "-wrong") {
			t.Errorf("%s (%s): event leaks a BMC password: %s", name, why, msg)
		}
		if i == 2 && !strings.Contains(msg, "refused the credentials") {
			t.Errorf("%s: event does not say the credentials were refused: %s", name, msg)
		}
	}
	// Their Nodes: no taint, not deleted, over several lifecycle passes.
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		for _, name := range names[1:] {
			n, err := l.node(name)
			if err != nil {
				t.Fatalf("%s: %v — a Node whose BMC does not answer must not be deleted", name, err)
			}
			if framework.HasTaint(n, cloudproviderapi.TaintNodeShutdown) {
				t.Fatalf("%s got the shutdown taint although its BMC never said off", name)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}

	bmcs[0].SetPowerState(redfish.PowerOn)
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, "pw-0", v1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	l.waitTaint("pw-0", cloudproviderapi.TaintNodeShutdown, false)
	l.waitCondition("pw-0", powermon.ConditionPoweredOn, v1.ConditionTrue)
	if err := framework.WaitFor(l.ctx, 30*time.Second, "powered-off-since removed", func(context.Context) (bool, error) {
		n, err := l.node("pw-0")
		return err == nil && n.Annotations[powermon.AnnotationOffSince] == "", err
	}); err != nil {
		t.Error(err)
	}
	// One kept session per answering BMC, at most: reads reuse it, and the hung BMC's
	// abandoned calls did not add logins.
	for i, bm := range bmcs[:3] {
		if n := bm.ActiveSessions(); n > 1 {
			t.Errorf("pw-%d: %d Redfish sessions open, want at most 1", i, n)
		}
	}
	if n := hung.SessionsCreated(); n > 1 {
		t.Errorf("the hung BMC saw %d logins, want at most 1", n)
	}
	// The hung BMC answers again; on SIGTERM every session is logged out.
	hung.SetHang(false)
	l.ccm.Stop()
	for i, bm := range bmcs[:3] {
		if n := bm.ActiveSessions(); n != 0 {
			t.Errorf("pw-%d: %d Redfish sessions left open after the CCM stopped", i, n)
		}
	}
}

// TestBMCCredentialsFromSecret: a host whose bmc block names a Secret in the
// credentials namespace (readable under the packaged RBAC only there): the CCM reads
// the Secret and the shutdown taint follows the BMC; a Secret the BMC refuses shows
// BMCReachable=False without the password, and fixing the Secret is picked up
// without a restart.
func TestBMCCredentialsFromSecret(t *testing.T) {
	dir := t.TempDir()
	ca, err := redfish.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "bmc-ca.pem")
	writeFile(t, caFile, string(ca.PEM()))
	l := newLabNoCCM(t)
	secrets := l.cp.Client.CoreV1().Secrets(manifests.CredentialsNamespace)
	var hosts string
	var bmcs []*redfish.BMC
	for i, pass := range []string{"sec-0-secret", "sec-1-wrong"} {
		b := redfish.NewBMC(redfish.Options{CA: ca, Username: "admin", Password: fmt.Sprintf("sec-%d-secret", i)})
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		bmcs = append(bmcs, b)
		name := fmt.Sprintf("e2e-bmc-sec-%d", i)
		if _, err := secrets.Create(l.ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string][]byte{"username": []byte("admin"), "password": []byte(pass)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = secrets.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		hosts += fmt.Sprintf("- name: sec-%d\n  addresses: [{type: InternalIP, address: 10.81.0.%d}]\n  bmc: {protocol: redfish, address: \"https://127.0.0.1\", port: %s, credentialsSecret: {namespace: %s, name: %s}, caFile: %s}\n",
			i, i+1, b.Port(), manifests.CredentialsNamespace, name, caFile)
	}
	l.setInventory("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n" + hosts)
	l.writeConfig("", "bmc: {callTimeout: 3s, cacheTTL: 1s, notReadyInterval: 1s, failureThreshold: 100}\n")
	l.startCCM(l.config)
	for i := range 2 {
		name := fmt.Sprintf("sec-%d", i)
		l.createNode(framework.NodeSpec{Name: name, InternalIPs: []string{fmt.Sprintf("10.81.0.%d", i+1)}, Ready: ready(v1.ConditionTrue)})
		l.waitInitialized(name)
	}
	l.waitCondition("sec-0", powermon.ConditionPoweredOn, v1.ConditionTrue)
	l.waitCondition("sec-1", powermon.ConditionBMCReachable, v1.ConditionFalse)
	msg := l.waitEvent("default", "Node", "sec-1", powermon.ReasonBMCUnreachable)
	if !strings.Contains(msg, "refused the credentials") || strings.Contains(msg, "sec-1-wrong") || strings.Contains(msg, "sec-1-secret") {
		t.Errorf("sec-1 event: %s; want the credentials refused, without a password", msg)
	}

	bmcs[0].SetPowerState(redfish.PowerOff)
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, "sec-0", v1.ConditionUnknown); err != nil {
		t.Fatal(err)
	}
	l.waitTaint("sec-0", cloudproviderapi.TaintNodeShutdown, true)

	// Fix sec-1's Secret: read again after the refusal, no restart.
	sec, err := secrets.Get(l.ctx, "e2e-bmc-sec-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data["password"] = []byte("sec-1-secret")
	if _, err := secrets.Update(l.ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	bmcs[1].SetPowerState(redfish.PowerOff)
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, "sec-1", v1.ConditionUnknown); err != nil {
		t.Fatal(err)
	}
	l.waitCondition("sec-1", powermon.ConditionBMCReachable, v1.ConditionTrue)
	l.waitTaint("sec-1", cloudproviderapi.TaintNodeShutdown, true)

	// The packaged RBAC behind it: get in the credentials namespace, nothing more.
	sa := "system:serviceaccount:" + manifests.Namespace + ":" + manifests.ServiceAccount
	for _, c := range []struct {
		verb, ns string
		allowed  bool
	}{
		{"get", manifests.CredentialsNamespace, true},
		{"list", manifests.CredentialsNamespace, false},
		{"watch", manifests.CredentialsNamespace, false},
		{"update", manifests.CredentialsNamespace, false},
		{"get", "default", false},
		{"list", "", false},
	} {
		sar, err := l.cp.Client.AuthorizationV1().SubjectAccessReviews().Create(l.ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: sa, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Resource: "secrets", Verb: c.verb, Namespace: c.ns,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != c.allowed {
			t.Errorf("%s secrets in %q: allowed = %v, want %v", c.verb, c.ns, sar.Status.Allowed, c.allowed)
		}
	}
}

func (l *lab) waitTaint(name, key string, want bool) {
	l.t.Helper()
	err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("taint %s on %s = %v", key, name, want), func(ctx context.Context) (bool, error) {
		n, err := l.node(name)
		if err != nil {
			return false, err
		}
		return framework.HasTaint(n, key) == want, nil
	})
	if err != nil {
		l.t.Fatal(err)
	}
}

func (l *lab) waitCondition(name string, ct v1.NodeConditionType, want v1.ConditionStatus) {
	l.t.Helper()
	err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("%s %s=%s", name, ct, want), func(ctx context.Context) (bool, error) {
		n, err := l.node(name)
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == ct {
				return c.Status == want, nil
			}
		}
		return false, nil
	})
	if err != nil {
		l.t.Fatal(err)
	}
}

// TestPowerOffPolicies: with outOfServiceAfter and deleteAfter set (short here), a
// NotReady Node whose host stays off first gets the out-of-service taint, then is
// deleted; a host that comes back on before deleteAfter keeps its Node.
func TestPowerOffPolicies(t *testing.T) {
	bmcs, inv := redfishHosts(t, "pol", "10.90.0", 2, nil)
	l := newLabNoCCM(t)
	l.setInventory(inv)
	l.writeConfig(", maxRemovedPercent: 100", "bmc: {callTimeout: 3s, cacheTTL: 1s, notReadyInterval: 1s}\ninstances: {outOfServiceAfter: 3s, deleteAfter: 10s}\n")
	l.startCCM(l.config)
	for i := range 2 {
		name := fmt.Sprintf("pol-%d", i)
		l.createNode(framework.NodeSpec{Name: name, InternalIPs: []string{fmt.Sprintf("10.90.0.%d", i+1)}, Ready: ready(v1.ConditionTrue)})
		l.waitInitialized(name)
		bmcs[i].SetPowerState(redfish.PowerOff)
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, name, v1.ConditionUnknown); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		l.waitTaint(fmt.Sprintf("pol-%d", i), v1.TaintNodeOutOfService, true)
	}
	l.waitEvent("default", "Node", "pol-0", powermon.ReasonOutOfService)
	// pol-1 comes back before deleteAfter: it is kept, and stays until it is Ready.
	bmcs[1].SetPowerState(redfish.PowerOn)
	l.waitDeleted("pol-0")
	if msg := l.waitEvent("default", "Node", "pol-0", "HostGone"); !strings.Contains(msg, "instances.deleteAfter") {
		t.Errorf("HostGone message: %s", msg)
	}
	if _, err := l.node("pol-1"); err != nil {
		t.Fatalf("pol-1, powered on again, was deleted: %v", err)
	}
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, "pol-1", v1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	l.waitTaint("pol-1", v1.TaintNodeOutOfService, false)
}

// TestShutdownTaintIPMI: the same through IPMI: a real ipmi_sim BMC read by bmclib's
// ipmitool driver (the real ipmitool binary) from the CCM process.
func TestShutdownTaintIPMI(t *testing.T) {
	dir := t.TempDir()
	lab, err := ipmi.Start(context.Background(), filepath.Join(dir, "ipmi"), 1, ipmi.Options{Username: "admin", Password: "ipmi-e2e-pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Stop)
	b := lab.BMCs()[0]
	creds := filepath.Join(dir, "creds")
	writeFile(t, creds, "username: admin\npassword: ipmi-e2e-pw\n")
	if err := os.Chmod(creds, 0o600); err != nil {
		t.Fatal(err)
	}
	l := newLabNoCCM(t)
	l.setInventory(fmt.Sprintf("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: ipmi-0\n  addresses: [{type: InternalIP, address: 10.85.0.1}]\n  bmc: {protocol: ipmi, address: %s, port: %d, credentialsFile: %s}\n", b.Host(), b.Port(), creds))
	l.writeConfig("", "bmc: {callTimeout: 10s, cacheTTL: 1s, notReadyInterval: 1s}\n")
	l.startCCM(l.config)
	l.createNode(framework.NodeSpec{Name: "ipmi-0", InternalIPs: []string{"10.85.0.1"}, Ready: ready(v1.ConditionTrue)})
	l.waitInitialized("ipmi-0")
	l.waitCondition("ipmi-0", powermon.ConditionPoweredOn, v1.ConditionTrue)

	if err := b.SetPower(false); err != nil { // the host loses power
		t.Fatal(err)
	}
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, "ipmi-0", v1.ConditionUnknown); err != nil {
		t.Fatal(err)
	}
	l.waitTaint("ipmi-0", cloudproviderapi.TaintNodeShutdown, true)
	l.waitCondition("ipmi-0", powermon.ConditionPoweredOn, v1.ConditionFalse)
	if err := b.SetPower(true); err != nil {
		t.Fatal(err)
	}
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, "ipmi-0", v1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	l.waitTaint("ipmi-0", cloudproviderapi.TaintNodeShutdown, false)
}
