// Command redfish-sim serves N emulated Redfish BMCs on 127.0.0.1 until
// SIGINT or SIGTERM, for demos and manual tests. Every BMC manages one
// server (power On at start) and uses the same credentials; all share one
// CA, whose certificate -ca-out writes as ca.pem.
//
//	redfish-sim -n 3 -base-port 18443 -user admin -pass secret -ca-out DIR
//
// prints one line per BMC: its index, its URL and its ComputerSystem URI.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/redfish"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "redfish-sim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("redfish-sim", flag.ContinueOnError)
	n := fs.Int("n", 1, "number of BMCs")
	basePort := fs.Int("base-port", 0, "port of the first BMC, the others on the next ports (0: random ports)")
	user := fs.String("user", redfish.DefaultUsername, "user name of every BMC")
	pass := fs.String("pass", redfish.DefaultPassword, "password of every BMC")
	caOut := fs.String("ca-out", "", "directory to write the CA certificate into, as ca.pem")
	plain := fs.Bool("plain-http", false, "serve plain HTTP instead of TLS")
	delay := fs.Duration("transition-delay", 0, "time spent in PoweringOn/PoweringOff after a reset")
	maxSessions := fs.Int("max-sessions", redfish.DefaultMaxSessions, "session limit of each BMC (negative: none)")
	off := fs.Bool("off", false, "start with the servers powered off")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *n < 1 {
		return errors.New("-n must be at least 1")
	}
	if *basePort < 0 || *basePort > 0 && *basePort+*n-1 > 65535 {
		return fmt.Errorf("-base-port %d does not leave room for %d ports", *basePort, *n)
	}
	if *maxSessions == 0 {
		return errors.New("-max-sessions must not be 0")
	}

	var ca *redfish.CA
	if !*plain {
		var err error
		if ca, err = redfish.NewCA(); err != nil {
			return err
		}
		if *caOut != "" {
			if err := os.MkdirAll(*caOut, 0o755); err != nil {
				return err
			}
			path := filepath.Join(*caOut, "ca.pem")
			if err := os.WriteFile(path, ca.PEM(), 0o644); err != nil {
				return err
			}
			fmt.Printf("CA certificate: %s\n", path)
		}
	}
	power := redfish.PowerOn
	if *off {
		power = redfish.PowerOff
	}

	bmcs := make([]*redfish.BMC, 0, *n)
	defer func() {
		for _, b := range bmcs {
			b.Close()
		}
	}()
	for i := range *n {
		port := 0
		if *basePort > 0 {
			port = *basePort + i
		}
		b := redfish.NewBMC(redfish.Options{
			Username:          *user,
			Password:          *pass,
			Addr:              "127.0.0.1:" + strconv.Itoa(port),
			PlainHTTP:         *plain,
			CA:                ca,
			SerialNumber:      fmt.Sprintf("SIM%04d", i),
			InitialPowerState: power,
			TransitionDelay:   *delay,
			MaxSessions:       *maxSessions,
		})
		if err := b.Start(); err != nil {
			return fmt.Errorf("BMC %d: %w", i, err)
		}
		bmcs = append(bmcs, b)
		fmt.Printf("bmc-%d %s %s\n", i, b.URL(), b.SystemPath())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Printf("shutting down %d BMCs\n", len(bmcs))
	done := make(chan struct{})
	go func() {
		for _, b := range bmcs {
			b.Close()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return errors.New("BMCs did not close within 10s")
	}
	bmcs = nil
	return nil
}
