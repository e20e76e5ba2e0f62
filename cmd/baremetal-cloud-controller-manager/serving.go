package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/klog/v2"
)

// notifyWhenServing tells systemd READY=1 once this replica really serves: its Node
// informer (the replica-local view of the cluster; it runs on every replica, leader or
// not) has synced, the secure port answers /healthz and the agent applies everything
// (/readyz: its BGP sessions up with this host's paths at the routers), so a rolling
// restart that waits for READY never leaves a prefix without a path. It then pings
// the watchdog only while /healthz keeps answering, so a wedged process is
// restarted. Outside systemd the notifications are no-ops but readiness is still
// logged.
func notifyWhenServing(ctx context.Context, c *config.CompletedConfig, p *process) {
	n := p.notifier
	logger := klog.FromContext(ctx).WithName("serving")
	nodes := c.SharedInformers.Core().V1().Nodes().Informer()
	c.SharedInformers.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		return
	}
	health := healthCheck(c)
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := health(ctx); err != nil {
			logger.V(2).Info("Waiting for /healthz", "err", err)
			return false, nil
		}
		ok, why := readiness(ctx, nodes.HasSynced, p)
		if !ok {
			logger.V(2).Info("Waiting for readiness", "reason", why)
		}
		return ok, nil
	}); err != nil {
		return
	}
	logger.Info("Serving: informers synced, /healthz OK, ready", "event", "serving", "systemd", n.Enabled())
	if err := n.Ready(); err != nil {
		logger.Error(err, "Cannot tell systemd READY=1")
	}
	_ = n.Status("serving")
	n.RunWatchdog(ctx, health)
}

// healthCheck returns a check of the process's own /healthz on the secure port (over
// loopback when it listens on all addresses). Without a secure port it checks nothing.
func healthCheck(c *config.CompletedConfig) func(context.Context) error {
	if c.SecureServing == nil || c.SecureServing.Listener == nil {
		return func(context.Context) error { return nil }
	}
	addr := c.SecureServing.Listener.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
		if addr.IP.To4() == nil {
			host = "::1"
		}
	}
	url := "https://" + net.JoinHostPort(host, strconv.Itoa(addr.Port)) + "/healthz"
	client := &http.Client{
		Timeout: 5 * time.Second,
		// Our own serving certificate on loopback; /healthz carries no secret.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // self-check over loopback
	}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
		}
		return nil
	}
}
