package framework

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// RSS returns the CCM's resident set size in bytes (VmRSS of /proc/<pid>/status;
// Linux only).
func (c *CCM) RSS() (int64, error) {
	select {
	case <-c.done:
		return 0, fmt.Errorf("CCM pid %d has exited", c.PID())
	default:
	}
	return ProcRSS(c.PID())
}

// ProcRSS returns VmRSS of /proc/<pid>/status in bytes.
func ProcRSS(pid int) (int64, error) { return procStatusKB(pid, "VmRSS") }

// ProcRSSParts returns the anonymous (heap, stacks) and file-backed (the binary's
// mapped code and data, reclaimable) parts of the process's RSS in bytes: RssAnon and
// RssFile of /proc/<pid>/status.
func ProcRSSParts(pid int) (anon, file int64, err error) {
	if anon, err = procStatusKB(pid, "RssAnon"); err != nil {
		return 0, 0, err
	}
	file, err = procStatusKB(pid, "RssFile")
	return anon, file, err
}

// procStatusKB returns the "<field>: N kB" line of /proc/<pid>/status in bytes.
func procStatusKB(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest) // "12345 kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("pid %d: unexpected %s line %q", pid, field, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d: %s %q: %w", pid, field, line, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("pid %d: no %s in /proc/%d/status", pid, field, pid)
}

// CPUTime returns the user plus system CPU time the CCM has used so far
// (/proc/<pid>/stat; Linux only).
func (c *CCM) CPUTime() (time.Duration, error) { return ProcCPUTime(c.PID()) }

// ProcCPUTime returns utime+stime of /proc/<pid>/stat. Linux reports them in clock
// ticks of USER_HZ, which is 100 on every architecture Go supports.
func ProcCPUTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')') // the command name may contain spaces
	if i < 0 {
		return 0, fmt.Errorf("pid %d: malformed /proc/%d/stat", pid, pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state): utime is field 14, stime 15
	if len(f) < 13 {
		return 0, fmt.Errorf("pid %d: short /proc/%d/stat", pid, pid)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d: /proc/%d/stat: %w", pid, pid, err)
		}
		ticks += n
	}
	const userHZ = 100
	return time.Duration(ticks) * time.Second / userHZ, nil
}
