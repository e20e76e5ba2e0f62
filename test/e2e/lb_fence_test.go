//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// TestFrozenLeaderKeepsIPs: three CCM replicas serve LoadBalancer Services while
// Services are created and deleted all the time; five times the leader is frozen
// (SIGSTOP, as a VM or cgroup freeze does) for longer than its lease, another replica
// takes over, and the frozen one is resumed (SIGCONT) with its stale view. Throughout,
// a watch checks that no Service ever changes or loses an IP it holds, and that no two
// live Services show the same IP. Afterwards the leader's allocator must know every
// held IP: a Service asking for any of them explicitly is refused.
func TestFrozenLeaderKeepsIPs(t *testing.T) {
	l := newLabNoCCM(t)
	ns, cfg := lbNamespace(t, l, "fence", "192.0.2.0/26")
	lease := "bccm-fence-" + utilrand.String(6)
	var replicas []*framework.CCM
	start := func() *framework.CCM {
		c := framework.StartCCM(t, l.cp, cfg,
			"--controllers=service-lb-controller",
			"--leader-elect=true", "--leader-elect-resource-name="+lease,
			"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s")
		if err := c.WaitHealthy(l.ctx); err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, c)
		return c
	}
	for range 3 {
		start()
	}

	w := newHoldWatch(t, l, ns, "svc-")
	churn := newChurn(l, ns)
	churnCtx, stopChurn := context.WithCancel(l.ctx)
	churnDone := make(chan struct{})
	go func() { defer close(churnDone); churn.run(churnCtx) }()

	const rounds = 5
	for round := range rounds {
		time.Sleep(3 * time.Second)
		leader := waitLeader(t, l.ctx, l.cp.Client, lease, replicas)
		t.Logf("round %d: freezing leader pid %d for 9 s (lease 4 s)", round, leader.PID())
		leader.Signal(syscall.SIGSTOP)
		time.Sleep(9 * time.Second)
		leader.Signal(syscall.SIGCONT)
		// The resumed replica finds it cannot renew: its controllers stop (it does not
		// exit: its agent keeps announcing) and it contends again, as a standby that a
		// later round may elect and freeze again.
		lost := strings.Count(leader.Log(), "lost the Lease")
		err := framework.WaitFor(l.ctx, 20*time.Second, "the resumed former leader to stop its controllers", func(context.Context) (bool, error) {
			return strings.Count(leader.Log(), "lost the Lease") > lost, nil
		})
		if err != nil {
			t.Fatalf("round %d: pid %d: %v", round, leader.PID(), err)
		}
		select {
		case <-leader.Done():
			t.Fatalf("round %d: the resumed former leader pid %d exited: %v", round, leader.PID(), leader.ExitErr())
		default:
		}
		time.Sleep(3 * time.Second)
	}
	stopChurn()
	<-churnDone

	// Every live Service settles with an IP (the pool has room for all of them).
	held := w.waitAllAssigned(churn.live())
	t.Logf("%d Services created, %d deleted, %d hold IPs at the end; %d IP assignments observed", churn.created, churn.deleted, len(held), w.assignments())
	if v := w.violations(); len(v) > 0 {
		t.Fatalf("%d violations, first ones:\n%s", len(v), strings.Join(v[:min(len(v), 10)], "\n"))
	}

	// The leader knows every held IP: explicit requests for any of them are refused.
	var probes []string
	for ip := range held {
		name := "probe-" + strings.ReplaceAll(ip, ".", "-")
		probes = append(probes, name)
		s := fenceService(ns, name)
		s.Annotations = map[string]string{"baremetal-ccm.io/load-balancer-ips": ip}
		if _, err := l.cp.Client.CoreV1().Services(ns).Create(l.ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range probes {
		l.waitEvent(ns, "Service", name, lb.ReasonIPUnavailable)
	}
	for _, name := range probes {
		s, err := l.cp.Client.CoreV1().Services(ns).Get(l.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Status.LoadBalancer.Ingress) > 0 {
			t.Errorf("%s got %v, an IP another Service holds", name, s.Status.LoadBalancer.Ingress)
		}
	}
	if v := w.violations(); len(v) > 0 {
		t.Fatalf("%d violations after the probes, first ones:\n%s", len(v), strings.Join(v[:min(len(v), 10)], "\n"))
	}

	// Leave nothing behind: the leader releases every Service's IP and finalizer.
	all, err := l.cp.Client.CoreV1().Services(ns).List(l.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all.Items {
		if err := l.cp.Client.CoreV1().Services(ns).Delete(l.ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := framework.WaitFor(l.ctx, 60*time.Second, "every Service of the test gone", func(ctx context.Context) (bool, error) {
		svcs, err := l.cp.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if n := len(svcs.Items); n > 0 {
			return false, fmt.Errorf("%d left", n)
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// waitLeader returns the replica that holds the Lease and runs its controllers: the
// Lease names the holder's identity, which the holder logs when it starts leading.
func waitLeader(t *testing.T, ctx context.Context, client kubernetes.Interface, lease string, replicas []*framework.CCM) *framework.CCM {
	t.Helper()
	var leader *framework.CCM
	err := framework.WaitFor(ctx, 30*time.Second, "a leader", func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return false, nil
		}
		leader = nil
		for _, c := range replicas {
			if strings.Contains(c.Log(), `"Leading: starting the controllers" logger="leader-election" identity="`+*l.Spec.HolderIdentity+`"`) {
				leader = c
			}
		}
		return leader != nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return leader
}

func fenceService(ns, name string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeLoadBalancer,
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Selector:   map[string]string{"app": name},
			Ports:      []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
}

// churn creates Services and deletes the older ones, keeping about 30 alive.
type churn struct {
	l  *lab
	ns string

	mu               sync.Mutex
	alive            []string
	created, deleted int
}

func newChurn(l *lab, ns string) *churn { return &churn{l: l, ns: ns} }

func (c *churn) run(ctx context.Context) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("svc-%04d", i)
		if _, err := c.l.cp.Client.CoreV1().Services(c.ns).Create(ctx, fenceService(c.ns, name), metav1.CreateOptions{}); err == nil {
			c.mu.Lock()
			c.alive = append(c.alive, name)
			c.created++
			c.mu.Unlock()
		}
		c.mu.Lock()
		var victim string
		if len(c.alive) > 30 || len(c.alive) > 5 && rng.IntN(3) == 0 {
			j := rng.IntN(len(c.alive))
			victim = c.alive[j]
			c.alive = append(c.alive[:j], c.alive[j+1:]...)
		}
		c.mu.Unlock()
		if victim != "" {
			if err := c.l.cp.Client.CoreV1().Services(c.ns).Delete(ctx, victim, metav1.DeleteOptions{}); err == nil {
				c.mu.Lock()
				c.deleted++
				c.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *churn) live() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.alive...)
}

// holdWatch follows the namespace's Services and records every violation of "a
// Service keeps the IP it got until it is deleted, and no two live Services show the
// same IP".
type holdWatch struct {
	t        *testing.T
	l        *lab
	ns       string
	prefixes []string

	mu      sync.Mutex
	first   map[types.UID]string   // the IP each Service got first
	current map[types.UID]string   // its IP now ("" once deleted)
	names   map[types.UID]string   // namespace/name, for messages
	byIP    map[string][]types.UID // live Services showing each IP
	bad     []string
	seen    int
}

// newHoldWatch watches the Services of ns whose names start with one of prefixes.
func newHoldWatch(t *testing.T, l *lab, ns string, prefixes ...string) *holdWatch {
	w := &holdWatch{t: t, l: l, ns: ns, prefixes: prefixes, first: map[types.UID]string{}, current: map[types.UID]string{}, names: map[types.UID]string{}, byIP: map[string][]types.UID{}}
	f := informers.NewSharedInformerFactoryWithOptions(l.cp.Client, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Services().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.observe(o.(*v1.Service), false) },
		UpdateFunc: func(_, o any) { w.observe(o.(*v1.Service), false) },
		DeleteFunc: func(o any) {
			if tomb, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = tomb.Obj
			}
			if s, ok := o.(*v1.Service); ok {
				w.observe(s, true)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	f.Start(stop)
	f.WaitForCacheSync(stop)
	return w
}

func (w *holdWatch) observe(s *v1.Service, deleted bool) {
	if !slices.ContainsFunc(w.prefixes, func(p string) bool { return strings.HasPrefix(s.Name, p) }) {
		return // e.g. the final probes ask for held IPs on purpose
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ip := ""
	if len(s.Status.LoadBalancer.Ingress) > 0 {
		ip = s.Status.LoadBalancer.Ingress[0].IP
	}
	if s.DeletionTimestamp != nil {
		deleted = true
	}
	uid := s.UID
	w.names[uid] = s.Namespace + "/" + s.Name
	if prev := w.current[uid]; prev != "" && prev != ip {
		w.byIP[prev] = removeUID(w.byIP[prev], uid)
		if !deleted {
			w.bad = append(w.bad, fmt.Sprintf("%s changed its IP from %s to %q", w.names[uid], prev, ip))
		}
	}
	if deleted {
		if ip != "" {
			w.byIP[ip] = removeUID(w.byIP[ip], uid)
		}
		w.current[uid] = ""
		return
	}
	if ip == "" {
		w.current[uid] = ""
		return
	}
	if _, ok := w.first[uid]; !ok {
		w.first[uid] = ip
		w.seen++
	} else if w.first[uid] != ip {
		w.bad = append(w.bad, fmt.Sprintf("%s shows %s, but got %s first", w.names[uid], ip, w.first[uid]))
	}
	if w.current[uid] != ip {
		w.byIP[ip] = append(w.byIP[ip], uid)
		if holders := w.byIP[ip]; len(holders) > 1 {
			var names []string
			for _, h := range holders {
				names = append(names, w.names[h])
			}
			w.bad = append(w.bad, fmt.Sprintf("%s is shown by %d live Services: %v", ip, len(holders), names))
		}
	}
	w.current[uid] = ip
}

func removeUID(us []types.UID, u types.UID) []types.UID {
	out := us[:0]
	for _, x := range us {
		if x != u {
			out = append(out, x)
		}
	}
	return out
}

func (w *holdWatch) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bad...)
}

func (w *holdWatch) assignments() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

// waitAllAssigned waits until every named live Service shows an IP and returns the
// IPs held, each with its Service.
func (w *holdWatch) waitAllAssigned(names []string) map[string]string {
	w.t.Helper()
	held := map[string]string{}
	err := framework.WaitFor(w.l.ctx, 60*time.Second, "every live Service with an IP", func(ctx context.Context) (bool, error) {
		clear(held)
		for _, n := range names {
			s, err := w.l.cp.Client.CoreV1().Services(w.ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if len(s.Status.LoadBalancer.Ingress) == 0 {
				return false, fmt.Errorf("%s has no IP yet", n)
			}
			held[s.Status.LoadBalancer.Ingress[0].IP] = n
		}
		return true, nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return held
}
