package lb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Claims make the API server, not a replica's memory, guarantee that no address
// is given to two Services: before a Service's status shows an address, the
// address is claimed with an object named after it (networking.k8s.io/v1
// IPAddress, the object Kubernetes itself claims ClusterIPs with), and creating an
// object whose name exists fails. A leader that resumes after any pause, with any
// stale view, can therefore not give an address to a second Service: its claim
// fails, and it writes nothing.
//
// A claim names its holder: spec.parentRef is the Service (namespace and name)
// and the annotation ClaimUIDAnnotation its UID, so a claim left by a deleted
// Service is not taken for one of the same name created later. An address
// Services share (baremetal-ccm.io/allow-shared-ip) is claimed for the sharing
// key (ClaimSharingKeyAnnotation): any Service with that key may hold it; the
// leader's allocator checks ports and policies within the group, as before. Claims
// carry the label ipaddress.kubernetes.io/managed-by: baremetal-ccm.io, which the
// API server's own ClusterIP repair loop leaves alone (it manages only its own).
const (
	// ClaimManager is the value of networkingv1.LabelManagedBy on our claims.
	ClaimManager = "baremetal-ccm.io"
	// ClaimUIDAnnotation is the holder Service's UID.
	ClaimUIDAnnotation = "baremetal-ccm.io/service-uid"
	// ClaimSharingKeyAnnotation is the sharing key of a shared address.
	ClaimSharingKeyAnnotation = "baremetal-ccm.io/sharing-key"
)

// ErrClaimed is wrapped by Claim's error when another Service (or something that
// is not ours, such as a ClusterIP) holds the address.
var ErrClaimed = errors.New("address claimed by another holder")

// Holder is the Service (or sharing group) a claim is for.
type Holder struct {
	Namespace, Name string
	UID             types.UID
	// SharingKey is set for a shared address: any Service with the key may hold it.
	SharingKey string
}

func (h Holder) String() string {
	if h.SharingKey != "" {
		return fmt.Sprintf("the Services sharing key %q (first %s/%s)", h.SharingKey, h.Namespace, h.Name)
	}
	return "Service " + h.Namespace + "/" + h.Name
}

// Claim is an existing claim.
type Claim struct {
	IP     netip.Addr
	Holder Holder
	// Ours is false for an IPAddress another manager made (a ClusterIP): the
	// address is taken, and never released here.
	Ours bool
	// Created is when the claim was made.
	Created time.Time
	// UID and ResourceVersion identify this claim object (deletion preconditions).
	UID             types.UID
	ResourceVersion string
}

// owns reports whether the claim is for h: the same Service (name and UID), or the
// same sharing key.
func (c Claim) owns(h Holder) bool {
	if !c.Ours {
		return false
	}
	if c.Holder.SharingKey != "" || h.SharingKey != "" {
		return c.Holder.SharingKey == h.SharingKey
	}
	// A holder without a UID is a Service known to be gone (see Committed): any
	// claim of that name is its.
	return c.Holder.Namespace == h.Namespace && c.Holder.Name == h.Name && (c.Holder.UID == h.UID || h.UID == "")
}

// Claimer claims addresses in the API server. Implementations are safe for
// concurrent use; every call has the caller's deadline.
type Claimer interface {
	// Claim makes h the holder of ip: nil if it is (now or already), an error
	// wrapping ErrClaimed if another holder has it. A claim left by a deleted
	// Service of the same name (another UID) is replaced.
	Claim(ctx context.Context, ip netip.Addr, h Holder) error
	// Release deletes the claim of ip if it is h's (nil if there is none).
	Release(ctx context.Context, ip netip.Addr, h Holder) error
	// Get returns the claim of ip, ok false if there is none.
	Get(ctx context.Context, ip netip.Addr) (c Claim, ok bool, err error)
	// List returns every claim on an address, ours and others' (ClusterIPs); with
	// ours, only this CCM's (the API server selects them: the others are not read).
	List(ctx context.Context, ours bool) (map[netip.Addr]Claim, error)
}

// IPAddressClaims is the Claimer over networking.k8s.io/v1 IPAddress objects.
type IPAddressClaims struct {
	Client kubernetes.Interface
}

var _ Claimer = IPAddressClaims{}

func familyLabel(ip netip.Addr) string {
	if ip.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func claimObject(ip netip.Addr, h Holder) *networkingv1.IPAddress {
	o := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name:        ip.String(), // canonical form, as the API requires
			Labels:      map[string]string{networkingv1.LabelManagedBy: ClaimManager, networkingv1.LabelIPAddressFamily: familyLabel(ip)},
			Annotations: map[string]string{ClaimUIDAnnotation: string(h.UID)},
		},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: h.Namespace, Name: h.Name}},
	}
	if h.SharingKey != "" {
		o.Annotations[ClaimSharingKeyAnnotation] = h.SharingKey
	}
	return o
}

// claimOf reads a claim from its object.
func claimOf(o *networkingv1.IPAddress) (Claim, bool) {
	ip, err := netip.ParseAddr(o.Name)
	if err != nil {
		return Claim{}, false
	}
	c := Claim{IP: ip.Unmap(), Ours: o.Labels[networkingv1.LabelManagedBy] == ClaimManager, Created: o.CreationTimestamp.Time,
		UID: o.UID, ResourceVersion: o.ResourceVersion}
	if p := o.Spec.ParentRef; p != nil {
		c.Holder.Namespace, c.Holder.Name = p.Namespace, p.Name
	}
	c.Holder.UID = types.UID(o.Annotations[ClaimUIDAnnotation])
	c.Holder.SharingKey = o.Annotations[ClaimSharingKeyAnnotation]
	return c, true
}

// Claim implements Claimer.
func (c IPAddressClaims) Claim(ctx context.Context, ip netip.Addr, h Holder) error {
	api := c.Client.NetworkingV1().IPAddresses()
	for range 3 {
		_, err := api.Create(ctx, claimObject(ip, h), metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("claiming %s for %s: %w", ip, h, err)
		}
		o, err := api.Get(ctx, ip.String(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // released meanwhile: claim it
		}
		if err != nil {
			return fmt.Errorf("reading the claim of %s: %w", ip, err)
		}
		cur, _ := claimOf(o)
		switch {
		case cur.owns(h):
			return nil
		case !cur.Ours:
			return fmt.Errorf("%w: %s is IPAddress %s of %s/%s %s (managed by %q)", ErrClaimed, ip, o.Name, cur.Holder.Namespace, cur.Holder.Name,
				o.Spec.ParentRef.Resource, o.Labels[networkingv1.LabelManagedBy])
		case h.SharingKey == "" && cur.Holder.SharingKey == "" && cur.Holder.Namespace == h.Namespace && cur.Holder.Name == h.Name:
			// Left by a deleted Service of the same name (another UID: this
			// Service exists, so that one does not): replace it.
			pre := metav1.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion}
			if err := api.Delete(ctx, o.Name, metav1.DeleteOptions{Preconditions: &pre}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("replacing the stale claim of %s: %w", ip, err)
			}
			continue
		case cur.Holder.SharingKey == "" && h.SharingKey != "" && h.UID != "" && cur.Holder == Holder{Namespace: h.Namespace, Name: h.Name, UID: h.UID}:
			// The Service that holds the address alone now allows sharing it: the
			// claim becomes its sharing key's. Nobody else can hold an address
			// claimed for one Service, so nothing is given twice. The other way (a
			// key dropped or changed) stays refused: a joiner of the shared address
			// only reads the claim, so no precondition here could see one whose
			// status is still being written.
			o.Annotations[ClaimSharingKeyAnnotation] = h.SharingKey
			_, err := api.Update(ctx, o, metav1.UpdateOptions{}) // at o's resourceVersion
			if err == nil {
				return nil
			}
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				return fmt.Errorf("sharing the claim of %s under key %q: %w", ip, h.SharingKey, err)
			}
		default:
			return fmt.Errorf("%w: %s is claimed by %s", ErrClaimed, ip, cur.Holder)
		}
	}
	return fmt.Errorf("claiming %s for %s: the claim kept changing", ip, h)
}

// Release implements Claimer.
func (c IPAddressClaims) Release(ctx context.Context, ip netip.Addr, h Holder) error {
	api := c.Client.NetworkingV1().IPAddresses()
	o, err := api.Get(ctx, ip.String(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the claim of %s: %w", ip, err)
	}
	cur, _ := claimOf(o)
	if !cur.owns(h) {
		return nil
	}
	pre := metav1.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion}
	if err := api.Delete(ctx, o.Name, metav1.DeleteOptions{Preconditions: &pre}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing the claim of %s: %w", ip, err)
	}
	return nil
}

// Get implements Claimer.
func (c IPAddressClaims) Get(ctx context.Context, ip netip.Addr) (Claim, bool, error) {
	o, err := c.Client.NetworkingV1().IPAddresses().Get(ctx, ip.String(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Claim{}, false, nil
	}
	if err != nil {
		return Claim{}, false, fmt.Errorf("reading the claim of %s: %w", ip, err)
	}
	cl, ok := claimOf(o)
	return cl, ok, nil
}

// List implements Claimer.
func (c IPAddressClaims) List(ctx context.Context, ours bool) (map[netip.Addr]Claim, error) {
	out := map[netip.Addr]Claim{}
	opts := metav1.ListOptions{Limit: 5000}
	if ours {
		opts.LabelSelector = networkingv1.LabelManagedBy + "=" + ClaimManager
	}
	for {
		list, err := c.Client.NetworkingV1().IPAddresses().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing address claims: %w", err)
		}
		for i := range list.Items {
			if cl, ok := claimOf(&list.Items[i]); ok {
				out[cl.IP] = cl
			}
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}
