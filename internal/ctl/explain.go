package ctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/explain"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// kubeFlags are the cluster-reading commands' connection flags, as kubectl's:
// --kubeconfig (else $KUBECONFIG, else ~/.kube/config, else in-cluster) and
// --namespace/-n (else the context's namespace, else default).
type kubeFlags struct {
	kubeconfig, context, namespace string
	// cfg is the client configuration client made.
	cfg *rest.Config
}

func (k *kubeFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	fs.StringVar(&k.context, "context", "", "kubeconfig context")
	fs.StringVar(&k.namespace, "namespace", "", "namespace of a Service (default: the context's, else default)")
	fs.StringVar(&k.namespace, "n", "", "shorthand for --namespace")
}

func (k *kubeFlags) client() (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if k.kubeconfig != "" {
		rules.ExplicitPath = k.kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns := k.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = metav1.NamespaceDefault
		}
	}
	k.cfg = cfg
	client, err := kubernetes.NewForConfig(cfg)
	return client, ns, err
}

const explainUsage = `usage: baremetal-ccmctl explain [--kubeconfig F] [--context C] [-n NS] [--timeout D] svc/NAME | node/NAME | ccm
       baremetal-ccmctl explain [--inventory F] [--bmc-ca-file F] [--kubeconfig F] [--timeout D] host/NAME
  svc/NAME   why a LoadBalancer Service is pending or not announced: its request, addresses,
             conditions (AddressAssigned, Announced), its pool's use, recent events, next steps
  node/NAME  why a Node is tainted or not initialized: taints, BMC conditions, maintenance
             (Node lifecycle conditions, exclude-from-remediation), what the CCM published
             for its agent, its replica's BGP sessions, recent events
  --timeout  bound on the whole command (default 30s)
  ccm        whether the cluster has what the CCM needs: its namespace, its ConfigMaps, and
             each replica's own check (its namespace and permissions; condition CCMPreflight)
  host/NAME  a host of the inventory: its entry, its Node, and its BMC asked as the CCM does
Also as a kubectl plugin: kubectl baremetal explain svc/NAME (install kubectl-baremetal on the PATH).
`

// explainCmd runs `explain`. Exit status: 0 explained, 1 the object is missing or the
// cluster could not be read, 2 usage errors.
func explainCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, explainUsage) }
	var k kubeFlags
	k.add(fs)
	invPath := fs.String("inventory", "/etc/baremetal-ccm/inventory.yaml", "inventory document (host/NAME)")
	defaultCA := fs.String("bmc-ca-file", "", "the CloudConfig's bmc.caFile (host/NAME)")
	timeout := fs.Duration("timeout", 30*time.Second, "bound on the whole command")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || !strings.Contains(fs.Arg(0), "/") && fs.Arg(0) != "ccm" {
		fs.Usage()
		return 2
	}
	kind, name, _ := strings.Cut(fs.Arg(0), "/")
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if kind == "host" || kind == "hosts" {
		return explainHost(ctx, name, *invPath, *defaultCA, k, stdout, stderr)
	}
	client, ns, err := k.client()
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 2
	}
	e := &explain.Explainer{Client: client}
	if e.Sessions, err = versioned.NewForConfig(k.cfg); err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 2
	}
	var out string
	switch kind {
	case "svc", "service", "services":
		out, err = e.Service(ctx, ns, name)
	case "node", "nodes", "no":
		out, err = e.Node(ctx, name)
	case "ccm":
		out, err = e.CCM(ctx)
	default:
		fmt.Fprintf(stderr, "baremetal-ccmctl: explain %s: want svc/NAME, node/NAME, ccm or host/NAME\n", kind)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, out)
	return 0
}

// explainHost prints a host's inventory entry, the Node initialized from it (when a
// kubeconfig reaches the cluster) and its BMC check.
func explainHost(ctx context.Context, name, invPath, defaultCA string, k kubeFlags, stdout, stderr io.Writer) int {
	data, err := os.ReadFile(invPath)
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v (give --inventory)\n", err)
		return 2
	}
	view, err := inventory.ParseWith(data, inventory.ParseOptions{AllowInsecureSkipVerify: true, AllowPlainHTTP: true})
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %s: %v\n", invPath, err)
		return 2
	}
	h, ok := view.Host(name)
	if !ok {
		fmt.Fprintf(stderr, "baremetal-ccmctl: no host %q in %s: a Node of it would be reported gone (within the deletion guard)\n", name, invPath)
		return 1
	}
	state := string(h.State)
	if state == "" {
		state = "active"
	}
	fmt.Fprintf(stdout, "Host %s (inventory %s)\n  state: %s\n", h.Name, invPath, state)
	for _, a := range h.Addresses {
		fmt.Fprintf(stdout, "  address: %s %s\n", a.Type, a.Address)
	}
	if h.SystemUUID != "" {
		fmt.Fprintf(stdout, "  systemUUID: %s\n", h.SystemUUID)
	}
	if h.Rack != "" {
		fmt.Fprintf(stdout, "  rack: %s\n", h.Rack)
	}
	if client, _, err := k.client(); err == nil {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		switch {
		case err != nil:
			fmt.Fprintf(stdout, "  node: cannot list Nodes: %v\n", err)
		default:
			found := false
			for _, n := range nodes.Items {
				if id, ok := inventory.HostIDFromProviderID(n.Spec.ProviderID); ok && id == h.Name {
					fmt.Fprintf(stdout, "  node: %s (providerID %s; baremetal-ccmctl explain node/%s)\n", n.Name, n.Spec.ProviderID, n.Name)
					found = true
				}
			}
			if !found {
				fmt.Fprintf(stdout, "  node: none initialized from this host (providerID baremetal://%s)\n", h.Name)
			}
		}
	}
	if h.BMC == nil {
		fmt.Fprintln(stdout, "  bmc: none in the inventory (power state unknown: never reported off, never deleted on power)")
		return 0
	}
	fmt.Fprintln(stdout, "BMC check:")
	args := []string{"--inventory", invPath}
	if defaultCA != "" {
		args = append(args, "--bmc-ca-file", defaultCA)
	}
	if k.kubeconfig != "" {
		args = append(args, "--kubeconfig", k.kubeconfig)
	}
	if code := bmcCheck(append(args, h.Name), indent{stdout}, stderr); code != 0 {
		return code
	}
	return 0
}

// indent prefixes every line with two spaces.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	s := "  " + strings.ReplaceAll(strings.TrimRight(string(p), "\n"), "\n", "\n  ") + "\n"
	if _, err := io.WriteString(i.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// lbPoolsCmd prints the pools' use the leader publishes.
func lbPoolsCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lb pools", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var k kubeFlags
	k.add(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	client, _, err := k.client()
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := (&explain.Explainer{Client: client}).Pools(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, out)
	return 0
}
