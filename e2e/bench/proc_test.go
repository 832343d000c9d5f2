package bench

import (
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestParseSchedstat reads a schedstat line's time on a CPU and time
// waiting in a run queue, and refuses a malformed one.
func TestParseSchedstat(t *testing.T) {
	onCPU, waiting, err := parseSchedstat([]byte("691457 1200 3\n"))
	if err != nil || onCPU != 691457*time.Nanosecond || waiting != 1200*time.Nanosecond {
		t.Errorf("parseSchedstat = %v, %v, %v; want 691457ns, 1200ns", onCPU, waiting, err)
	}
	if _, _, err := parseSchedstat([]byte("12 x 3")); err == nil {
		t.Error("a malformed line parsed")
	}
}

// TestReadRunDelayCountsThisProcessesCPU: this process's threads' time on
// a CPU grows by at least what a busy loop spends on one.
func TestReadRunDelayCountsThisProcessesCPU(t *testing.T) {
	before, err := ReadRunDelay(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	busy := 20 * time.Millisecond
	// The loop runs on this thread, which then sleeps in the kernel: a
	// thread's schedstat counts its time on a CPU up to its last tick or
	// switch, so a thread still running reads up to a tick short; the
	// switch into the sleep brings its count up to date.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	var x uint64
	for time.Since(start) < busy {
		x++
	}
	if err := unix.Nanosleep(&unix.Timespec{Nsec: int64(time.Millisecond)}, nil); err != nil {
		t.Fatal(err)
	}
	after, err := ReadRunDelay(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The loop ran for busy of wall time, on a CPU or waiting for one.
	if d := after.Sub(before); d.OnCPU+d.Waiting < busy*9/10 {
		t.Errorf("over a %v busy loop (%d turns) the threads ran %v and waited %v", busy, x, d.OnCPU, d.Waiting)
	}
}
