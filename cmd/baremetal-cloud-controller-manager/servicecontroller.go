package main

import (
	"context"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/lb"
	lbcontroller "github.com/baremetal-ccm/baremetal-ccm/pkg/lb/controller"
)

// controllerConstructors are the upstream controllers with the service controller
// (service-lb-controller) replaced by ours (pkg/lb/controller: no per-Service node
// lists, one write per new Service), and the cloud-node-lifecycle-controller given a
// lister of only the Nodes it acts on (startNodeLifecycleController). Names, client
// identities and flags stay the upstream ones.
func controllerConstructors() map[string]app.ControllerInitFuncConstructor {
	m := maps.Clone(app.DefaultInitFuncConstructors)
	svc := m[names.ServiceLBController]
	svc.Constructor = startServiceController
	m[names.ServiceLBController] = svc
	life := m[names.CloudNodeLifecycleController]
	life.Constructor = startNodeLifecycleController
	m[names.CloudNodeLifecycleController] = life
	return m
}

func startServiceController(initContext app.ControllerInitContext, completed *config.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, cc genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		logger := klog.FromContext(ctx)
		balancer, ok := cloud.LoadBalancer()
		if !ok {
			logger.Info("No loadBalancer section in the CloudConfig: the service controller is not started")
			return nil, false, nil
		}
		client := completed.ClientBuilder.ClientOrDie(initContext.ClientName)
		opts := lbcontroller.Options{
			Client:      client,
			Services:    completed.SharedInformers.Core().V1().Services(),
			Balancer:    balancer,
			ClusterName: completed.ComponentConfig.KubeCloudShared.ClusterName,
		}
		if le := completed.ComponentConfig.Generic.LeaderElection; le.LeaderElect {
			// client-go's leader election does not fence: a leader paused past its
			// lease writes nothing once another replica holds it.
			opts.Fence = &lbcontroller.LeaseFence{Client: client, Namespace: le.ResourceNamespace, Name: le.ResourceName}
		}
		if l, ok := balancer.(*lb.LoadBalancer); ok {
			setClaims(ctx, l, client, opts.Fence)
		}
		c, err := lbcontroller.New(opts)
		if err != nil {
			return nil, false, err
		}
		go func() {
			// running_managed_controllers{name="service"}, as upstream.
			if m := cc.ControllerManagerMetrics; m != nil {
				m.ControllerStarted("service")
				defer m.ControllerStopped("service")
			}
			c.Run(ctx, int(completed.ComponentConfig.ServiceController.ConcurrentServiceSyncs))
		}()
		return nil, true, nil
	}
}

// setClaims makes the balancer claim every address in the API server before a
// status shows it (lb.Claimer, networking.k8s.io/v1 IPAddress objects), with the
// term's fence, and runs the collector of claims no Service needs for the term.
// Without the IPAddress API (Kubernetes before 1.33) it says so and runs without
// claims: uniqueness then rests on the fence and the resourceVersion preconditions.
func setClaims(ctx context.Context, l *lb.LoadBalancer, client kubernetes.Interface, fence lbcontroller.Fence) {
	logger := klog.FromContext(ctx)
	res, err := client.Discovery().ServerResourcesForGroupVersion("networking.k8s.io/v1")
	served := err == nil && slices.ContainsFunc(res.APIResources, func(r metav1.APIResource) bool { return r.Name == "ipaddresses" })
	if !served {
		logger.Error(err, "Warning: the API server does not serve networking.k8s.io/v1 IPAddress (Kubernetes 1.33 or later does): addresses are assigned without claims")
		l.SetClaimer(nil)
		return
	}
	l.SetClaimer(lb.IPAddressClaims{Client: client})
	if fence != nil {
		l.SetFence(fence.Check)
	} else {
		l.SetFence(nil)
	}
	go l.RunClaimCollector(klog.NewContext(ctx, logger.WithName("lb")), lb.ClaimCollectInterval)
}
