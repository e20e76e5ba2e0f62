package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/bmc"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// bmcCheck asks one host's BMC for its power state, as the CCM would, and prints
// protocol, TLS mode, reachability, power state and latency — never credentials.
// Exit status: 0 reachable with a known state, 1 otherwise, 2 usage errors.
func bmcCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bmc check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	invPath := fs.String("inventory", "/etc/baremetal-ccm/inventory.yaml", "Inventory document")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on the BMC call")
	defaultCA := fs.String("bmc-ca-file", "", "the CloudConfig's bmc.caFile: CA bundle for Redfish BMCs without a caFile of their own")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig to read a host's credentialsSecret with (the CCM's own, e.g. /etc/baremetal-ccm/kubeconfig)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: baremetal-ccmctl bmc check [--inventory FILE] [--timeout D] [--bmc-ca-file F] [--kubeconfig F] HOST")
		return 2
	}
	data, err := os.ReadFile(*invPath)
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 2
	}
	// A diagnostic: show such hosts too, and say that TLS is not verified or not used.
	view, err := inventory.ParseWith(data, inventory.ParseOptions{AllowInsecureSkipVerify: true, AllowPlainHTTP: true})
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %s: %v\n", *invPath, err)
		return 2
	}
	host, ok := view.Host(fs.Arg(0))
	if !ok {
		fmt.Fprintf(stderr, "baremetal-ccmctl: no host %q in %s\n", fs.Arg(0), *invPath)
		return 2
	}
	t, ok := bmc.TargetFor(host, *defaultCA)
	if !ok {
		fmt.Fprintf(stderr, "baremetal-ccmctl: host %q has no bmc block in %s\n", host.Name, *invPath)
		return 2
	}
	tlsMode := "n/a (IPMI)"
	address := t.Address
	if t.Port != 0 {
		address += fmt.Sprintf(" (port %d)", t.Port)
	}
	if t.Protocol == inventory.ProtocolRedfish {
		if ep, err := bmc.RedfishEndpoint(t); err == nil {
			address = ep
		}
		switch {
		case strings.HasPrefix(strings.ToLower(t.Address), "http://"):
			tlsMode = "NONE: plain HTTP (plainHTTP), the password crosses the network in clear text"
		case t.InsecureSkipVerify:
			tlsMode = "NOT verified (insecureSkipVerify)"
		case t.CAFile != "":
			tlsMode = "verified with " + t.CAFile
		default:
			tlsMode = "verified with the system roots"
		}
	}
	creds := t.CredentialsFile
	if t.SecretName != "" {
		creds = "Secret " + t.SecretNamespace + "/" + t.SecretName
	}
	fmt.Fprintf(stdout, "host:        %s\nprotocol:    %s\naddress:     %s\ntls:         %s\ncredentials: %s\n",
		host.Name, t.Protocol, address, tlsMode, creds)

	if t.System != "" {
		fmt.Fprintf(stdout, "system:      %s\n", t.System)
	}

	// The CCM's own driver (kept Redfish session, system choice, identity), logged
	// out before returning.
	ctx, cancel := context.WithTimeout(bmc.WithCallLimit(context.Background(), *timeout), *timeout)
	defer cancel()
	var source bmc.CredentialSource // nil: the credentials file
	if t.SecretName != "" {
		if *kubeconfig == "" {
			fmt.Fprintf(stderr, "baremetal-ccmctl: host %q keeps its credentials in Secret %s/%s: give --kubeconfig to read it\n", host.Name, t.SecretNamespace, t.SecretName)
			return 2
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			fmt.Fprintf(stderr, "baremetal-ccmctl: --kubeconfig: %v\n", err)
			return 2
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			fmt.Fprintf(stderr, "baremetal-ccmctl: --kubeconfig: %v\n", err)
			return 2
		}
		source = bmc.NewSecrets(client, time.Minute, nil)
	}
	drv := bmc.NewSessions(source, 0)
	defer drv.Close(context.Background(), 5*time.Second)
	start := time.Now()
	raw, uuid, err := drv.ReadPower(ctx, t)
	latency := time.Since(start).Round(time.Millisecond)
	if err != nil {
		reach := "no (unreachable)"
		switch {
		case errors.Is(err, bmc.ErrAccessDenied):
			reach = "yes, but it refuses this account the read (the login worked: give the account the privilege, e.g. Operator or a read-only role)"
		case errors.Is(err, bmc.ErrAuth):
			reach = "no (credentials refused)"
		case errors.Is(err, bmc.ErrCredentials):
			reach = "no (credentials file unusable)"
		case errors.Is(err, bmc.ErrUnknownState):
			reach = "yes, but the power state could not be read"
		}
		fmt.Fprintf(stdout, "reachable:   %s\nerror:       %v\nlatency:     %s\n", reach, err, latency)
		return 1
	}
	state := bmc.Normalize(raw)
	fmt.Fprintf(stdout, "reachable:   yes\npower:       %s (BMC said %q)\n", state, raw)
	if uuid != "" {
		match := "no systemUUID in the inventory to compare"
		if host.SystemUUID != "" {
			match = "matches the inventory's systemUUID"
			if same, _ := inventory.SameSystemUUID(uuid, host.SystemUUID); !same {
				match = "CONTRADICTS the inventory's systemUUID " + host.SystemUUID + ": no action is taken on this BMC's power state"
			}
		}
		fmt.Fprintf(stdout, "system uuid: %s (%s)\n", uuid, match)
	}
	fmt.Fprintf(stdout, "latency:     %s\n", latency)
	if state == bmc.PowerUnknown {
		return 1
	}
	return 0
}
