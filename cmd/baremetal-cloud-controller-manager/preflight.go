package main

import (
	"context"

	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	genericcontrollermanager "k8s.io/controller-manager/app"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/preflight"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/provider"
)

// newPreflight returns the monitor of what this replica needs in the cluster: the
// CCM's namespace with the deletion guard's (and, with a loadBalancer section, the
// pools') ConfigMap it may create, read and update, the leader-election Lease, the
// load balancer's address claims, (instances.outOfServiceAfter) listing pods and
// VolumeAttachments, and the CRDs of the IPPools and BGPSessionStates it uses. /readyz fails until it passes (systemd READY does
// not wait for it: the Node controllers work without the namespace); a change is
// logged once and set as the condition baremetal-ccm.io/CCMPreflight on this
// replica's Node, with an event, and as systemd's STATUS.
func newPreflight(c *config.CompletedConfig, withLB, withBGP, outOfService bool, nodeName string, n notifier) *preflight.Monitor {
	ns := provider.GuardStateNamespace
	guard := "the deletion guard's state"
	perms := []preflight.Permission{
		{Verb: "get", Resource: "configmaps", Namespace: ns, Name: inventory.StateConfigMapName, For: guard},
		{Verb: "update", Resource: "configmaps", Namespace: ns, Name: inventory.StateConfigMapName, For: guard},
	}
	holds := guard
	if withLB {
		holds += " and the pools' use"
		pools := "publishing the pools' use"
		perms = append(perms,
			preflight.Permission{Verb: "get", Resource: "configmaps", Namespace: ns, Name: lb.PoolsConfigMap, For: pools},
			preflight.Permission{Verb: "update", Resource: "configmaps", Namespace: ns, Name: lb.PoolsConfigMap, For: pools})
		if genericcontrollermanager.IsControllerEnabled(names.ServiceLBController, app.ControllersDisabledByDefault, c.ComponentConfig.Generic.Controllers) {
			for _, verb := range []string{"list", "create", "update", "delete"} {
				perms = append(perms, preflight.Permission{Verb: verb, Group: "networking.k8s.io", Resource: "ipaddresses", For: "the load balancer's address claims"})
			}
		}
	}
	if outOfService {
		// The out-of-service taint comes off only once the Node is empty (pkg/powermon).
		perms = append(perms,
			preflight.Permission{Verb: "list", Resource: "pods", For: "removing the out-of-service taint"},
			preflight.Permission{Verb: "list", Group: "storage.k8s.io", Resource: "volumeattachments", For: "removing the out-of-service taint"})
	}
	if le := c.ComponentConfig.Generic.LeaderElection; le.LeaderElect {
		for _, verb := range []string{"get", "update"} {
			perms = append(perms, preflight.Permission{Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: le.ResourceNamespace, Name: le.ResourceName, For: "leader election"})
		}
		perms = append(perms, preflight.Permission{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: le.ResourceNamespace, For: "leader election"})
	}
	// The project's CRDs: the pools managed in the cluster, the speakers' sessions.
	const fixCRDs = "baremetal-ccmctl manifests crds | kubectl apply -f - (the same objects as packaging/kubernetes/crds.yaml)"
	var resources []preflight.Resource
	if withLB {
		resources = append(resources, preflight.Resource{Group: v1alpha1.GroupName, Version: "v1alpha1", Resource: "ippools", For: "IP pools managed in the cluster", Fix: fixCRDs})
	}
	if withBGP {
		resources = append(resources, preflight.Resource{Group: v1alpha1.GroupName, Version: "v1alpha1", Resource: "bgpsessionstates", For: "publishing this replica's BGP sessions", Fix: fixCRDs})
		resources = append(resources, preflight.Resource{Group: v1alpha1.GroupName, Version: "v1alpha1", Resource: "bgppeers", For: "BGP peers managed in the cluster", Fix: fixCRDs})
		if withLB {
			resources = append(resources, preflight.Resource{Group: v1alpha1.GroupName, Version: "v1alpha1", Resource: "bgpadvertisements", For: "BGP advertisements managed in the cluster", Fix: fixCRDs})
		}
	}
	client := c.ClientBuilder.ClientOrDie("baremetal-preflight")
	return &preflight.Monitor{
		Checker: &preflight.Checker{Client: client, Namespace: ns, ConfigMap: inventory.StateConfigMapName, NamespaceFor: holds, Permissions: perms, Resources: resources},
		Reporters: []preflight.Reporter{
			&preflight.NodeReporter{Client: client, Recorder: c.EventRecorder, NodeName: nodeName},
			systemdStatus{n},
		},
	}
}

// systemdStatus shows the preflight outcome in `systemctl status`.
type systemdStatus struct{ n notifier }

func (s systemdStatus) Report(_ context.Context, r preflight.Result) error {
	if s.n == nil || !s.n.Enabled() {
		return nil
	}
	if r.OK() {
		return s.n.Status("serving")
	}
	return s.n.Status("not ready: " + r.String())
}
