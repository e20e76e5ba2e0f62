package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CCM is a baremetal-cloud-controller-manager process started by StartCCM.
type CCM struct {
	*Process
	// Port is the secure port serving /healthz and /metrics on 127.0.0.1.
	Port int
	// Args are the command-line arguments the process was started with.
	Args []string

	cp   *ControlPlane
	addr string // where /healthz and /metrics are served
	http *http.Client
}

// DefaultCCMArgs returns the arguments StartCCM uses unless extraArgs override them:
// the kubeconfig of the ServiceAccount bound only by the packaged RBAC (CCMKubeconfig),
// for the API and for delegated authn/authz (so /metrics accepts the admin token), no
// leader election, only the node controllers (the control plane has no pod CIDRs,
// Services or routes), verbose logs.
func DefaultCCMArgs(cp *ControlPlane, cloudConfigPath string, port int) []string {
	kc := CCMKubeconfig()
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--cloud-config=" + cloudConfigPath,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--leader-elect=false",
		"--controllers=cloud-node-controller,cloud-node-lifecycle-controller",
		"--configure-cloud-routes=false",
		"--v=4",
	}
}

// StartCCM starts the CCM binary built by RunMain against cp, with DefaultCCMArgs on a
// free port; a flag in extraArgs (--name=value) replaces the default of the same name.
// Output goes to LogPath. It does not wait for the CCM to be healthy (see WaitHealthy).
// When the test ends the process is stopped (Stop), and if the test failed the log's
// last 150 lines are printed.
func StartCCM(t testing.TB, cp *ControlPlane, cloudConfigPath string, extraArgs ...string) *CCM {
	t.Helper()
	return StartCCMBinary(t, cp, CCMBinary(), cloudConfigPath, extraArgs...)
}

// StartCCMBinary is StartCCM with another CCM binary (see BuildBinary) that takes the
// upstream cloud-controller-manager flags.
func StartCCMBinary(t testing.TB, cp *ControlPlane, binary, cloudConfigPath string, extraArgs ...string) *CCM {
	t.Helper()
	return startCCM(t, cp, binary, nil, nil, cloudConfigPath, extraArgs)
}

// StartCCMEnv is StartCCM with extra environment variables (NAME=value) for the process.
func StartCCMEnv(t testing.TB, cp *ControlPlane, env []string, cloudConfigPath string, extraArgs ...string) *CCM {
	t.Helper()
	return startCCM(t, cp, CCMBinary(), env, nil, cloudConfigPath, extraArgs)
}

// StartCCMIn is StartCCM with the CCM in the network namespace of h (standing for
// another machine): it reaches the API server through h's proxy and serves /healthz
// and /metrics on h's address.
func StartCCMIn(t testing.TB, cp *ControlPlane, h *Host, cloudConfigPath string, extraArgs ...string) *CCM {
	t.Helper()
	defaults := []string{
		"--kubeconfig=" + h.Kubeconfig, "--authentication-kubeconfig=" + h.Kubeconfig, "--authorization-kubeconfig=" + h.Kubeconfig,
		"--bind-address=" + h.HostAddr.String(),
	}
	return startCCM(t, cp, CCMBinary(), nil, []string{"ip", "netns", "exec", h.Name}, cloudConfigPath, append(defaults, extraArgs...))
}

func startCCM(t testing.TB, cp *ControlPlane, binary string, env, wrapper []string, cloudConfigPath string, extraArgs []string) *CCM {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatalf("StartCCM: %v", err)
	}
	args := mergeArgs(DefaultCCMArgs(cp, cloudConfigPath, port), extraArgs)
	if p, ok := flagValue(args, "secure-port"); ok {
		port, _ = strconv.Atoi(p)
	}
	addr := "127.0.0.1"
	if a, ok := flagValue(args, "bind-address"); ok && a != "0.0.0.0" && a != "::" {
		addr = a
	}
	c := &CCM{
		Port: port, Args: args, cp: cp, addr: addr,
		http: &http.Client{
			Timeout: 5 * time.Second,
			// The CCM serves a self-signed certificate on loopback.
			Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		},
	}
	// Registered before the Process's cleanup, so it runs after the CCM stopped.
	t.Cleanup(func() {
		c.http.CloseIdleConnections()
		if c.Process == nil {
			return
		}
		// The CCM runs with the packaged RBAC only: a denial means it lacks a permission
		// (unless the API server was restarting: RestartAPIServer).
		for _, line := range strings.Split(c.Log(), "\n") {
			if strings.Contains(line, " is forbidden: ") && !cp.restarting(klogTime(line)) {
				t.Errorf("the CCM was denied by RBAC (packaging/kubernetes/rbac.yaml lacks a permission): %s", line)
				break
			}
		}
	})
	// The wrapper (ip netns exec NS) execs the CCM: the PID stays the CCM's.
	argv := append(append(append([]string{}, wrapper...), binary), args...)
	p, err := startProcess(t, "CCM", env, argv, 150)
	if err != nil {
		t.Fatalf("StartCCM: %v", err)
	}
	c.Process = p
	t.Logf("CCM pid %d started on %s:%d, log %s", p.PID(), addr, port, p.log)
	return c
}

// WaitHealthy waits, at most 60 s or until ctx is done, until GET /healthz answers 200.
// It fails at once if the process exits, with the log's tail.
func (c *CCM) WaitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last error
	for {
		code, body, err := c.get(ctx, c.http, "/healthz", false)
		switch {
		case err == nil && code == http.StatusOK:
			return nil
		case err == nil:
			last = fmt.Errorf("HTTP %d: %s", code, tail(body, 20))
		default:
			last = err
		}
		select {
		case <-c.done:
			return fmt.Errorf("CCM exited (%v) before it was healthy; log tail:\n%s", c.err, tail(c.Log(), 30))
		case <-ctx.Done():
			return fmt.Errorf("CCM on %s:%d not healthy: %w (last: %w)", c.addr, c.Port, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Metrics returns the /metrics text, fetched with the admin bearer token.
func (c *CCM) Metrics(ctx context.Context) (string, error) {
	code, body, err := c.get(ctx, c.http, "/metrics", true)
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: HTTP %d: %s", code, tail(body, 5))
	}
	return body, nil
}

// Fetch returns the body of an authenticated GET of path on the secure port (for
// example /debug/pprof/heap), with the admin bearer token.
func (c *CCM) Fetch(ctx context.Context, path string) ([]byte, error) {
	return c.fetch(ctx, c.http, path)
}

// CPUProfile returns the CCM's CPU profile over the next d (GET
// /debug/pprof/profile), for `go tool pprof`.
func (c *CCM) CPUProfile(ctx context.Context, d time.Duration) ([]byte, error) {
	slow := &http.Client{Timeout: d + 10*time.Second, Transport: c.http.Transport}
	return c.fetch(ctx, slow, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())))
}

func (c *CCM) fetch(ctx context.Context, client *http.Client, path string) ([]byte, error) {
	code, body, err := c.get(ctx, client, path, true)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", path, code, tail(body, 5))
	}
	return []byte(body), nil
}

func (c *CCM) get(ctx context.Context, client *http.Client, path string, auth bool) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://%s%s", net.JoinHostPort(c.addr, strconv.Itoa(c.Port)), path), nil)
	if err != nil {
		return 0, "", err
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+c.cp.RESTConfig.BearerToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, "", fmt.Errorf("GET %s: reading body: %w", path, err)
	}
	return resp.StatusCode, string(body), nil
}

// klogTime returns the time in a klog text header ("E1127 10:24:29.319288 ..."), in
// this year and the local zone as klog writes it, or the zero time.
func klogTime(line string) time.Time {
	if len(line) < 21 {
		return time.Time{}
	}
	t, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
	if err != nil {
		return time.Time{}
	}
	return t.AddDate(time.Now().Year(), 0, 0)
}

// mergeArgs returns defaults without the flags that extra sets, followed by extra.
func mergeArgs(defaults, extra []string) []string {
	set := map[string]bool{}
	for _, a := range extra {
		if name, ok := flagName(a); ok {
			set[name] = true
		}
	}
	var out []string
	for _, a := range defaults {
		if name, _ := flagName(a); !set[name] {
			out = append(out, a)
		}
	}
	return append(out, extra...)
}

// flagValue returns the value of the last --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	var v string
	var found bool
	for _, a := range args {
		if n, ok := flagName(a); ok && n == name {
			_, v, found = strings.Cut(a, "=")
		}
	}
	return v, found
}

func flagName(arg string) (string, bool) {
	if !strings.HasPrefix(arg, "-") {
		return "", false
	}
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return name, name != ""
}

// tail returns the last n lines of s.
// tail returns the last n lines of a log, without the flag dump the CCM starts with
// (it would fill the tail of a CCM that exits early).
func tail(s string, n int) string {
	var lines []string
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if !strings.Contains(line, "] FLAG: --") {
			lines = append(lines, line)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
