package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/spf13/cobra"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version/verflag"

	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/informerscope"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/preflight"
)

// newCommand is the upstream CCM command (app.NewCloudControllerManagerCommand:
// the same flags, config and help) with our run in place of app.Run, which runs
// leader election with context.TODO: a stopping leader never released its Lease
// and a leader that lost it exited, withdrawing every announcement with it (see
// run.go).
func newCommand(s *options.CloudControllerManagerOptions, init app.InitCloudFunc, constructors map[string]app.ControllerInitFuncConstructor,
	aliases map[string]string, extra cliflag.NamedFlagSets, p *process) *cobra.Command {
	logOptions := logs.NewOptions()
	names := app.ControllerNames(constructors)
	cmd := &cobra.Command{
		Use: program,
		RunE: func(cmd *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			if err := logsapi.ValidateAndApply(logOptions, utilfeature.DefaultFeatureGate); err != nil {
				fmt.Fprintf(os.Stderr, "%v\n", err)
				return err
			}
			cliflag.PrintFlags(cmd.Flags())
			c, err := s.Config(names, app.ControllersDisabledByDefault.List(), aliases, app.AllWebhooks, app.DisabledByDefaultWebhooks)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%v\n", err)
				return err
			}
			completed := c.Complete()
			cloud := init(completed)
			if err := run(p.ctx, completed, cloud, constructors, p); err != nil {
				fmt.Fprintf(os.Stderr, "%v\n", err)
				return err
			}
			return nil
		},
		Args: func(cmd *cobra.Command, args []string) error {
			for _, arg := range args {
				if len(arg) > 0 {
					return fmt.Errorf("%q does not take any arguments, got %q", cmd.CommandPath(), args)
				}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	named := s.Flags(names, app.ControllersDisabledByDefault.List(), aliases, app.AllWebhooks, app.DisabledByDefaultWebhooks)
	global := named.FlagSet("global")
	verflag.AddFlags(global)
	logsapi.AddFlags(logOptions, global)
	globalflag.AddGlobalFlags(global, cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	for _, f := range extra.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cmd.SetUsageFunc(func(cmd *cobra.Command) error {
		fmt.Fprintf(cmd.OutOrStderr(), "Usage:\n  %s\n", cmd.UseLine())
		cliflag.PrintSections(cmd.OutOrStderr(), named, cols)
		cliflag.PrintSections(cmd.OutOrStderr(), extra, cols)
		return nil
	})
	cmd.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n\nUsage:\n  %s\n", cmd.Long, cmd.UseLine())
		cliflag.PrintSections(cmd.OutOrStdout(), named, cols)
		cliflag.PrintSections(cmd.OutOrStdout(), extra, cols)
	})
	return cmd
}

// process is what main shares with the command: the process's context (done on
// SIGTERM), the systemd notifier, the agent once it runs, and the process's informers
// (the root scope over the shared informer factory, which counts event handlers).
type process struct {
	ctx       context.Context
	notifier  notifier
	agent     readier
	informers *informerscope.Scope
	// nodeName is this replica's Node (--node-name).
	nodeName string
	// preflight is what this replica needs in the cluster (its namespace and
	// permissions); /readyz fails until it passes. Nil until run starts it; mu
	// guards it.
	preflight *preflight.Monitor
	mu        sync.Mutex
	// apiBack returns a channel closed when the API server answers again after an
	// outage (apigate.Gate.Reopened); nil until the informers' client is built.
	apiBack func() <-chan struct{}
}

// readier is the agent's readiness (agent.Agent).
type readier interface {
	Ready(ctx context.Context) (bool, string)
}

// notifier is the systemd notifier (sdnotify.Notifier).
type notifier interface {
	Ready() error
	Status(string) error
	Enabled() bool
	RunWatchdog(ctx context.Context, check func(context.Context) error)
}

func (p *process) setPreflight(m *preflight.Monitor) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.preflight = m
}

func (p *process) preflightMonitor() *preflight.Monitor {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.preflight
}
