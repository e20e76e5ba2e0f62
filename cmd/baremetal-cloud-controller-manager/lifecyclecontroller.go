package main

import (
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1informers "k8s.io/client-go/informers/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"

	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/controllers/nodelifecycle"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/cachelist"
)

// startNodeLifecycleController starts the upstream cloud-node-lifecycle-controller,
// as upstream does, except that its Node lister lists only the Nodes a monitor pass
// acts on (attentionNodeLister). Upstream deep-copies every listed Node on every pass
// (--node-monitor-period, 5 s): at 5000 Nodes some 110 MB a minute of garbage for
// Nodes it then leaves alone, which kept the CCM's heap from ever going quiet.
func startNodeLifecycleController(initContext app.ControllerInitContext, completed *config.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, cc genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		c, err := nodelifecycle.NewCloudNodeLifecycleController(
			attentionNodeInformer{completed.SharedInformers.Core().V1().Nodes()},
			completed.ClientBuilder.ClientOrDie(initContext.ClientName),
			cloud,
			completed.ComponentConfig.NodeLifecycleController.NodeMonitorPeriod.Duration,
			int(completed.ComponentConfig.NodeLifecycleController.ConcurrentNodeLifecycleSyncs),
		)
		if err != nil {
			// As upstream: a cloud without instances runs without this controller.
			klog.FromContext(ctx).Info("Warning: the cloud node lifecycle controller is not started", "err", err)
			return nil, false, nil
		}
		go c.Run(ctx, cc.ControllerManagerMetrics)
		return nil, true, nil
	}
}

// attentionNodeInformer is a NodeInformer whose Lister lists only the Nodes that
// need the lifecycle controller's attention (needsLifecycleAttention); Get and the
// informer itself are the shared ones.
type attentionNodeInformer struct {
	corev1informers.NodeInformer
}

func (i attentionNodeInformer) Lister() corev1listers.NodeLister {
	return attentionNodeLister{cachelist.NodeLister(i.Informer().GetIndexer())}
}

type attentionNodeLister struct {
	corev1listers.NodeLister
}

// List returns the Nodes matching selector that need the lifecycle controller's
// attention, in the shared lister's order.
func (l attentionNodeLister) List(selector labels.Selector) ([]*v1.Node, error) {
	nodes, err := l.NodeLister.List(selector) // a new slice per call: ours to filter
	return slices.DeleteFunc(nodes, func(n *v1.Node) bool { return !needsLifecycleAttention(n) }), err
}

// needsLifecycleAttention reports whether the upstream lifecycle controller's monitor
// pass can do anything for n: a Node whose first Ready condition is True is only
// checked for the shutdown taint (removed if present), every other Node is looked up
// in the cloud. A Ready Node without a taint of the shutdown key is left alone by
// upstream, so leaving it out of the list changes nothing but the cost.
func needsLifecycleAttention(n *v1.Node) bool {
	ready := false // no Ready condition: upstream takes it as Unknown
	for i := range n.Status.Conditions {
		if c := &n.Status.Conditions[i]; c.Type == v1.NodeReady {
			ready = c.Status == v1.ConditionTrue
			break
		}
	}
	if !ready {
		return true
	}
	for _, t := range n.Spec.Taints {
		if t.Key == cloudproviderapi.TaintNodeShutdown {
			return true
		}
	}
	return false
}
