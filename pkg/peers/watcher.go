package peers

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
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
	// Synced, when set, is closed once the BGPPeers were read the first time.
	Synced chan struct{}

	cur  atomic.Pointer[[]Peer]
	once sync.Once
}

// Current returns the BGPPeers in force (none before the first read).
func (w *Watcher) Current() []Peer {
	if p := w.cur.Load(); p != nil {
		return *p
	}
	return nil
}

// WaitSynced waits for w.Synced up to timeout (the BGPPeers cannot be read: their
// CRD is missing, the API server is away) and reports whether it closed.
func (w *Watcher) WaitSynced(ctx context.Context, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.Synced:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// Run watches the BGPPeers through factory (which it starts) until ctx ends.
func (w *Watcher) Run(ctx context.Context, factory externalversions.SharedInformerFactory) {
	logger := klog.FromContext(ctx).WithName("bgp-peers")
	inf := factory.BaremetalCCM().V1alpha1().BGPPeers()
	wake := kick.New()
	reg, err := inf.Informer().AddEventHandler(wake.Handler())
	if err != nil {
		logger.Error(err, "BGPPeers are not watched: only the CloudConfig's and the racks' peers are in force")
		return
	}
	defer func() { _ = inf.Informer().RemoveEventHandler(reg) }()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return
	}
	kick.Loop(ctx, wake, 0, func() {
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
		w.once.Do(func() {
			if w.Synced != nil {
				close(w.Synced)
			}
		})
	})
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
