// Package ctl is baremetal-ccmctl, the operators' tool for baremetal-ccm (cmd/baremetal-ccmctl,
// and the CCM binary when run under that name: the image carries both as one file).
//
//	baremetal-ccmctl manifests static-pod [--image I] [--kubeconfig P] [--config-dir D] [--secure-port N] [-- extra CCM args]
//	baremetal-ccmctl manifests deployment [--image I] [--replicas N] [--config-map NAME] [--config-dir D] [--secure-port N] [--api-server [HOST]:PORT] [-- extra CCM args]
//	baremetal-ccmctl manifests rbac
//	baremetal-ccmctl manifests rbac-metallb [--namespace NS]
//	baremetal-ccmctl manifests agent-rbac
//	baremetal-ccmctl manifests agent-daemonset [--image I] [--config-map NAME] [--config-dir D] [--host-dir D] [--serving-port N] [--api-server [HOST]:PORT] [-- extra agent args]
//	baremetal-ccmctl agent kubeconfig --node NAME --ca-cert F --ca-key F --server URL [--ca-bundle F] [--tls-server-name N] [--validity D] [--out F]
//	baremetal-ccmctl bmc check [--inventory FILE] [--timeout D] [--bmc-ca-file F] [--kubeconfig F] HOST
//	baremetal-ccmctl explain [--kubeconfig F] [-n NS] svc/NAME | node/NAME | host/NAME | ccm
//	baremetal-ccmctl lb pools [--kubeconfig F]
//	baremetal-ccmctl version
//
// Installed (or linked) as kubectl-baremetal it is a kubectl plugin: kubectl baremetal
// explain svc/NAME.
package ctl

import (
	"flag"
	"fmt"
	"io"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/version"
)

const usage = `usage:
  baremetal-ccmctl manifests static-pod [flags] [-- extra CCM arguments]
      print the static pod manifest for a control-plane node (put it in /etc/kubernetes/manifests/)
  baremetal-ccmctl manifests deployment [flags] [-- extra CCM arguments]
      print the CCM as a Deployment on the control-plane nodes (kubectl apply -f -), for
      clusters that prefer one to static pods; its configuration comes from a ConfigMap
  baremetal-ccmctl manifests crds
      print the CustomResourceDefinitions of baremetal-ccm.io (BGPSessionState); apply
      them before the CCM and the agents (kubectl apply -f -)
  baremetal-ccmctl manifests rbac
      print the ServiceAccount, ClusterRole and bindings the CCM needs (kubectl apply -f -)
  baremetal-ccmctl manifests rbac-metallb [--namespace NS]
      print the Role and RoleBinding the metallb announcer needs in MetalLB's namespace
  baremetal-ccmctl manifests agent-rbac
      print the worker agents' ServiceAccount, ClusterRole and binding, and the
      ValidatingAdmissionPolicy that keeps each agent to its own node's objects
      (kubectl apply -f -)
  baremetal-ccmctl manifests agent-daemonset [flags] [-- extra agent arguments]
      print the worker agent as a DaemonSet on every Node but the control plane's
      (kubectl apply -f -), for clusters that prefer one to the agent's systemd unit;
      its CloudConfig comes from a ConfigMap, the host's own files (a TCP-MD5 password)
      from the host's /etc/baremetal-ccm, seen at /host/etc/baremetal-ccm
  baremetal-ccmctl agent kubeconfig --node NAME --ca-cert F --ca-key F --server URL
        [--ca-bundle F] [--tls-server-name N] [--validity D] [--out F]
      write a kubeconfig for NAME's agent: a new key and a client certificate signed by
      the cluster's client CA (kubeadm: /etc/kubernetes/pki/ca.crt and ca.key), with CN
      system:baremetal-ccm-agent:NAME and O system:baremetal-ccm-agents
  baremetal-ccmctl bmc check [--inventory FILE] [--bmc-ca-file F] [--kubeconfig F] [--timeout D] HOST
      ask HOST's BMC for its power state as the CCM does; prints protocol, TLS mode,
      reachability, power state and latency (never credentials)
  baremetal-ccmctl explain [--kubeconfig F] [-n NS] svc/NAME | node/NAME
      why a LoadBalancer Service is pending or not announced, why a Node is tainted or not
      initialized: conditions, events, pools, BGP sessions, next steps
  baremetal-ccmctl explain [--inventory F] [--kubeconfig F] host/NAME
      an inventory host: its entry, its Node, and its BMC asked as the CCM does
  baremetal-ccmctl explain [--kubeconfig F] ccm
      whether the cluster has what the CCM needs (its namespace, ConfigMaps, permissions)
  baremetal-ccmctl pools convert [--cloud-config F]
      print the CloudConfig's loadBalancer.pools as IPPool objects (kubectl apply -f -)
  baremetal-ccmctl pools import-metallb [-f FILE]... [--kubeconfig F] [-n NS]
      print MetalLB's IPAddressPools, BGPPeers (with their BFDProfiles' timers) and
      BGPAdvertisements as IPPools, BGPPeers and BGPAdvertisements; from the files, else
      from the cluster (namespace metallb-system); every field without an equivalent is
      named on stderr
  baremetal-ccmctl peers convert [--cloud-config F]
      print the CloudConfig's bgp.peers as BGPPeer objects (kubectl apply -f -)
  baremetal-ccmctl lb pools [--kubeconfig F]
      every LoadBalancer pool's size, use and free addresses per family, and its Services
  baremetal-ccmctl version
As a kubectl plugin (the binary named kubectl-baremetal on the PATH): kubectl baremetal explain svc/NAME
`

// Run runs baremetal-ccmctl with args (without the program name) and returns its exit
// status: 0 done, 1 the command failed, 2 a usage error.
func Run(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) >= 1 && args[0] == "version":
		fmt.Fprintln(stdout, version.String("baremetal-ccmctl"))
		return 0
	case len(args) >= 2 && args[0] == "bmc" && args[1] == "check":
		return bmcCheck(args[2:], stdout, stderr)
	case len(args) >= 1 && args[0] == "explain":
		return explainCmd(args[1:], stdout, stderr)
	case len(args) >= 2 && args[0] == "pools" && args[1] == "convert":
		return poolsConvertCmd(args[2:], stdout, stderr)
	case len(args) >= 2 && args[0] == "pools" && args[1] == "import-metallb":
		return poolsImportMetalLBCmd(args[2:], stdout, stderr)
	case len(args) >= 2 && args[0] == "peers" && args[1] == "convert":
		return peersConvertCmd(args[2:], stdout, stderr)
	case len(args) >= 2 && args[0] == "lb" && args[1] == "pools":
		return lbPoolsCmd(args[2:], stdout, stderr)
	case len(args) >= 2 && args[0] == "agent" && args[1] == "kubeconfig":
		return agentKubeconfigCmd(args[2:], stdout, stderr)
	case len(args) >= 2 && args[0] == "manifests" && args[1] == "crds":
		_, _ = stdout.Write(manifests.CRDs())
		return 0
	case len(args) >= 2 && args[0] == "manifests" && args[1] == "rbac":
		return emit(stdout, stderr, manifests.RBAC()...)
	case len(args) >= 2 && args[0] == "manifests" && args[1] == "agent-rbac":
		return emit(stdout, stderr, manifests.AgentRBAC()...)
	case len(args) >= 2 && args[0] == "manifests" && args[1] == "rbac-metallb":
		fs := flag.NewFlagSet("rbac-metallb", flag.ContinueOnError)
		fs.SetOutput(stderr)
		ns := fs.String("namespace", "metallb-system", "MetalLB's namespace (loadBalancer.metallb.namespace)")
		if err := fs.Parse(args[2:]); err != nil {
			return 2
		}
		return emit(stdout, stderr, manifests.MetalLBRBAC(*ns)...)
	case len(args) >= 2 && args[0] == "manifests" && args[1] == "static-pod":
		o := manifests.DefaultStaticPodOptions()
		fs := flag.NewFlagSet("static-pod", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.StringVar(&o.Image, "image", o.Image, "CCM image (must contain ipmitool)")
		fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "host path of the CCM's kubeconfig; its server should be this node's own kube-apiserver")
		fs.StringVar(&o.ConfigDir, "config-dir", o.ConfigDir, "host directory with cloud-config.yaml, the inventory and BMC credentials")
		fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "port of /healthz and /metrics on 127.0.0.1")
		if err := fs.Parse(args[2:]); err != nil {
			return 2
		}
		o.ExtraArgs = fs.Args()
		pod, err := manifests.StaticPod(o)
		if err != nil {
			fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
			return 2
		}
		return emit(stdout, stderr, pod)
	case len(args) >= 2 && args[0] == "manifests" && args[1] == "deployment":
		return deploymentCmd(args[2:], stdout, stderr)
	case len(args) >= 2 && args[0] == "manifests" && args[1] == "agent-daemonset":
		return agentDaemonSetCmd(args[2:], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return 2
}

func emit(stdout, stderr io.Writer, objs ...any) int {
	data, err := manifests.YAML(objs...)
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 1
	}
	_, _ = stdout.Write(data)
	return 0
}

func deploymentCmd(args []string, stdout, stderr io.Writer) int {
	o := manifests.DefaultDeploymentOptions()
	fs := flag.NewFlagSet("deployment", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Image, "image", o.Image, "CCM image (must contain ipmitool)")
	replicas := fs.Int("replicas", int(o.Replicas), "replicas, at most one per control-plane node")
	fs.StringVar(&o.ConfigMap, "config-map", o.ConfigMap, "ConfigMap in kube-system with cloud-config.yaml, the inventory and CA files")
	fs.StringVar(&o.ConfigDir, "config-dir", o.ConfigDir, "where the ConfigMap is mounted (the paths in cloud-config.yaml)")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "port of /healthz and /metrics on the node's 127.0.0.1")
	fs.StringVar(&o.APIServer, "api-server", o.APIServer, "HOST:PORT of the API server to use instead of the kubernetes Service (no kube-proxy or CNI needed; its certificate must name HOST); :PORT is the node's own at the node's address")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *replicas < 1 || *replicas > 1000 {
		fmt.Fprintf(stderr, "baremetal-ccmctl: --replicas %d: want 1 to 1000\n", *replicas)
		return 2
	}
	o.Replicas = int32(*replicas)
	o.ExtraArgs = fs.Args()
	d, err := manifests.Deployment(o)
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 2
	}
	return emit(stdout, stderr, d)
}

func agentDaemonSetCmd(args []string, stdout, stderr io.Writer) int {
	o := manifests.DefaultAgentDaemonSetOptions()
	fs := flag.NewFlagSet("agent-daemonset", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Image, "image", o.Image, "CCM image (the agent is its agent mode)")
	fs.StringVar(&o.ConfigMap, "config-map", o.ConfigMap, "ConfigMap in kube-system with the agents' cloud-config.yaml (bgp, routes, loadBalancer.pools; no inventory)")
	fs.StringVar(&o.ConfigDir, "config-dir", o.ConfigDir, "where the ConfigMap is mounted")
	fs.StringVar(&o.HostDir, "host-dir", o.HostDir, "each host's directory of its own files (a TCP-MD5 password), mounted read-only at /host<dir>; empty: none")
	fs.IntVar(&o.ServingPort, "serving-port", o.ServingPort, "port of /metrics, /healthz and /readyz on the node's 127.0.0.1")
	fs.StringVar(&o.APIServer, "api-server", o.APIServer, "HOST:PORT of the API server to use instead of the kubernetes Service (no kube-proxy needed; its certificate must name HOST); :PORT is the node's own at the node's address")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.ExtraArgs = fs.Args()
	d, err := manifests.AgentDaemonSet(o)
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 2
	}
	return emit(stdout, stderr, d)
}
