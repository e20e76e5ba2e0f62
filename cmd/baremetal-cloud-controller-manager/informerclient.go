package main

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/apigate"
)

// informerClient returns the client for the process's informers (the shared informer
// factory of the agent and the controllers, and the Lease watch): cfg's, behind an
// API gate that lives as long as ctx (newGate), and the gate. Use it for informers
// only: a GET through it waits for the API server for as long as its context allows.
func informerClient(ctx context.Context, cfg *rest.Config) (kubernetes.Interface, *apigate.Gate, error) {
	gate := newGate(ctx)
	client, err := kubernetes.NewForConfig(gate.Config(cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("the informers' client: %w", err)
	}
	return client, gate, nil
}

// newGate returns an apigate.Gate for the process's life (ctx): while the API server
// refuses or drops connections, the GETs of the clients it wraps wait in it instead
// of failing, so client-go's reflectors never back off for the outage (up to 60 s),
// and they re-list and re-watch within 0.8 s of the API server's /readyz answering
// 200 again (probed every 0.4-0.8 s; see internal/apigate).
func newGate(ctx context.Context) *apigate.Gate {
	return apigate.New(klog.NewContext(ctx, klog.FromContext(ctx).WithName("apigate")), apigate.Options{})
}
