package provider

import (
	"errors"
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

func TestFactory(t *testing.T) {
	if _, err := Factory(nil); err == nil || !strings.Contains(err.Error(), "--cloud-config") {
		t.Fatalf("Factory(nil) = %v, want an error naming --cloud-config", err)
	}
	_, err := Factory(strings.NewReader("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\n"))
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("Factory(invalid) = %v, want config.ErrInvalid", err)
	}
	c, err := Factory(strings.NewReader("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory: {file: {path: /nonexistent/inventory.yaml}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Implemented interfaces answer true; the rest nil, false (never nil, true).
	if i, ok := c.InstancesV2(); !ok || i == nil {
		t.Error("InstancesV2 not implemented")
	}
	for name, f := range map[string]func() (any, bool){
		"LoadBalancer": func() (any, bool) { v, ok := c.LoadBalancer(); return v, ok },
		"Instances":    func() (any, bool) { v, ok := c.Instances(); return v, ok },
		"Zones":        func() (any, bool) { v, ok := c.Zones(); return v, ok },
		"Clusters":     func() (any, bool) { v, ok := c.Clusters(); return v, ok },
		"Routes":       func() (any, bool) { v, ok := c.Routes(); return v, ok },
	} {
		if _, ok := f(); ok {
			t.Errorf("%s: ok = true for an unimplemented interface", name)
		}
	}
	if c.ProviderName() != "baremetal" || !c.HasClusterID() {
		t.Error("ProviderName/HasClusterID")
	}
}

func TestRegister(t *testing.T) {
	Register()
	if !cloudprovider.IsCloudProvider(Name) {
		t.Fatal("provider not registered")
	}
}
