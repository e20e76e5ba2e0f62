package framework

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	cloudproviderapi "k8s.io/cloud-provider/api"
)

// NodeSpec is what a kubelet started with --cloud-provider=external registers.
type NodeSpec struct {
	Name       string
	SystemUUID string
	// ProviderID is usually empty: the CCM sets it.
	ProviderID  string
	InternalIPs []string
	// ProvidedNodeIP is kubelet's --node-ip (annotation alpha.kubernetes.io/provided-node-ip).
	ProvidedNodeIP string
	Labels         map[string]string
	// Ready, when set, adds a Ready condition with this status.
	Ready *v1.ConditionStatus
}

// CreateNode creates the Node as such a kubelet does: with the
// node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule taint, and in the
// same request (the API server keeps a new Node's status) status.nodeInfo.systemUUID,
// the InternalIP addresses and the Ready condition, so the CCM never sees a
// half-registered Node.
func CreateNode(ctx context.Context, client kubernetes.Interface, spec NodeSpec) (*v1.Node, error) {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: spec.Labels},
		Spec: v1.NodeSpec{
			ProviderID: spec.ProviderID,
			Taints: []v1.Taint{{
				Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule,
			}},
		},
		Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{SystemUUID: spec.SystemUUID}},
	}
	if spec.ProvidedNodeIP != "" {
		node.Annotations = map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: spec.ProvidedNodeIP}
	}
	for _, ip := range spec.InternalIPs {
		node.Status.Addresses = append(node.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	if spec.Ready != nil {
		node.Status.Conditions = []v1.NodeCondition{readyCondition(*spec.Ready)}
	}
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating node %s: %w", spec.Name, err)
	}
	return created, nil
}

// SetNodeReady sets the Node's Ready condition to status with fresh heartbeat and
// transition times, as kubelet's status update does, retrying on conflicts.
func SetNodeReady(ctx context.Context, client kubernetes.Interface, name string, status v1.ConditionStatus) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cond := readyCondition(status)
		replaced := false
		for i := range node.Status.Conditions {
			if node.Status.Conditions[i].Type == v1.NodeReady {
				node.Status.Conditions[i], replaced = cond, true
			}
		}
		if !replaced {
			node.Status.Conditions = append(node.Status.Conditions, cond)
		}
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("setting node %s Ready=%s: %w", name, status, err)
	}
	return nil
}

// BackdateReady moves the last transition and heartbeat of the Node's Ready condition
// back to at, as if its readiness had last changed then (a host off for an hour has a
// Node that turned NotReady an hour ago).
func BackdateReady(ctx context.Context, client kubernetes.Interface, name string, at time.Time) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		found := false
		for i := range node.Status.Conditions {
			if c := &node.Status.Conditions[i]; c.Type == v1.NodeReady {
				c.LastTransitionTime, c.LastHeartbeatTime, found = metav1.NewTime(at), metav1.NewTime(at), true
			}
		}
		if !found {
			return fmt.Errorf("node %s has no Ready condition", name)
		}
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("backdating node %s's Ready condition: %w", name, err)
	}
	return nil
}

// DeleteNodes deletes the named Nodes; a Node that does not exist is not an error.
func DeleteNodes(ctx context.Context, client kubernetes.Interface, names ...string) error {
	var errs []error
	for _, name := range names {
		err := client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting node %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// ResetGuardState deletes the deletion guard's state ConfigMap, so a test's CCM does
// not inherit the trips, removals and power-off grants of an earlier test's.
func ResetGuardState(ctx context.Context, client kubernetes.Interface) error {
	err := client.CoreV1().ConfigMaps(GuardStateNamespace).Delete(ctx, GuardStateName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the guard state: %w", err)
	}
	return nil
}

// DeleteAddressClaims deletes every load-balancer address claim (the IPAddress
// objects the CCM makes, label ipaddress.kubernetes.io/managed-by:
// baremetal-ccm.io): a test whose CCMs stopped before their Services went leaves
// them, and the next test's pools would find those addresses taken.
func DeleteAddressClaims(ctx context.Context, client kubernetes.Interface) error {
	err := client.NetworkingV1().IPAddresses().DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: "ipaddress.kubernetes.io/managed-by=baremetal-ccm.io"})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the address claims: %w", err)
	}
	return nil
}

// The deletion guard's state ConfigMap (pkg/provider.GuardStateNamespace,
// pkg/inventory.StateConfigMapName), named here so the framework needs neither package.
const (
	GuardStateNamespace = "baremetal-ccm"
	GuardStateName      = "baremetal-ccm-deletion-guard"
)

// Events returns the events in namespace about the object of the given kind and name,
// oldest first. Events about cluster-scoped objects such as Nodes are in "default".
func Events(ctx context.Context, client kubernetes.Interface, namespace, involvedKind, involvedName string) ([]v1.Event, error) {
	sel := fields.Set{"involvedObject.kind": involvedKind, "involvedObject.name": involvedName}.AsSelector().String()
	list, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("listing events in %q for %s %s: %w", namespace, involvedKind, involvedName, err)
	}
	sort.SliceStable(list.Items, func(i, j int) bool {
		return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp)
	})
	return list.Items, nil
}

// HasTaint reports whether the Node carries a taint with key.
func HasTaint(node *v1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func readyCondition(status v1.ConditionStatus) v1.NodeCondition {
	now := metav1.NewTime(time.Now())
	reason := map[v1.ConditionStatus]string{v1.ConditionTrue: "KubeletReady", v1.ConditionFalse: "KubeletNotReady"}[status]
	if reason == "" {
		reason = "NodeStatusUnknown"
	}
	msg := "set by the e2e framework"
	return v1.NodeCondition{
		Type: v1.NodeReady, Status: status, Reason: reason, Message: msg,
		LastHeartbeatTime: now, LastTransitionTime: now,
	}
}

// SetNodeCondition sets the Node's condition of c's type to c (added when absent), as an
// admin or a maintenance tool sets a Node lifecycle condition; a zero
// LastTransitionTime is now.
func SetNodeCondition(ctx context.Context, client kubernetes.Interface, name string, c v1.NodeCondition) error {
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = metav1.Now()
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Conditions = append(slices.DeleteFunc(node.Status.Conditions, func(o v1.NodeCondition) bool { return o.Type == c.Type }), c)
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("setting node %s %s=%s: %w", name, c.Type, c.Status, err)
	}
	return nil
}
