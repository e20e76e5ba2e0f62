package peers

import (
	"context"
	"reflect"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/informers/externalversions"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/kick"
)

// Watcher keeps the BGPPeers in force in one process (a replica's or a worker
// agent's speaker): Current is their Effective set, and Changed is called whenever
// it changes, so the speaker applies it at once.
type Watcher struct {
	// File are the CloudConfig's bgp.peers (they win their addresses).
	File []config.BGPPeer
	// Changed, when set, is called after Current changed.
	Changed func()
	// Synced, when set, opens once the BGPPeers were read the first time.
	Synced *kick.Gate

	cur atomic.Pointer[[]Peer]
}

// Current returns the BGPPeers in force (none before the first read).
func (w *Watcher) Current() []Peer {
	if p := w.cur.Load(); p != nil {
		return *p
	}
	return nil
}

// Run watches the BGPPeers through factory (which it starts) until ctx ends.
func (w *Watcher) Run(ctx context.Context, factory externalversions.SharedInformerFactory) {
	logger := klog.FromContext(ctx).WithName("bgp-peers")
	inf := factory.BaremetalCCM().V1alpha1().BGPPeers()
	informer := inf.Informer()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	err := kick.Watch(ctx, informer, 0, func() {
		if objs, err := inf.Lister().List(labels.Everything()); err == nil {
			want := Effective(w.File, objs)
			if old := w.Current(); !reflect.DeepEqual(summary(want), summary(old)) {
				w.cur.Store(&want)
				logger.Info("BGPPeers in force", "peers", names(want))
				if w.Changed != nil {
					w.Changed()
				}
			}
		}
		w.Synced.Open()
	})
	if err != nil {
		logger.Error(err, "BGPPeers are not watched: only the CloudConfig's and the racks' peers are in force")
	}
}

// summary is what decides a change: every peer's name, settings and selector.
func summary(ps []Peer) []any {
	out := make([]any, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Name, p.Config, p.Selector.String())
	}
	return out
}

func names(ps []Peer) []string {
	out := make([]string, len(ps))
	for i := range ps {
		out[i] = ps[i].Name
	}
	return out
}
