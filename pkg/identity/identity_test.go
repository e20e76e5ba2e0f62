package identity

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

func TestCheck(t *testing.T) {
	const (
		a       = "4c4c4544-0037-4a10-8052-b5c04f4e4d01"
		aSMBIOS = "44454c4c-3700-104a-8052-b5c04f4e4d01"
		b       = "4c4c4544-0037-4a10-8052-b5c04f4e4d02"
	)
	node := func(uuid string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{SystemUUID: uuid}}}
	}
	for _, c := range []struct {
		name                string
		nodeUUID, host, bmc string
		wantNamed           []string // nil: no error
	}{
		{"all agree", a, a, a, nil},
		{"byte orders differ, same machine", a, a, aSMBIOS, nil},
		// Issue 26: the inventory in SMBIOS order, the Node in RFC order, the IPMI
		// GUID fully reversed (from the SMBIOS bytes), and a BMC without hyphens.
		{"three byte orders, one machine", a, aSMBIOS, "014d4e4f-c0b5-5280-4a10-00374c4c4544", nil},
		{"BMC UUID without hyphens", a, a, "4C4C454400374A108052B5C04F4E4D01", nil},
		{"BMC UUID without hyphens, another machine", a, a, "4C4C454400374A108052B5C04F4E4D02", []string{"h1", "bmc.address"}},
		{"nothing known", "", "", "", nil},
		{"only the BMC", "", "", a, nil},
		{"node contradicts host", b, a, "", []string{a, b, "n1", "h1"}},
		{"BMC contradicts host", a, a, b, []string{a, b, "bmc.address"}},
		{"BMC contradicts node, host has none", a, "", b, []string{a, b, "n1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Check(node(c.nodeUUID), &inventory.Host{Name: "h1", SystemUUID: c.host}, c.bmc)
			if c.wantNamed == nil {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrMismatch) {
				t.Fatalf("Check = %v, want ErrMismatch", err)
			}
			for _, s := range c.wantNamed {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %s", err, s)
				}
			}
		})
	}
}

// TestMachineIDIsNoSystemUUID: on a machine without an SMBIOS UUID the kubelet reports
// /etc/machine-id as the systemUUID (seen in the real-kubelet e2e lab). It names an
// installation, not the hardware: no mismatch with the inventory's or the BMC's UUID,
// and the Node is matched by its other criteria.
func TestMachineIDIsNoSystemUUID(t *testing.T) {
	const machineID = "3d1219c7c4c5404aaa1f6d2a48adfda4"
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kl-cp-1"}}
	node.Status.NodeInfo.SystemUUID, node.Status.NodeInfo.MachineID = machineID, machineID
	host := &inventory.Host{Name: "kl-cp-1", SystemUUID: "8249eea1-e2f5-52c8-708f-54e79f68ed1f"}
	if err := Check(node, host, "8249eea1-e2f5-52c8-708f-54e79f68ed1f"); err != nil {
		t.Errorf("the machine ID taken for a system UUID: %v", err)
	}
	// A hyphen-less systemUUID that is not the machine ID is a UUID, and it contradicts.
	node.Status.NodeInfo.MachineID = "0123456789abcdef0123456789abcdef"
	if err := Check(node, host, ""); !errors.Is(err, ErrMismatch) {
		t.Errorf("a contradicting hyphen-less UUID: %v, want ErrMismatch", err)
	}
	v, err := inventory.Parse([]byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: kl-cp-1\n  systemUUID: 8249eea1-e2f5-52c8-708f-54e79f68ed1f\n"))
	if err != nil {
		t.Fatal(err)
	}
	node.Status.NodeInfo.MachineID = machineID
	if h, by, err := v.Match(node); err != nil || h.Name != "kl-cp-1" || by != "name" {
		t.Errorf("Match = %v, %q, %v; want kl-cp-1 by name", h, by, err)
	}
}
