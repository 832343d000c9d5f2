package runtime_test

import (
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// logFiles lists the files of a container's log directory, by name.
func logFiles(t *testing.T, log string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(log))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestLogRotation: a running container's log that reaches the maximum size
// is moved aside with a timestamp and reopened by the runtime, the rotated
// file is gzipped at the next rotation and the oldest go so that at most
// MaxFiles remain; an exited container's log and a log under the size are
// left alone.
func TestLogRotation(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	rot, err := runtime.NewLogRotator(runtime.LogRotatorOptions{Runtime: h.client.RuntimeService(), MaxSize: 100, MaxFiles: 3, Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	pod := newPod("chatty", ctr("app"), ctr("done"))
	h.sync(pod, nil)
	h.exitNow(pod, "done", 0)
	log := filepath.Join(runtime.PodLogsDirectory(h.logsDir, "default", "chatty", pod.UID), "app", "0.log")
	doneLog := filepath.Join(filepath.Dir(filepath.Dir(log)), "done", "0.log")
	appendTo(t, doneLog, strings.Repeat("d", 500))

	// Under the size: nothing happens.
	appendTo(t, log, strings.Repeat("a", 50))
	if err := rot.RotateLogs(h.ctx); err != nil {
		t.Fatal(err)
	}
	if got := logFiles(t, log); !slices.Equal(got, []string{"0.log"}) || h.cri.Calls("ReopenContainerLog") != 0 {
		t.Fatalf("files %v, reopens %d under the maximum size", got, h.cri.Calls("ReopenContainerLog"))
	}

	first := h.clk.Now().Format("20060102-150405")
	appendTo(t, log, strings.Repeat("b", 60))
	if err := rot.RotateLogs(h.ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := logFiles(t, log), []string{"0.log", "0.log." + first}; !slices.Equal(got, want) {
		t.Fatalf("files after a rotation %v, want %v", got, want)
	}
	if data, _ := os.ReadFile(log + "." + first); !strings.HasSuffix(string(data), strings.Repeat("a", 50)+strings.Repeat("b", 60)) {
		t.Errorf("rotated file holds %q", data)
	}
	if fi, err := os.Stat(log); err != nil || fi.Size() >= 100 {
		t.Fatalf("the reopened log: %v, %v", fi, err)
	}
	if n := h.cri.Calls("ReopenContainerLog"); n != 1 {
		t.Errorf("%d ReopenContainerLog calls, want 1", n)
	}

	// Two more rotations: the first file is gzipped, then removed (3 files
	// at most: the log, the newest rotated and one gzipped).
	h.clk.Step(time.Second)
	second := h.clk.Now().Format("20060102-150405")
	appendTo(t, log, strings.Repeat("c", 120))
	statuses := h.cri.Calls("ContainerStatus")
	if err := rot.RotateLogs(h.ctx); err != nil {
		t.Fatal(err)
	}
	// The log path of a container already seen is not asked again.
	if n := h.cri.Calls("ContainerStatus") - statuses; n != 0 {
		t.Errorf("%d ContainerStatus calls in a round for a container seen before, want 0", n)
	}
	if got, want := logFiles(t, log), []string{"0.log", "0.log." + first + ".gz", "0.log." + second}; !slices.Equal(got, want) {
		t.Fatalf("files after a second rotation %v, want %v", got, want)
	}
	if got := gunzip(t, log+"."+first+".gz"); !strings.HasPrefix(got, strings.Repeat("a", 50)) {
		t.Errorf("gzipped log holds %q", got)
	}
	h.clk.Step(time.Second)
	third := h.clk.Now().Format("20060102-150405")
	// A leftover of a failed compression is cleaned up.
	must(t, os.WriteFile(log+"."+second+".tmp", []byte("x"), 0o640))
	appendTo(t, log, strings.Repeat("e", 120))
	if err := rot.RotateLogs(h.ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := logFiles(t, log), []string{"0.log", "0.log." + second + ".gz", "0.log." + third}; !slices.Equal(got, want) {
		t.Fatalf("files after a third rotation %v, want %v", got, want)
	}
	if got := logFiles(t, doneLog); !slices.Equal(got, []string{"0.log"}) {
		t.Errorf("an exited container's log was rotated: %v", got)
	}

	// A log that went missing is reopened.
	must(t, os.Remove(log))
	if err := rot.RotateLogs(h.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(log); err != nil {
		t.Errorf("a missing log was not reopened: %v", err)
	}

	// Removing the container removes its rotated logs too.
	h.inBackground(time.Second, func() {
		if err := h.pm.KillPod(h.ctx, pod, h.status(pod).RunningPod(), nil); err != nil {
			t.Error(err)
		}
	})
	must(t, h.pm.RemovePod(h.ctx, pod.UID))
	if _, err := os.Stat(filepath.Dir(log)); !os.IsNotExist(err) {
		t.Errorf("log directory after RemovePod: %v", err)
	}
}

// rotatorOverLog runs a pod of one container, name, on fakecri with 20
// bytes in its log, and returns a rotator of o (on the harness's runtime
// and clock) and the log's path.
func rotatorOverLog(t *testing.T, name string, o runtime.LogRotatorOptions) (*harness, *runtime.LogRotator, string) {
	t.Helper()
	h := newHarness(t, fakecri.Options{}, nil)
	o.Runtime, o.Clock = h.client.RuntimeService(), h.clk
	rot, err := runtime.NewLogRotator(o)
	if err != nil {
		t.Fatal(err)
	}
	pod := newPod(name, ctr("app"))
	h.sync(pod, nil)
	log := filepath.Join(runtime.PodLogsDirectory(h.logsDir, "default", name, pod.UID), "app", "0.log")
	appendTo(t, log, strings.Repeat("x", 20))
	return h, rot, log
}

// TestLogRotationRunning: a round in which Options.Running says no
// container runs asks the runtime nothing and rotates nothing; once it
// says one may run, the round lists and rotates as before.
func TestLogRotationRunning(t *testing.T) {
	running := false
	h, rot, log := rotatorOverLog(t, "quiet", runtime.LogRotatorOptions{MaxSize: 10, Running: func() bool { return running }})
	lists := h.cri.Calls("ListContainers")
	if err := rot.RotateLogs(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.cri.Calls("ListContainers") - lists; n != 0 {
		t.Errorf("%d ListContainers calls in a round with no container running, want 0", n)
	}
	if got := logFiles(t, log); !slices.Equal(got, []string{"0.log"}) {
		t.Errorf("files %v after a round with no container running, want the log alone", got)
	}
	running = true
	if err := rot.RotateLogs(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.cri.Calls("ListContainers") - lists; n != 1 {
		t.Errorf("%d ListContainers calls, want 1", n)
	}
	if n := len(logFiles(t, log)); n != 2 {
		t.Errorf("%d log files after a round with the container running, want 2 (rotated)", n)
	}
}

// TestLogRotatorRun: Run rotates every MonitorInterval; a negative maximum
// size disables rotation.
func TestLogRotatorRun(t *testing.T) {
	h, rot, log := rotatorOverLog(t, "run", runtime.LogRotatorOptions{MaxSize: 10, Workers: 4})
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error)
	go func() { done <- rot.Run(ctx) }()
	// Wait for the rotation to finish (the log reopened), not just to
	// begin: cancelling Run mid-way would undo it.
	poll(t, func() bool {
		if h.clk.Waiters() > 0 {
			h.clk.Step(runtime.DefaultContainerLogMonitorInterval)
		}
		_, err := os.Stat(log)
		return len(logFiles(t, log)) == 2 && err == nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	off, err := runtime.NewLogRotator(runtime.LogRotatorOptions{Runtime: h.client.RuntimeService(), MaxSize: -1, Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	appendTo(t, log, strings.Repeat("y", 20))
	if err := off.RotateLogs(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(logFiles(t, log)); n != 2 {
		t.Errorf("disabled rotation rotated: %d files", n)
	}
	if _, err := runtime.NewLogRotator(runtime.LogRotatorOptions{Runtime: h.client.RuntimeService(), MaxFiles: 1}); err == nil {
		t.Error("MaxFiles 1 was accepted")
	}
}

// TestLogRotationTakesThePathsThePLEGHolds: with Options.LogPath answered
// by the PLEG, a round asks the runtime for no log path the sync's own
// read of a new container handed the PLEG (the runtime's ContainerStatus
// log path), and rotates that log as before; a container it does not hold
// is asked about.
func TestLogRotationTakesThePathsThePLEGHolds(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	p, b := runObservedPLEG(t, h)
	known := newPod("known", ctr("app"))
	if res := b.SyncPod(h.ctx, known); res.Err != nil {
		t.Fatal(res.Err)
	}
	// Synced without the PLEG. Its relist on the event stream connecting
	// may still read this pod, so LogPath below answers for it as a PLEG
	// that does not hold it.
	other := newPod("other", ctr("app"))
	h.sync(other, nil)
	app := h.container(known, "app")
	log := filepath.Join(runtime.PodLogsDirectory(h.logsDir, "default", "known", known.UID), "app", "0.log")
	poll(t, func() bool { _, ok := p.ContainerLogPath(known.UID, app.ID); return ok })
	if got, _ := p.ContainerLogPath(known.UID, app.ID); got != log {
		t.Fatalf("the PLEG holds log path %q, want %q", got, log)
	}
	otherLog := filepath.Join(runtime.PodLogsDirectory(h.logsDir, "default", "other", other.UID), "app", "0.log")
	appendTo(t, log, strings.Repeat("x", 20))
	appendTo(t, otherLog, strings.Repeat("y", 20))

	var asked []string
	// The rotator's own ContainerStatus calls: the running PLEG reads pods
	// in the background too.
	rs := &statusCounter{RuntimeService: h.client.RuntimeService()}
	rot, err := runtime.NewLogRotator(runtime.LogRotatorOptions{Runtime: rs, Clock: h.clk, MaxSize: 10,
		LogPath: func(uid types.UID, id string) (string, bool) {
			asked = append(asked, string(uid))
			if uid == other.UID {
				return "", false
			}
			return p.ContainerLogPath(uid, id)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rot.RotateLogs(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := rs.statuses.Load(); n != 1 {
		t.Errorf("%d ContainerStatus calls in the round, want 1 (the container the PLEG does not hold)", n)
	}
	slices.Sort(asked)
	if want := []string{string(known.UID), string(other.UID)}; !slices.Equal(asked, want) {
		t.Errorf("LogPath asked for pods %v, want %v (each by its label)", asked, want)
	}
	for _, l := range []string{log, otherLog} {
		if n := len(logFiles(t, l)); n != 2 {
			t.Errorf("%d files of %s after the round, want 2 (rotated)", n, l)
		}
	}
}

// statusCounter counts the ContainerStatus calls made through it.
type statusCounter struct {
	cri.RuntimeService
	statuses atomic.Int64
}

func (c *statusCounter) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	c.statuses.Add(1)
	return c.RuntimeService.ContainerStatus(ctx, id, verbose)
}
