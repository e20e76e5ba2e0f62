//go:build linux

package ipmi

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

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
