package ipam

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func svcWith(ann map[string]string, mut func(*v1.ServiceSpec)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Annotations: ann, Labels: map[string]string{"app": "web"}},
		Spec: v1.ServiceSpec{
			Type:     v1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "web"},
			Ports:    []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: 80}, {Port: 53, Protocol: v1.ProtocolUDP}, {Port: 8080}},
		},
	}
	if mut != nil {
		mut(&s.Spec)
	}
	return s
}

func policy(p v1.IPFamilyPolicy) *v1.IPFamilyPolicy { return &p }

func TestParseService(t *testing.T) {
	tests := []struct {
		name    string
		svc     *v1.Service
		want    Request
		wantErr []string // substrings; nil: no error
	}{
		{
			name: "defaults: single stack IPv4, Cluster, ports with TCP default",
			svc:  svcWith(nil, nil),
			want: Request{Families: v4, Ports: []Port{{"TCP", 80}, {"UDP", 53}, {"TCP", 8080}}},
		},
		{
			name: "annotations",
			svc: svcWith(map[string]string{AnnotationAddressPool: "public", AnnotationAllowSharedIP: "dns", AnnotationLoadBalancerIPs: " 192.0.2.10 , 2001:db8::10"}, func(s *v1.ServiceSpec) {
				s.IPFamilyPolicy = policy(v1.IPFamilyPolicyRequireDualStack)
				s.IPFamilies = v64
				s.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			}),
			want: Request{Pool: "public", SharingKey: "dns", IPs: addrs("192.0.2.10", "2001:db8::10"), Families: v64, RequireAll: true, Local: true},
		},
		{
			name: "spec.loadBalancerIP, IPv4-mapped form unmapped",
			svc:  svcWith(nil, func(s *v1.ServiceSpec) { s.LoadBalancerIP = "::ffff:192.0.2.1" }),
			want: Request{Families: v4, IPs: addrs("192.0.2.1")},
		},
		{
			name: "single stack IPv6 from ipFamilies",
			svc:  svcWith(nil, func(s *v1.ServiceSpec) { s.IPFamilies = v6 }),
			want: Request{Families: v6},
		},
		{
			name: "no ipFamilies: the requested IP's family",
			svc:  svcWith(map[string]string{AnnotationLoadBalancerIPs: "2001:db8::1"}, nil),
			want: Request{Families: v6, IPs: addrs("2001:db8::1")},
		},
		{
			name: "PreferDualStack takes ipFamilies as they are",
			svc: svcWith(nil, func(s *v1.ServiceSpec) {
				s.IPFamilyPolicy = policy(v1.IPFamilyPolicyPreferDualStack)
				s.IPFamilies = v6
			}),
			want: Request{Families: v6},
		},
		{
			name: "PreferDualStack without ipFamilies: both",
			svc:  svcWith(nil, func(s *v1.ServiceSpec) { s.IPFamilyPolicy = policy(v1.IPFamilyPolicyPreferDualStack) }),
			want: Request{Families: v46},
		},
		{
			name: "RequireDualStack completes the families",
			svc: svcWith(nil, func(s *v1.ServiceSpec) {
				s.IPFamilyPolicy = policy(v1.IPFamilyPolicyRequireDualStack)
				s.IPFamilies = v6
			}),
			want: Request{Families: v64, RequireAll: true},
		},
		{
			name:    "garbage IP",
			svc:     svcWith(map[string]string{AnnotationLoadBalancerIPs: "192.0.2.1,banana"}, nil),
			want:    Request{Families: v4, IPs: addrs("192.0.2.1")},
			wantErr: []string{AnnotationLoadBalancerIPs, `"banana"`, "ns/web"},
		},
		{
			name:    "zone",
			svc:     svcWith(nil, func(s *v1.ServiceSpec) { s.LoadBalancerIP = "fe80::1%eth0"; s.IPFamilies = v6 }),
			want:    Request{Families: v6},
			wantErr: []string{"spec.loadBalancerIP", "zone"},
		},
		{
			name:    "both annotation and spec.loadBalancerIP",
			svc:     svcWith(map[string]string{AnnotationLoadBalancerIPs: "192.0.2.1"}, func(s *v1.ServiceSpec) { s.LoadBalancerIP = "192.0.2.2" }),
			want:    Request{Families: v4},
			wantErr: []string{"keep only the annotation"},
		},
		{
			name:    "two of one family",
			svc:     svcWith(map[string]string{AnnotationLoadBalancerIPs: "192.0.2.1,192.0.2.2"}, nil),
			want:    Request{Families: v4, IPs: addrs("192.0.2.1")},
			wantErr: []string{"same family"},
		},
		{
			name:    "three addresses",
			svc:     svcWith(map[string]string{AnnotationLoadBalancerIPs: "192.0.2.1,2001:db8::1,192.0.2.2"}, nil),
			want:    Request{Families: v4},
			wantErr: []string{"3 addresses"},
		},
		{
			name:    "IP of a family the Service does not have",
			svc:     svcWith(map[string]string{AnnotationLoadBalancerIPs: "2001:db8::1"}, func(s *v1.ServiceSpec) { s.IPFamilies = v4 }),
			want:    Request{Families: v4},
			wantErr: []string{"2001:db8::1 is IPv6"},
		},
		{
			name:    "bad pool name",
			svc:     svcWith(map[string]string{AnnotationAddressPool: "Not_A_Pool"}, nil),
			want:    Request{Families: v4},
			wantErr: []string{AnnotationAddressPool, "Not_A_Pool"},
		},
		{
			name: "bad families and policy, all reported",
			svc: svcWith(map[string]string{AnnotationAllowSharedIP: "a\nb"}, func(s *v1.ServiceSpec) {
				s.IPFamilies = []v1.IPFamily{"IPv4", "IPv4", "IPX"}
				s.IPFamilyPolicy = policy("Sometimes")
			}),
			want:    Request{Families: v4},
			wantErr: []string{"spec.ipFamilies[1]", "spec.ipFamilies[2]", "spec.ipFamilyPolicy", AnnotationAllowSharedIP},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseService(tt.svc)
			if tt.wantErr == nil && err != nil {
				t.Fatal(err)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, ErrBadAnnotation) {
					t.Fatalf("err = %v, want ErrBadAnnotation", err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not mention %q: %v", w, err)
					}
				}
			}
			want := tt.want
			want.Namespace, want.Labels, want.Selector = "ns", tt.svc.Labels, tt.svc.Spec.Selector
			if want.Ports == nil {
				want.Ports = []Port{{"TCP", 80}, {"UDP", 53}, {"TCP", 8080}}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ParseService =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// FuzzParseService checks that no input panics and that a successful parse (and
// the partial Request of a failed one) is consistent: at most one IP per family,
// each of a requested family, one or two distinct families.
func FuzzParseService(f *testing.F) {
	f.Add("public", "192.0.2.1,2001:db8::1", "key", "", "IPv4", "IPv6", "RequireDualStack", "Local")
	f.Add("", "", "", "10.0.0.1", "", "", "", "")
	f.Add("Bad Pool", "x,y,,", "\x00", "fe80::1%eth0", "IPv6", "IPv6", "PreferDualStack", "Cluster")
	f.Add("p", "::ffff:10.0.0.1", "", "", "IPv4", "", "SingleStack", "")
	f.Add("p", " , ", "k", "", "", "IPv4", "Weird", "OnlyLocal")
	f.Fuzz(func(t *testing.T, pool, ips, share, lbIP, fam0, fam1, pol, etp string) {
		ann := map[string]string{}
		for k, v := range map[string]string{AnnotationAddressPool: pool, AnnotationLoadBalancerIPs: ips, AnnotationAllowSharedIP: share} {
			if v != "" {
				ann[k] = v
			}
		}
		svc := svcWith(ann, func(s *v1.ServiceSpec) {
			s.LoadBalancerIP = lbIP
			for _, f := range []string{fam0, fam1} {
				if f != "" {
					s.IPFamilies = append(s.IPFamilies, v1.IPFamily(f))
				}
			}
			if pol != "" {
				s.IPFamilyPolicy = policy(v1.IPFamilyPolicy(pol))
			}
			s.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicy(etp)
		})
		req, err := ParseService(svc)
		if err != nil && !errors.Is(err, ErrBadAnnotation) {
			t.Fatalf("error does not wrap ErrBadAnnotation: %v", err)
		}
		if n := len(req.Families); n < 1 || n > 2 || (n == 2 && req.Families[0] == req.Families[1]) {
			t.Fatalf("families %v", req.Families)
		}
		if len(req.IPs) > 2 || (len(req.IPs) == 2 && req.IPs[0].Is4() == req.IPs[1].Is4()) {
			t.Fatalf("IPs %v", req.IPs)
		}
		for _, ip := range req.IPs {
			if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() || !containsFamily(req.Families, familyOf(ip)) {
				t.Fatalf("IP %v with families %v", ip, req.Families)
			}
		}
		// Whatever was parsed is usable by the allocator without a panic.
		a, aerr := New(nil)
		if aerr != nil {
			t.Fatal(aerr)
		}
		_, _ = a.Assign("ns/web", req, []netip.Addr{netip.MustParseAddr("192.0.2.1")})
		_ = a.Prime("ns/x", req, req.IPs)
	})
}
