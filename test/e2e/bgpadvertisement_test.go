//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestBGPAdvertisements: which pools (and Services) go to which peers, with which
// communities, set with kubectl and applied without a restart, with two replicas and
// two BIRDs: the CloudConfig's router (both replicas) and a BGPPeer's (replica 0,
// by label). A pool advertised to the BGPPeer only leaves the CloudConfig's router
// and reaches the BGPPeer's with the advertisement's community; a Service selector
// sends only the selected Services of a pool to the CloudConfig's router; a missing
// BGPPeer and a bad community are named in the condition and change nothing; the
// leader stops and the other replica's term decides from then on; a deleted
// advertisement gives the pool back to every peer. No router ever sees the speaker's
// internal scope tags, and no Service's address changes.
func TestBGPAdvertisements(t *testing.T) {
	l := newLBLab(t, 2)
	r, r2 := l.router, bird.Start(t, bird.Options{Speakers: make([]bird.Speaker, 2), EventLog: true})
	label := "e2e.baremetal-ccm.io/adv-" + strings.ToLower(l.ns)
	for i := range 2 {
		l.createNode(framework.NodeSpec{Name: fmt.Sprintf("cp-%d", i), InternalIPs: []string{r.SpeakerV4(i).String()},
			Labels: map[string]string{label: fmt.Sprint(i)}, Ready: ready(v1.ConditionTrue)})
		l.start(i, "self")
	}
	objects := versioned.NewForConfigOrDie(jsonConfig(l.cp.RESTConfig)).BaremetalCCMV1alpha1()
	prefix := "e2e-" + strings.ToLower(l.ns)
	peerName := prefix + "-r2"
	t.Cleanup(func() {
		ctx := context.Background()
		for _, n := range []string{"pool", "web", "missing", "bad"} {
			_ = objects.BGPAdvertisements().Delete(ctx, prefix+"-"+n, metav1.DeleteOptions{})
		}
		_ = objects.BGPPeers().Delete(ctx, peerName, metav1.DeleteOptions{})
	})
	kubectlApply := func(name, yaml string) {
		t.Helper()
		path := filepath.Join(l.dir, name+".yaml")
		writeFile(t, path, yaml)
		if out, err := framework.Kubectl(l.ctx, l.cp, "apply", "-f", path); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	kubectlApply("peer", fmt.Sprintf(`apiVersion: baremetal-ccm.io/v1alpha1
kind: BGPPeer
metadata: {name: %s}
spec: {address: "%s", asn: %d, sourceAddress: "%s", holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s, nodeSelector: {matchLabels: {%s: "0"}}}
`, peerName, r2.RouterV4, r2.ASN, r2.SpeakerV4(0), label))
	advertise := func(name, spec string) {
		t.Helper()
		kubectlApply(name, fmt.Sprintf("apiVersion: baremetal-ccm.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: %s-%s}\nspec: %s\n", prefix, name, spec))
	}
	waitAdv := func(name string, status metav1.ConditionStatus, reason string, words ...string) *v1alpha1.BGPAdvertisement {
		t.Helper()
		return waitAccepted(t, l.ctx, "BGPAdvertisement "+prefix+"-"+name, func(ctx context.Context) (*v1alpha1.BGPAdvertisement, metav1.Object, []metav1.Condition, error) {
			o, err := objects.BGPAdvertisements().Get(ctx, prefix+"-"+name, metav1.GetOptions{})
			if err != nil {
				return nil, nil, nil, err
			}
			return o, o, o.Status.Conditions, nil
		}, status, reason, words...)
	}
	// at returns the speakers (by index) router rt holds ip from, and the
	// communities of those paths.
	at := func(ctx context.Context, rt *bird.Router, ip netip.Addr) ([]int, []string, error) {
		rs, err := rt.RoutesFor(ctx, netip.PrefixFrom(ip, 32))
		if err != nil {
			return nil, nil, err
		}
		var from []int
		var comms []string
		for _, route := range rs {
			for i := range 2 {
				if route.Protocol == rt.Protocol(i, false) || route.Protocol == rt.Protocol(i, true) {
					from = append(from, i)
				}
			}
			comms = append(comms, route.Communities...)
			for _, lc := range route.LargeCommunities {
				if strings.Contains(lc, "4294967295") {
					t.Errorf("%s reached %s with the speaker's scope tag %s", ip, rt.RouterV4, lc)
				}
			}
		}
		slices.Sort(from)
		return slices.Compact(from), comms, nil
	}
	waitAt := func(rt *bird.Router, ip netip.Addr, what string, want ...int) []string {
		t.Helper()
		var comms []string
		var last []int
		if err := framework.WaitFor(l.ctx, 30*time.Second, fmt.Sprintf("%s: %s from speakers %v at %s", what, ip, want, rt.RouterV4), func(ctx context.Context) (bool, error) {
			from, c, err := at(ctx, rt, ip)
			last, comms = from, c
			return err == nil && slices.Equal(from, want), nil
		}); err != nil {
			t.Fatalf("%v; last: %v", err, last)
		}
		return comms
	}

	if err := framework.WaitFor(l.ctx, 60*time.Second, "replica 0's session with the BGPPeer's router", func(ctx context.Context) (bool, error) {
		st, err := r2.ProtocolState(ctx, r2.Protocol(0, false))
		return err == nil && st.Established(), nil
	}); err != nil {
		t.Fatal(err)
	}
	l.createService("plain", nil)
	l.createService("tiny", func(s *v1.Service) { s.Annotations = map[string]string{ipam.AnnotationAddressPool: "tiny"} })
	l.createService("web", func(s *v1.Service) { s.Labels = map[string]string{"app": "web"} })
	plain, tiny, web := l.waitIPs("plain", 1)[0], l.waitIPs("tiny", 1)[0], l.waitIPs("web", 1)[0]
	steady := l.allIPs()
	for _, ip := range []netip.Addr{plain, tiny, web} {
		waitAt(r, ip, "without advertisements, everywhere", 0, 1)
		waitAt(r2, ip, "without advertisements, everywhere", 0)
	}

	// Pool tiny to the BGPPeer only, with a community.
	start := time.Now()
	advertise("pool", fmt.Sprintf(`{ipPools: [tiny], peers: [%s], communities: ["65000:555"]}`, peerName))
	waitAdv("pool", metav1.ConditionTrue, v1alpha1.AdvertisementReasonAccepted)
	waitAt(r, tiny, "advertised to the BGPPeer only: gone from the CloudConfig's router")
	t.Logf("TIMING kubectl apply of a BGPAdvertisement to the pool's address withdrawn at the other router: %s (polled)", time.Since(start).Round(100*time.Millisecond))
	if comms := waitAt(r2, tiny, "advertised to the BGPPeer", 0); !slices.Contains(comms, "65000:555") {
		t.Errorf("tiny's path at the BGPPeer's router: communities %v, want the advertisement's 65000:555", comms)
	}
	waitAt(r, plain, "another pool: untouched", 0, 1)

	// A Service selector: of pool public, only app=web goes to the CloudConfig's
	// router (and only there); the others stay everywhere.
	advertise("web", fmt.Sprintf(`{ipPools: [public], serviceSelector: {matchLabels: {app: web}}, peerAddresses: ["%s"]}`, r.RouterV4))
	waitAdv("web", metav1.ConditionTrue, v1alpha1.AdvertisementReasonAccepted)
	waitAt(r2, web, "a selected Service: not to the BGPPeer's router")
	waitAt(r, web, "a selected Service: to the CloudConfig's router", 0, 1)
	waitAt(r2, plain, "an unselected Service of the same pool: everywhere", 0)

	// Mistakes: named, nothing changes.
	advertise("missing", `{ipPools: [public], peers: [nope]}`)
	waitAdv("missing", metav1.ConditionFalse, v1alpha1.AdvertisementReasonMissingReference, "spec.peers[0]", "nope", "nothing of it is in force")
	advertise("bad", `{communities: ["70000:1"]}`)
	waitAdv("bad", metav1.ConditionFalse, v1alpha1.AdvertisementReasonInvalid, "spec.communities[0]", "nothing of it is in force")
	time.Sleep(2 * time.Second)
	waitAt(r2, plain, "after the mistakes: untouched", 0)
	waitAt(r, plain, "after the mistakes: untouched", 0, 1)

	// The leader stops; the other replica's term decides from here on.
	leader := l.leaderIndex()
	if err := l.ccms[leader].Stop(); err != nil {
		t.Errorf("stopping the leader: %v", err)
	}
	other := 1 - leader
	if l.leaderIndex() != other {
		t.Fatal("the other replica does not lead")
	}
	// Deleted: tiny goes back to every peer.
	if out, err := framework.Kubectl(l.ctx, l.cp, "delete", "bgpadvertisement", prefix+"-pool"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitAt(r, tiny, "the advertisement deleted: back at the CloudConfig's router", other)
	// And a new one, decided by the new leader: web goes nowhere but the BGPPeer.
	advertise("web", fmt.Sprintf(`{ipPools: [public], serviceSelector: {matchLabels: {app: web}}, peers: [%s]}`, peerName))
	waitAdv("web", metav1.ConditionTrue, v1alpha1.AdvertisementReasonAccepted)
	waitAt(r, web, "re-advertised by the new leader's decision: gone from the CloudConfig's router")

	now := l.allIPs()
	for svc, ips := range steady {
		if now[svc] != ips {
			t.Errorf("%s's addresses changed from %s to %s", svc, ips, now[svc])
		}
	}
	select {
	case <-l.ccms[other].Done():
		t.Error("the CCM exited")
	default:
	}
}
