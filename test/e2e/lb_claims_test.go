//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/internal/procsignal"
	"github.com/baremetal-ccm/baremetal-ccm/internal/testhook"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestResumedLeaderCannotGiveAnAddressTwice: three CCM replicas serve LoadBalancer
// Services while others are created and deleted all the time. In each of 20
// trials the leader decides an address for a new Service ("held-N") and is frozen
// right before it writes anything (after its own leadership check: the test hook
// stops the process), another replica takes over and gives the same free address
// to another new Service ("free-N"), and the frozen one is resumed with its stale
// decision. The address claims (pkg/lb, networking.k8s.io/v1 IPAddress) make its
// write fail: throughout, a watch checks that no Service changes or loses an
// address it holds and that no two live Services show the same one.
//
// The replicas that take over ignore the held-N Services (a second test hook), so
// nothing but the frozen leader's stale decision could ever give them an address:
// the old "per-Service resourceVersion" guard could not stop that write.
func TestResumedLeaderCannotGiveAnAddressTwice(t *testing.T) {
	raceForAnAddress(t, false)
}

// TestCutLeaderCannotGiveAnAddressTwice is TestResumedLeaderCannotGiveAnAddressTwice
// with the leader's API path cut (connections refused) instead of a pause: the
// leader waits in the test hook, its API path is cut, another replica takes over
// and gives the address to free-N, the path comes back and the old leader goes on
// with its stale decision.
func TestCutLeaderCannotGiveAnAddressTwice(t *testing.T) {
	raceForAnAddress(t, true)
}

func raceForAnAddress(t *testing.T, cut bool) {
	l := newLabNoCCM(t)
	// 20 trials of about 15 s: longer than the lab's own deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	l.ctx = ctx
	ns, cfg := lbNamespace(t, l, "claims", "192.0.2.128/25")
	lease := "bccm-claims-" + utilrand.String(6)
	args := []string{"--controllers=service-lb-controller", "--leader-elect=true", "--leader-elect-resource-name=" + lease,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s"}
	start := func(env ...string) *framework.CCM {
		c := framework.StartCCMEnv(t, l.cp, env, cfg, args...)
		if err := c.WaitHealthy(l.ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The one that decides and freezes; the others take over and ignore held-N.
	var freezer *framework.CCM
	var proxy *framework.APIProxy
	release := filepath.Join(l.dir, "release-held")
	if cut {
		proxy = framework.NewAPIProxy(t, l.cp)
		freezer = framework.StartCCMEnv(t, l.cp, []string{testhook.HoldBeforeClaimEnv + "=held-," + release}, cfg, append(slices.Clone(args), proxy.CCMArgs()...)...)
		if err := freezer.WaitHealthy(l.ctx); err != nil {
			t.Fatal(err)
		}
	} else {
		freezer = start(testhook.HoldBeforeClaimEnv + "=held-")
	}
	waitLeader(t, l.ctx, l.cp.Client, lease, []*framework.CCM{freezer})
	others := []*framework.CCM{start(testhook.IgnoreServicesEnv + "=held-"), start(testhook.IgnoreServicesEnv + "=held-")}
	all := append([]*framework.CCM{freezer}, others...)

	w := newHoldWatch(t, l, ns, "svc-", "free-")
	churn := newChurn(l, ns)
	churnCtx, stopChurn := context.WithCancel(l.ctx)
	churnDone := make(chan struct{})
	go func() { defer close(churnDone); churn.run(churnCtx) }()
	defer func() { stopChurn(); <-churnDone }()

	const trials = 20
	conflicts := 0
	for trial := range trials {
		makeLeader(t, l, lease, freezer, others, &all, start)
		held, free := fmt.Sprintf("held-%02d", trial), fmt.Sprintf("free-%02d", trial)
		if _, err := l.cp.Client.CoreV1().Services(ns).Create(l.ctx, fenceService(ns, held), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The leader decided an address for held-N and stopped itself before writing
		// (or waits for the release file, and its API path is cut).
		err := framework.WaitFor(l.ctx, 30*time.Second, "the leader to hold before claiming", func(context.Context) (bool, error) {
			if cut {
				return lastDecision(freezer.Log(), ns+"/"+held) != "", nil
			}
			return procsignal.TasksStopped(freezer.PID(), true)
		})
		if err != nil {
			t.Fatalf("trial %d: %v\n%s", trial, err, freezer.Log())
		}
		decided := lastDecision(freezer.Log(), ns+"/"+held)
		lost := strings.Count(freezer.Log(), "lost the Lease")
		if cut {
			proxy.Refuse()
		}
		// Another replica takes over and gives a new Service the lowest free address,
		// which is the one the frozen leader decided.
		if _, err := l.cp.Client.CoreV1().Services(ns).Create(l.ctx, fenceService(ns, free), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var freeIP string
		err = framework.WaitFor(l.ctx, 60*time.Second, free+" to get an address from the new leader", func(ctx context.Context) (bool, error) {
			s, err := l.cp.Client.CoreV1().Services(ns).Get(ctx, free, metav1.GetOptions{})
			if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
				return false, err
			}
			freeIP = s.Status.LoadBalancer.Ingress[0].IP
			return true, nil
		})
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if decided != "" && decided == freeIP {
			conflicts++
		}
		// Resume the stale leader: its claim must fail, and it writes nothing.
		if cut {
			if err := proxy.Restore(); err != nil {
				t.Fatal(err)
			}
			writeFile(t, release, "")
		} else {
			freezer.Signal(syscall.SIGCONT)
		}
		err = framework.WaitFor(l.ctx, 30*time.Second, "the resumed leader to notice it lost the Lease", func(context.Context) (bool, error) {
			return strings.Count(freezer.Log(), "lost the Lease") > lost, nil
		})
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		time.Sleep(time.Second) // anything it would still write has been written now
		s, err := l.cp.Client.CoreV1().Services(ns).Get(l.ctx, held, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range s.Status.LoadBalancer.Ingress {
			if in.IP == freeIP {
				t.Errorf("trial %d: %s shows %s, the address %s holds", trial, held, in.IP, free)
			}
		}
		if c, err := l.cp.Client.NetworkingV1().IPAddresses().Get(l.ctx, freeIP, metav1.GetOptions{}); err != nil || c.Spec.ParentRef.Name != free || c.Labels[networkingv1.LabelManagedBy] != lb.ClaimManager {
			t.Errorf("trial %d: the claim of %s: %+v %v, want %s's", trial, freeIP, c, err, free)
		}
		if cut {
			if err := os.Remove(release); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("trial %d: the frozen leader decided %q for %s, the new leader gave %s to %s", trial, decided, held, freeIP, free)
	}
	if conflicts < trials/2 {
		t.Errorf("only %d of %d trials raced for the same address: the test does not test what it says", conflicts, trials)
	}
	if v := w.violations(); len(v) > 0 {
		t.Fatalf("%d violations, first ones:\n%s", len(v), strings.Join(v[:min(len(v), 10)], "\n"))
	}
	t.Logf("%d of %d trials had the stale leader and the new one decide the same address; 0 duplicates, 0 changed addresses (%d assignments watched)", conflicts, trials, w.assignments())
}

// makeLeader makes freezer the leader: the leader it is not is stopped (it releases
// the Lease) until freezer holds it, then the stopped replicas start again.
func makeLeader(t *testing.T, l *lab, lease string, freezer *framework.CCM, others []*framework.CCM, all *[]*framework.CCM, start func(env ...string) *framework.CCM) {
	t.Helper()
	var stopped int
	for {
		leader := waitLeader(t, l.ctx, l.cp.Client, lease, *all)
		if leader == freezer {
			break
		}
		if err := leader.Stop(); err != nil {
			t.Fatal(err)
		}
		*all = removeCCM(*all, leader)
		stopped++
	}
	for range stopped {
		*all = append(*all, start(testhook.IgnoreServicesEnv+"=held-"))
	}
}

func removeCCM(cs []*framework.CCM, c *framework.CCM) []*framework.CCM {
	out := cs[:0]
	for _, x := range cs {
		if x != c {
			out = append(out, x)
		}
	}
	return out
}

// lastDecision is the address the CCM's log says it assigned svc last ("" if none
// was logged before it held: the hook holds it before the assignment is logged).
func lastDecision(log, svc string) string {
	ip := ""
	for _, line := range strings.Split(log, "\n") {
		if (strings.Contains(line, `"Test hook: stopping the process before claiming"`) || strings.Contains(line, `"Test hook: waiting before claiming"`)) && strings.Contains(line, svc) {
			if i := strings.Index(line, `ips=["`); i >= 0 {
				rest := line[i+6:]
				ip = rest[:strings.IndexByte(rest, '"')]
			}
		}
	}
	return ip
}

// cleanupServices drops the namespace's Services' finalizers (the CCMs stopped
// first) and deletes them and the namespace.
func cleanupServices(l *lab, ns string) {
	ctx := context.Background()
	svcs, _ := l.cp.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if svcs != nil {
		for _, s := range svcs.Items {
			if len(s.Finalizers) > 0 {
				_, _ = l.cp.Client.CoreV1().Services(ns).Patch(ctx, s.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
			_ = l.cp.Client.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
	}
	_ = l.cp.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}

// TestUpgradeClaimsExistingAddresses: a cluster upgraded from a version without
// claims has Services whose status shows their addresses, and no IPAddress
// objects, including two Services that show one address (a duplicate an older
// version could make). The CCM's first term claims every address for the Service
// that shows it, without moving any; the duplicate is resolved for the older
// Service, with a LoadBalancerIPConflict event on the newer one, which gets a new
// address.
func TestUpgradeClaimsExistingAddresses(t *testing.T) {
	l := newLabNoCCM(t)
	ns, cfg := lbNamespace(t, l, "upgrade", "192.0.2.128/25")
	// What an older version left: statuses, no claims.
	shown := map[string]string{"old": "192.0.2.140", "solo": "192.0.2.141", "dup": "192.0.2.140"}
	for _, name := range []string{"old", "solo", "dup"} {
		s, err := l.cp.Client.CoreV1().Services(ns).Create(l.ctx, fenceService(ns, name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: shown[name], IPMode: ptr.To(v1.LoadBalancerIPModeVIP)}}
		if _, err := l.cp.Client.CoreV1().Services(ns).UpdateStatus(l.ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if name == "solo" {
			time.Sleep(1100 * time.Millisecond) // dup is newer than old by its creation timestamp
		}
	}
	w := newHoldWatch(t, l, ns, "old", "solo")
	c := framework.StartCCM(t, l.cp, cfg, "--controllers=service-lb-controller", "--leader-elect=false")
	if err := c.WaitHealthy(l.ctx); err != nil {
		t.Fatal(err)
	}
	var dupIP string
	err := framework.WaitFor(l.ctx, 60*time.Second, "every address claimed and dup moved", func(ctx context.Context) (bool, error) {
		s, err := l.cp.Client.CoreV1().Services(ns).Get(ctx, "dup", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) != 1 || s.Status.LoadBalancer.Ingress[0].IP == shown["dup"] {
			return false, err
		}
		dupIP = s.Status.LoadBalancer.Ingress[0].IP
		for name, ip := range map[string]string{"old": shown["old"], "solo": shown["solo"], "dup": dupIP} {
			claim, err := l.cp.Client.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
			if err != nil || claim.Spec.ParentRef == nil || claim.Spec.ParentRef.Name != name || claim.Spec.ParentRef.Namespace != ns {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Log())
	}
	for _, name := range []string{"old", "solo"} {
		s, err := l.cp.Client.CoreV1().Services(ns).Get(l.ctx, name, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) != 1 || s.Status.LoadBalancer.Ingress[0].IP != shown[name] {
			t.Errorf("%s: status %+v %v, want %s kept", name, s.Status.LoadBalancer, err, shown[name])
		}
	}
	msg := l.waitEvent(ns, "Service", "dup", lb.ReasonPrimingConflict)
	if !strings.Contains(msg, shown["dup"]) {
		t.Errorf("the conflict event says %q, want the address %s", msg, shown["dup"])
	}
	if v := w.violations(); len(v) > 0 {
		t.Fatalf("%d violations:\n%s", len(v), strings.Join(v[:min(len(v), 10)], "\n"))
	}
	t.Logf("claimed %s for old and %s for solo without moving them; dup moved from %s to %s with a %s event", shown["old"], shown["solo"], shown["dup"], dupIP, lb.ReasonPrimingConflict)
}

// lbNamespace creates a namespace named prefix-<random> whose Services are cleaned
// up once the test's CCMs stopped (Services still carrying the cleanup finalizer
// would stay Terminating with their IPs, and the next test's CCM would count those
// IPs as in use), and writes a cloud config with one pool, announcer none; it
// returns the namespace and the config's path.
func lbNamespace(t *testing.T, l *lab, prefix, pool string) (ns, cfg string) {
	t.Helper()
	ns = prefix + "-" + utilrand.String(6)
	if _, err := l.cp.Client.CoreV1().Namespaces().Create(l.ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupServices(l, ns) })
	cfg = filepath.Join(l.dir, "cloud-config-"+prefix+".yaml")
	writeFile(t, cfg, fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: %s, pollInterval: 1s}
  deletionGuard: {acknowledgeFile: %s}
loadBalancer:
  announcer: none
  pools:
  - name: public
    addresses: [%s]
`, l.inventory, l.ack, pool))
	return ns, cfg
}
