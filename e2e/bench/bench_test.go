package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func ms(n ...int) []time.Duration {
	out := make([]time.Duration, len(n))
	for i, v := range n {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

func TestSummarizeNearestRank(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- { // 100 ms … 1 ms, unsorted
		samples = append(samples, time.Duration(i)*time.Millisecond)
	}
	d := Summarize(samples)
	want := Distribution{N: 100, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond,
		Min: time.Millisecond, Max: 100 * time.Millisecond, Mean: 50500 * time.Microsecond}
	if d != want {
		t.Errorf("Summarize = %+v, want %+v", d, want)
	}
	if samples[0] != 100*time.Millisecond {
		t.Error("Summarize sorted its input")
	}
	if d := Summarize(ms(7)); d.P50 != 7*time.Millisecond || d.P99 != 7*time.Millisecond {
		t.Errorf("one sample: %+v", d)
	}
	if d := Summarize(nil); d != (Distribution{}) || d.String() != "n/a" {
		t.Errorf("no samples: %+v %q", d, d.String())
	}
	// Three samples: p50 is the 2nd, p90 and p99 the 3rd.
	if d := Summarize(ms(30, 10, 20)); d.P50 != 20*time.Millisecond || d.P90 != 30*time.Millisecond {
		t.Errorf("three samples: %+v", d)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{ms(5), 5 * time.Millisecond},
		{ms(9, 1, 5), 5 * time.Millisecond},
		{ms(4, 1, 3, 2), 2 * time.Millisecond},
	} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1500 * time.Microsecond: "1.5 ms",
		42 * time.Millisecond:   "42 ms",
		1270 * time.Millisecond: "1.27 s",
		-3 * time.Millisecond:   "-3.0 ms",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
	if got := FormatMiB(40 << 20); got != "40.0 MiB" {
		t.Errorf("FormatMiB(40 MiB) = %q", got)
	}
	if got := FormatMiB(3 << 29); got != "1.50 GiB" {
		t.Errorf("FormatMiB(1.5 GiB) = %q", got)
	}
}

func TestParseProcStatus(t *testing.T) {
	status := []byte("Name:\tnodeagent\nVmPeak:\t  900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nRssAnon:\t   10240 kB\nRssFile:\t   30720 kB\nRssShmem:\t       0 kB\nThreads:\t12\n")
	st, err := parseProcStatus(4242, status)
	if err != nil {
		t.Fatal(err)
	}
	want := ProcStats{RSS: 40 << 20, PeakRSS: 50 << 20, RSSAnon: 10 << 20, RSSFile: 30 << 20}
	if st != want {
		t.Errorf("parseProcStatus = %+v, want %+v", st, want)
	}
	for _, c := range []struct{ name, status, err string }{
		{"no VmRSS", "Name:\tx\n", "no VmRSS"},
		{"not a number", "VmRSS:\tlots kB\n", "VmRSS"},
		{"no unit", "VmRSS:\t40960\n", `malformed VmRSS line "VmRSS:\t40960"`},
		{"other unit", "VmHWM:\t50 MB\nVmRSS:\t40960 kB\n", "malformed VmHWM line"},
	} {
		if _, err := parseProcStatus(7, []byte(c.status)); err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "process 7") {
			t.Errorf("%s: err = %v, want one naming process 7 and %q", c.name, err, c.err)
		}
	}
}

// TestReadProcStatsCPU: the CPU figure of a process is its CPU-time clock,
// which utime+stime of /proc/<pid>/stat rounds down to 10 ms steps (each
// of the two, so by less than 20 ms in all); of a process that is gone it
// is an error.
func TestReadProcStatsCPU(t *testing.T) {
	before, err := ReadProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ticks := statCPU(t, os.Getpid())
	after, err := ReadProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		t.Fatal(err)
	}
	own := time.Duration(ts.Nano())
	if before.RSS == 0 || before.PeakRSS < before.RSS {
		t.Errorf("stats of this process = %+v", before)
	}
	if before.CPU <= 0 || after.CPU < before.CPU || own < after.CPU {
		t.Errorf("CPU of this process %v, then %v, then CLOCK_PROCESS_CPUTIME_ID %v: want positive and not decreasing", before.CPU, after.CPU, own)
	}
	if ticks > after.CPU || ticks <= before.CPU-20*time.Millisecond {
		t.Errorf("utime+stime %v, read between CPU clock readings %v and %v: want in (%v, %v]", ticks, before.CPU, after.CPU, before.CPU-20*time.Millisecond, after.CPU)
	}

	// Another process, then the same one gone.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := ReadProcStats(cmd.Process.Pid)
	if err != nil || st.CPU < 0 || st.RSS == 0 {
		t.Errorf("stats of a child process = %+v, %v", st, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := ReadProcStats(cmd.Process.Pid); err == nil || !strings.Contains(err.Error(), fmt.Sprint(cmd.Process.Pid)) {
		t.Errorf("a process gone: err = %v, want one naming it", err)
	}
	if _, err := processCPU(cmd.Process.Pid); err == nil || !strings.Contains(err.Error(), "CPU time of process") {
		t.Errorf("CPU time of a process gone: err = %v", err)
	}
	if _, err := ReadProcStats(-1); err == nil {
		t.Error("pid -1: no error")
	}
}

// statCPU is utime+stime of /proc/<pid>/stat, in USER_HZ (100 a second)
// steps: fields 14 and 15, counted after the command name's last ')'.
func statCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	var ticks int64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / 100
}

// TestReadRequests: a user's requests in the window, counted once each
// whatever the stages logged, and those answered.
func TestReadRequests(t *testing.T) {
	lines := []string{
		// In the window: a lease update (two stages, one request), a
		// status patch, a watch, a non-resource request.
		`{"auditID":"a1","stage":"ResponseStarted","verb":"update","user":{"username":"system:node:n1"},"objectRef":{"resource":"leases"},"requestReceivedTimestamp":"2026-01-01T00:00:10.000000Z"}`,
		`{"auditID":"a1","stage":"ResponseComplete","verb":"update","user":{"username":"system:node:n1"},"objectRef":{"resource":"leases"},"requestReceivedTimestamp":"2026-01-01T00:00:10.000000Z"}`,
		`{"auditID":"a2","stage":"ResponseComplete","verb":"patch","user":{"username":"system:node:n1"},"objectRef":{"resource":"nodes","subresource":"status"},"requestReceivedTimestamp":"2026-01-01T00:00:20.500000Z"}`,
		`{"auditID":"a3","stage":"ResponseStarted","verb":"watch","user":{"username":"system:node:n1"},"objectRef":{"resource":"pods"},"requestReceivedTimestamp":"2026-01-01T00:00:30.000000Z"}`,
		`{"auditID":"a4","stage":"ResponseComplete","verb":"get","user":{"username":"system:node:n1"},"requestURI":"/version","requestReceivedTimestamp":"2026-01-01T00:00:31.000000Z"}`,
		// Another node, and n1 outside the window.
		`{"auditID":"b1","stage":"ResponseComplete","verb":"update","user":{"username":"system:node:n10"},"objectRef":{"resource":"leases"},"requestReceivedTimestamp":"2026-01-01T00:00:10.000000Z"}`,
		`{"auditID":"a5","stage":"ResponseComplete","verb":"update","user":{"username":"system:node:n1"},"objectRef":{"resource":"leases"},"requestReceivedTimestamp":"2026-01-01T00:01:00.000000Z"}`,
		`{"auditID":"a0","stage":"ResponseComplete","verb":"update","user":{"username":"system:node:n1"},"objectRef":{"resource":"leases"},"requestReceivedTimestamp":"2026-01-01T00:00:09.999999Z"}`,
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	got, answered, err := ReadRequests(path, "system:node:n1", from, from.Add(50*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := Requests{"update leases": 1, "patch nodes/status": 1, "watch pods": 1, "get /version": 1}
	if got.String() != want.String() || got.Total() != 4 {
		t.Errorf("ReadRequests counts %s (total %d), want %s", got, got.Total(), want)
	}
	var keys []string
	for _, r := range answered {
		keys = append(keys, r.Key)
	}
	// The watch has no ResponseComplete yet.
	if want := []string{"update leases", "patch nodes/status", "get /version"}; !slices.Equal(keys, want) {
		t.Errorf("ReadRequests answered %v, want %v", keys, want)
	}
	if s := (Requests{}).String(); s != "none" {
		t.Errorf("empty String = %q", s)
	}

	if err := os.WriteFile(path, []byte(`{"user":{"username":"system:node:n1"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadRequests(path, "system:node:n1", from, from); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("malformed line: err = %v", err)
	}
	if _, _, err := ReadRequests(filepath.Join(t.TempDir(), "missing"), "u", from, from); err == nil {
		t.Error("missing file: no error")
	}
}

func TestTable(t *testing.T) {
	var tab Table
	tab.Add(Row{Metric: "a", Value: "1", Result: Verdict(true)})
	if tab.Failed() {
		t.Error("Failed with only passes")
	}
	tab.Add(Row{Metric: "b", Value: "2", Result: Verdict(false)})
	if !tab.Failed() {
		t.Error("not Failed with a FAIL row")
	}
	var out strings.Builder
	if err := tab.Write(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[2], "FAIL") || !strings.Contains(lines[1], "—") {
		t.Errorf("table:\n%s", out.String())
	}
}

// TestReadRequestsAnsweredAndUnderWay: the answered requests of a user in the
// window, in the order received, and what came while status patches were
// under way.
func TestReadRequestsAnsweredAndUnderWay(t *testing.T) {
	lines := []string{
		// Two patches overlapping (10.0-10.2, 10.1-10.4), one later
		// (11.0-11.05); an event created during the first, one between
		// them, a watch still open (no ResponseComplete), another node's
		// patch, and n1 outside the window.
		`{"auditID":"p2","stage":"ResponseComplete","verb":"patch","user":{"username":"system:node:n1"},"objectRef":{"resource":"pods","subresource":"status"},"requestReceivedTimestamp":"2026-01-01T00:00:10.100000Z","stageTimestamp":"2026-01-01T00:00:10.400000Z"}`,
		`{"auditID":"p1","stage":"ResponseComplete","verb":"patch","user":{"username":"system:node:n1"},"objectRef":{"resource":"pods","subresource":"status"},"requestReceivedTimestamp":"2026-01-01T00:00:10.000000Z","stageTimestamp":"2026-01-01T00:00:10.200000Z"}`,
		`{"auditID":"e1","stage":"ResponseComplete","verb":"create","user":{"username":"system:node:n1"},"objectRef":{"resource":"events"},"requestReceivedTimestamp":"2026-01-01T00:00:10.300000Z","stageTimestamp":"2026-01-01T00:00:10.310000Z"}`,
		`{"auditID":"e2","stage":"ResponseComplete","verb":"create","user":{"username":"system:node:n1"},"objectRef":{"resource":"events"},"requestReceivedTimestamp":"2026-01-01T00:00:10.400000Z","stageTimestamp":"2026-01-01T00:00:10.410000Z"}`,
		`{"auditID":"w1","stage":"ResponseStarted","verb":"watch","user":{"username":"system:node:n1"},"objectRef":{"resource":"pods"},"requestReceivedTimestamp":"2026-01-01T00:00:10.050000Z","stageTimestamp":"2026-01-01T00:00:10.051000Z"}`,
		`{"auditID":"p3","stage":"ResponseComplete","verb":"patch","user":{"username":"system:node:n1"},"objectRef":{"resource":"pods","subresource":"status"},"requestReceivedTimestamp":"2026-01-01T00:00:11.000000Z","stageTimestamp":"2026-01-01T00:00:11.050000Z"}`,
		`{"auditID":"b1","stage":"ResponseComplete","verb":"patch","user":{"username":"system:node:n2"},"objectRef":{"resource":"pods","subresource":"status"},"requestReceivedTimestamp":"2026-01-01T00:00:10.000000Z","stageTimestamp":"2026-01-01T00:00:12.000000Z"}`,
		`{"auditID":"a0","stage":"ResponseComplete","verb":"create","user":{"username":"system:node:n1"},"objectRef":{"resource":"events"},"requestReceivedTimestamp":"2026-01-01T00:00:09.000000Z","stageTimestamp":"2026-01-01T00:00:10.100000Z"}`,
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	counts, reqs, err := ReadRequests(path, "system:node:n1", from, from.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got := counts.String(); got != "patch pods/status: 3, create events: 2, watch pods: 1" {
		t.Errorf("ReadRequests counts %s", got)
	}
	var keys []string
	for _, r := range reqs {
		keys = append(keys, r.Key)
	}
	want := []string{"patch pods/status", "patch pods/status", "create events", "create events", "patch pods/status"}
	if !slices.Equal(keys, want) {
		t.Fatalf("ReadRequests answered %v, want %v", keys, want)
	}
	times, meanwhile := UnderWay(reqs, "patch pods/status")
	if !slices.Equal(times, []time.Duration{200 * time.Millisecond, 300 * time.Millisecond, 50 * time.Millisecond}) {
		t.Errorf("patch times = %v", times)
	}
	// e1 came while p2 was under way; e2 as p2 was answered.
	if meanwhile.String() != "create events: 1" {
		t.Errorf("requests while patches were under way: %s", meanwhile)
	}
}
