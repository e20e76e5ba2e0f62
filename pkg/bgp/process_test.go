package bgp

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/internal/childproc"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// A speaker in a process of its own: stops and restarts are process exits, as in
// production (mode retain leaves the connections to the kernel to close), and a
// kill -9 is a real one. The test binary runs itself with speakerEnv set.

const speakerEnv = "BAREMETAL_CCM_TEST_SPEAKER"

// childSpec is what the speaker process runs.
type childSpec struct {
	LocalASN uint32
	RouterID string
	OnStop   string
	Peers    []config.BGPPeer
	Prefixes []string
	// IPv6NextHop is next hop self for IPv6 paths on IPv4 sessions (optional).
	IPv6NextHop string
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(speakerEnv); spec != "" {
		os.Exit(runChildSpeaker(spec))
	}
	os.Exit(m.Run())
}

// runChildSpeaker announces the spec's prefixes with next hop self, prints READY
// once the speaker is ready, and stops on SIGTERM.
func runChildSpeaker(specJSON string) int {
	var spec childSpec
	if v := os.Getenv("BAREMETAL_CCM_TEST_SPEAKER_V"); v != "" {
		// Verbose speaker logs when debugging a test: BAREMETAL_CCM_TEST_SPEAKER_V=5.
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("v", v)
	}
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var nh6 netip.Addr
	if spec.IPv6NextHop != "" {
		nh6 = netip.MustParseAddr(spec.IPv6NextHop)
	}
	sp, err := New(Config{LocalASN: spec.LocalASN, RouterID: netip.MustParseAddr(spec.RouterID), Peers: spec.Peers, OnStop: spec.OnStop, DeferSessions: true, IPv6NextHop: nh6})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var paths []Path
	for _, p := range spec.Prefixes {
		paths = append(paths, Path{Prefix: netip.MustParsePrefix(p)})
	}
	sp.Announce("lb", paths)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	ctx = klog.NewContext(ctx, klog.Background())
	done := make(chan error, 1)
	go func() { done <- sp.Run(ctx) }()
	if err := sp.Synced(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	go func() {
		for ctx.Err() == nil {
			if ok, _ := sp.Ready(); ok {
				fmt.Println("READY")
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// speakerProc is a running speaker process.
type speakerProc struct {
	cmd   *exec.Cmd
	ready chan struct{}
	exit  chan error
	log   *strings.Builder
}

// startSpeakerProc starts a speaker process; it is killed at cleanup if still running.
func startSpeakerProc(t testing.TB, spec childSpec) *speakerProc {
	t.Helper()
	if spec.LocalASN == 0 {
		spec.LocalASN = 65000
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), speakerEnv+"="+string(b))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &speakerProc{cmd: cmd, ready: make(chan struct{}), exit: make(chan error, 1), log: &strings.Builder{}}
	cmd.Stderr = &syncWriter{b: p.log}
	if err := childproc.Start(cmd); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "READY" {
				close(p.ready)
			}
		}
		p.exit <- cmd.Wait()
		close(p.exit)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exit
	})
	return p
}

// waitReady waits until the process reports its speaker ready.
func (p *speakerProc) waitReady(t testing.TB) {
	t.Helper()
	select {
	case <-p.ready:
	case err := <-p.exit:
		t.Fatalf("speaker process exited before ready: %v\n%s", err, p.logText())
	case <-time.After(converge):
		t.Fatalf("speaker process not ready after %v\n%s", converge, p.logText())
	}
}

// stop sends SIGTERM and waits for the exit; it returns when the process exited.
func (p *speakerProc) stop(t testing.TB) time.Time {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exit:
		if err != nil {
			t.Errorf("speaker process: %v\n%s", err, p.logText())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("speaker process did not exit after SIGTERM\n%s", p.logText())
	}
	return time.Now()
}

// freeze stops the process (SIGSTOP): nothing leaves it any more, as with a host
// that lost power; it returns when the signal was sent. Cleanup kills it.
func (p *speakerProc) freeze() time.Time {
	at := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	return at
}

func (p *speakerProc) logText() string {
	w := p.cmd.Stderr.(*syncWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// syncWriter is a strings.Builder safe for a process's writes and a test's reads.
type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
