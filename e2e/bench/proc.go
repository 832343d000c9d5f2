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

	"golang.org/x/sys/unix"
)

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
	// CPU is the CPU time all of the process's threads used so far,
	// threads that exited included, to the nanosecond: the process's
	// CPU-time clock (see processCPU).
	CPU time.Duration
}

// ReadProcStats reads the figures of process pid (use os.Getpid() for this
// process).
func ReadProcStats(pid int) (ProcStats, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcStats{}, fmt.Errorf("read stats of process %d: %w", pid, err)
	}
	st, err := parseProcStatus(pid, status)
	if err != nil {
		return ProcStats{}, err
	}
	if st.CPU, err = processCPU(pid); err != nil {
		return ProcStats{}, err
	}
	return st, nil
}

// processCPU reads the CPU-time clock of process pid, the one
// clock_getcpuclockid(3) names: the scheduler's count of nanoseconds on a
// CPU of every thread of the process, live or exited. It is the figure
// utime+stime of /proc/<pid>/stat is made from (split by the tick samples,
// then cut to USER_HZ, 10 ms steps), unrounded. Summing
// /proc/<pid>/task/*/schedstat instead would miss the threads that exited
// (containerd's, for one: seconds of its CPU). Linux lets any process read
// another's CPU clock.
func processCPU(pid int) (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(processCPUClock(pid), &ts); err != nil {
		return 0, fmt.Errorf("read CPU time of process %d: %w", pid, err)
	}
	return time.Duration(ts.Nano()), nil
}

// processCPUClock is the clock id of process pid's CPU-time clock as the
// kernel encodes it (MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)): the
// complement of pid shifted by 3, a process (not a thread) clock, counting
// the scheduler's time.
func processCPUClock(pid int) int32 {
	const cpuclockSched = 2
	return int32((^pid)<<3 | cpuclockSched)
}

// parseProcStatus reads the RSS figures of process pid from its
// /proc/<pid>/status.
func parseProcStatus(pid int, status []byte) (ProcStats, error) {
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
