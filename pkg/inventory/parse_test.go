package inventory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
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
- name: swapped
  systemUUID: 44454c4c-4200-1035-8052-b4c04f4e4d32
- name: placeholder
  systemUUID: 03000200-0400-0500-0006-000700080009
- name: rid-a
  bgpRouterID: 10.9.0.1
- name: rid-b
  bgpRouterID: 10.9.0.1
- name: rid-c
  bgpRouterID: "fd00::1"
- name: rid-d
  bgpRouterID: 10.0.0.1
- name: rid-e
  bgpRouterID: 10.9.0.5
  addresses: [{type: InternalIP, address: 10.9.0.5}]
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
		`hosts[5].systemUUID: Duplicate value: "systemUUID \"44454c4c-4200-1035-8052-b4c04f4e4d32\" is already used at hosts[0].systemUUID (in another byte order)"`,
		`hosts[6].systemUUID: Invalid value: "03000200-0400-0500-0006-000700080009": is a placeholder`,
		`hosts[8].bgpRouterID: Duplicate value: "bgpRouterID \"10.9.0.1\" is already used at hosts[7].bgpRouterID"`,
		`hosts[9].bgpRouterID: Invalid value: "fd00::1": must be an IPv4 address`,
		`hosts[10].bgpRouterID: Duplicate value: "bgpRouterID 10.0.0.1 is the address of another host at hosts[0].addresses[0].address`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q", want)
		}
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Error("error leaks a BMC password")
	}
	if strings.Contains(err.Error(), "hosts[11]") {
		t.Error("a host's own InternalIP as its router ID is reported")
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

// FuzzParse: Parse and ParseWith never panic; what ParseWith accepts under the
// default CloudConfig's rules, Parse accepts too, with the digest of the raw bytes,
// and every credentials file in it lies under the credentials directory.
func FuzzParse(f *testing.F) {
	f.Add([]byte(validDoc))
	f.Add([]byte(`{"apiVersion":"baremetal-ccm.io/v1alpha1","kind":"Inventory","hosts":[{"name":"h"}]}`))
	f.Add([]byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: h\n  bmc: {protocol: redfish, address: \"https://10.0.0.1\", credentialsFile: /etc/baremetal-ccm/bmc/../h, insecureSkipVerify: true}\n"))
	if data, err := os.ReadFile("../../packaging/examples/inventory.yaml"); err == nil {
		f.Add(data)
	}
	opts := ParseOptions{CredentialsDir: config.DefaultCredentialsDir}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data)
		if err == nil && v == nil {
			t.Fatal("nil view without error")
		}
		w, err := ParseWith(data, opts)
		if err != nil {
			return
		}
		if v == nil || v.Digest() != Digest(data) || w.Digest() != Digest(data) {
			t.Fatalf("ParseWith accepted what Parse refused, or digests differ")
		}
		w.Hosts(func(h *Host) {
			if h.BMC != nil && h.BMC.CredentialsFile != "" && !strings.HasPrefix(filepath.Clean(h.BMC.CredentialsFile), opts.CredentialsDir+"/") {
				t.Fatalf("credentialsFile %q accepted outside %s", h.BMC.CredentialsFile, opts.CredentialsDir)
			}
		})
	})
}

// TestExampleInventory keeps the shipped example valid under the shipped CloudConfig's
// rules (and the defaults).
func TestExampleInventory(t *testing.T) {
	data, err := os.ReadFile("../../packaging/examples/inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load("../../packaging/examples/cloud-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []ParseOptions{ParseOptionsFor(cfg), ParseOptionsFor(defaultCloudConfig(t))} {
		v, err := ParseWith(data, opts)
		if err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
		if r, ok := v.Rack("r1"); !ok || len(r.BGPPeers) != 1 {
			t.Errorf("rack r1 = %+v", r)
		}
	}
}

// defaultCloudConfig is a minimal CloudConfig with every default.
func defaultCloudConfig(t *testing.T) *config.CloudConfig {
	t.Helper()
	cfg, err := config.Parse([]byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory:\n  file: {path: /etc/baremetal-ccm/inventory.yaml}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestParseOptionsFor(t *testing.T) {
	cfg := defaultCloudConfig(t)
	if o := ParseOptionsFor(cfg); o.CredentialsDir != config.DefaultCredentialsDir || o.AllowInsecureSkipVerify {
		t.Fatalf("defaults: %+v", o)
	}
	cfg.Inventory.CredentialsDir, cfg.Inventory.AllowInsecureSkipVerify = "/srv/creds", true
	if o := ParseOptionsFor(cfg); o != (ParseOptions{CredentialsDir: "/srv/creds", AllowInsecureSkipVerify: true}) {
		t.Fatalf("explicit: %+v", o)
	}
}

// TestParseWithRules: the inventory cannot point credentials files outside the
// CloudConfig's credentialsDir, nor skip TLS verification unless the CloudConfig
// allows it.
func TestParseWithRules(t *testing.T) {
	const head = "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\n"
	host := func(bmc string) string {
		return head + "hosts:\n- name: h1\n  bmc: {protocol: redfish, address: \"https://10.0.0.1\", " + bmc + "}\n"
	}
	rack := func(pw string) string {
		return head + "hosts: []\nracks:\n- name: r1\n  bgpPeers:\n  - {address: 10.0.0.1, asn: 65000, passwordFile: \"" + pw + "\"}\n"
	}
	const dir = "/etc/baremetal-ccm/bmc"
	opts := ParseOptions{CredentialsDir: dir}
	fix := "move the file under " + dir + " or set inventory.credentialsDir"
	tests := []struct {
		name, doc string
		opts      ParseOptions
		wantErr   []string // empty: accepted
	}{
		{"under the directory", host("credentialsFile: " + dir + "/h1"), opts, nil},
		{"in a subdirectory", host("credentialsFile: " + dir + "/rack1/h1"), opts, nil},
		{"dot segments that stay inside", host("credentialsFile: " + dir + "/rack1/./../h1"), opts, nil},
		{"a name starting with ..", host("credentialsFile: " + dir + "/..h1"), opts, nil},
		{"the directory with a trailing slash", host("credentialsFile: /x/h1"), ParseOptions{CredentialsDir: "/x/"}, nil},
		{"under another directory", host("credentialsFile: /etc/kubernetes/admin.conf"), opts,
			[]string{`hosts[0].bmc.credentialsFile: Invalid value: "/etc/kubernetes/admin.conf": must be a file under inventory.credentialsDir ` + dir, fix}},
		{"escaping with ..", host("credentialsFile: " + dir + "/../../shadow"), opts,
			[]string{`hosts[0].bmc.credentialsFile: Invalid value: "` + dir + `/../../shadow"`, "resolves to /etc/shadow", fix}},
		{"escaping with .. to the parent", host("credentialsFile: " + dir + "/.."), opts, []string{"hosts[0].bmc.credentialsFile", "resolves to /etc/baremetal-ccm"}},
		{"a sibling with the same prefix", host("credentialsFile: " + dir + "-old/h1"), opts, []string{"hosts[0].bmc.credentialsFile", fix}},
		{"the directory itself", host("credentialsFile: " + dir), opts, []string{"hosts[0].bmc.credentialsFile"}},
		{"the directory itself with a slash", host("credentialsFile: " + dir + "/"), opts, []string{"hosts[0].bmc.credentialsFile"}},
		{"a relative path is reported once, as relative", host("credentialsFile: etc/baremetal-ccm/credentials/h1"), opts,
			[]string{`hosts[0].bmc.credentialsFile: Invalid value: "etc/baremetal-ccm/credentials/h1": must be an absolute path`}},
		{"no restriction without a directory", host("credentialsFile: /anywhere/h1"), ParseOptions{}, nil},
		{"a Secret is not a path", host("credentialsSecret: {namespace: baremetal-ccm, name: h1}"), opts, nil},
		{"rack password under another directory", rack("/root/pw"), opts, []string{`racks[0].bgpPeers[0].passwordFile: Invalid value: "/root/pw"`, fix}},
		{"rack password escaping with ..", rack(dir + "/../bgp-password"), opts, []string{"racks[0].bgpPeers[0].passwordFile", "resolves to /etc/baremetal-ccm/bgp-password"}},
		{"rack password under the directory", rack(dir + "/r1-pw"), opts, nil},
		{"insecureSkipVerify not allowed", host("credentialsFile: " + dir + "/h1, insecureSkipVerify: true"), opts,
			[]string{"hosts[0].bmc.insecureSkipVerify: Forbidden", "set inventory.allowInsecureSkipVerify: true"}},
		{"insecureSkipVerify not allowed without a directory either", host("credentialsFile: /c, insecureSkipVerify: true"), ParseOptions{AllowInsecureSkipVerify: false},
			[]string{"hosts[0].bmc.insecureSkipVerify: Forbidden"}},
		{"insecureSkipVerify allowed", host("credentialsFile: " + dir + "/h1, insecureSkipVerify: true"),
			ParseOptions{CredentialsDir: dir, AllowInsecureSkipVerify: true}, nil},
		{"every problem at once", head + "hosts:\n- name: a\n  bmc: {protocol: redfish, address: \"https://10.0.0.1\", credentialsFile: /a, insecureSkipVerify: true}\n" +
			"- name: b\n  bmc: {protocol: ipmi, address: 10.0.0.2, credentialsFile: /b}\n" +
			"racks:\n- name: r1\n  bgpPeers: [{address: 10.0.0.1, asn: 65000, passwordFile: /c}]\n", opts,
			[]string{"hosts[0].bmc.credentialsFile", "hosts[0].bmc.insecureSkipVerify", "hosts[1].bmc.credentialsFile", "racks[0].bgpPeers[0].passwordFile"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := ParseWith([]byte(tt.doc), tt.opts)
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("ParseWith = %v", err)
				}
				if v.Digest() != Digest([]byte(tt.doc)) {
					t.Errorf("digest %s is not that of the raw document", v.Digest())
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseWith = %v, want ErrInvalid", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if n := strings.Count(err.Error(), "credentialsFile"); tt.name == "a relative path is reported once, as relative" && n != 1 {
				t.Errorf("credentialsFile reported %d times: %v", n, err)
			}
		})
	}
}

// TestParseZeroOptions: Parse is ParseWith(data, ParseOptions{}): no restriction on
// where credentials files lie, but TLS verification may not be skipped.
func TestParseZeroOptions(t *testing.T) {
	const doc = "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: h1\n  bmc: {protocol: redfish, address: \"https://10.0.0.1\", credentialsFile: /anywhere/h1%s}\n"
	plain, insecure := []byte(fmt.Sprintf(doc, "")), []byte(fmt.Sprintf(doc, ", insecureSkipVerify: true"))
	if _, err := Parse(plain); err != nil {
		t.Fatalf("Parse = %v", err)
	}
	if _, err := Parse(insecure); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "hosts[0].bmc.insecureSkipVerify: Forbidden") {
		t.Fatalf("Parse(insecureSkipVerify) = %v", err)
	}
	if _, err := ParseWith(plain, ParseOptionsFor(defaultCloudConfig(t))); err == nil {
		t.Fatal("ParseWith with the default CloudConfig accepted /anywhere/h1")
	}
}

// TestParseBMCSystem: a Redfish host may name its ComputerSystem by Id or path.
func TestParseBMCSystem(t *testing.T) {
	doc := func(system string) string {
		return "apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: h\n  bmc: {protocol: redfish, address: 10.0.0.1, credentialsFile: /c, system: " + system + "}\n"
	}
	for _, ok := range []string{"Blade3", "/redfish/v1/Systems/Blade3", "437XR1138R2", "system-1.a"} {
		if _, err := Parse([]byte(doc(ok))); err != nil {
			t.Errorf("system %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"/redfish/v1/Chassis/1", `"a b"`, "/redfish/v1/Systems/", "/redfish/v1/Systems/a/b"} {
		_, err := Parse([]byte(doc(bad)))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "hosts[0].bmc.system") {
			t.Errorf("system %s: %v, want an error naming hosts[0].bmc.system", bad, err)
		}
	}
	_, err := Parse([]byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: h\n  bmc: {protocol: ipmi, address: 10.0.0.1, credentialsFile: /c, system: x}\n"))
	if err == nil || !strings.Contains(err.Error(), "applies to redfish only") {
		t.Errorf("ipmi with system: %v", err)
	}
}

// TestParseBMCScheme: https:// is the default; http:// needs the host's plainHTTP and
// the CloudConfig's allowPlainHTTP; other schemes are refused.
func TestParseBMCScheme(t *testing.T) {
	doc := func(addr, extra string) []byte {
		return []byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n- name: h\n  bmc: {protocol: redfish, address: \"" + addr + "\", credentialsFile: /c" + extra + "}\n")
	}
	allow := ParseOptions{AllowPlainHTTP: true}
	for _, tc := range []struct {
		addr, extra string
		opts        ParseOptions
		wantErr     string // "" : valid
	}{
		{"https://10.0.0.1:8443", "", ParseOptions{}, ""},
		{"10.0.0.1", "", ParseOptions{}, ""},
		{"http://10.0.0.1", "", allow, "hosts[0].bmc.address: Invalid value: \"http://10.0.0.1\": http:// sends the BMC password in clear text"},
		{"http://10.0.0.1", ", plainHTTP: true", ParseOptions{}, "hosts[0].bmc.plainHTTP: Forbidden: the CloudConfig does not allow plain-HTTP BMCs"},
		{"http://10.0.0.1", ", plainHTTP: true", allow, ""},
		{"HTTP://10.0.0.1", ", plainHTTP: true", allow, ""},
		{"ftp://10.0.0.1", "", allow, "hosts[0].bmc.address: Unsupported value: \"ftp://\""},
		{"https://10.0.0.1", ", plainHTTP: true", allow, "hosts[0].bmc.plainHTTP: Invalid value: true: applies to an http:// address only"},
	} {
		_, err := ParseWith(doc(tc.addr, tc.extra), tc.opts)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s%s: %v", tc.addr, tc.extra, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s%s: %v, want %q", tc.addr, tc.extra, err, tc.wantErr)
		}
	}
}
