package inventory

import (
	"errors"
	"os"
	"strings"
	"testing"
)

const validDoc = `
apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
hosts:
- name: node-a
  hostnames: [Node-A.dc1.example]
  systemUUID: 4C4C4544-0042-3510-8052-B4C04F4E4D32
  addresses:
  - {type: InternalIP, address: 10.0.0.11}
  - {type: InternalIP, address: "fd00::11"}
  - {type: ExternalIP, address: 192.0.2.11}
  - {type: Hostname, address: node-a}
  instanceType: r650
  zone: rack1
  region: dc1
  rack: r1
  labels: {pool: gpu, example.com/owner: team-a}
  bmc: {protocol: redfish, address: "https://10.1.0.11", credentialsFile: /etc/baremetal-ccm/bmc/a}
- name: node-b
  state: maintenance
  addresses: [{type: InternalIP, address: 10.0.0.12}]
  bmc: {protocol: ipmi, address: 10.1.0.12, port: 623, credentialsFile: /etc/baremetal-ccm/bmc/b}
- name: node-c
  state: decommissioned
`

func TestParseValid(t *testing.T) {
	v, err := Parse([]byte(validDoc))
	if err != nil {
		t.Fatal(err)
	}
	if v.Len() != 3 {
		t.Fatalf("Len = %d", v.Len())
	}
	a, _ := v.Host("node-a")
	if a.SystemUUID != "4c4c4544-0042-3510-8052-b4c04f4e4d32" {
		t.Errorf("systemUUID not normalized: %q", a.SystemUUID)
	}
	if a.Hostnames[0] != "node-a.dc1.example" {
		t.Errorf("hostname not lower-cased: %q", a.Hostnames[0])
	}
	if a.State != StateActive {
		t.Errorf("default state = %q", a.State)
	}
	if c, _ := v.Host("node-c"); !c.Gone() {
		t.Error("decommissioned host is not Gone")
	}
	if !strings.HasPrefix(v.Digest(), "sha256:") || v.Digest() != Digest([]byte(validDoc)) {
		t.Errorf("digest = %q", v.Digest())
	}
}

func TestParseJSON(t *testing.T) {
	v, err := Parse([]byte(`{"apiVersion":"baremetal-ccm.io/v1alpha1","kind":"Inventory","hosts":[{"name":"h1"}]}`))
	if err != nil || v.Len() != 1 {
		t.Fatalf("Parse(JSON) = %v, %v", v, err)
	}
}

// TestParseInvalid checks that each kind of bad input is reported with its field path,
// all at once, wrapping ErrInvalid.
func TestParseInvalid(t *testing.T) {
	doc := `
apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
hosts:
- name: dup
  systemUUID: 4c4c4544-0042-3510-8052-b4c04f4e4d32
  addresses: [{type: InternalIP, address: 10.0.0.1}]
- name: dup
  systemUUID: 4C4C4544-0042-3510-8052-B4C04F4E4D32
  addresses: [{type: InternalIP, address: 10.0.0.1}]
- name: Bad_Name
  systemUUID: not-a-uuid
  hostnames: [dup]
  addresses:
  - {type: InternalIP, address: 10.0.0.300}
  - {type: Public, address: 10.0.0.2}
  zone: "rack 1"
  labels: {node-role.kubernetes.io/worker: "", "bad key!": x, ok: "bad value!"}
  state: retired
- name: bmc
  bmc: {protocol: snmp, address: "https://admin:hunter2@10.1.0.1", port: 70000}
- name: ipmi-tls
  bmc: {protocol: ipmi, address: "https://10.1.0.2", credentialsFile: creds, insecureSkipVerify: true}
`
	_, err := Parse([]byte(doc))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	for _, want := range []string{
		`hosts[1].name: Duplicate value: "name \"dup\" is already used at hosts[0].name"`,
		`hosts[1].systemUUID: Duplicate value`,
		`hosts[1].addresses[0].address: Duplicate value: "address 10.0.0.1 is already used at hosts[0].addresses[0].address"`,
		`hosts[2].name: Invalid value: "Bad_Name"`,
		`hosts[2].systemUUID: Invalid value: "not-a-uuid"`,
		`hosts[2].hostnames[0]: Duplicate value`,
		`hosts[2].addresses[0].address: Invalid value: "10.0.0.300"`,
		`hosts[2].addresses[1].type: Unsupported value: "Public"`,
		`hosts[2].zone: Invalid value: "rack 1"`,
		`hosts[2].labels[node-role.kubernetes.io/worker]`, "reserved",
		`hosts[2].labels[bad key!]`,
		`hosts[2].labels[ok]: Invalid value: "bad value!"`,
		`hosts[2].state: Unsupported value: "retired"`,
		`hosts[3].bmc.protocol: Unsupported value: "snmp"`,
		`hosts[3].bmc.address: Invalid value: "(redacted)"`,
		`hosts[3].bmc.port: Invalid value: 70000`,
		`hosts[3].bmc.credentialsFile: Required value`,
		`hosts[4].bmc.address: Invalid value: "https://10.1.0.2": an IPMI BMC address is a host name or IP`,
		`hosts[4].bmc.credentialsFile: Invalid value: "creds": must be an absolute path`,
		`hosts[4].bmc.insecureSkipVerify`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q", want)
		}
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Error("error leaks a BMC password")
	}
	if t.Failed() {
		t.Logf("full error:\n%v", err)
	}
}

func TestParseRejectsUnknownFieldsAndGarbage(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":  "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: a\n  bmc: {protocol: ipmi, address: x, credentialsFile: /c, pasword: x}\n",
		"garbage":        "\x00\x01 this is : not : yaml [",
		"empty":          "",
		"wrong kind":     "apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\nhosts: []\n",
		"hosts not list": "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts: {a: b}\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(doc))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if name == "unknown field" && !strings.Contains(err.Error(), `unknown field "hosts[0].bmc.pasword"`) {
				t.Errorf("unknown field not named with its path: %v", err)
			}
		})
	}
}

func TestNodeLabelKey(t *testing.T) {
	for in, want := range map[string]string{"pool": "baremetal-ccm.io/pool", "example.com/owner": "example.com/owner"} {
		if got := NodeLabelKey(in); got != want {
			t.Errorf("NodeLabelKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(validDoc))
	f.Add([]byte(`{"apiVersion":"baremetal-ccm.io/v1alpha1","kind":"Inventory","hosts":[{"name":"h"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data)
		if err == nil && v == nil {
			t.Fatal("nil view without error")
		}
	})
}

// TestExampleInventory keeps the shipped example valid.
func TestExampleInventory(t *testing.T) {
	data, err := os.ReadFile("../../packaging/examples/inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(data); err != nil {
		t.Fatal(err)
	}
}
