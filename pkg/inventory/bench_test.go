package inventory

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// bigDoc is a realistic inventory of n hosts: names, hostnames, UUIDs, v4+v6
// addresses, metadata, labels and a BMC each.
func bigDoc(n int) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: baremetal-ccm.io/v1alpha1\nkind: Inventory\nhosts:\n")
	for i := range n {
		fmt.Fprintf(&b, `- name: host-%05d
  hostnames: [host-%05d.dc1.example]
  systemUUID: 4c4c4544-0042-3510-8052-%012x
  addresses:
  - {type: InternalIP, address: 10.%d.%d.%d}
  - {type: InternalIP, address: "fd00::%x"}
  - {type: Hostname, address: host-%05d}
  instanceType: r650
  region: dc1
  zone: dc1-row%d
  rack: r%d
  labels: {pool: general, generation: "15"}
  bmc: {protocol: redfish, address: "https://10.200.%d.%d", credentialsFile: /etc/baremetal-ccm/bmc/host-%05d}
`, i, i, i, i/65536, (i/256)%256, i%256, i+1, i, i%10, i%100, (i/256)%256, i%256, i)
	}
	return []byte(b.String())
}

// BenchmarkParse10k: decoding, validating and indexing a 10,000-host inventory (the
// cost of a reload whose content changed).
func BenchmarkParse10k(b *testing.B) {
	data := bigDoc(10000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse10kJSON: the same inventory as JSON, as an HTTP API would serve it.
func BenchmarkParse10kJSON(b *testing.B) {
	js, err := yaml.YAMLToJSON(bigDoc(10000))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(js)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(js); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkViewMemory10k reports the heap a 10,000-host View keeps live.
func BenchmarkViewMemory10k(b *testing.B) {
	data := bigDoc(10000)
	var views []*View
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v, err := Parse(data)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		views = append(views, v)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB-live")
	}
	runtime.KeepAlive(views)
}

// BenchmarkStoreReload10k: a full Store reload of a 10,000-host document that changed
// (fetch from memory, parse, guard evaluation against the previous view, install).
func BenchmarkStoreReload10k(b *testing.B) {
	docs := [][]byte{bigDoc(10000), append(bigDoc(10000), []byte("# changed\n")...)}
	src := &fakeSource{}
	s := NewStore(src, Guard{MaxHosts: 10, MaxPercent: 25}, nil, nil)
	ctx := klog.NewContext(context.Background(), klog.Background().V(10))
	i := 0
	for b.Loop() {
		src.set(string(docs[i%2]), nil)
		i++
		if err := s.Reload(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreReloadUnchanged10k: the steady-state cost of a poll when nothing changed.
func BenchmarkStoreReloadUnchanged10k(b *testing.B) {
	src := &fakeSource{}
	src.set(string(bigDoc(10000)), nil)
	s := NewStore(src, Guard{MaxHosts: 10, MaxPercent: 25}, nil, nil)
	ctx := context.Background()
	_ = s.Reload(ctx)
	for b.Loop() {
		_ = s.Reload(ctx)
	}
}

// BenchmarkMatch: one Node-to-host lookup in a 10,000-host view, per criterion.
func BenchmarkMatch(b *testing.B) {
	v, err := Parse(bigDoc(10000))
	if err != nil {
		b.Fatal(err)
	}
	cases := map[string][]nodeOpt{
		"providerID": {withProviderID("baremetal://host-04242")},
		"systemUUID": {withUUID(fmt.Sprintf("4c4c4544-0042-3510-8052-%012x", 4242))},
		"name":       nil,
		"internalIP": {withInternalIP("10.0.16.146")},
		"all":        {withUUID(fmt.Sprintf("4c4c4544-0042-3510-8052-%012x", 4242)), withInternalIP("10.0.16.146")},
	}
	for name, opts := range cases {
		nodeName := "unrelated"
		if name == "name" || name == "all" {
			nodeName = "host-04242"
		}
		n := node(nodeName, opts...)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h, _, err := v.Match(n)
				if err != nil || h.Name != "host-04242" {
					b.Fatalf("Match = %v, %v", h, err)
				}
			}
		})
	}
}
