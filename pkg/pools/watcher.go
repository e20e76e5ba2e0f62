package pools

import (
	"context"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/informers/externalversions"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/kick"
)

// Watcher puts the pools in force in one process (a replica's allocator and agent, a
// worker agent's pool lookup): the CloudConfig's plus the IPPools' status.applied,
// applied whenever they change.
type Watcher struct {
	// File are the CloudConfig's pools.
	File []config.AddressPool
	// Apply puts a pool set in force; an error keeps the previous one (and is
	// retried at the next change or after a minute).
	Apply func(ctx context.Context, pools []config.AddressPool) error
	// Synced, when set, opens once the IPPools were read and applied the first
	// time: a speaker waits for it before its first announcements.
	Synced *kick.Gate
}

// Run watches the IPPools through factory (which it starts) until ctx ends.
func (w *Watcher) Run(ctx context.Context, factory externalversions.SharedInformerFactory) {
	logger := klog.FromContext(ctx).WithName("ip-pools")
	ctx = klog.NewContext(ctx, logger)
	inf := factory.BaremetalCCM().V1alpha1().IPPools()
	informer := inf.Informer()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	last := w.File
	// An Apply that failed is retried at the next change or after a minute.
	err := kick.Watch(ctx, informer, time.Minute, func() {
		if objs, err := inf.Lister().List(labels.Everything()); err == nil {
			if want := Effective(w.File, objs); !reflect.DeepEqual(want, last) {
				if err := w.Apply(ctx, want); err != nil {
					logger.Error(err, "Cannot put the pools in force; the previous ones stay", "pools", names(want))
				} else {
					logger.Info("Pools in force", "pools", names(want))
					last = want
				}
			}
		}
		w.Synced.Open()
	})
	if err != nil {
		logger.Error(err, "IPPools are not watched: only the CloudConfig's pools are in force")
	}
}

func names(pools []config.AddressPool) []string {
	out := make([]string, len(pools))
	for i := range pools {
		out[i] = pools[i].Name
	}
	return out
}
