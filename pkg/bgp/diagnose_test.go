package bgp

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
	"github.com/baremetal-ccm/baremetal-ccm/test/bird"
)

func TestCauseOfAndWarning(t *testing.T) {
	timeout := &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}
	refused := &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		err   error
		md5   bool
		cause string
		want  []string
	}{
		{timeout, true, "timeout", []string{"state active", "different TCP-MD5 password or none", "ACL or firewall", "port 179"}},
		{timeout, false, "timeout", []string{"expects a TCP-MD5 password (set passwordFile", "ACL or firewall"}},
		{refused, false, "refused", []string{"refused the connection", "neighbor statement"}},
		{nil, false, "none", []string{"(state active)", "expects a TCP-MD5 password"}},
		{errors.New("dial tcp: connect: network is unreachable"), false, "other", []string{"network is unreachable"}},
	} {
		if got := causeOf(tc.err); got != tc.cause {
			t.Errorf("causeOf(%v) = %s, want %s", tc.err, got, tc.cause)
		}
		msg := downWarning("active", tc.err, tc.md5)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("downWarning(%v, md5=%v) = %q, want it to contain %q", tc.err, tc.md5, msg, w)
			}
		}
	}
}

// logLines captures a logger's lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() klog.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 0})
}

func (l *logLines) matching(sub ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, s := range sub {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// TestBIRDPasswordMismatchWarns: BIRD expects a TCP-MD5 password and the speaker
// signs with another one. Nothing on the wire says so (BIRD's kernel drops the
// segments); after the grace the speaker logs one warning at the default level that
// names the password, with the last connection error, and not again while nothing
// changes; Peers and Ready say why.
func TestBIRDPasswordMismatchWarns(t *testing.T) {
	r := bird.Start(t, bird.Options{Speakers: []bird.Speaker{{Password: "right-one"}}})
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("wrong-one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := peerV4(r, 0)
	p.PasswordFile = file
	s, err := New(Config{LocalASN: 65000, RouterID: r.SpeakerV4(0), Peers: []config.BGPPeer{p}})
	if err != nil {
		t.Fatal(err)
	}
	var logs logLines
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.logger()))
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var warned []string
	err = bird.WaitFor(waitCtx(t), func(context.Context) (bool, error) {
		warned = logs.matching("Warning: BGP session not established", r.RouterV4.String())
		return len(warned) > 0, nil
	})
	if err != nil {
		t.Fatalf("no warning about the session: %v\n%s", err, strings.Join(logs.matching(""), "\n"))
	}
	if !strings.Contains(warned[0], "different TCP-MD5 password or none") {
		t.Errorf("warning does not name the password: %s", warned[0])
	}
	time.Sleep(3 * time.Second)
	if n := len(logs.matching("Warning: BGP session not established")); n != 1 {
		t.Errorf("%d warnings while nothing changed, want 1", n)
	}
	ps := s.Peers()
	if len(ps) != 1 || ps[0].State == "established" || ps[0].LastError == "" {
		t.Errorf("Peers() = %+v, want a peer down with its last connection error", ps)
	}
	if ok, why := s.Ready(); ok || len(why) != 1 || !strings.Contains(why[0], r.RouterV4.String()) {
		t.Errorf("Ready() = %v %v, want not ready naming the peer", ok, why)
	}
	t.Logf("warning: %s", warned[0])
}
