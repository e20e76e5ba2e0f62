package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/bgptest"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// TestReviewSetPeersChurnThenStop: SetPeers called rapidly (peers added, removed,
// re-created with another hold time) while raw routers accept, handshake, or
// stall mid-handshake, then the speaker stops. Run with -race. After Run returned,
// no goroutine of the speaker may be left, and every router connection must be
// closed. (It fails on GoBGP's event watcher: startLocked calls srv.WatchEvent
// with context.WithoutCancel(ctx), so its two goroutines, holding the Speaker
// and the stopped GoBGP server, outlive Run for good.)
func TestReviewSetPeersChurnThenStop(t *testing.T) {
	before := runtime.NumGoroutine()
	const n = 4
	var ls []*bgptest.Listener
	for i := range n {
		l, err := bgptest.Listen(fmt.Sprintf("127.0.0.%d:0", 10+i))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls = append(ls, l)
	}
	sp, err := New(Config{LocalASN: 65000, RouterID: netip.MustParseAddr("10.0.0.1"), IPv6NextHop: netip.MustParseAddr("2001:db8:ffff::1")})
	if err != nil {
		t.Fatal(err)
	}
	sp.Announce("lb", []Path{{Prefix: crashPrefix4}, {Prefix: crashPrefix6}})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	done := make(chan struct{})
	go func() { defer close(done); _ = sp.Run(ctx) }()

	// The routers: accept every connection; some handshake, some stall before their OPEN.
	var mu sync.Mutex
	var sessions []*bgptest.Session
	rctx, rcancel := context.WithCancel(context.Background())
	defer rcancel()
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; rctx.Err() == nil; k++ {
				actx, acancel := context.WithTimeout(rctx, 200*time.Millisecond)
				s, err := l.Accept(actx)
				acancel()
				if err != nil {
					continue
				}
				mu.Lock()
				sessions = append(sessions, s)
				mu.Unlock()
				if (i+k)%3 != 0 {
					go func() {
						hctx, hcancel := context.WithTimeout(rctx, 5*time.Second)
						defer hcancel()
						if _, err := s.Handshake(hctx, rawRouterOpen(uint32(65001+i), fmt.Sprintf("10.0.0.%d", 10+i))); err == nil {
							s.KeepAlive(rctx)
						}
					}()
				}
			}
		}()
	}
	peer := func(i int, hold time.Duration) config.BGPPeer {
		p := rawPeer(ls[i], uint32(65001+i))
		p.HoldTime = &metav1.Duration{Duration: hold}
		p.ConnectRetry = &metav1.Duration{Duration: 100 * time.Millisecond}
		return p
	}
	for round := range 40 {
		var ps []config.BGPPeer
		for i := range n {
			if (round+i)%3 == 0 {
				continue
			}
			ps = append(ps, peer(i, time.Duration(9+round%2)*time.Second))
		}
		_ = sp.SetPeers(ps)
		_ = sp.Peers()
		_, _ = sp.Ready()
		time.Sleep(time.Duration(20+round*7%90) * time.Millisecond)
	}
	time.Sleep(time.Second)
	stopAt := time.Now()
	cancel()
	<-done
	t.Logf("Run returned %v after the stop", time.Since(stopAt).Round(10*time.Millisecond))
	rcancel()
	wg.Wait()

	// Every router connection is closed by the speaker.
	mu.Lock()
	open := 0
	for _, s := range sessions {
		select {
		case <-s.Closed():
		case <-time.After(100 * time.Millisecond):
			open++
		}
	}
	total := len(sessions)
	mu.Unlock()
	if open > 0 {
		t.Errorf("%d of %d router connections still open after Run returned", open, total)
	}
	time.Sleep(200 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before+2 {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		var ours []string
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testing.(*T).Run") {
				continue
			}
			if strings.Contains(g, "baremetal-ccm/pkg/bgp") || strings.Contains(g, "gobgp") {
				ours = append(ours, g)
			}
		}
		if len(ours) > 0 {
			t.Errorf("%d goroutines before, %d after Run returned; the speaker's:\n%s", before, after, strings.Join(ours, "\n\n"))
		}
	}
	for _, s := range sessions {
		_ = s.Close()
	}
}
