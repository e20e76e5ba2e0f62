package adverts

import (
	"context"
	"reflect"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/informers/externalversions"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/kick"
)

// Watcher keeps the BGPAdvertisements in force in one process: Current is their
// Effective set, and Changed is called whenever it changes (the speaker then
// announces anew).
type Watcher struct {
	// Changed, when set, is called after Current changed.
	Changed func()
	// Synced, when set, opens once the BGPAdvertisements were read the first time:
	// a speaker waits for it (bounded) before its first announcements, so a
	// restricted address never goes to every peer first.
	Synced *kick.Gate

	cur atomic.Pointer[[]Advert]
}

// Current returns the advertisements in force (none before the first read).
func (w *Watcher) Current() []Advert {
	if p := w.cur.Load(); p != nil {
		return *p
	}
	return nil
}

// Run watches the BGPAdvertisements through factory (which it starts) until ctx
// ends. Until they are read, nothing restricts an address: as without any.
func (w *Watcher) Run(ctx context.Context, factory externalversions.SharedInformerFactory) {
	logger := klog.FromContext(ctx).WithName("bgp-advertisements")
	inf := factory.BaremetalCCM().V1alpha1().BGPAdvertisements()
	informer := inf.Informer()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	var last []any
	err := kick.Watch(ctx, informer, 0, func() {
		if objs, err := inf.Lister().List(labels.Everything()); err == nil {
			want := Effective(objs)
			if sum := summary(want); last == nil || !reflect.DeepEqual(sum, last) {
				last = sum
				w.cur.Store(&want)
				logger.Info("BGPAdvertisements in force", "advertisements", len(want))
				if w.Changed != nil {
					w.Changed()
				}
			}
		}
		w.Synced.Open()
	})
	if err != nil {
		logger.Error(err, "BGPAdvertisements are not watched: every address goes to every peer")
	}
}

func summary(ads []Advert) []any {
	out := make([]any, 0, len(ads))
	for _, a := range ads {
		out = append(out, a.Name, a.AllPools, a.Pools, a.Services.String(), a.AllPeers, a.Peers, a.Advertising)
	}
	return out
}
