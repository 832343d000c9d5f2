package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// RunDelay is what the kernel's scheduler statistics
// (/proc/<pid>/task/<tid>/schedstat) say of a process's threads, summed:
// the time they ran on a CPU and the time they waited, runnable, in a run
// queue for one. The Go runtime's own scheduling latencies do not see the
// second: a goroutine "running" on a thread the kernel has not given a
// CPU waits there.
type RunDelay struct {
	OnCPU, Waiting time.Duration
}

// ReadRunDelay reads the RunDelay of process pid's threads as they are
// now; a thread that ended before took its figures with it.
func ReadRunDelay(pid int) (RunDelay, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return RunDelay{}, fmt.Errorf("read threads of process %d: %w", pid, err)
	}
	var d RunDelay
	for _, t := range tasks {
		data, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended meanwhile
		}
		if err != nil {
			return RunDelay{}, fmt.Errorf("read schedstat of process %d: %w", pid, err)
		}
		onCPU, waiting, err := parseSchedstat(data)
		if err != nil {
			return RunDelay{}, fmt.Errorf("process %d thread %s: %w", pid, t.Name(), err)
		}
		d.OnCPU += onCPU
		d.Waiting += waiting
	}
	return d, nil
}

// parseSchedstat reads a schedstat line: nanoseconds on a CPU, nanoseconds
// waiting in a run queue, time slices.
func parseSchedstat(data []byte) (onCPU, waiting time.Duration, err error) {
	fields := strings.Fields(string(data))
	if len(fields) != 3 {
		return 0, 0, fmt.Errorf("malformed schedstat %q", data)
	}
	var ns [2]int64
	for i := range ns {
		if ns[i], err = strconv.ParseInt(fields[i], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("malformed schedstat %q: %w", data, err)
		}
	}
	return time.Duration(ns[0]), time.Duration(ns[1]), nil
}

// Sub is d less an earlier reading.
func (d RunDelay) Sub(before RunDelay) RunDelay {
	return RunDelay{OnCPU: d.OnCPU - before.OnCPU, Waiting: d.Waiting - before.Waiting}
}
