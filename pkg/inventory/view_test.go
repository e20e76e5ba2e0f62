package inventory

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func mustParse(t testing.TB, doc string) *View {
	t.Helper()
	v, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type nodeOpt func(*v1.Node)

func node(name string, opts ...nodeOpt) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func withProviderID(id string) nodeOpt { return func(n *v1.Node) { n.Spec.ProviderID = id } }
func withUUID(u string) nodeOpt        { return func(n *v1.Node) { n.Status.NodeInfo.SystemUUID = u } }
func withInternalIP(ip string) nodeOpt {
	return func(n *v1.Node) {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
}
func withNodeIP(ip string) nodeOpt {
	return func(n *v1.Node) {
		n.Annotations = map[string]string{"alpha.kubernetes.io/provided-node-ip": ip}
	}
}

func TestMatch(t *testing.T) {
	v := mustParse(t, validDoc)
	tests := []struct {
		name    string
		node    *v1.Node
		want    string
		wantBy  string
		wantErr error
	}{
		{"providerID", node("whatever", withProviderID("baremetal://node-b")), "node-b", "providerID", nil},
		{"providerID wins over a conflicting name", node("node-a", withProviderID("baremetal://node-b")), "node-b", "providerID", nil},
		{"providerID of a vanished host", node("node-a", withProviderID("baremetal://gone")), "", "", ErrHostGone},
		{"foreign providerID", node("node-a", withProviderID("aws:///i-123")), "", "", ErrForeignProviderID},
		{"systemUUID, any case", node("x", withUUID("4C4C4544-0042-3510-8052-B4C04F4E4D32")), "node-a", "systemUUID", nil},
		{"name", node("node-b"), "node-b", "name", nil},
		{"hostname alias", node("node-a.dc1.example"), "node-a", "name", nil},
		{"InternalIP", node("x", withInternalIP("10.0.0.12")), "node-b", "InternalIP 10.0.0.12", nil},
		{"kubelet node-ip", node("x", withNodeIP("fd00::11")), "node-a", "InternalIP fd00::11", nil},
		{"all criteria agree", node("node-a", withUUID("4c4c4544-0042-3510-8052-b4c04f4e4d32"), withInternalIP("10.0.0.11")), "node-a", "systemUUID+name+InternalIP 10.0.0.11", nil},
		{"uuid and name disagree", node("node-b", withUUID("4c4c4544-0042-3510-8052-b4c04f4e4d32")), "", "", ErrAmbiguous},
		{"two InternalIPs of two hosts", node("x", withInternalIP("10.0.0.11"), withInternalIP("10.0.0.12")), "", "", ErrAmbiguous},
		{"no match", node("stranger", withInternalIP("10.9.9.9")), "", "", ErrNoMatch},
		{"a host's ExternalIP is not an InternalIP match", node("x", withInternalIP("192.0.2.11")), "", "", ErrNoMatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, by, err := v.Match(tt.node)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name != tt.want || by != tt.wantBy {
				t.Errorf("Match = %s by %q, want %s by %q", h.Name, by, tt.want, tt.wantBy)
			}
		})
	}
}
