//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/utils/ptr"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestBGPPeers: BGP peers added, changed and removed with kubectl while Services
// churn, without a restart, with two replicas and a second BIRD that no CloudConfig
// names. Each replica is picked by its own BGPPeer's nodeSelector (replica 0 over
// IPv4, replica 1 over IPv6, each from its own source address): BIRD sees each new
// session (the time from kubectl apply to BIRD's "up" is BIRD's own timestamp) and
// gets the Services' paths; a change (hold time) re-creates only that session; an
// invalid change gets an Invalid condition naming the field and touches no session; a
// peer that is a CloudConfig peer is in Conflict; the leader stops and the other
// replica decides from then on; a deleted peer's session ends; no Service's address
// changes; kubectl get bgppeers shows them.
func TestBGPPeers(t *testing.T) {
	l := newLBLab(t, 2)
	r2 := bird.Start(t, bird.Options{Speakers: make([]bird.Speaker, 2), EventLog: true})
	label := "e2e.baremetal-ccm.io/peer-" + strings.ToLower(l.ns)
	for i := range 2 {
		l.createNode(framework.NodeSpec{Name: fmt.Sprintf("cp-%d", i), InternalIPs: []string{l.router.SpeakerV4(i).String()},
			Labels: map[string]string{label: fmt.Sprint(i)}, Ready: ready(v1.ConditionTrue)})
		l.start(i, "self")
	}
	leader := l.leaderIndex()
	other := 1 - leader
	objs := versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig)).BaremetalCCMV1alpha1().BGPPeers()
	name := func(i int) string { return fmt.Sprintf("e2e-%s-%d", strings.ToLower(l.ns), i) }
	t.Cleanup(func() {
		for i := range 3 {
			_ = objs.Delete(context.Background(), name(i), metav1.DeleteOptions{})
		}
	})
	// Peer i: r2 over IPv4 for replica 0, over IPv6 for replica 1, from the replica's
	// own address on r2's link.
	apply := func(i int, address, source, hold string) {
		t.Helper()
		path := filepath.Join(l.dir, fmt.Sprintf("bgppeer-%d.yaml", i))
		writeFile(t, path, fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: BGPPeer
metadata: {name: %s}
spec:
  address: "%s"
  asn: %d
  sourceAddress: "%s"
  holdTime: %s
  keepaliveTime: 1s
  connectRetry: 1s
  nodeSelector:
    matchLabels: {%s: "%d"}
`, name(i), address, r2.ASN, source, hold, label, i))
		if out, err := framework.Kubectl(l.ctx, l.cp, "apply", "-f", path); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	addr := func(i int) (netip.Addr, netip.Addr) {
		if i == 0 {
			return r2.RouterV4, r2.SpeakerV4(0)
		}
		return r2.RouterV6, r2.SpeakerV6(1)
	}
	proto := func(i int) string { return r2.Protocol(i, i == 1) }
	waitPeer := func(i int, status metav1.ConditionStatus, reason string, words ...string) *v1alpha1.BGPPeer {
		t.Helper()
		return waitAccepted(t, l.ctx, "BGPPeer "+name(i), func(ctx context.Context) (*v1alpha1.BGPPeer, metav1.Object, []metav1.Condition, error) {
			p, err := objs.Get(ctx, name(i), metav1.GetOptions{})
			if err != nil {
				return nil, nil, nil, err
			}
			return p, p, p.Status.Conditions, nil
		}, status, reason, words...)
	}
	// upAt is BIRD's time of protocol p's first change after since to state to
	// ("up"), or out of up ("down": BIRD says start, stop or flush), zero if none.
	upAt := func(p string, since time.Time, to string) time.Time {
		evs, err := r2.LogEvents(since)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == bird.EventProtocolState && e.Protocol == p && (e.To == to || to == "down" && e.To != "up") {
				return e.Time
			}
		}
		return time.Time{}
	}
	waitEvent := func(i int, since time.Time, to, what string) time.Time {
		t.Helper()
		var at time.Time
		if err := framework.WaitFor(l.ctx, 60*time.Second, fmt.Sprintf("BIRD 2's session with replica %d %s", i, what), func(context.Context) (bool, error) {
			at = upAt(proto(i), since, to)
			return !at.IsZero(), nil
		}); err != nil {
			t.Fatal(err)
		}
		return at
	}
	// holds reports whether r2 holds a path for ip from speaker i.
	holds := func(ctx context.Context, ip netip.Addr, i int) (bool, error) {
		rs, err := r2.RoutesFor(ctx, netip.PrefixFrom(ip, ip.BitLen()))
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(rs, func(r bird.Route) bool { return r.Protocol == proto(i) }), nil
	}

	// Services that live through the whole test, and churn beside them.
	// steady-1 is dual-stack: replica 1 peers with r2 over IPv6.
	l.createService("steady-0", nil)
	l.createService("steady-1", func(s *v1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	})
	steadyIPs := [2]netip.Addr{l.waitIPs("steady-0", 1)[0]}
	for _, ip := range l.waitIPs("steady-1", 2) {
		if ip.Is6() {
			steadyIPs[1] = ip
		}
	}
	steady := l.allIPs()
	churnCtx, stopChurn := context.WithCancel(l.ctx)
	var churn sync.WaitGroup
	churned := 0
	churn.Go(func() {
		for i := 0; churnCtx.Err() == nil; i++ {
			s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: fmt.Sprintf("churn-%d", i)},
				Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Port: 80}}}}
			if _, err := l.cp.Client.CoreV1().Services(l.ns).Create(churnCtx, s, metav1.CreateOptions{}); err != nil {
				continue
			}
			time.Sleep(300 * time.Millisecond)
			_ = l.cp.Client.CoreV1().Services(l.ns).Delete(churnCtx, s.Name, metav1.DeleteOptions{})
			churned++
		}
	})

	// Added: each replica opens its session with r2 and sends it the Services.
	for i := range 2 {
		a, src := addr(i)
		start := time.Now()
		apply(i, a.String(), src.String(), "9s")
		up := waitEvent(i, start, "up", "up")
		t.Logf("TIMING kubectl apply of BGPPeer %s (%s, replica %d) to BIRD's session up: %s (BIRD's timestamp)", name(i), a, i, up.Sub(start).Round(time.Millisecond))
		waitPeer(i, metav1.ConditionTrue, v1alpha1.PeerReasonAccepted)
		if err := framework.WaitFor(l.ctx, 30*time.Second, fmt.Sprintf("BIRD 2 to hold %s from replica %d", steadyIPs[i], i), func(ctx context.Context) (bool, error) {
			return holds(ctx, steadyIPs[i], i)
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Only the replica its selector picks: replica 1 never opened an IPv4 session.
	if d, err := r2.ProtocolDetail(l.ctx, r2.Protocol(1, false)); err != nil || d.Established() {
		t.Errorf("replica 1 peers with r2 over IPv4 (%+v, %v): the nodeSelector picks replica 0 only", d, err)
	}
	row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name(0)) + `\s+` + regexp.QuoteMeta(r2.RouterV4.String()) + fmt.Sprintf(`\s+%d\s+True\s+Accepted\s`, r2.ASN))
	if out, err := framework.Kubectl(l.ctx, l.cp, "get", "bgppeers"); err != nil || !row.MatchString(out) {
		t.Errorf("kubectl get bgppeers: %v\n%s", err, out)
	}

	// Changed: a shorter hold time re-creates replica 0's session (negotiated 6 s at
	// BIRD); replica 1's stays up throughout.
	start := time.Now()
	a0, src0 := addr(0)
	apply(0, a0.String(), src0.String(), "6s")
	waitEvent(0, start, "down", "ended for the change")
	up := waitEvent(0, start, "up", "back up with the change")
	t.Logf("TIMING kubectl apply of a changed BGPPeer to BIRD's new session up: %s (BIRD's timestamp)", up.Sub(start).Round(time.Millisecond))
	if out, err := r2.Birdc(l.ctx, "show", "protocols", "all", proto(0)); err != nil || !regexp.MustCompile(`Hold timer:\s+[0-9.]+/6\b`).MatchString(out) {
		t.Errorf("the changed session's hold time at BIRD: %v\n%s", err, out)
	}
	if at := upAt(proto(1), start, "down"); !at.IsZero() {
		t.Errorf("replica 1's session went down at %s when replica 0's peer changed", at)
	}

	// Invalid: named, the last good spec stays, and no session moves.
	start = time.Now()
	apply(0, a0.String(), src0.String(), "1s")
	p := waitPeer(0, metav1.ConditionFalse, v1alpha1.PeerReasonInvalid, "spec.holdTime", "stays in force")
	if p.Status.Applied == nil || p.Status.Applied.HoldTime == nil || p.Status.Applied.HoldTime.Duration != 6*time.Second {
		t.Errorf("an invalid change touched status.applied: %+v", p.Status.Applied)
	}
	// What the schema can tell, the API server refuses outright.
	bad := p.DeepCopy()
	bad.Spec.Address = "r2.example"
	if _, err := objs.Update(l.ctx, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.address") {
		t.Errorf("a BGPPeer with a host name for address: %v, want Invalid naming spec.address from the API server", err)
	}
	// A duration without a unit would break every client's decoding of the list:
	// the schema refuses it.
	unitless := filepath.Join(l.dir, "unitless.yaml")
	writeFile(t, unitless, fmt.Sprintf("apiVersion: baremetal-ccm.io/v1alpha1\nkind: BGPPeer\nmetadata: {name: %s-unitless}\nspec: {address: 192.0.2.99, asn: 65001, holdTime: \"90\"}\n", strings.ToLower(l.ns)))
	if out, err := framework.Kubectl(l.ctx, l.cp, "apply", "-f", unitless); err == nil || !strings.Contains(err.Error()+out, "spec.holdTime") {
		t.Errorf("a hold time without a unit: %v\n%s; want the API server to refuse it naming spec.holdTime", err, out)
	}
	// A CloudConfig peer's address: Conflict, nothing applied.
	conflict := &v1alpha1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name(2)}, Spec: v1alpha1.BGPPeerSpec{Address: l.tor.v4.String(), ASN: int64(l.tor.asn)}}
	if _, err := objs.Create(l.ctx, conflict, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := waitPeer(2, metav1.ConditionFalse, v1alpha1.PeerReasonConflict, "spec.address", "bgp.peers[0]"); p.Status.Applied != nil {
		t.Errorf("a conflicting peer is applied: %+v", p.Status.Applied)
	}
	time.Sleep(3 * time.Second) // a session the invalid or conflicting object moved would show by now
	for i := range 2 {
		if at := upAt(proto(i), start, "down"); !at.IsZero() {
			t.Errorf("replica %d's session with r2 went down at %s after an invalid or conflicting object", i, at)
		}
	}

	// The leader stops: the other replica leads, and decides from here on.
	if err := l.ccms[leader].Stop(); err != nil {
		t.Errorf("stopping the leader: %v", err)
	}
	if l.leaderIndex() != other {
		t.Fatal("the other replica does not lead")
	}
	ccm := l.ccms[other]
	a, src := addr(other)
	start = time.Now()
	apply(other, a.String(), src.String(), "7s")
	waitPeer(other, metav1.ConditionTrue, v1alpha1.PeerReasonAccepted)
	up = waitEvent(other, start, "up", "back up with the change decided by the new leader")
	t.Logf("TIMING a BGPPeer change decided by the new leader to BIRD's new session up: %s (BIRD's timestamp)", up.Sub(start).Round(time.Millisecond))

	// Removed: the session ends (paths withdrawn, then a Cease).
	start = time.Now()
	if out, err := framework.Kubectl(l.ctx, l.cp, "delete", "bgppeer", name(other)); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	down := waitEvent(other, start, "down", "ended after the BGPPeer's deletion")
	t.Logf("TIMING kubectl delete of a BGPPeer to BIRD's session down: %s (BIRD's timestamp)", down.Sub(start).Round(time.Millisecond))
	if ok, _ := holds(l.ctx, steadyIPs[other], other); ok {
		t.Errorf("r2 still holds %s from replica %d after its BGPPeer was deleted", steadyIPs[other], other)
	}
	// The CloudConfig's router kept its session and paths throughout.
	l.waitAnnounced(steadyIPs[0], other)

	stopChurn()
	churn.Wait()
	t.Logf("%d Services churned meanwhile", churned)
	if churned == 0 {
		t.Error("no Service churned during the test")
	}
	now := l.allIPs()
	for svc, ips := range steady {
		if now[svc] != ips {
			t.Errorf("%s's addresses changed from %s to %s", svc, ips, now[svc])
		}
	}
	select {
	case <-ccm.Done():
		t.Error("the CCM exited")
	default:
	}
	if strings.Contains(ccm.Log(), "Observed a panic") {
		t.Error("the CCM panicked")
	}
}
