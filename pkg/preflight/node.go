package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// NodeReporter sets ConditionType on the Node this replica runs on and records an
// event there: a Warning at every failing outcome, a Normal one when a failure is
// fixed. A replica whose Node does not exist (yet) reports through the others only.
type NodeReporter struct {
	Client   kubernetes.Interface
	Recorder record.EventRecorder // optional
	NodeName string
	// Now is time.Now unless a test sets it.
	Now func() time.Time

	mu     sync.Mutex
	failed bool
}

// Report implements Reporter.
func (n *NodeReporter) Report(ctx context.Context, r Result) error {
	if n.NodeName == "" {
		return nil
	}
	now := time.Now
	if n.Now != nil {
		now = n.Now
	}
	status, reason, evType := v1.ConditionTrue, ReasonPassed, v1.EventTypeNormal
	if !r.OK() {
		status, reason, evType = v1.ConditionFalse, ReasonFailed, v1.EventTypeWarning
	}
	n.mu.Lock()
	wasFailed := n.failed
	n.failed = !r.OK()
	n.mu.Unlock()
	if n.Recorder != nil && (!r.OK() || wasFailed) {
		ref := &v1.ObjectReference{Kind: "Node", Name: n.NodeName, UID: types.UID(n.NodeName)}
		n.Recorder.Eventf(ref, evType, reason, "%s", r.String())
	}
	node, err := n.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		klog.FromContext(ctx).V(2).Info("No Node for this replica: the preflight condition is not set", "node", n.NodeName)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Node %s for its %s condition: %w", n.NodeName, ConditionType, err)
	}
	cond := v1.NodeCondition{
		Type: ConditionType, Status: status, Reason: reason, Message: r.String(),
		LastHeartbeatTime: metav1.NewTime(now()), LastTransitionTime: metav1.NewTime(now()),
	}
	for _, c := range node.Status.Conditions {
		if c.Type == ConditionType && c.Status == status {
			cond.LastTransitionTime = c.LastTransitionTime
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []v1.NodeCondition{cond}}})
	if err != nil {
		return err
	}
	if _, err := n.Client.CoreV1().Nodes().PatchStatus(ctx, n.NodeName, patch); err != nil {
		return fmt.Errorf("setting Node %s's %s condition: %w", n.NodeName, ConditionType, err)
	}
	return nil
}
