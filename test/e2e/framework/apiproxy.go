package framework

import (
	"net"
	"net/url"
	"strings"
	"testing"
)

// APIProxy is a TCP proxy on 127.0.0.1 between one process and the API server: a test
// cuts that process's API path, as a firewall rule or a broken link would, while the
// API server keeps serving everyone else. It is removed when the test ends.
type APIProxy struct {
	// Kubeconfig is the CCM's kubeconfig (CCMKubeconfig) through the proxy.
	Kubeconfig string

	addr string
	p    *tcpProxy
}

// NewAPIProxy starts a proxy to cp's API server on a free port of 127.0.0.1.
func NewAPIProxy(t testing.TB, cp *ControlPlane) *APIProxy {
	t.Helper()
	api, err := url.Parse(cp.RESTConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("NewAPIProxy: %v", err)
	}
	a := &APIProxy{addr: ln.Addr().String()}
	a.p = serveTCPProxy(t, ln, api.Host)
	a.Kubeconfig = kubeconfigVia(t, CCMKubeconfig(), a.addr, api.Hostname(), "proxy-"+strings.ReplaceAll(a.addr, ":", "-"))
	return a
}

// CCMArgs are the CCM flags that send all its API traffic (its own, and delegated
// authentication and authorization) through the proxy.
func (a *APIProxy) CCMArgs() []string {
	return []string{"--kubeconfig=" + a.Kubeconfig, "--authentication-kubeconfig=" + a.Kubeconfig, "--authorization-kubeconfig=" + a.Kubeconfig}
}

// Refuse closes every connection through the proxy and its listener: new connections
// are refused (RST), as by a firewall's reject rule or a stopped API server.
func (a *APIProxy) Refuse() { a.p.cut(true) }

// Drop closes every connection through the proxy and closes each new one as soon as it
// is accepted, as a load balancer without a healthy backend does.
func (a *APIProxy) Drop() { a.p.cut(false) }

// Restore forwards new connections again, on the same address.
func (a *APIProxy) Restore() error {
	return a.p.restore(func() (net.Listener, error) { return net.Listen("tcp", a.addr) })
}
