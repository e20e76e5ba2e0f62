package bmc

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	idcheck "github.com/baremetal-ccm/baremetal-ccm/pkg/identity"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
	"github.com/baremetal-ccm/baremetal-ccm/test/bmcsim/ipmi"
)

// fakeIPMI answers ipmitool commands: power status "off", Get System GUID per guid
// (an error when guidErr is set), counting the commands.
type fakeIPMI struct {
	mu       sync.Mutex
	cmds     []string
	guidErr  error
	guidHeld chan struct{} // when set, Get System GUID signals guidIn and waits for it
	guidIn   chan struct{}
}

func (f *fakeIPMI) run(ctx context.Context, t Target, _ Credentials, args ...string) (string, error) {
	cmd := strings.Join(args, " ")
	f.mu.Lock()
	f.cmds = append(f.cmds, t.Host+": "+cmd)
	f.mu.Unlock()
	if cmd != "raw 0x06 0x37" {
		return "Chassis Power is off\n", nil
	}
	if f.guidHeld != nil {
		f.guidIn <- struct{}{}
		select {
		case <-f.guidHeld:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if f.guidErr != nil {
		return "", f.guidErr
	}
	return " 01 4d 4e 4f c0 b5 52 80 4a 10 00 37 4c 4c 45 44\n", nil
}

func (f *fakeIPMI) commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cmds...)
}

func ipmiTarget(t *testing.T, host string) Target {
	return Target{Host: host, Protocol: inventory.ProtocolIPMI, Address: "127.0.0.1", Port: 6230, CredentialsFile: writeCreds(t, "admin", "pw", 0o600)}
}

// TestIPMIGUIDWithinTheBudget: a refused login on the Get System GUID read counts
// against the failed-login budget like one on the power read: the next read is not
// tried (ErrLoginBudget) instead of logging in twice more with refused credentials.
func TestIPMIGUIDWithinTheBudget(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := &fakeIPMI{guidErr: classify(errors.New("ipmitool raw 0x06 0x37: RAKP 2 HMAC is invalid"))}
	s := NewSessions(nil, time.Minute)
	s.ipmi = f.run
	defer s.Close(ctx, time.Second)
	tgt := ipmiTarget(t, "h1")
	if _, _, err := s.ReadPower(ctx, tgt); !errors.Is(err, ErrAuth) {
		t.Fatalf("refused GUID read: %v, want ErrAuth", err)
	}
	n := len(f.commands())
	if _, _, err := s.ReadPower(ctx, tgt); !errors.Is(err, ErrLoginBudget) {
		t.Errorf("read after a refused GUID login: %v, want ErrLoginBudget", err)
	}
	if got := f.commands(); len(got) != n {
		t.Errorf("ipmitool ran again with refused credentials: %v", got[n:])
	}
}

// TestIPMIGUIDUnderTheBMCLock: the Get System GUID read holds the BMC like the power
// read: another host's read on the same BMC (blades) waits for it, never a second
// RMCP+ session at the same time.
func TestIPMIGUIDUnderTheBMCLock(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := &fakeIPMI{guidHeld: make(chan struct{}), guidIn: make(chan struct{}, 1)}
	s := NewSessions(nil, time.Minute)
	s.ipmi = f.run
	defer s.Close(ctx, time.Second)
	a, b := ipmiTarget(t, "blade-1"), ipmiTarget(t, "blade-2")
	done := make(chan error, 1)
	go func() {
		_, _, err := s.ReadPower(ctx, a)
		done <- err
	}()
	<-f.guidIn // blade-1's GUID read is under way
	bctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, err := s.ReadPower(bctx, b)
	cancel()
	close(f.guidHeld)
	if aerr := <-done; aerr != nil {
		t.Fatal(aerr)
	}
	for _, c := range f.commands() {
		if strings.HasPrefix(c, "blade-2") {
			t.Fatalf("blade-2 ran %q while blade-1's GUID read held the BMC (err %v)", c, err)
		}
	}
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("blade-2 = %v, want ErrUnreachable (the previous call has not returned)", err)
	}
}

// TestIPMIPrivilegeRefusal: a real ipmi_sim BMC whose Get System GUID is refused
// with 0xD4 (insufficient privilege) after login and power status worked: the error
// is ErrAccessDenied (the power state stays unknown), not refused credentials, and
// spends no failed-login budget; the GUID it sends fully reversed (IPMI order)
// matches a Node in RFC order and an inventory in SMBIOS order.
func TestIPMIPrivilegeRefusal(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const rfc = "4c4c4544-0037-4a10-8052-b5c04f4e4d01"
	const smbios = "44454c4c-3700-104a-8052-b5c04f4e4d01"
	const ipmiOrder = "014d4e4f-c0b5-5280-4a10-00374c4c4544" // the SMBIOS bytes reversed
	lab, err := ipmi.Start(ctx, t.TempDir(), 2, ipmi.Options{Username: "admin", Password: "ipmi-pw-42", PoweredOff: true,
		SystemGUIDs: []string{ipmiOrder, ipmiOrder}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Stop)
	refusing, err := ipmi.Start(ctx, t.TempDir(), 1, ipmi.Options{Username: "admin", Password: "ipmi-pw-42", PoweredOff: true,
		Refuse: []ipmi.Refusal{{NetFn: 0x06, Cmd: 0x37, Code: 0xd4}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(refusing.Stop)
	creds := writeCreds(t, "admin", "ipmi-pw-42", 0o600)
	s := NewSessions(nil, time.Minute)
	defer s.Close(ctx, 5*time.Second)
	read := func(b *ipmi.BMC) (string, string, error) {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return s.ReadPower(cctx, Target{Host: b.Name(), Protocol: "ipmi", Address: b.Host(), Port: int32(b.Port()), CredentialsFile: creds})
	}

	raw, uuid, err := read(lab.BMCs()[0])
	if err != nil || Normalize(raw) != PowerOff || uuid != ipmiOrder {
		t.Fatalf("off with GUID: %q, %q, %v; want %s", raw, uuid, err, ipmiOrder)
	}
	node := &v1.Node{Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{SystemUUID: rfc}}}
	if err := idcheck.Check(node, &inventory.Host{Name: "h", SystemUUID: smbios}, uuid); err != nil {
		t.Errorf("one machine in three byte orders: %v", err)
	}

	t.Setenv("PATH", refusing.ToolDir()+string(os.PathListSeparator)+os.Getenv("PATH"))
	for i := range 3 {
		_, _, err := read(refusing.BMCs()[0])
		if !errors.Is(err, ErrAccessDenied) || !errors.Is(err, ErrUnknownState) || errors.Is(err, ErrAuth) || errors.Is(err, ErrLoginBudget) {
			t.Fatalf("read %d, GUID refused with 0xD4: %v; want ErrAccessDenied, not ErrAuth", i, err)
		}
		if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "ipmi-pw-42") {
			t.Errorf("error: %q", err)
		}
	}
}

// TestIPMIGUIDErrorIsNoEvidence: a Get System GUID that fails (busy: 0xC0) is an
// unknown state, never "off" without an identity; only 0xC1 (the optional command not
// implemented) means the BMC reports none. ipmitool -v prints "Invalid command" for
// its login probes on every BMC, which made any failure look like 0xC1.
func TestIPMIGUIDErrorIsNoEvidence(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	creds := writeCreds(t, "admin", "ipmi-pw-42", 0o600)
	for _, tc := range []struct {
		code    byte
		wantErr bool
	}{{0xc0, true}, {0xc1, false}} {
		lab, err := ipmi.Start(ctx, t.TempDir(), 1, ipmi.Options{Username: "admin", Password: "ipmi-pw-42", PoweredOff: true,
			Refuse: []ipmi.Refusal{{NetFn: 0x06, Cmd: 0x37, Code: tc.code}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(lab.Stop)
		t.Setenv("PATH", lab.ToolDir()+string(os.PathListSeparator)+os.Getenv("PATH"))
		b := lab.BMCs()[0]
		s := NewSessions(nil, time.Minute)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		raw, uuid, err := s.ReadPower(cctx, Target{Host: b.Name(), Protocol: "ipmi", Address: b.Host(), Port: int32(b.Port()), CredentialsFile: creds})
		cancel()
		s.Close(ctx, time.Second)
		if tc.wantErr && (!errors.Is(err, ErrUnknownState) || uuid != "") {
			t.Errorf("GUID answered 0x%x: %q, %q, %v; want ErrUnknownState", tc.code, raw, uuid, err)
		}
		if !tc.wantErr && (err != nil || Normalize(raw) != PowerOff || uuid != "") {
			t.Errorf("GUID not implemented (0x%x): %q, %q, %v; want off without a GUID", tc.code, raw, uuid, err)
		}
	}
}
