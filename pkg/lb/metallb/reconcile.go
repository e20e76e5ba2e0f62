package metallb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	metallbv1beta1 "go.universe.tf/metallb/api/v1beta1"
	metallbv1beta2 "go.universe.tf/metallb/api/v1beta2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// Errors wrapped by Sync.
var (
	// ErrConflict: an object with one of our names exists without our label. It is
	// left alone, and so is the object of ours that depends on it (the BGPPeer using a
	// Secret, the BGPAdvertisement of a pool).
	ErrConflict = errors.New("object exists and is not managed by baremetal-ccm")
	// ErrMetalLBMissing: the metallb.io API (MetalLB's CRDs) is not installed.
	ErrMetalLBMissing = errors.New("MetalLB's CRDs are not installed")
)

// Event reasons.
const (
	// ReasonObjectConflict is the Warning event on a foreign object that has one of
	// our names.
	ReasonObjectConflict = "MetalLBObjectConflict"
)

// GVRs of the objects the Reconciler writes.
var (
	SecretsGVR           = corev1.SchemeGroupVersion.WithResource("secrets")
	IPAddressPoolsGVR    = metallbv1beta1.GroupVersion.WithResource("ipaddresspools")
	BGPPeersGVR          = metallbv1beta2.GroupVersion.WithResource("bgppeers")
	BGPAdvertisementsGVR = metallbv1beta1.GroupVersion.WithResource("bgpadvertisements")
)

// kind describes one resource the Reconciler manages.
type kind struct {
	gvr  schema.GroupVersionResource
	name string // for messages
	// dependsOn is the index in kinds of the kind whose same-name object this one
	// uses (a BGPPeer its password Secret, a BGPAdvertisement its pool), or -1.
	dependsOn int
	// equal reports whether existing already has desired's content, after the
	// apiserver's defaulting.
	equal func(desired, existing *unstructured.Unstructured) (bool, error)
	// recreate reports whether reaching desired needs a delete and create (an
	// immutable field changed).
	recreate func(desired, existing *unstructured.Unstructured) (bool, error)
}

// kinds in apply order; deletion runs in reverse.
var kinds = []kind{
	{gvr: SecretsGVR, name: "Secret", dependsOn: -1,
		equal:    typedEqual(func(s *corev1.Secret) any { return []any{s.Type, s.Data} }),
		recreate: typedDiffer(func(s *corev1.Secret) any { return s.Type })},
	{gvr: IPAddressPoolsGVR, name: "IPAddressPool", dependsOn: -1,
		equal: typedEqual(func(p *metallbv1beta1.IPAddressPool) any { return p.Spec })},
	{gvr: BGPPeersGVR, name: "BGPPeer", dependsOn: 0,
		equal: typedEqual(func(p *metallbv1beta2.BGPPeer) any { return p.Spec }),
		// enableGracefulRestart is immutable (a CEL rule in the CRD).
		recreate: typedDiffer(func(p *metallbv1beta2.BGPPeer) any { return p.Spec.EnableGracefulRestart })},
	{gvr: BGPAdvertisementsGVR, name: "BGPAdvertisement", dependsOn: 1,
		equal: typedEqual(func(a *metallbv1beta1.BGPAdvertisement) any { return a.Spec })},
}

// typedEqual compares the part f picks of the typed forms of two objects, so that
// fields the apiserver defaults (false, 0) compare equal to their absence.
func typedEqual[T any](f func(*T) any) func(d, e *unstructured.Unstructured) (bool, error) {
	return func(d, e *unstructured.Unstructured) (bool, error) {
		var dt, et T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, &dt); err != nil {
			return false, fmt.Errorf("decoding %s: %w", d.GetName(), err)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(e.Object, &et); err != nil {
			return false, fmt.Errorf("decoding existing %s: %w", e.GetName(), err)
		}
		return equality.Semantic.DeepEqual(f(&dt), f(&et)), nil
	}
}

func typedDiffer[T any](f func(*T) any) func(d, e *unstructured.Unstructured) (bool, error) {
	eq := typedEqual(f)
	return func(d, e *unstructured.Unstructured) (bool, error) {
		same, err := eq(d, e)
		return !same, err
	}
}

// ReconcilerOptions configure a Reconciler.
type ReconcilerOptions struct {
	// Client writes the objects. Required.
	Client dynamic.Interface
	// Config is the CloudConfig (pools, bgp). Required.
	Config *config.CloudConfig
	// Inventory returns the current inventory view (inventory.Store.View). Required.
	// While it returns an error nothing is changed, so a failed inventory load never
	// removes rack peers.
	Inventory func() (*inventory.View, error)
	// Options are MetalLB's namespace and BGP mode.
	Options Options
	// Recorder records the Warning events on conflicting foreign objects. Optional.
	Recorder record.EventRecorder
	// Fence, when set, must answer nil right before every write (the service
	// controller's, lbcontroller.LeaseFence.Check): a replica that no longer leads
	// changes nothing. Optional.
	Fence func(context.Context) error
	// Trigger makes Run sync now (for example when the inventory or the pools
	// changed). Optional.
	Trigger <-chan struct{}
	// Pools, when set, returns the pools in force (the CloudConfig's and the accepted
	// IPPools'), used instead of Config's.
	Pools func() []config.AddressPool
	// PollInterval is how often Run checks the inventory digest and retries a failed
	// sync. Default: 5s.
	PollInterval time.Duration
	// ResyncInterval is how often Run syncs with nothing changed, repairing objects
	// someone edited or deleted. Default: 1m.
	ResyncInterval time.Duration
	// SyncTimeout bounds one sync, all API calls included. Default: 30s.
	SyncTimeout time.Duration
	// Clock is for tests. Default: the real clock.
	Clock clock.WithTicker
}

// Reconciler makes the MetalLB objects in the cluster match Objects: it creates and
// updates the ones it owns and deletes owned ones no longer generated. Objects without
// the label LabelManagedBy=ManagedBy are never updated or deleted.
type Reconciler struct {
	o ReconcilerOptions
	// afterSync, when set (tests), is called by Run after each sync.
	afterSync func(ctx context.Context, err error)
}

// NewReconciler checks o and fills its defaults.
func NewReconciler(o ReconcilerOptions) (*Reconciler, error) {
	if o.Client == nil || o.Config == nil || o.Inventory == nil {
		return nil, errors.New("metallb reconciler: Client, Config and Inventory are required")
	}
	o.Options = o.Options.withDefaults()
	if o.PollInterval <= 0 {
		o.PollInterval = 5 * time.Second
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = time.Minute
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = 30 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Reconciler{o: o}, nil
}

// Run syncs at once, then whenever Trigger fires, the inventory digest changes, the
// last sync failed with an API error (every PollInterval), or ResyncInterval passed,
// until ctx is done. Conflicts, an inexpressible configuration and a missing MetalLB
// API need an operator, so they are retried only every ResyncInterval (one log line
// and one event per conflict each time). Call it on the elected leader only. Failures
// are logged; Run never gives up.
func (r *Reconciler) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("metallb")
	ctx = klog.NewContext(ctx, logger)
	ticker := r.o.Clock.NewTicker(r.o.PollInterval)
	defer ticker.Stop()
	var (
		lastDigest string
		lastSync   time.Time
		failed     = true
	)
	for {
		digest := ""
		if v, err := r.o.Inventory(); err == nil {
			digest = v.Digest()
		}
		if failed || digest != lastDigest || r.o.Clock.Since(lastSync) >= r.o.ResyncInterval {
			err := r.Sync(ctx)
			failed = retriable(err)
			lastDigest, lastSync = digest, r.o.Clock.Now()
			if err != nil {
				logger.Error(err, "Syncing MetalLB objects failed; retrying", "event", "metallbSyncFailed", "retryIn", r.o.PollInterval)
			}
			if r.afterSync != nil {
				r.afterSync(ctx, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		case <-r.o.Trigger:
			failed = true // sync now
		}
	}
}

// retriable reports whether err has a part that retrying soon may fix (an API error),
// rather than only parts that need an operator.
func retriable(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if retriable(e) {
				return true
			}
		}
		return false
	}
	return !errors.Is(err, ErrConflict) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrMetalLBMissing)
}

// Sync makes one pass. It returns nil when every generated object is in place and
// every owned object that is no longer generated is gone. Otherwise it returns all
// problems joined; each conflict wraps ErrConflict, a missing MetalLB API wraps
// ErrMetalLBMissing, an inexpressible configuration wraps ErrUnsupported (and then
// nothing is changed). Objects unaffected by a problem are still reconciled.
func (r *Reconciler) Sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.SyncTimeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	view, err := r.o.Inventory()
	if err != nil {
		return fmt.Errorf("not syncing MetalLB objects without an inventory: %w", err)
	}
	cfg := r.o.Config
	if r.o.Pools != nil && cfg.LoadBalancer != nil {
		c, lb := *cfg, *cfg.LoadBalancer
		lb.Pools = r.o.Pools()
		c.LoadBalancer = &lb
		cfg = &c
	}
	set, err := Objects(cfg, view, r.o.Options)
	if err != nil {
		return fmt.Errorf("not changing MetalLB objects: %w", err)
	}
	objs, err := set.Unstructured()
	if err != nil {
		return err
	}
	desired := make([]map[string]*unstructured.Unstructured, len(kinds))
	for i := range kinds {
		desired[i] = map[string]*unstructured.Unstructured{}
	}
	for _, o := range objs {
		desired[kindIndex(o)][o.GetName()] = o
	}

	ns := r.o.Options.Namespace
	owned := make([]map[string]*unstructured.Unstructured, len(kinds))
	for i, k := range kinds {
		list, err := r.o.Client.Resource(k.gvr).Namespace(ns).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set{LabelManagedBy: ManagedBy}.String(),
		})
		if err != nil {
			if apierrors.IsNotFound(err) && k.gvr.Group != "" {
				return fmt.Errorf("%w: listing %s: %w (install MetalLB, or set loadBalancer.announcer to another announcer)", ErrMetalLBMissing, k.gvr.GroupResource(), err)
			}
			return fmt.Errorf("listing %s in %s: %w", k.gvr.GroupResource(), ns, err)
		}
		owned[i] = map[string]*unstructured.Unstructured{}
		for j := range list.Items {
			owned[i][list.Items[j].GetName()] = &list.Items[j]
		}
	}

	var errs []error
	// frozen[i] holds names of kind i that must not be touched: they conflict, or the
	// object they depend on does.
	frozen := make([]map[string]bool, len(kinds))
	for i, k := range kinds {
		frozen[i] = map[string]bool{}
		for _, name := range sortedKeys(desired[i]) {
			if k.dependsOn >= 0 && frozen[k.dependsOn][name] {
				frozen[i][name] = true
				logger.Info("Leaving a MetalLB object alone: the object it uses is not ours", "kind", k.name, "namespace", ns, "name", name)
				continue
			}
			if err := r.apply(ctx, k, desired[i][name], owned[i][name]); err != nil {
				if errors.Is(err, ErrConflict) {
					frozen[i][name] = true
				}
				errs = append(errs, err)
			}
		}
	}
	for i := len(kinds) - 1; i >= 0; i-- {
		k := kinds[i]
		for _, name := range sortedKeys(owned[i]) {
			if _, ok := desired[i][name]; ok || frozen[i][name] {
				continue
			}
			o := owned[i][name]
			if err := r.fenced(ctx); err != nil {
				return errors.Join(append(errs, err)...)
			}
			err := r.o.Client.Resource(k.gvr).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: unchanged(o)})
			switch {
			case err == nil:
				logger.Info("Deleted MetalLB object no longer generated", "kind", k.name, "namespace", ns, "name", name)
			case apierrors.IsNotFound(err):
			default:
				errs = append(errs, fmt.Errorf("deleting %s %s/%s: %w", k.name, ns, name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// apply creates desired, or brings existing (ours) to it.
func (r *Reconciler) apply(ctx context.Context, k kind, desired, existing *unstructured.Unstructured) error {
	logger := klog.FromContext(ctx)
	client := r.o.Client.Resource(k.gvr).Namespace(desired.GetNamespace())
	name := desired.GetName()
	if existing == nil {
		if err := r.fenced(ctx); err != nil {
			return err
		}
		_, err := client.Create(ctx, desired, metav1.CreateOptions{FieldManager: ManagedBy})
		if err == nil {
			logger.Info("Created MetalLB object", "kind", k.name, "namespace", desired.GetNamespace(), "name", name)
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s/%s: %w", k.name, desired.GetNamespace(), name, err)
		}
		if existing, err = client.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("reading %s %s/%s after a create conflict: %w", k.name, desired.GetNamespace(), name, err)
		}
		if existing.GetLabels()[LabelManagedBy] != ManagedBy {
			return r.conflict(ctx, k, existing)
		}
	}
	same, err := k.equal(desired, existing)
	if err != nil || same {
		return err
	}
	if err := r.fenced(ctx); err != nil {
		return err
	}
	if k.recreate != nil {
		recreate, err := k.recreate(desired, existing)
		if err != nil {
			return err
		}
		if recreate {
			if err := client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: unchanged(existing)}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting %s %s/%s to change an immutable field: %w", k.name, desired.GetNamespace(), name, err)
			}
			if _, err := client.Create(ctx, desired, metav1.CreateOptions{FieldManager: ManagedBy}); err != nil {
				return fmt.Errorf("recreating %s %s/%s: %w", k.name, desired.GetNamespace(), name, err)
			}
			logger.Info("Recreated MetalLB object to change an immutable field", "kind", k.name, "namespace", desired.GetNamespace(), "name", name)
			return nil
		}
	}
	// Keep what others put on our object (labels, annotations, finalizers); replace
	// the content (spec, or a Secret's type and data).
	updated := existing.DeepCopy()
	for key := range updated.Object {
		switch key {
		case "apiVersion", "kind", "metadata", "status":
		default:
			delete(updated.Object, key)
		}
	}
	for key, v := range desired.Object {
		switch key {
		case "apiVersion", "kind", "metadata", "status":
		default:
			updated.Object[key] = runtime.DeepCopyJSONValue(v)
		}
	}
	lbls := updated.GetLabels()
	if lbls == nil {
		lbls = map[string]string{}
	}
	for lk, lv := range desired.GetLabels() {
		lbls[lk] = lv
	}
	updated.SetLabels(lbls)
	if _, err := client.Update(ctx, updated, metav1.UpdateOptions{FieldManager: ManagedBy}); err != nil {
		return fmt.Errorf("updating %s %s/%s: %w", k.name, desired.GetNamespace(), name, err)
	}
	logger.Info("Updated MetalLB object", "kind", k.name, "namespace", desired.GetNamespace(), "name", name)
	return nil
}

// fenced asks the Fence, when there is one, whether this replica may still write.
func (r *Reconciler) fenced(ctx context.Context) error {
	if r.o.Fence == nil {
		return nil
	}
	if err := r.o.Fence(ctx); err != nil {
		return fmt.Errorf("not changing MetalLB objects: %w", err)
	}
	return nil
}

// unchanged is the precondition of a delete of o: the object as listed, not one that
// was replaced or changed since (for example handed back by removing our label).
func unchanged(o *unstructured.Unstructured) *metav1.Preconditions {
	uid, rv := o.GetUID(), o.GetResourceVersion()
	return &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}
}

// conflict reports a foreign object that has one of our names: an error and a Warning
// event on it. The object's content is never logged (it may be a Secret).
func (r *Reconciler) conflict(ctx context.Context, k kind, foreign *unstructured.Unstructured) error {
	err := fmt.Errorf("%w: %s %s/%s has no label %s=%s; baremetal-ccm leaves it alone and does not apply its own %s of that name (rename or delete it, or add the label to hand it over)",
		ErrConflict, k.name, foreign.GetNamespace(), foreign.GetName(), LabelManagedBy, ManagedBy, k.name)
	klog.FromContext(ctx).Error(err, "MetalLB object conflict", "event", "metallbObjectConflict", "kind", k.name, "namespace", foreign.GetNamespace(), "name", foreign.GetName())
	if r.o.Recorder != nil {
		// A reference, not the object: an event must not carry a Secret's data.
		ref := &corev1.ObjectReference{
			APIVersion: foreign.GetAPIVersion(), Kind: foreign.GetKind(), Namespace: foreign.GetNamespace(),
			Name: foreign.GetName(), UID: foreign.GetUID(), ResourceVersion: foreign.GetResourceVersion(),
		}
		r.o.Recorder.Eventf(ref, corev1.EventTypeWarning, ReasonObjectConflict,
			"%s %s is not managed by baremetal-ccm (no label %s=%s) but has a name baremetal-ccm generates; it is left alone and baremetal-ccm's own %s is not applied. Rename or delete it, or add the label to hand it over.",
			k.name, foreign.GetName(), LabelManagedBy, ManagedBy, k.name)
	}
	return err
}

func kindIndex(o *unstructured.Unstructured) int {
	gvk := o.GroupVersionKind()
	for i, k := range kinds {
		if gvk.GroupVersion() == k.gvr.GroupVersion() && gvk.Kind == k.name {
			return i
		}
	}
	panic(fmt.Sprintf("metallb: generated an object of unexpected kind %s", gvk))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return slices.Clip(keys)
}
