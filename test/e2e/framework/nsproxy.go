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
func serveTCPProxy(t testing.TB, ln net.Listener, upstream string) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) bool {
		mu.Lock()
		defer mu.Unlock()
		if add && conns == nil {
			return false // stopping
		}
		if add {
			conns[c] = true
		} else {
			delete(conns, c)
		}
		return true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				up, err := net.DialTimeout("tcp", upstream, 5*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				if !track(c, true) || !track(up, true) {
					return
				}
				defer track(c, false)
				defer track(up, false)
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
}
