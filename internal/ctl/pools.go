package ctl

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	metallbv1beta1 "go.universe.tf/metallb/api/v1beta1"
	metallbv1beta2 "go.universe.tf/metallb/api/v1beta2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/peers"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/pools"
)

// poolsConvertCmd prints the CloudConfig's loadBalancer.pools as IPPool objects.
func poolsConvertCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pools convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("cloud-config", "/etc/baremetal-ccm/cloud-config.yaml", "the CloudConfig whose loadBalancer.pools to convert")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 1
	}
	if cfg.LoadBalancer == nil || len(cfg.LoadBalancer.Pools) == 0 {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %s has no loadBalancer.pools to convert\n", *path)
		return 1
	}
	var objs []v1alpha1.IPPool
	for i := range cfg.LoadBalancer.Pools {
		p := &cfg.LoadBalancer.Pools[i]
		objs = append(objs, v1alpha1.IPPool{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "IPPool"},
			ObjectMeta: metav1.ObjectMeta{Name: p.Name}, Spec: pools.FromConfig(p)})
	}
	fmt.Fprintf(stdout, "# The loadBalancer.pools of %s as IPPools. Each is accepted as the same pool as the\n"+
		"# CloudConfig's: apply them, then remove the pools from each replica's CloudConfig, one replica at a time.\n", *path)
	return writePools(stdout, stderr, objs)
}

var (
	metallbPools   = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
	metallbAdvs    = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "bgpadvertisements"}
	metallbComms   = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "communities"}
	metallbPeersV2 = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta2", Resource: "bgppeers"}
	metallbBFD     = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "bfdprofiles"}
)

// poolsImportMetalLBCmd prints MetalLB's IPAddressPools, BGPPeers (with their
// BFDProfiles) and BGPAdvertisements as the project's objects.
func poolsImportMetalLBCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pools import-metallb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var files stringList
	fs.Var(&files, "f", "a YAML file of MetalLB objects (repeatable); without -f they are read from the cluster")
	var k kubeFlags
	k.add(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var m pools.MetalLB
	var err error
	if len(files) > 0 {
		for _, f := range files {
			if err = decodeMetalLBFile(f, &m); err != nil {
				break
			}
		}
	} else {
		err = readMetalLBCluster(&k, &m)
	}
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 1
	}
	if len(m.Pools)+len(m.Peers) == 0 {
		fmt.Fprintln(stderr, "baremetal-ccmctl: no IPAddressPool or BGPPeer to import")
		return 1
	}
	imp := pools.FromMetalLB(m)
	for _, w := range imp.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	fmt.Fprintln(stdout, "# MetalLB's IPAddressPools, BGPPeers and BGPAdvertisements as IPPools, BGPPeers and")
	fmt.Fprintln(stdout, "# BGPAdvertisements (kubectl apply -f -): the peers with their BFDProfiles' timers, the")
	fmt.Fprintln(stdout, "# advertisements with their community aliases resolved.")
	if len(imp.Peers) > 0 {
		fmt.Fprintf(stdout, "# MetalLB's myASN, for the CloudConfig: bgp: {localASN: %d}\n", imp.LocalASN)
	}
	objs := make([]any, 0, len(imp.Pools)+len(imp.Peers))
	for i := range imp.Pools {
		objs = append(objs, &imp.Pools[i])
	}
	for i := range imp.Peers {
		objs = append(objs, &imp.Peers[i])
	}
	for i := range imp.Advertisements {
		objs = append(objs, &imp.Advertisements[i])
	}
	return writeObjects(stdout, stderr, objs)
}

func writePools(stdout, stderr io.Writer, objs []v1alpha1.IPPool) int {
	out := make([]any, len(objs))
	for i := range objs {
		out[i] = &objs[i]
	}
	return writeObjects(stdout, stderr, out)
}

// writeObjects prints objects as a YAML stream for kubectl apply, without the empty
// fields a new object has.
func writeObjects(stdout, stderr io.Writer, objs []any) int {
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
			return 1
		}
		b = bytes.ReplaceAll(b, []byte("  creationTimestamp: null\n"), nil)
		b = bytes.ReplaceAll(b, []byte("status: {}\n"), nil)
		fmt.Fprintf(stdout, "---\n%s", b)
	}
	return 0
}

// peersConvertCmd prints the CloudConfig's bgp.peers as BGPPeer objects.
func peersConvertCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peers convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("cloud-config", "/etc/baremetal-ccm/cloud-config.yaml", "the CloudConfig whose bgp.peers to convert")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 1
	}
	if cfg.BGP == nil || len(cfg.BGP.Peers) == 0 {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %s has no bgp.peers to convert\n", *path)
		return 1
	}
	var objs []any
	for i := range cfg.BGP.Peers {
		p := &cfg.BGP.Peers[i]
		objs = append(objs, &v1alpha1.BGPPeer{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BGPPeer"},
			ObjectMeta: metav1.ObjectMeta{Name: peers.ObjectName(p.Address)}, Spec: peers.FromConfig(p)})
	}
	fmt.Fprintf(stdout, "# The bgp.peers of %s as BGPPeers. Each is accepted as the same peer as the\n"+
		"# CloudConfig's: apply them, then remove the peers from each replica's CloudConfig, one replica at a time.\n", *path)
	return writeObjects(stdout, stderr, objs)
}

// decodeMetalLBFile adds the MetalLB objects of a YAML file to m; other kinds are
// an error (a file of something else is a mistake).
func decodeMetalLBFile(path string, m *pools.MetalLB) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for i := 1; ; i++ {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if len(raw) == 0 {
			continue
		}
		if err := addMetalLB(raw, m); err != nil {
			return fmt.Errorf("%s: document %d: %w", path, i, err)
		}
	}
}

// addMetalLB adds one object (a decoded document or a listed item) to m.
func addMetalLB(raw map[string]any, m *pools.MetalLB) error {
	apiVersion, _ := raw["apiVersion"].(string)
	kind, _ := raw["kind"].(string)
	conv := runtime.DefaultUnstructuredConverter
	var err error
	switch {
	case apiVersion == "metallb.io/v1beta1" && kind == "IPAddressPool":
		var o metallbv1beta1.IPAddressPool
		if err = conv.FromUnstructured(raw, &o); err == nil {
			m.Pools = append(m.Pools, o)
		}
	case apiVersion == "metallb.io/v1beta1" && kind == "BGPAdvertisement":
		var o metallbv1beta1.BGPAdvertisement
		if err = conv.FromUnstructured(raw, &o); err == nil {
			m.Advertisements = append(m.Advertisements, o)
		}
	case apiVersion == "metallb.io/v1beta1" && kind == "Community":
		var o metallbv1beta1.Community
		if err = conv.FromUnstructured(raw, &o); err == nil {
			m.Communities = append(m.Communities, o)
		}
	case apiVersion == "metallb.io/v1beta2" && kind == "BGPPeer":
		var o metallbv1beta2.BGPPeer
		if err = conv.FromUnstructured(raw, &o); err == nil {
			m.Peers = append(m.Peers, o)
		}
	case apiVersion == "metallb.io/v1beta1" && kind == "BFDProfile":
		var o metallbv1beta1.BFDProfile
		if err = conv.FromUnstructured(raw, &o); err == nil {
			m.BFDProfiles = append(m.BFDProfiles, o)
		}
	case strings.HasPrefix(apiVersion, "metallb.io/") && kind == "L2Advertisement":
		return nil // nothing to import: the embedded speaker announces over BGP
	default:
		return fmt.Errorf("%s %s is not an object this imports (metallb.io/v1beta1 IPAddressPool, BGPAdvertisement, Community, BFDProfile; metallb.io/v1beta2 BGPPeer)", apiVersion, kind)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", apiVersion, kind, err)
	}
	return nil
}

// readMetalLBCluster lists MetalLB's objects in k's namespace (default
// metallb-system).
func readMetalLBCluster(k *kubeFlags, m *pools.MetalLB) error {
	if k.namespace == "" {
		k.namespace = "metallb-system"
	}
	if _, _, err := k.client(); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(k.cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, gvr := range []schema.GroupVersionResource{metallbPools, metallbAdvs, metallbComms, metallbPeersV2, metallbBFD} {
		list, err := dyn.Resource(gvr).Namespace(k.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing %s in namespace %s: %w", gvr.GroupResource(), k.namespace, err)
		}
		for _, item := range list.Items {
			if err := addMetalLB(item.Object, m); err != nil {
				return err
			}
		}
	}
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
