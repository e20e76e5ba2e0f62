// Command zeroccm is a benchmark baseline, not a provider: the same upstream CCM
// command as baremetal-cloud-controller-manager, with a provider named "zero" whose
// InstancesV2 answers instantly from nothing (providerID zero://<node name>) and whose
// LoadBalancer hands out the next address of 198.18.0.0/15 from memory. The
// node-initialization and load-balancer benchmarks run both binaries in the same
// harness and report the ratio, so what they measure is the cost of the baremetal
// provider itself: the upstream controllers' API calls (the status patch and
// finalizer per Service, the Node updates) are the same for both.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
)

func main() {
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatal(err)
	}
	opts.KubeCloudShared.CloudProvider.Name = "zero"
	cloudprovider.RegisterCloudProvider("zero", func(io.Reader) (cloudprovider.Interface, error) { return zero{}, nil })
	cmd := app.NewCloudControllerManagerCommand(opts, func(*config.CompletedConfig) cloudprovider.Interface { return zero{} },
		app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	os.Exit(cli.Run(cmd))
}

type zero struct{}

func (zero) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (zero) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return &lbs, true }
func (zero) Instances() (cloudprovider.Instances, bool)                        { return nil, false }
func (z zero) InstancesV2() (cloudprovider.InstancesV2, bool)                  { return z, true }
func (zero) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (zero) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (zero) Routes() (cloudprovider.Routes, bool)                              { return nil, false }
func (zero) ProviderName() string                                              { return "zero" }
func (zero) HasClusterID() bool                                                { return true }

func (zero) InstanceExists(context.Context, *v1.Node) (bool, error)   { return true, nil }
func (zero) InstanceShutdown(context.Context, *v1.Node) (bool, error) { return false, nil }
func (zero) InstanceMetadata(_ context.Context, n *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	// The same shape of answer the baremetal provider gives in the benchmark, so both
	// make the same API calls: providerID, type, zone, region, one label, and the
	// Node's own addresses (no address patch needed).
	return &cloudprovider.InstanceMetadata{
		ProviderID: "zero://" + n.Name, InstanceType: "bench", Zone: "zone-1", Region: "region-1",
		NodeAddresses: n.Status.Addresses, AdditionalLabels: map[string]string{"baremetal-ccm.io/rack": "r1"},
	}, nil
}

// lbs is the zero provider's load balancer: an address per Service UID, the next of
// 198.18.0.0/15, kept in memory (a restart starts over: fine for a benchmark).
var lbs = zeroLB{ips: map[string]string{}}

type zeroLB struct {
	mu   sync.Mutex
	next int
	ips  map[string]string
}

func (z *zeroLB) status(svc *v1.Service, create bool) (*v1.LoadBalancerStatus, bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	ip, ok := z.ips[string(svc.UID)]
	if !ok && create {
		z.next++
		ip = fmt.Sprintf("198.%d.%d.%d", 18+z.next>>16, z.next>>8&0xff, z.next&0xff)
		z.ips[string(svc.UID)], ok = ip, true
	}
	if !ok {
		return nil, false
	}
	vip := v1.LoadBalancerIPModeVIP
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: ip, IPMode: &vip}}}, true
}

func (z *zeroLB) GetLoadBalancer(_ context.Context, _ string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	st, ok := z.status(svc, false)
	return st, ok, nil
}

func (z *zeroLB) GetLoadBalancerName(_ context.Context, _ string, svc *v1.Service) string {
	return string(svc.UID)
}

func (z *zeroLB) EnsureLoadBalancer(_ context.Context, _ string, svc *v1.Service, _ []*v1.Node) (*v1.LoadBalancerStatus, error) {
	st, _ := z.status(svc, true)
	return st, nil
}

func (z *zeroLB) UpdateLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) error {
	return nil
}

func (z *zeroLB) EnsureLoadBalancerDeleted(_ context.Context, _ string, svc *v1.Service) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	delete(z.ips, string(svc.UID))
	return nil
}
