// Command zeroccm is a benchmark baseline, not a provider: the same upstream CCM
// command as baremetal-cloud-controller-manager, with a provider named "zero" whose
// InstancesV2 answers instantly from nothing (providerID zero://<node name>). The
// node-initialization benchmark runs both binaries in the same harness and reports the
// ratio, so what it measures is the cost of the baremetal provider itself.
package main

import (
	"context"
	"io"
	"os"

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
func (zero) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return nil, false }
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
