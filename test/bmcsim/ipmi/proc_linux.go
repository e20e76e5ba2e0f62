//go:build linux

package ipmi

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

var (
	spawnOnce sync.Once
	spawnReqs chan func()
)

// startProcess starts cmd with Pdeathsig SIGKILL from a dedicated goroutine
// locked to its OS thread for the life of the test binary. The kernel sends
// Pdeathsig when the thread that forked the child exits
// (https://go.dev/issue/27505), and Go terminates a thread whose goroutine
// exits while locked to it; forking from a thread that never exits makes the
// signal mean "the test binary died".
func startProcess(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for f := range spawnReqs {
				f()
			}
		}()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	errc := make(chan error, 1)
	spawnReqs <- func() { errc <- cmd.Start() }
	return <-errc
}

// ownsUDPPort reports whether process pid holds a UDP socket bound to
// 127.0.0.1:port: the socket's inode in /proc/<pid>/net/udp must be one of
// the process's file descriptors.
func ownsUDPPort(pid, port int) (bool, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/udp", pid))
	if err != nil {
		return false, err
	}
	defer f.Close()
	// 127.0.0.1 as the kernel prints a __be32 with %08X: little- or big-endian hosts.
	want := map[string]bool{
		fmt.Sprintf("0100007F:%04X", port): true,
		fmt.Sprintf("7F000001:%04X", port): true,
	}
	inodes := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
		if len(fields) >= 10 && want[fields[1]] {
			inodes["socket:["+fields[9]+"]"] = true
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	if len(inodes) == 0 {
		return false, nil
	}
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		if target, err := os.Readlink(fdDir + "/" + fd.Name()); err == nil && inodes[target] {
			return true, nil
		}
	}
	return false, nil
}
