package framework

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// listenInNetns opens a TCP listener on addr inside the named network namespace (a
// socket stays in the namespace it was created in, whatever thread accepts on it).
func listenInNetns(name, addr string) (net.Listener, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("current network namespace: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("network namespace %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("entering network namespace %s: %w", name, err)
	}
	ln, listenErr := net.Listen("tcp", addr)
	if err := netns.Set(orig); err != nil {
		// The thread stays locked and in the wrong namespace: Go ends it with the goroutine.
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("leaving network namespace %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	if listenErr != nil {
		return nil, fmt.Errorf("listening on %s in %s: %w", addr, name, listenErr)
	}
	return ln, nil
}

// serveTCPProxy forwards every connection accepted on ln to upstream until the test
// ends, then closes the listener and every connection.
func serveTCPProxy(t testing.TB, ln net.Listener, upstream string) *tcpProxy {
	p := &tcpProxy{upstream: upstream, conns: map[net.Conn]bool{}}
	p.serve(ln)
	t.Cleanup(p.stop)
	return p
}

// tcpProxy forwards the connections its listeners accept to upstream. Its path can be
// cut: refuse (no listener: connections are refused) or drop (connections accepted
// and closed at once), then restored.
type tcpProxy struct {
	upstream string
	wg       sync.WaitGroup

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool // nil once stopped
	drop  bool
}

// serve accepts on ln (replacing any listener) until ln is closed.
func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.forward(c)
			}()
		}
	}()
}

// forward copies between c and a new connection upstream until either side ends or
// the path is cut.
func (p *tcpProxy) forward(c net.Conn) {
	defer c.Close()
	if !p.track(c, true) {
		return
	}
	defer p.track(c, false)
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	if !p.track(up, true) {
		return
	}
	defer p.track(up, false)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// track adds or removes a connection; it returns false when adding after stop or
// while the path drops connections.
func (p *tcpProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add && (p.conns == nil || p.drop) {
		return false
	}
	if add {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	return true
}

// cut closes every forwarded connection; refuse also closes the listener, drop makes
// it close what it accepts.
func (p *tcpProxy) cut(refuse bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if refuse && p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.drop = !refuse
	for c := range p.conns {
		_ = c.Close()
	}
}

// restore forwards new connections again, on a listener from listen when cut
// refused them.
func (p *tcpProxy) restore(listen func() (net.Listener, error)) error {
	p.mu.Lock()
	listening := p.ln != nil
	p.drop = false
	p.mu.Unlock()
	if listening {
		return nil
	}
	ln, err := listen()
	if err != nil {
		return fmt.Errorf("the proxy to %s: listening again: %w", p.upstream, err)
	}
	p.serve(ln)
	return nil
}

// stop closes the listener and every connection and waits for the forwarding to end.
func (p *tcpProxy) stop() {
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
