package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on
// every Linux architecture Go supports.
const userHZ = 100

// ProcStats are what the kernel reports for one process.
type ProcStats struct {
	// RSS is VmRSS and PeakRSS VmHWM of /proc/<pid>/status, in bytes.
	RSS, PeakRSS uint64
	// RSSAnon and RSSFile split RSS (RssAnon and RssFile of
	// /proc/<pid>/status, in bytes): anonymous memory (heap, stacks, the
	// runtime's own) and file-backed pages (the executable's text and
	// read-only data, shared libraries); RSS less both is shared memory.
	// Zero on kernels older than 4.5, which do not report them.
	RSSAnon, RSSFile uint64
	// CPU is utime + stime of /proc/<pid>/stat: the CPU time all of the
	// process's threads used so far, in 10 ms steps.
	CPU time.Duration
}

// ReadProcStats reads the figures of process pid (use os.Getpid() for this
// process).
func ReadProcStats(pid int) (ProcStats, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcStats{}, fmt.Errorf("read stats of process %d: %w", pid, err)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcStats{}, fmt.Errorf("read stats of process %d: %w", pid, err)
	}
	return parseProcStats(pid, status, stat)
}

func parseProcStats(pid int, status, stat []byte) (ProcStats, error) {
	var st ProcStats
	var haveRSS bool
	s := bufio.NewScanner(bytes.NewReader(status))
	for s.Scan() {
		key, value, ok := strings.Cut(s.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM" && key != "RssAnon" && key != "RssFile") {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) != 2 || fields[1] != "kB" {
			return ProcStats{}, fmt.Errorf("process %d: malformed %s line %q", pid, key, s.Text())
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return ProcStats{}, fmt.Errorf("process %d: %s: %w", pid, key, err)
		}
		switch key {
		case "VmRSS":
			st.RSS, haveRSS = kb<<10, true
		case "VmHWM":
			st.PeakRSS = kb << 10
		case "RssAnon":
			st.RSSAnon = kb << 10
		case "RssFile":
			st.RSSFile = kb << 10
		}
	}
	if !haveRSS {
		return ProcStats{}, fmt.Errorf("process %d: no VmRSS in /proc/%d/status (a zombie?)", pid, pid)
	}
	// The command name may hold spaces and parentheses; the fields resume
	// after the last ')' with the state (field 3); utime and stime are
	// fields 14 and 15.
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return ProcStats{}, fmt.Errorf("process %d: malformed /proc/%d/stat", pid, pid)
	}
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 13 {
		return ProcStats{}, fmt.Errorf("process %d: /proc/%d/stat has %d fields after the name, want at least 13", pid, pid, len(fields))
	}
	var ticks uint64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return ProcStats{}, fmt.Errorf("process %d: cpu time %q: %w", pid, f, err)
		}
		ticks += v
	}
	st.CPU = time.Duration(ticks) * time.Second / userHZ
	return st, nil
}
