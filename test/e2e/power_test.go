//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/explain"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/maintenance"
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
	return redfishFleet(t, name, subnet, n, func(i int, h *fleetHost) {
		h.wrongPassword = wrongPassword != nil && wrongPassword(i)
	})
}

// fleetHost is how one host of redfishFleet differs from the others.
type fleetHost struct {
	wrongPassword bool
	// bmcUUID is the ComputerSystem.UUID its emulated BMC reports (random when empty);
	// hostUUID is the systemUUID of its inventory entry (none when empty).
	bmcUUID, hostUUID string
}

// redfishFleet is redfishHosts with each host shaped by shape.
func redfishFleet(t *testing.T, name, subnet string, n int, shape func(i int, h *fleetHost)) ([]*redfish.BMC, string) {
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
		var fh fleetHost
		if shape != nil {
			shape(i, &fh)
		}
		pass := fmt.Sprintf("%s-%d-secret", name, i)
		// StartForTest: once the CCM has stopped (its cleanup runs first), every session
		// it opened on this BMC must have been logged out.
		b := redfish.StartForTest(t, redfish.Options{CA: ca, Username: "admin", Password: pass, SystemUUID: fh.bmcUUID})
		bmcs = append(bmcs, b)
		if fh.wrongPassword {
			pass = fmt.Sprintf("%s-%d-wrong", name, i)
		}
		creds := filepath.Join(dir, fmt.Sprintf("creds-%d", i))
		writeFile(t, creds, fmt.Sprintf("username: admin\npassword: %s\n", pass))
		if err := os.Chmod(creds, 0o600); err != nil {
			t.Fatal(err)
		}
		hosts += fmt.Sprintf("- name: %s-%d\n  addresses: [{type: InternalIP, address: %s.%d}]\n  bmc: {protocol: redfish, address: \"https://127.0.0.1\", port: %s, credentialsFile: %s, caFile: %s}\n",
			name, i, subnet, i+1, b.Port(), creds, caFile)
		if fh.hostUUID != "" {
			hosts += "  systemUUID: " + fh.hostUUID + "\n"
		}
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
	if n, err := l.node("pw-0"); err != nil || n.Annotations[powermon.AnnotationOffSince] == "" || n.Annotations[powermon.AnnotationOffSeen] == "" {
		t.Errorf("pw-0 lacks %s or %s: %v", powermon.AnnotationOffSince, powermon.AnnotationOffSeen, err)
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
		return err == nil && n.Annotations[powermon.AnnotationOffSince] == "" && n.Annotations[powermon.AnnotationOffSeen] == "", err
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
		b := redfish.StartForTest(t, redfish.Options{CA: ca, Username: "admin", Password: fmt.Sprintf("sec-%d-secret", i)})
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

	// baremetal-ccmctl bmc check reads the Secret as the CCM does, with the CCM's own
	// kubeconfig (the packaged RBAC), and asks the BMC through the CCM's driver.
	ctl, err := framework.BuildBinary(l.ctx, "./cmd/baremetal-ccmctl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(l.ctx, ctl, "bmc", "check", "--inventory", l.inventory, "--kubeconfig", framework.CCMKubeconfig(), "sec-1").CombinedOutput()
	if err != nil {
		t.Fatalf("bmc check: %v\n%s", err, out)
	}
	for _, want := range []string{"credentials: Secret " + manifests.CredentialsNamespace + "/e2e-bmc-sec-1", "reachable:   yes", "power:       off"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("bmc check output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "sec-1-secret") {
		t.Errorf("bmc check printed the password:\n%s", out)
	}

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

// powerPolicies are the shortest power-off policies validation allows.
const powerPolicies = "bmc: {callTimeout: 3s, cacheTTL: 1s, notReadyInterval: 1s}\ninstances: {outOfServiceAfter: 1m, deleteAfter: 5m%s}\n"

// backdateOffSince waits until the monitor has stamped the Node's host off, then moves
// that stamp, and the Node's last readiness change with it, back by ago, as if the
// host had been seen off (and its Node NotReady) that long: the e2e stands for minutes
// of observed off time without waiting for them. The CCM never rewrites a present
// stamp while the host stays off and the Node shows no sign of life after it, so from
// then on the policies see that age.
func (l *lab) backdateOffSince(name string, ago time.Duration) {
	l.t.Helper()
	err := framework.WaitFor(l.ctx, 60*time.Second, name+" stamped off", func(ctx context.Context) (bool, error) {
		n, err := l.node(name)
		return err == nil && n.Annotations[powermon.AnnotationOffSince] != "", err
	})
	if err != nil {
		l.t.Fatal(err)
	}
	l.backdate(name, ago)
}

// backdate moves the Node's last readiness change back by ago (first: a stamp older
// than it would be stale) and stamps its host off since then.
func (l *lab) backdate(name string, ago time.Duration) {
	l.t.Helper()
	at := time.Now().Add(-ago)
	if err := framework.BackdateReady(l.ctx, l.cp.Client, name, at); err != nil {
		l.t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, powermon.AnnotationOffSince, at.UTC().Format(time.RFC3339))
	if _, err := l.cp.Client.CoreV1().Nodes().Patch(l.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		l.t.Fatal(err)
	}
}

// powerLab starts a CCM over inv with the shortest power-off policies (budget, if not
// empty, set inside instances), registers the Nodes name-0.. at subnet.1.. for the n
// hosts, and once they are initialized powers every host off through its BMC and
// marks its Node NotReady. It returns the Node names.
func powerLab(t *testing.T, bmcs []*redfish.BMC, inv, name, subnet, budget string) (*lab, []string) {
	t.Helper()
	l := newLabNoCCM(t)
	l.setInventory(inv)
	l.writeConfig(", maxRemovedPercent: 100", fmt.Sprintf(powerPolicies, budget))
	l.startCCM(l.config)
	var names []string
	for i := range bmcs {
		names = append(names, fmt.Sprintf("%s-%d", name, i))
		l.createNode(framework.NodeSpec{Name: names[i], InternalIPs: []string{fmt.Sprintf("%s.%d", subnet, i+1)}, Ready: ready(v1.ConditionTrue)})
	}
	for i, n := range names {
		l.waitInitialized(n)
		bmcs[i].SetPowerState(redfish.PowerOff)
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, n, v1.ConditionUnknown); err != nil {
			t.Fatal(err)
		}
	}
	return l, names
}

// TestPowerOffPolicies: a NotReady Node whose host has stayed off past
// outOfServiceAfter gets the out-of-service taint, past deleteAfter it is deleted; a
// host that comes back on keeps its Node; a host in maintenance, off for days by
// design, is neither fenced nor deleted. The taint comes off while the host still
// reads off, once the Node is empty: pol-0's VolumeAttachment holds it until it is
// deleted (the attach-detach controller's part, played by the test); pol-1 comes back
// on with a pod still bound to it, so its taint stays, with a warning, until a person
// removes it (kubernetes#142331).
func TestPowerOffPolicies(t *testing.T) {
	bmcs, inv := redfishHosts(t, "pol", "10.90.0", 3, nil)
	inv = strings.Replace(inv, "- name: pol-2\n", "- name: pol-2\n  state: maintenance\n", 1)
	l, _ := powerLab(t, bmcs, inv, "pol", "10.90.0", "")
	va := l.attachVolume("pol-0")
	l.bindPod("pol-1")
	// Off for 2 minutes: out of service, not deleted.
	for i := range 3 {
		l.backdateOffSince(fmt.Sprintf("pol-%d", i), 2*time.Minute)
	}
	for i := range 2 {
		l.waitTaint(fmt.Sprintf("pol-%d", i), v1.TaintNodeOutOfService, true)
	}
	l.waitEvent("default", "Node", "pol-0", powermon.ReasonOutOfService)
	l.stillThere(3*time.Second, "pol-0", "pol-1", "pol-2")
	for _, name := range []string{"pol-0", "pol-1"} {
		if n, _ := l.node(name); !framework.HasTaint(n, v1.TaintNodeOutOfService) {
			t.Fatalf("%s: the out-of-service taint came off while its Node still held a volume attachment or a pod", name)
		}
	}
	// pol-0's volume is detached while its host still reads off: the taint comes off
	// and is not added again.
	if err := l.cp.Client.StorageV1().VolumeAttachments().Delete(l.ctx, va, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	l.waitTaint("pol-0", v1.TaintNodeOutOfService, false)
	if n, _ := l.node("pol-0"); n.Annotations[powermon.AnnotationOutOfService] != powermon.OutOfServiceReleased || condStatus(n, powermon.ConditionPoweredOn) != v1.ConditionFalse {
		t.Fatalf("pol-0 after the release: annotations %v, PoweredOn %s; want released while off", n.Annotations, condStatus(n, powermon.ConditionPoweredOn))
	}
	l.waitEvent("default", "Node", "pol-0", powermon.ReasonOutOfServiceRemoved)
	deadline := time.Now().Add(4 * time.Second) // several monitor passes
	for time.Now().Before(deadline) {
		if n, _ := l.node("pol-0"); framework.HasTaint(n, v1.TaintNodeOutOfService) {
			t.Fatal("pol-0 was tainted again in the same off period")
		}
		time.Sleep(200 * time.Millisecond)
	}
	// pol-1 comes back with the taint still there; pol-0 and pol-2 have been off for 10
	// minutes: pol-0 goes.
	bmcs[1].SetPowerState(redfish.PowerOn)
	l.waitCondition("pol-1", powermon.ConditionPoweredOn, v1.ConditionTrue)
	if msg := l.waitEvent("default", "Node", "pol-1", powermon.ReasonOutOfServiceKept); !strings.Contains(msg, "kubectl taint nodes pol-1") {
		t.Errorf("%s message: %s", powermon.ReasonOutOfServiceKept, msg)
	}
	l.backdateOffSince("pol-0", 10*time.Minute)
	l.backdateOffSince("pol-2", 10*time.Minute)
	l.waitDeleted("pol-0")
	if msg := l.waitEvent("default", "Node", "pol-0", "HostGone"); !strings.Contains(msg, "instances.deleteAfter") {
		t.Errorf("HostGone message: %s", msg)
	}
	if _, err := l.node("pol-1"); err != nil {
		t.Fatalf("pol-1, powered on again, was deleted: %v", err)
	}
	l.stillThere(4*time.Second, "pol-2")
	if n, _ := l.node("pol-2"); fenced(n) {
		t.Fatal("pol-2 is in maintenance but got the out-of-service taint")
	}
	// Ready again: the taint stays (never removed after the host came back) until a
	// person removes it; it is not put back on the live host.
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, "pol-1", v1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // several monitor passes
	n, err := l.node("pol-1")
	if err != nil || !framework.HasTaint(n, v1.TaintNodeOutOfService) || n.Annotations[powermon.AnnotationOutOfService] != powermon.OutOfServiceKept {
		t.Fatalf("pol-1 on and Ready: %v, annotations %v; want the taint kept", err, n.Annotations)
	}
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tn v1.Taint) bool { return tn.Key == v1.TaintNodeOutOfService })
	if _, err := l.cp.Client.CoreV1().Nodes().Update(l.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if n, _ := l.node("pol-1"); framework.HasTaint(n, v1.TaintNodeOutOfService) {
			t.Fatal("the out-of-service taint was put back on pol-1, on and Ready")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitAnnotation waits until the Node's annotation key has value ("": absent).
func (l *lab) waitAnnotation(name, key, value string) {
	l.t.Helper()
	err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("annotation %s=%q on %s", key, value, name), func(ctx context.Context) (bool, error) {
		n, err := l.node(name)
		return err == nil && n.Annotations[key] == value, err
	})
	if err != nil {
		l.t.Fatal(err)
	}
}

// fenced reports whether the CCM acted on n with the out-of-service taint (it may
// have removed the taint again while the host read off, leaving its marker).
func fenced(n *v1.Node) bool {
	_, marked := n.Annotations[powermon.AnnotationOutOfService]
	return marked || framework.HasTaint(n, v1.TaintNodeOutOfService)
}

func condStatus(n *v1.Node, t v1.NodeConditionType) v1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// attachVolume creates a VolumeAttachment to node, as the attach-detach controller
// would for a CSI volume, and returns its name; nothing here detaches it.
func (l *lab) attachVolume(node string) string {
	l.t.Helper()
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-" + node},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "csi.example.com", NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-" + node)}},
	}
	if _, err := l.cp.Client.StorageV1().VolumeAttachments().Create(l.ctx, va, metav1.CreateOptions{}); err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() {
		_ = l.cp.Client.StorageV1().VolumeAttachments().Delete(context.Background(), va.Name, metav1.DeleteOptions{})
	})
	return va.Name
}

// bindPod creates a pod bound to node (as the scheduler would); with no kubelet,
// taint manager or pod GC here, it stays until the test deletes it.
func (l *lab) bindPod(node string) {
	l.t.Helper()
	if _, err := l.cp.Client.CoreV1().ServiceAccounts("default").Create(l.ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		l.t.Fatal(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app-" + node},
		Spec: v1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Containers: []v1.Container{{Name: "app", Image: "registry.invalid/app:1"}}},
	}
	if _, err := l.cp.Client.CoreV1().Pods("default").Create(l.ctx, pod, metav1.CreateOptions{}); err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() {
		zero := int64(0)
		_ = l.cp.Client.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

// TestMaintenanceLifecycleConditions: Nodes that a Node lifecycle condition of
// Kubernetes 1.37 (KEP-5683) puts in maintenance, MaintenanceInProgress or
// MaintenancePlanned True, with their hosts powered off for 10 minutes, are never
// tainted out-of-service, deleted or counted against the power-off budget: with a
// budget of 1 host the one Node not in maintenance takes it and is deleted, and no host
// waits; so is a Node labeled baremetal-ccm.io/exclude-from-remediation=true. explain
// names the condition. Once MaintenanceInProgress turns False, that Node is under the
// policies again, its off time counted from the end of the maintenance (nothing at
// once); once that is long enough the budget is used up, so it waits, with an event.
func TestMaintenanceLifecycleConditions(t *testing.T) {
	bmcs, inv := redfishHosts(t, "mnt", "10.95.0", 4, nil)
	l, names := powerLab(t, bmcs, inv, "mnt", "10.95.0", ", powerOffBudget: {maxHosts: 1}")
	setCond := func(name string, typ v1.NodeConditionType, status v1.ConditionStatus) {
		t.Helper()
		c := v1.NodeCondition{Type: typ, Status: status, Reason: "FirmwareUpdate", Message: "set by the e2e test as a maintenance tool would"}
		if err := framework.SetNodeCondition(l.ctx, l.cp.Client, name, c); err != nil {
			t.Fatal(err)
		}
	}
	setCond("mnt-0", v1.NodeMaintenanceInProgress, v1.ConditionTrue)
	setCond("mnt-1", v1.NodeMaintenancePlanned, v1.ConditionTrue)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, maintenance.ExcludeLabel)
	if _, err := l.cp.Client.CoreV1().Nodes().Patch(l.ctx, "mnt-3", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		l.backdateOffSince(name, 10*time.Minute)
	}
	l.waitDeleted("mnt-2")
	l.stillThere(8*time.Second, "mnt-0", "mnt-1", "mnt-3") // several lifecycle and monitor passes
	for _, name := range []string{"mnt-0", "mnt-1", "mnt-3"} {
		if n, _ := l.node(name); fenced(n) {
			t.Errorf("%s is in maintenance by a Node condition but got the out-of-service taint", name)
		}
	}
	if st := l.guardState(); st.PowerTrip != nil {
		t.Errorf("hosts wait for the power-off budget: %+v; the Nodes in maintenance must not count", st.PowerTrip)
	}
	l.waitMetric("baremetal_ccm_power_budget_waiting_hosts 0")
	out, err := (&explain.Explainer{Client: l.cp.Client}).Node(l.ctx, "mnt-0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "in maintenance: Node condition MaintenanceInProgress is True") {
		t.Errorf("explain node mnt-0 does not name the condition:\n%s", out)
	}

	// Maintenance ends on mnt-0 with its host still off: off time counts from the end
	// of the maintenance, so nothing happens at once.
	setCond("mnt-0", v1.NodeMaintenanceInProgress, v1.ConditionFalse)
	l.stillThere(5*time.Second, "mnt-0")
	if n, _ := l.node("mnt-0"); fenced(n) {
		t.Error("mnt-0 was fenced the moment its maintenance ended")
	}
	l.waitMetric("baremetal_ccm_power_budget_waiting_hosts 0")
	// It ended 10 minutes ago: the policies apply, and the budget (mnt-2's) holds it.
	ended := v1.NodeCondition{Type: v1.NodeMaintenanceInProgress, Status: v1.ConditionFalse, Reason: "Done",
		LastTransitionTime: metav1.NewTime(time.Now().Add(-10 * time.Minute))}
	if err := framework.SetNodeCondition(l.ctx, l.cp.Client, "mnt-0", ended); err != nil {
		t.Fatal(err)
	}
	if msg := l.waitEvent("default", "Node", "mnt-0", inventory.ReasonPowerBudget); !strings.Contains(msg, "power-off budget used up") {
		t.Errorf("%s event on mnt-0: %q", inventory.ReasonPowerBudget, msg)
	}
	l.waitMetric("baremetal_ccm_power_budget_waiting_hosts 1")
	l.stillThere(4*time.Second, "mnt-0", "mnt-1", "mnt-3")
	for _, name := range []string{"mnt-1", "mnt-3"} {
		if n, _ := l.node(name); fenced(n) {
			t.Errorf("%s (still exempt) got the out-of-service taint", name)
		}
	}
}

// TestPowerOffControlPlaneOneAtATime: two control-plane Nodes (and a worker) whose
// hosts are off past both policies, with budget to spare: one control-plane Node is
// fenced and deleted, the other waits with a PowerOffBudgetExceeded event that says one
// control-plane host at a time, and the worker is not held by it.
func TestPowerOffControlPlaneOneAtATime(t *testing.T) {
	bmcs, inv := redfishHosts(t, "cpl", "10.97.0", 3, nil)
	l, names := powerLab(t, bmcs, inv, "cpl", "10.97.0", ", powerOffBudget: {maxHosts: 5}")
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, maintenance.ControlPlaneLabel)
	for _, name := range names[:2] {
		if _, err := l.cp.Client.CoreV1().Nodes().Patch(l.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		l.backdateOffSince(name, 10*time.Minute)
	}
	l.waitDeleted("cpl-2") // the worker
	var acted, waiting string
	err := framework.WaitFor(l.ctx, 60*time.Second, "one control-plane Node deleted", func(ctx context.Context) (bool, error) {
		for i, name := range names[:2] {
			if _, err := l.node(name); apierrors.IsNotFound(err) {
				acted, waiting = name, names[1-i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if msg := l.waitEvent("default", "Node", waiting, inventory.ReasonPowerBudget); !strings.Contains(msg, "one control-plane host at a time") || !strings.Contains(msg, "cpl-") {
		t.Errorf("%s event on %s: %q", inventory.ReasonPowerBudget, waiting, msg)
	}
	l.stillThere(6*time.Second, waiting) // several lifecycle and monitor passes
	if n, _ := l.node(waiting); fenced(n) {
		t.Errorf("%s was fenced while control-plane Node %s held the window's grant", waiting, acted)
	}
	l.waitMetric("baremetal_ccm_power_budget_waiting_hosts 1")
}

// TestRemediationStorm: 10 of 20 hosts go off at once with maxUnhealthy 30% (6): a
// remediation storm holds every power-based action, so none of the 10 is fenced or
// deleted though their hosts have been off for 10 minutes, each carries RemediationHeld
// True, and the Inventory has a RemediationStormStarted event. When 5 come back (5
// unhealthy, at most 6) the cooldown holds the other 5 (RemediationHeld reason
// StormCooldown); after it they are acted on.
func TestRemediationStorm(t *testing.T) {
	const n = 20
	bmcs, inv := redfishHosts(t, "stm", "10.98.0", n, nil)
	l := newLabNoCCM(t)
	l.setInventory(inv)
	l.writeConfig(", maxRemovedPercent: 100", fmt.Sprintf(powerPolicies, ", powerOffBudget: {maxHosts: 20}, maxUnhealthy: 30%, stormCooldown: 20s"))
	l.startCCM(l.config)
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("stm-%d", i))
		l.createNode(framework.NodeSpec{Name: names[i], InternalIPs: []string{fmt.Sprintf("10.98.0.%d", i+1)}, Ready: ready(v1.ConditionTrue)})
	}
	for _, name := range names {
		l.waitInitialized(name)
	}
	l.waitMetric("baremetal_ccm_remediation_max_unhealthy_nodes 6")
	down := names[:10]
	for i, name := range down {
		bmcs[i].SetPowerState(redfish.PowerOff)
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, name, v1.ConditionUnknown); err != nil {
			t.Fatal(err)
		}
	}
	l.waitMetric("baremetal_ccm_remediation_storm 1")
	for _, name := range down {
		l.backdateOffSince(name, 10*time.Minute)
	}
	held := func(name, reason string) {
		t.Helper()
		err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("%s RemediationHeld True (%s)", name, reason), func(ctx context.Context) (bool, error) {
			node, err := l.node(name)
			if err != nil {
				return false, err
			}
			for _, c := range node.Status.Conditions {
				if c.Type == powermon.ConditionRemediationHeld {
					return c.Status == v1.ConditionTrue && c.Reason == reason, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range down {
		held(name, powermon.ReasonRemediationStorm)
	}
	l.stillThere(8*time.Second, down...) // several lifecycle and monitor passes
	for _, name := range down {
		if node, _ := l.node(name); fenced(node) {
			t.Errorf("%s was fenced in a remediation storm", name)
		}
	}
	if err := framework.WaitFor(l.ctx, 30*time.Second, "a RemediationStormStarted event on the Inventory", func(ctx context.Context) (bool, error) {
		evs, err := framework.Events(ctx, l.cp.Client, "kube-system", "Inventory", "inventory")
		for _, e := range evs {
			if e.Reason == inventory.ReasonStormStarted && strings.Contains(e.Message, "10 of 20 Nodes are unhealthy") {
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		t.Fatal(err)
	}

	// Five come back: at most 6 unhealthy, the cooldown holds the other five.
	for i, name := range down[:5] {
		bmcs[i].SetPowerState(redfish.PowerOn)
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, name, v1.ConditionTrue); err != nil {
			t.Fatal(err)
		}
	}
	rest := down[5:]
	for _, name := range rest {
		held(name, powermon.ReasonStormCooldown)
	}
	l.stillThere(8*time.Second, rest...) // well within the 20 s cooldown
	for _, name := range rest {
		if node, _ := l.node(name); fenced(node) {
			t.Errorf("%s was fenced in the storm's cooldown", name)
		}
	}
	// After the cooldown they are acted on: off for 10 minutes, past deleteAfter.
	for _, name := range rest {
		l.waitDeleted(name)
	}
	l.waitMetric("baremetal_ccm_remediation_storm 0")
	for _, name := range down[:5] {
		if _, err := l.node(name); err != nil {
			t.Errorf("%s, back on and Ready, is gone: %v", name, err)
		}
	}
}

// TestPowerOffBudget is the scenario (b): 40 hosts powered off at once (a PDU
// event) through their emulated BMCs, past both outOfServiceAfter and deleteAfter, with
// a budget of 5: at most 5 hosts are fenced or deleted, the other 35 wait with an
// event and a metric, and an acknowledgement of the waiting hosts releases them.
func TestPowerOffBudget(t *testing.T) {
	const n, budget = 40, 5
	bmcs, inv := redfishHosts(t, "pdu", "10.91.0", n, nil)
	l, names := powerLab(t, bmcs, inv, "pdu", "10.91.0", fmt.Sprintf(", powerOffBudget: {maxHosts: %d}", budget))
	for _, name := range names {
		l.backdateOffSince(name, 10*time.Minute)
	}

	// acted counts the hosts fenced (out-of-service) or deleted.
	acted := func() (int, []string) {
		var waiting []string
		count := 0
		for _, name := range names {
			node, err := l.node(name)
			switch {
			case apierrors.IsNotFound(err):
				count++
			case err != nil:
				t.Fatal(err)
			case fenced(node):
				count++
			default:
				waiting = append(waiting, name)
			}
		}
		return count, waiting
	}
	l.waitMetric(fmt.Sprintf("baremetal_ccm_power_budget_waiting_hosts %d", n-budget))
	deadline := time.Now().Add(8 * time.Second) // several lifecycle and monitor passes
	for time.Now().Before(deadline) {
		if c, _ := acted(); c > budget {
			t.Fatalf("%d hosts fenced or deleted, budget %d", c, budget)
		}
		time.Sleep(500 * time.Millisecond)
	}
	c, waiting := acted()
	if c != budget || len(waiting) != n-budget {
		t.Fatalf("%d hosts acted on, %d waiting; want %d and %d", c, len(waiting), budget, n-budget)
	}
	if msg := l.waitEvent("default", "Node", waiting[0], inventory.ReasonPowerBudget); !strings.Contains(msg, "power-off budget used up") || !strings.Contains(msg, "acknowledge power-") {
		t.Errorf("%s event on %s: %q", inventory.ReasonPowerBudget, waiting[0], msg)
	}
	st := l.guardState()
	if st.PowerTrip == nil || len(st.PowerTrip.Hosts) != n-budget {
		t.Fatalf("power trip %+v", st.PowerTrip)
	}
	// The latest event on the Inventory names the trip's current ID (the ID changes
	// as hosts join, so an acknowledgement accepts exactly the hosts it was shown).
	if err := framework.WaitFor(l.ctx, 30*time.Second, "an event naming "+st.PowerTrip.ID, func(ctx context.Context) (bool, error) {
		evs, err := framework.Events(ctx, l.cp.Client, "kube-system", "Inventory", "inventory")
		for _, e := range evs {
			if e.Reason == inventory.ReasonPowerBudget && strings.Contains(e.Message, st.PowerTrip.ID) && strings.Contains(e.Message, fmt.Sprintf("of %d hosts wait", n-budget)) {
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		t.Fatal(err)
	}

	// The operator acknowledges exactly the waiting hosts: they are fenced and deleted.
	l.acknowledge(st.PowerTrip.ID)
	for _, name := range waiting {
		l.waitDeleted(name)
	}
	l.waitMetric("baremetal_ccm_power_budget_waiting_hosts 0")
}

// TestIdentityMismatch is the scenario (c): a BMC that reports another system
// UUID than the inventory host's (swapped BMC addresses) never leads to a taint or a
// deletion, and the Node's event names both UUIDs; the same machine in the other SMBIOS
// byte order is not a contradiction.
func TestIdentityMismatch(t *testing.T) {
	const (
		hostUUID  = "4c4c4544-0037-4a10-8052-b5c04f4e4d01"
		otherUUID = "4c4c4544-0037-4a10-8052-b5c04f4e4d99"
		swapped   = "44454c4c-3700-104a-8052-b5c04f4e4d01" // hostUUID, first three fields byte-swapped
	)
	bmcs, inv := redfishFleet(t, "idm", "10.92.0", 2, func(i int, h *fleetHost) {
		h.hostUUID = hostUUID
		if i == 1 {
			h.hostUUID = strings.Replace(hostUUID, "4d01", "4d02", 1)
		}
		h.bmcUUID = map[int]string{0: otherUUID, 1: strings.Replace(swapped, "4d01", "4d02", 1)}[i]
	})
	l, _ := powerLab(t, bmcs, inv, "idm", "10.92.0", "")
	// idm-1's BMC names the same machine (swapped byte order): tainted as usual.
	l.waitTaint("idm-1", cloudproviderapi.TaintNodeShutdown, true)

	// idm-0's BMC answers for another machine.
	msg := l.waitEvent("default", "Node", "idm-0", "IdentityMismatch")
	if !strings.Contains(msg, hostUUID) || !strings.Contains(msg, otherUUID) {
		t.Errorf("IdentityMismatch event does not name both UUIDs: %s", msg)
	}
	// Even with an off stamp from earlier, as if it had been off for an hour.
	l.backdate("idm-0", time.Hour)
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		node, err := l.node("idm-0")
		if err != nil {
			t.Fatalf("idm-0: %v — a Node whose BMC answers for another machine must not be deleted", err)
		}
		for _, key := range []string{cloudproviderapi.TaintNodeShutdown, v1.TaintNodeOutOfService} {
			if framework.HasTaint(node, key) {
				t.Fatalf("idm-0 got %s from another machine's power state", key)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	node, _ := l.node("idm-0")
	if c := condition(node, powermon.ConditionBMCReachable); c == nil || c.Reason != "IdentityMismatch" {
		t.Errorf("BMCReachable = %+v, want reason IdentityMismatch", c)
	}
}

func condition(n *v1.Node, t v1.NodeConditionType) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// TestShutdownTaintIPMI: the same through IPMI: a real ipmi_sim BMC read by bmclib's
// ipmitool driver (the real ipmitool binary) from the CCM process.
func TestShutdownTaintIPMI(t *testing.T) {
	dir := t.TempDir()
	lab, err := ipmi.Start(context.Background(), filepath.Join(dir, "ipmi"), 2, ipmi.Options{Username: "admin", Password: "ipmi-e2e-pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Stop)
	bmcs := lab.BMCs()
	creds := filepath.Join(dir, "creds")
	writeFile(t, creds, "username: admin\npassword: ipmi-e2e-pw\n")
	if err := os.Chmod(creds, 0o600); err != nil {
		t.Fatal(err)
	}
	// ipmi-0's inventory systemUUID is its BMC's system GUID written in the IPMI
	// specification's byte order (all 16 bytes reversed): the same machine. ipmi-1's
	// inventory names another machine than its BMC answers for.
	const otherUUID = "4c4c4544-0037-4a10-8052-b5c04f4e4d99"
	uuids := []string{reverseUUID(t, bmcs[0].SystemGUID()), otherUUID}
	inv := "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n"
	for i, b := range bmcs {
		inv += fmt.Sprintf("- name: ipmi-%d\n  systemUUID: %s\n  addresses: [{type: InternalIP, address: 10.85.0.%d}]\n  bmc: {protocol: ipmi, address: %s, port: %d, credentialsFile: %s}\n",
			i, uuids[i], i+1, b.Host(), b.Port(), creds)
	}
	l := newLabNoCCM(t)
	l.setInventory(inv)
	l.writeConfig("", "bmc: {callTimeout: 10s, cacheTTL: 1s, notReadyInterval: 1s}\n")
	l.startCCM(l.config)
	for i, b := range bmcs {
		name := fmt.Sprintf("ipmi-%d", i)
		l.createNode(framework.NodeSpec{Name: name, InternalIPs: []string{fmt.Sprintf("10.85.0.%d", i+1)}, Ready: ready(v1.ConditionTrue)})
		l.waitInitialized(name)
		l.waitCondition(name, powermon.ConditionPoweredOn, v1.ConditionTrue)
		if err := b.SetPower(false); err != nil { // the host loses power
			t.Fatal(err)
		}
		if err := framework.SetNodeReady(l.ctx, l.cp.Client, name, v1.ConditionUnknown); err != nil {
			t.Fatal(err)
		}
	}
	l.waitTaint("ipmi-0", cloudproviderapi.TaintNodeShutdown, true)
	l.waitCondition("ipmi-0", powermon.ConditionPoweredOn, v1.ConditionFalse)

	// ipmi-1: the BMC's system GUID contradicts the inventory: no taint, an event
	// naming both.
	msg := l.waitEvent("default", "Node", "ipmi-1", "IdentityMismatch")
	if !strings.Contains(msg, otherUUID) || !strings.Contains(msg, bmcs[1].SystemGUID()) {
		t.Errorf("IdentityMismatch event does not name both UUIDs (%s, %s): %s", otherUUID, bmcs[1].SystemGUID(), msg)
	}
	l.stillThere(3*time.Second, "ipmi-1")
	if n, _ := l.node("ipmi-1"); framework.HasTaint(n, cloudproviderapi.TaintNodeShutdown) {
		t.Fatal("ipmi-1 got the shutdown taint from a BMC that answers for another machine")
	}

	if err := bmcs[0].SetPower(true); err != nil {
		t.Fatal(err)
	}
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, "ipmi-0", v1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	l.waitTaint("ipmi-0", cloudproviderapi.TaintNodeShutdown, false)
}

// reverseUUID writes a UUID's 16 bytes in reverse order.
func reverseUUID(t *testing.T, u string) string {
	t.Helper()
	h := strings.ReplaceAll(u, "-", "")
	if len(h) != 32 {
		t.Fatalf("not a UUID: %q", u)
	}
	var r string
	for i := 30; i >= 0; i -= 2 {
		r += h[i : i+2]
	}
	return r[0:8] + "-" + r[8:12] + "-" + r[12:16] + "-" + r[16:20] + "-" + r[20:32]
}

// TestBMCRecovery: a BMC that was down long enough to be backed off (here for two
// minutes) is asked again as soon as its host's Node is Ready again: BMCReachable is
// True within one notReadyInterval, not after the backoff or the next Ready-interval
// read.
func TestBMCRecovery(t *testing.T) {
	bmcs, inv := redfishHosts(t, "rec", "10.93.0", 1, nil)
	b := bmcs[0]
	l := newLabNoCCM(t)
	l.setInventory(inv)
	const notReadyInterval = 10 * time.Second
	l.writeConfig("", fmt.Sprintf("bmc: {callTimeout: 2s, cacheTTL: 1s, notReadyInterval: %s, backoffInitial: 2m, backoffMax: 5m}\n", notReadyInterval))
	l.startCCM(l.config)
	l.createNode(framework.NodeSpec{Name: "rec-0", InternalIPs: []string{"10.93.0.1"}, Ready: ready(v1.ConditionTrue)})
	l.waitInitialized("rec-0")
	l.waitCondition("rec-0", powermon.ConditionBMCReachable, v1.ConditionTrue)

	// The rack's out-of-band switch dies: the BMC hangs, and the Node goes NotReady.
	b.SetHang(true)
	t.Cleanup(func() { b.SetHang(false) })
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, "rec-0", v1.ConditionUnknown); err != nil {
		t.Fatal(err)
	}
	l.waitCondition("rec-0", powermon.ConditionBMCReachable, v1.ConditionFalse)
	if err := framework.WaitFor(l.ctx, 90*time.Second, "the BMC backed off", func(context.Context) (bool, error) {
		return strings.Contains(l.ccm.Log(), `"event"="bmcBackoff"`) || strings.Contains(l.ccm.Log(), "event=\"bmcBackoff\""), nil
	}); err != nil {
		t.Fatal(err)
	}

	// Back: the switch is fixed, the Node reports Ready.
	b.SetHang(false)
	back := time.Now()
	if err := framework.SetNodeReady(l.ctx, l.cp.Client, "rec-0", v1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	l.waitCondition("rec-0", powermon.ConditionBMCReachable, v1.ConditionTrue)
	if took := time.Since(back); took > notReadyInterval {
		t.Fatalf("BMCReachable True %s after the Node was Ready again, want within notReadyInterval %s", took.Round(time.Millisecond), notReadyInterval)
	}
}
