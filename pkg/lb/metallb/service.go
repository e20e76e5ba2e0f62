package metallb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// The Service annotations MetalLB reads. Under the metallb announcer the CCM owns them
// on every Service it allocates for: they are overwritten with the CCM's allocation
// and removed when the load balancer is deleted.
const (
	// AnnotationLoadBalancerIPs is the comma list of IPs MetalLB must use.
	AnnotationLoadBalancerIPs = "metallb.io/loadBalancerIPs"
	// AnnotationAddressPool names the IPAddressPool the IPs belong to.
	AnnotationAddressPool = "metallb.io/address-pool"
	// AnnotationAllowSharedIP is MetalLB's sharing key; it mirrors the CCM's.
	AnnotationAllowSharedIP = "metallb.io/allow-shared-ip"

	// annotationCCMAllowSharedIP is the CCM's sharing key (pkg/lb/ipam), whose
	// semantics follow MetalLB's.
	annotationCCMAllowSharedIP = "baremetal-ccm.io/allow-shared-ip"
)

var ownedAnnotations = []string{AnnotationLoadBalancerIPs, AnnotationAddressPool, AnnotationAllowSharedIP}

// ErrNotAnnounceable is wrapped by Services.Ensure when the allocation is written to
// the Service but MetalLB's speakers will not announce it: MetalLB announces a
// Service only when all its IPs lie in one IPAddressPool. The caller should record it
// as a Warning event on the Service.
var ErrNotAnnounceable = errors.New("MetalLB will not announce this Service")

// Services sets MetalLB's annotations on LoadBalancer Services, on the elected leader.
// Its writes are fenced and conditional: each checks the fence right before it (a
// replica that no longer leads writes nothing), and each is a patch conditional on the
// resourceVersion of the Service it was given (a Service changed since is not
// written: the API server answers Conflict).
type Services struct {
	client  kubernetes.Interface
	timeout time.Duration
	fence   func(context.Context) error

	mu    sync.RWMutex
	pools []poolRanges
}

type poolRanges struct {
	name   string
	ranges [][2]netip.Addr
}

// NewServices returns a Services for the pools of lb (a defaulted, valid config).
// fence, when not nil, must answer nil right before every write (the service
// controller's, lbcontroller.LeaseFence.Check); its error is returned, wrapped.
func NewServices(client kubernetes.Interface, lb *config.LoadBalancerConfig, fence func(context.Context) error) (*Services, error) {
	s := &Services{client: client, timeout: 10 * time.Second, fence: fence}
	if lb == nil {
		return s, nil
	}
	if err := s.SetPools(lb.Pools); err != nil {
		return nil, err
	}
	return s, nil
}

// SetPools replaces the pools the annotations name (the pools in force: the
// CloudConfig's and the accepted IPPools'). On an error nothing changes.
func (s *Services) SetPools(pools []config.AddressPool) error {
	var prs []poolRanges
	for _, p := range pools {
		pr := poolRanges{name: p.Name}
		for _, a := range p.Addresses {
			first, last, err := config.ParseAddressRange(a)
			if err != nil {
				return fmt.Errorf("pool %s: %w", p.Name, err)
			}
			pr.ranges = append(pr.ranges, [2]netip.Addr{first, last})
		}
		prs = append(prs, pr)
	}
	s.mu.Lock()
	s.pools = prs
	s.mu.Unlock()
	return nil
}

// poolOf returns the CCM pool holding ip, or "".
func (s *Services) poolOf(ip netip.Addr) string {
	ip = ip.Unmap()
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, p := range s.pools {
		for _, r := range p.ranges {
			if ip.Compare(r[0]) >= 0 && ip.Compare(r[1]) <= 0 {
				return p.name
			}
		}
	}
	return ""
}

// Annotations returns the values of MetalLB's annotations for svc allocated ips; a
// nil value means the annotation must be absent. It is a pure function of its inputs:
//
//   - metallb.io/loadBalancerIPs: the IPs, comma-separated in the given order; absent
//     when ips is empty, and when spec.loadBalancerIP is set (MetalLB refuses a
//     Service that has both; it reads the same request from the spec).
//   - metallb.io/address-pool: PoolName of the one CCM pool holding every IP; absent
//     when they are not all in one pool.
//   - metallb.io/allow-shared-ip: the Service's baremetal-ccm.io/allow-shared-ip.
//
// The error wraps ErrNotAnnounceable when ips is not empty and not all in one pool;
// the annotations are still returned.
func (s *Services) Annotations(svc *v1.Service, ips []netip.Addr) (map[string]*string, error) {
	out := map[string]*string{}
	for _, k := range ownedAnnotations {
		out[k] = nil
	}
	if len(ips) == 0 {
		return out, nil
	}
	strs := make([]string, len(ips))
	pool := s.poolOf(ips[0])
	for i, ip := range ips {
		strs[i] = ip.Unmap().String()
		if s.poolOf(ip) != pool {
			pool = ""
		}
	}
	var err error
	if pool == "" {
		err = fmt.Errorf("%w: its IPs %s are not all in one address pool of the CloudConfig (MetalLB announces a Service only when every IP is in one IPAddressPool; give dual-stack Services one pool holding both families)",
			ErrNotAnnounceable, strings.Join(strs, ","))
	}
	if svc.Spec.LoadBalancerIP == "" {
		out[AnnotationLoadBalancerIPs] = new(strings.Join(strs, ","))
	}
	if pool != "" {
		out[AnnotationAddressPool] = new(PoolName(pool))
	}
	if key := svc.Annotations[annotationCCMAllowSharedIP]; key != "" {
		out[AnnotationAllowSharedIP] = new(key)
	}
	return out, err
}

// Ensure sets MetalLB's annotations on svc to Annotations(svc, ips) with one JSON
// merge patch, fenced and conditional on svc's resourceVersion (see Services), or
// makes no call when they already are. It returns the Service as the API server
// stored it (svc itself when nothing was written); svc is not modified. An error
// wrapping ErrNotAnnounceable comes after a successful patch, with the Service.
func (s *Services) Ensure(ctx context.Context, svc *v1.Service, ips []netip.Addr) (*v1.Service, error) {
	want, notAnnounceable := s.Annotations(svc, ips)
	out, err := s.patch(ctx, svc, want)
	if err != nil {
		return nil, err
	}
	return out, notAnnounceable
}

// Delete removes MetalLB's annotations from svc (one JSON merge patch, fenced and
// conditional as Ensure's, none when absent) and returns the Service as stored
// (svc itself when nothing was written, nil when it is gone). svc is not modified; a
// Service already gone is not an error.
func (s *Services) Delete(ctx context.Context, svc *v1.Service) (*v1.Service, error) {
	want := map[string]*string{}
	for _, k := range ownedAnnotations {
		want[k] = nil
	}
	return s.patch(ctx, svc, want)
}

// patch writes the annotations of want that svc does not already carry.
func (s *Services) patch(ctx context.Context, svc *v1.Service, want map[string]*string) (*v1.Service, error) {
	changes := map[string]*string{}
	for k, v := range want {
		cur, ok := svc.Annotations[k]
		switch {
		case v == nil && ok:
			changes[k] = nil
		case v != nil && (!ok || cur != *v):
			changes[k] = v
		}
	}
	if len(changes) == 0 {
		return svc, nil
	}
	meta := map[string]any{"annotations": changes}
	if svc.ResourceVersion != "" { // every Service read from the API server has one
		meta["resourceVersion"] = svc.ResourceVersion
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, fmt.Errorf("encoding the annotation patch: %w", err)
	}
	if s.fence != nil {
		if err := s.fence(ctx); err != nil {
			return nil, fmt.Errorf("not setting MetalLB annotations on Service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	out, err := s.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: ManagedBy})
	if err != nil {
		if apierrors.IsNotFound(err) && allNil(changes) {
			return nil, nil
		}
		return nil, fmt.Errorf("setting MetalLB annotations on Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	logged := make(map[string]any, len(changes))
	for k, v := range changes {
		logged[k] = v
		if v != nil {
			logged[k] = *v
		}
	}
	klog.FromContext(ctx).V(2).Info("Set MetalLB annotations", "service", klog.KObj(svc), "changes", logged, "resourceVersion", out.ResourceVersion)
	return out, nil
}

func allNil(m map[string]*string) bool {
	for _, v := range m {
		if v != nil {
			return false
		}
	}
	return true
}
