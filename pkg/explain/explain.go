// Package explain answers "why" for a person, from what the cluster says: why a
// LoadBalancer Service is pending or not announced (its conditions, events, the
// pools' use), why a Node is tainted or not initialized (taints, BMC conditions,
// events, what the leader published for its agent, its replica's BGP sessions).
// It reads only: Services, Nodes, Events and the pools ConfigMap. baremetal-ccmctl
// explain (and the kubectl plugin kubectl-baremetal) prints what it returns.
package explain

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/hostinfo"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb/ipam"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/maintenance"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/powermon"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/preflight"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/speakerstatus"
)

// CCMNamespace holds the CCM's own ConfigMaps (the pools' use, the deletion guard).
const CCMNamespace = "baremetal-ccm"

// Explainer reads the cluster through Client.
type Explainer struct {
	Client kubernetes.Interface
	// Sessions reads the BGPSessionState objects (nil: not shown).
	Sessions versioned.Interface
	// Now is time.Now unless a test sets it (ages are relative to it).
	Now func() time.Time
	// Events is how many recent events to show. Default 5.
	Events int
}

func (e *Explainer) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// ErrNotFound is returned (wrapped) for an object that does not exist.
var ErrNotFound = fmt.Errorf("not found")

// advice is the next step for each condition reason.
var advice = map[string]string{
	lb.ReasonExhausted:         "free addresses in the pool (delete Services that no longer need one) or add ranges to its loadBalancer.pools[].addresses; the Service is retried every 30 s",
	lb.ReasonUnknownPool:       "name a pool of the CloudConfig in baremetal-ccm.io/address-pool (baremetal-ccmctl lb pools lists them)",
	lb.ReasonNotInPool:         "ask for an address inside a pool (baremetal-ccmctl lb pools shows their ranges), or add the address's range to a pool",
	lb.ReasonIPInUse:           "another Service holds the address: ask for another one, or share it with baremetal-ccm.io/allow-shared-ip (same key, no port clash)",
	lb.ReasonSharingConflict:   "Services sharing an address need the same baremetal-ccm.io/allow-shared-ip key, compatible ports, and for Local the same selector",
	lb.ReasonNoPoolAllowed:     "the pools this Service may use are restricted (namespaces, serviceSelector) or not auto-assigned: name an allowed pool",
	lb.ReasonBadAnnotation:     "fix the annotation or field the message names",
	lb.ReasonFamilyUnavailable: "no pool offers the requested IP family: add a range of that family, or change spec.ipFamilies",
	lb.ReasonIPConflict:        "two Services show the same address; the older keeps it, the other gets a new one or stays pending",
	"NoSessionUp":              "no CCM replica has a BGP session: check the routers and the replicas' logs (\"Warning: BGP session not established\" names the likely cause)",
	"NoReplicaReports":         "no BGP speaker publishes its sessions: check that the CRD " + speakerstatus.CRD + " is installed (baremetal-ccmctl manifests crds), that the CCM runs with --node-name (the Node's name) and a bgp section, and the speakers' logs",
	"NoEligibleNode":           "no node may take the traffic (Ready, not excluded, powered on, healthy, and for Local with a ready endpoint)",
	"NoLocalEndpoint":          "for externalTrafficPolicy Local use bgp.nextHop: nodes, or run the Service's pods on the control-plane nodes",
	"NotInPool":                "add the address's range back to a pool, or recreate the Service to get one from the current pools",
	"NoAnnouncer":              "loadBalancer.announcer is none: announce the addresses by other means, or set it to bgp or metallb",
}

// Service explains a Service.
func (e *Explainer) Service(ctx context.Context, namespace, name string) (string, error) {
	svc, err := e.Client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("service %s/%s: %w", namespace, name, ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	var b strings.Builder
	now := e.now()
	fmt.Fprintf(&b, "Service %s/%s\n", namespace, name)
	switch {
	case svc.Spec.Type != v1.ServiceTypeLoadBalancer:
		fmt.Fprintf(&b, "  type %s: not a LoadBalancer, baremetal-ccm gives it no address\n", svc.Spec.Type)
		return b.String(), nil
	case svc.Spec.LoadBalancerClass != nil:
		fmt.Fprintf(&b, "  loadBalancerClass %s: another controller serves it, not baremetal-ccm\n", *svc.Spec.LoadBalancerClass)
		return b.String(), nil
	}
	policy := svc.Spec.ExternalTrafficPolicy
	if policy == "" {
		policy = v1.ServiceExternalTrafficPolicyCluster
	}
	fams := make([]string, len(svc.Spec.IPFamilies))
	for i, f := range svc.Spec.IPFamilies {
		fams[i] = string(f)
	}
	fmt.Fprintf(&b, "  type LoadBalancer, externalTrafficPolicy %s, ipFamilies [%s]\n", policy, strings.Join(fams, " "))
	var asks []string
	for _, a := range []string{ipam.AnnotationAddressPool, ipam.AnnotationLoadBalancerIPs, ipam.AnnotationAllowSharedIP, lb.AnnotationCommunities, lb.AnnotationLargeCommunities} {
		if v, ok := svc.Annotations[a]; ok {
			asks = append(asks, a+"="+v)
		}
	}
	if svc.Spec.LoadBalancerIP != "" {
		asks = append(asks, "spec.loadBalancerIP="+svc.Spec.LoadBalancerIP)
	}
	if len(asks) == 0 {
		asks = []string{"any address of an auto-assign pool"}
	}
	fmt.Fprintf(&b, "  asks for: %s\n", strings.Join(asks, ", "))
	ips := lb.IngressIPs(svc)
	if len(ips) == 0 {
		b.WriteString("  addresses: none (pending)\n")
	} else {
		s := make([]string, len(ips))
		for i, ip := range ips {
			s[i] = ip.String()
		}
		fmt.Fprintf(&b, "  addresses: %s\n", strings.Join(s, ", "))
	}
	var reasons []string
	for _, t := range []string{lb.ConditionAddressAssigned, lb.ConditionAnnounced} {
		c := meta.FindStatusCondition(svc.Status.Conditions, t)
		short := strings.TrimPrefix(t, "baremetal-ccm.io/")
		if c == nil {
			fmt.Fprintf(&b, "  %s: not reported\n", short)
			continue
		}
		fmt.Fprintf(&b, "  %s: %s (%s) since %s: %s\n", short, c.Status, c.Reason, age(now, c.LastTransitionTime.Time), c.Message)
		if c.Status != metav1.ConditionTrue {
			reasons = append(reasons, c.Reason)
		}
	}
	if meta.FindStatusCondition(svc.Status.Conditions, lb.ConditionAddressAssigned) == nil {
		reasons = append(reasons, "unhandled")
	}
	if pools, err := e.pools(ctx); err == nil {
		for _, p := range pools.Pools {
			if !strings.Contains(b.String(), "pool "+p.Name) && svc.Annotations[ipam.AnnotationAddressPool] != p.Name {
				continue
			}
			fmt.Fprintf(&b, "  pool %s: %s\n", p.Name, poolLine(p))
		}
	}
	e.events(ctx, &b, "Service", namespace, name)
	writeAdvice(&b, reasons)
	return b.String(), nil
}

func poolLine(p lb.PoolReport) string {
	var parts []string
	for _, f := range p.Families {
		parts = append(parts, fmt.Sprintf("%s %d of %d in use, %d free", f.Family, f.InUse, f.Size, f.Free))
	}
	if len(parts) == 0 {
		parts = append(parts, "no address")
	}
	return fmt.Sprintf("%s; %d Services; autoAssign %v", strings.Join(parts, ", "), p.Services, p.AutoAssign)
}

// pools reads the leader's pool report.
func (e *Explainer) pools(ctx context.Context) (lb.PoolsReport, error) {
	var r lb.PoolsReport
	cm, err := e.Client.CoreV1().ConfigMaps(CCMNamespace).Get(ctx, lb.PoolsConfigMap, metav1.GetOptions{})
	if err != nil {
		return r, err
	}
	err = json.Unmarshal([]byte(cm.Data[lb.PoolsKey]), &r)
	return r, err
}

// Pools returns the leader's pool report as a table.
func (e *Explainer) Pools(ctx context.Context) (string, error) {
	r, err := e.pools(ctx)
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("ConfigMap %s/%s %w: no CCM leader with a loadBalancer section has published the pools yet", CCMNamespace, lb.PoolsConfigMap, ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	return r.Table(), nil
}

// Node explains a Node.
func (e *Explainer) Node(ctx context.Context, name string) (string, error) {
	n, err := e.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("node %s: %w (a Node reported gone is deleted by the node-lifecycle controller: look for HostGone events)", name, ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	now := e.now()
	var b strings.Builder
	fmt.Fprintf(&b, "Node %s\n", name)
	ready := "Unknown (no Ready condition)"
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			ready = fmt.Sprintf("%s since %s (%s)", c.Status, age(now, c.LastTransitionTime.Time), c.Reason)
		}
	}
	fmt.Fprintf(&b, "  Ready: %s\n", ready)
	uninit := slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == cloudproviderapi.TaintExternalCloudProvider })
	var reasons []string
	switch {
	case uninit:
		b.WriteString("  initialized: no — it still has the uninitialized taint: the CCM found no host for it (see the events: HostNotFound, HostAmbiguous, HostDecommissioned) or no CCM leader runs the cloud-node controller\n")
		reasons = append(reasons, "uninitialized")
	case n.Spec.ProviderID == "":
		b.WriteString("  initialized: no providerID (registered without --cloud-provider=external?)\n")
	default:
		fmt.Fprintf(&b, "  initialized: providerID %s\n", n.Spec.ProviderID)
	}
	for _, t := range n.Spec.Taints {
		why := ""
		switch t.Key {
		case cloudproviderapi.TaintExternalCloudProvider:
			why = " (not initialized yet)"
		case cloudproviderapi.TaintNodeShutdown:
			why = " (the BMC reports the host off while the Node is NotReady)"
		case v1.TaintNodeOutOfService:
			why = " (non-graceful shutdown: volumes are detached)"
			switch n.Annotations[powermon.AnnotationOutOfService] {
			case powermon.OutOfServiceAdded:
				why = " (added by baremetal-ccm's out-of-service policy: the host has been off for instances.outOfServiceAfter; it comes off while the host still reads off, once the Node holds no pod and no volume attachment)"
			case powermon.OutOfServiceKept:
				why = fmt.Sprintf(" (added by baremetal-ccm's out-of-service policy; the host came back on before the Node was empty, so it is left to you: once the workloads are confirmed elsewhere, kubectl taint nodes %s %s-)", n.Name, v1.TaintNodeOutOfService)
			}
		case v1.TaintNodeNotReady, v1.TaintNodeUnreachable:
			why = " (the kubelet does not report)"
		}
		fmt.Fprintf(&b, "  taint %s:%s%s\n", t.Key, t.Effect, why)
	}
	if n.Annotations[powermon.AnnotationOutOfService] == powermon.OutOfServiceReleased {
		fmt.Fprintf(&b, "  out-of-service: taint removed while the host read off and the Node was empty; not added again until the host has been on\n")
	}
	for _, t := range []v1.NodeConditionType{powermon.ConditionBMCReachable, powermon.ConditionPoweredOn, powermon.ConditionRemediationHeld, preflight.ConditionType} {
		for _, c := range n.Status.Conditions {
			if c.Type == t {
				fmt.Fprintf(&b, "  %s: %s (%s) since %s: %s\n", strings.TrimPrefix(string(t), "baremetal-ccm.io/"), c.Status, c.Reason, age(now, c.LastTransitionTime.Time), c.Message)
			}
		}
	}
	if c, ok := maintenance.Condition(n); ok {
		fmt.Fprintf(&b, "  in maintenance: %s: exempt from deletion and the power-off policies (instances.outOfServiceAfter, instances.deleteAfter), not counted against the power-off budget; set the condition False or remove it to end that\n", maintenance.Describe(c))
	}
	if maintenance.Excluded(n) {
		fmt.Fprintf(&b, "  excluded from remediation: label %s=%s: no out-of-service taint, no deletion under instances.deleteAfter, no power-off budget spent\n", maintenance.ExcludeLabel, n.Labels[maintenance.ExcludeLabel])
	}
	if since, ok := lb.Draining(n, false); ok {
		fmt.Fprintf(&b, "  draining since %s (cordoned with DrainInProgress, or GracefulNodeShutdownInProgress): with bgp.gracefulShutdown, every path through it carries GRACEFUL_SHUTDOWN until withdrawn (its time passed and no serving endpoint left); uncordon to restore\n", age(now, since))
	} else if n.Spec.Unschedulable {
		b.WriteString("  cordoned: with bgp.gracefulShutdown.onCordon, its paths carry GRACEFUL_SHUTDOWN until withdrawn\n")
	}
	if since, ok := n.Annotations[powermon.AnnotationOffSince]; ok {
		seen := n.Annotations[powermon.AnnotationOffSeen]
		if seen == "" {
			seen = "unknown"
		}
		fmt.Fprintf(&b, "  powered off since: %s (by the BMC), last seen off %s\n", since, seen)
	}
	if info, ok, err := hostinfo.FromNode(n); err != nil {
		fmt.Fprintf(&b, "  BGP for its agent: unreadable annotation: %v\n", err)
	} else if ok {
		var peers []string
		for _, p := range info.Peers {
			s := p.Address
			if p.Password {
				s += " (TCP-MD5)"
			}
			peers = append(peers, s)
		}
		fmt.Fprintf(&b, "  BGP for its agent: host %s, rack %q, router ID %s, peers %s\n", info.Host, info.Rack, info.RouterID, strings.Join(peers, ", "))
	}
	e.sessions(ctx, &b, name, now)
	e.events(ctx, &b, "Node", "", name)
	writeAdvice(&b, reasons)
	return b.String(), nil
}

// sessions writes node's BGP sessions, as its speaker (a CCM replica or a worker
// agent) publishes them.
func (e *Explainer) sessions(ctx context.Context, b *strings.Builder, node string, now time.Time) {
	if e.Sessions == nil {
		return
	}
	list, err := e.Sessions.BaremetalCCMV1alpha1().BGPSessionStates().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelNode + "=" + node})
	if err != nil {
		fmt.Fprintf(b, "  BGP sessions: cannot list BGPSessionState objects: %v\n", err)
		return
	}
	if len(list.Items) == 0 {
		return
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool { return items[i].Spec.Peer < items[j].Spec.Peer })
	fmt.Fprintf(b, "  BGP sessions (%s speaker, kubectl get bgpsessionstates -l %s=%s):\n", strings.ToLower(items[0].Spec.Speaker), v1alpha1.LabelNode, node)
	for i := range items {
		o := &items[i]
		st := o.Status
		line := fmt.Sprintf("    peer %s: %s", o.Spec.Peer, st.BGPState)
		if st.Since != nil {
			line += " since " + age(now, st.Since.Time)
		}
		if st.BGPState == "established" {
			line += fmt.Sprintf(", %d prefixes sent", st.PrefixesSent)
		}
		if st.BFDState != "" {
			line += ", BFD " + st.BFDState
		}
		if st.LastError != "" {
			line += ", last error: " + st.LastError
		}
		if st.BFDProblem != "" {
			line += ", " + st.BFDProblem
		}
		if !speakerstatus.IsFresh(o, now) {
			updated := "never"
			if st.Updated != nil {
				updated = age(now, st.Updated.Time) + " ago"
			}
			line += " (STALE: updated " + updated + "; is its speaker running?)"
		}
		b.WriteString(line + "\n")
	}
}

// CCM explains whether the cluster has what the CCM needs: its namespace and the
// ConfigMaps it keeps there, and each replica's own check (the condition
// baremetal-ccm.io/CCMPreflight on the Node it runs on).
func (e *Explainer) CCM(ctx context.Context) (string, error) {
	now := e.now()
	var b strings.Builder
	fmt.Fprintf(&b, "CCM namespace %s\n", CCMNamespace)
	_, err := e.Client.CoreV1().Namespaces().Get(ctx, CCMNamespace, metav1.GetOptions{})
	switch {
	case err == nil:
		b.WriteString("  exists\n")
		for _, name := range []string{inventory.StateConfigMapName, lb.PoolsConfigMap} {
			_, err := e.Client.CoreV1().ConfigMaps(CCMNamespace).Get(ctx, name, metav1.GetOptions{})
			switch {
			case err == nil:
				fmt.Fprintf(&b, "  ConfigMap %s: present\n", name)
			case apierrors.IsNotFound(err):
				fmt.Fprintf(&b, "  ConfigMap %s: not yet (the leader creates it)\n", name)
			default:
				fmt.Fprintf(&b, "  ConfigMap %s: cannot read: %v\n", name, err)
			}
		}
	case apierrors.IsNotFound(err):
		fmt.Fprintf(&b, "  MISSING: no Node is reported gone and the pools' use is not published until it exists; fix: kubectl create namespace %s, or apply the packaged RBAC: %s\n", CCMNamespace, preflight.FixRBAC)
	default:
		fmt.Fprintf(&b, "  cannot read: %v\n", err)
	}
	nodes, err := e.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	reported := 0
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type != preflight.ConditionType {
				continue
			}
			reported++
			verdict := "passed"
			if c.Status != v1.ConditionTrue {
				verdict = "FAILED"
			}
			fmt.Fprintf(&b, "  replica on %s: %s (since %s): %s\n", n.Name, verdict, age(now, c.LastTransitionTime.Time), c.Message)
		}
	}
	if reported == 0 {
		b.WriteString("  no replica reports its check on a Node (replicas run with --node-name set to their Node's name do; see their /readyz and logs)\n")
	}
	return b.String(), nil
}

// events writes the object's most recent events, newest first.
func (e *Explainer) events(ctx context.Context, b *strings.Builder, kind, namespace, name string) {
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}
	if namespace != "" {
		sel["involvedObject.namespace"] = namespace
	}
	list, err := e.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil {
		fmt.Fprintf(b, "  events: cannot read: %v\n", err)
		return
	}
	evs := list.Items
	last := func(ev v1.Event) time.Time {
		switch {
		case !ev.LastTimestamp.IsZero():
			return ev.LastTimestamp.Time
		case !ev.EventTime.IsZero():
			return ev.EventTime.Time
		}
		return ev.CreationTimestamp.Time
	}
	sort.SliceStable(evs, func(i, j int) bool { return last(evs[i]).After(last(evs[j])) })
	n := e.Events
	if n <= 0 {
		n = 5
	}
	if len(evs) == 0 {
		b.WriteString("  events: none (events expire after an hour)\n")
		return
	}
	b.WriteString("  recent events:\n")
	for _, ev := range evs[:min(n, len(evs))] {
		count := ""
		if ev.Count > 1 {
			count = fmt.Sprintf(" x%d", ev.Count)
		}
		fmt.Fprintf(b, "    %s %s%s, %s: %s\n", ev.Type, ev.Reason, count, age(e.now(), last(ev)), strings.Join(strings.Fields(ev.Message), " "))
	}
}

func writeAdvice(b *strings.Builder, reasons []string) {
	var lines []string
	for _, r := range reasons {
		switch r {
		case "unhandled":
			lines = append(lines, "no AddressAssigned condition: no CCM leader has handled this Service yet — check that a CCM runs with a loadBalancer section and service-lb-controller among --controllers")
		case "uninitialized":
			lines = append(lines, "add the host to the inventory (matched by providerID, systemUUID, name or InternalIP), or fix the ambiguity the events name")
		default:
			if a, ok := advice[r]; ok {
				lines = append(lines, a)
			}
		}
	}
	for i, l := range lines {
		if i == 0 {
			b.WriteString("  next steps:\n")
		}
		b.WriteString("    - " + l + "\n")
	}
}

// age renders how long ago t was, coarsely ("45s ago", "3m ago", "2h ago").
func age(now, t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}
