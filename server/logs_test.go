package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

var logT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// criLines renders CRI log lines "line<i>" for i in [from, to], line i
// stamped logT0+i seconds, odd ones on stderr.
func criLines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		stream := "stdout"
		if i%2 == 1 {
			stream = "stderr"
		}
		fmt.Fprintf(&b, "%s %s F line%d\n", logT0.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), stream, i)
	}
	return b.String()
}

func plain(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line%d\n", i)
	}
	return b.String()
}

func TestParseCRILog(t *testing.T) {
	for _, tc := range []struct {
		in, log, stream string
		err             bool
	}{
		{in: "2016-10-06T00:17:09.669794202Z stdout F log content 1\n", log: "log content 1\n", stream: "stdout"},
		{in: "2016-10-06T00:17:09.669794203Z stderr P partial\n", log: "partial", stream: "stderr"},
		{in: "2016-10-06T00:17:09.669794203Z stderr F:x:y tagged\n", log: "tagged\n", stream: "stderr"},
		{in: "2016-10-06T00:17:09Z stdout F \n", log: "\n", stream: "stdout"},
		{in: "not-a-time stdout F x\n", err: true},
		{in: "2016-10-06T00:17:09Z stdin F x\n", err: true},
		{in: "2016-10-06T00:17:09Z stdout\n", err: true},
		{in: "nospace", err: true},
	} {
		var m logMessage
		err := parseCRILog([]byte(tc.in), &m)
		if (err != nil) != tc.err || (!tc.err && (string(m.log) != tc.log || string(m.stream) != tc.stream)) {
			t.Errorf("parse %q: %q %q %v", tc.in, m.log, m.stream, err)
		}
	}
}

func TestTailStart(t *testing.T) {
	for _, tc := range []struct {
		content string
		n       int64
		want    string
		found   int64
	}{
		{"a\nb\nc\n", 2, "b\nc\n", 2},
		{"a\nb\nc\n", 3, "a\nb\nc\n", 3},
		{"a\nb\nc\n", 9, "a\nb\nc\n", 3},
		{"a\nb", 1, "b", 1},
		{"\n\n", 1, "\n", 1},
		{"", 3, "", 0},
		{"a\n", 0, "", 0},
		{strings.Repeat("x", 5000) + "\n" + strings.Repeat("y", 5000) + "\n", 1, strings.Repeat("y", 5000) + "\n", 1},
	} {
		r := strings.NewReader(tc.content)
		off, found, err := tailStart(r, tc.n)
		if err != nil || tc.content[off:] != tc.want || found != tc.found {
			t.Errorf("tail %d of %q: offset %d found %d err %v", tc.n, tc.content[:min(len(tc.content), 20)], off, found, err)
		}
	}
}

type logHarness struct {
	t     *testing.T
	dir   string
	rt    *fakeRuntime
	clk   *clocktesting.FakeClock
	pod   *v1.Pod
	state v1.ContainerStatus
	opts  Options
}

func newLogHarness(t *testing.T) *logHarness {
	h := &logHarness{t: t, dir: t.TempDir(), clk: clocktesting.NewFakeClock(logT0.Add(time.Hour))}
	h.pod = testPod("default", "web", "app")
	h.rt = &fakeRuntime{statuses: map[string]*runtimeapi.ContainerStatus{}}
	h.state = v1.ContainerStatus{
		Name: "app", ContainerID: "containerd://c1",
		State:                v1.ContainerState{Running: &v1.ContainerStateRunning{}},
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ContainerID: "containerd://c0"}},
	}
	h.addContainer("c0", "0.log", runtimeapi.ContainerState_CONTAINER_EXITED, criLines(0, 0))
	h.addContainer("c1", "1.log", runtimeapi.ContainerState_CONTAINER_RUNNING, criLines(1, 4))
	h.opts = baseOptions(h.pod)
	h.opts.Runtime = h.rt
	h.opts.Clock = h.clk
	h.opts.PodStatus = func(uid types.UID) (v1.PodStatus, bool) {
		return v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{h.state}}, uid == h.pod.UID
	}
	return h
}

func (h *logHarness) logPath(name string) string { return filepath.Join(h.dir, "app", name) }

func (h *logHarness) addContainer(id, file string, state runtimeapi.ContainerState, content string) {
	if err := os.MkdirAll(filepath.Join(h.dir, "app"), 0o755); err != nil {
		h.t.Fatal(err)
	}
	h.write(file, content)
	h.rt.statuses[id] = &runtimeapi.ContainerStatus{Id: id, State: state, LogPath: h.logPath(file)}
}

func (h *logHarness) write(file, content string) {
	if err := os.WriteFile(h.logPath(file), []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *logHarness) writeGz(file, content string) {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(content))
	_ = zw.Close()
	h.write(file, b.String())
}

func (h *logHarness) get(query string) (int, string) {
	h.t.Helper()
	code, body, _ := do(h.t, mustNew(h.t, h.opts).Handler(), "GET", "/containerLogs/default/web/app?"+query, nil)
	return code, body
}

func TestContainerLogsQuery(t *testing.T) {
	h := newLogHarness(t)
	for _, tc := range []struct {
		query string
		want  string
	}{
		{"", plain(1, 4)},
		{"tailLines=2", plain(3, 4)},
		{"tail=1", plain(4, 4)},
		{"tail=all", plain(1, 4)},
		{"tailLines=0", ""},
		{"tailLines=100", plain(1, 4)},
		{"limitBytes=8", "line1\nli"},
		{"limitBytes=6&tailLines=1", "line4\n"},
		{"timestamps=true&tailLines=1", logT0.Add(4*time.Second).Format(timeFormatOut) + " line4\n"},
		{"sinceTime=" + url.QueryEscape(logT0.Add(3*time.Second).Format(time.RFC3339)), plain(3, 4)},
		// The clock is at logT0+1h: the last 3598s are from logT0+2s on.
		{"sinceSeconds=3598", plain(2, 4)},
		{"previous=true", plain(0, 0)},
		{"previous=false", plain(1, 4)},
		{"follow=false", plain(1, 4)},
		{"stream=All", plain(1, 4)},
		{"container=other", plain(1, 4)},
	} {
		code, body := h.get(tc.query)
		if code != 200 || body != tc.want {
			t.Errorf("?%s: %d %q, want %q", tc.query, code, body, tc.want)
		}
	}
}

func TestContainerLogsErrors(t *testing.T) {
	h := newLogHarness(t)
	for _, tc := range []struct {
		path  string
		code  int
		body  string
		state *v1.ContainerStatus
	}{
		{path: "/containerLogs/default/web/app?tailLines=x", code: 400, body: `{"message": "Unable to decode query."}`},
		{path: "/containerLogs/default/web/app?sinceTime=yesterday", code: 400, body: `{"message": "Unable to decode query."}`},
		{path: "/containerLogs/default/web/app?tailLines=-1", code: 422, body: `{"message": "Invalid request."}`},
		{path: "/containerLogs/default/web/app?limitBytes=0", code: 422, body: `{"message": "Invalid request."}`},
		{path: "/containerLogs/default/web/app?sinceSeconds=0", code: 422, body: `{"message": "Invalid request."}`},
		{path: "/containerLogs/default/web/app?sinceSeconds=1&sinceTime=2026-01-01T00:00:00Z", code: 422, body: `{"message": "Invalid request."}`},
		{path: "/containerLogs/default/web/app?stream=Stdout&tailLines=1", code: 422, body: `{"message": "Invalid request."}`},
		{path: "/containerLogs/default/web/app?stream=Bogus", code: 422, body: `{"message": "Invalid request."}`},
		{path: "/containerLogs/default/web/app?stream=Stdout", code: 400, body: `unable to return the given log stream: "Stdout". Please enable PodLogsQuerySplitStreams feature gate in kubelet`},
		{path: "/containerLogs/default/nope/app", code: 404, body: `pod "nope" does not exist`},
		{path: "/containerLogs/other/web/app", code: 404, body: `pod "web" does not exist`},
		{path: "/containerLogs/default/web/nope", code: 404, body: `container "nope" not found in pod "web"`},
		{path: "/containerLogs/default/web/app?previous=1", code: 400, body: `previous terminated container "app" in pod "web" not found`,
			state: &v1.ContainerStatus{Name: "app", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}, ContainerID: "containerd://c1"}},
		{path: "/containerLogs/default/web/app", code: 400, body: `container "app" in pod "web" is waiting to start: image can't be pulled`,
			state: &v1.ContainerStatus{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ErrImagePull"}}}},
		{path: "/containerLogs/default/web/app", code: 400, body: `container "app" in pod "web" is waiting to start: trying and failing to pull image`,
			state: &v1.ContainerStatus{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}},
		{path: "/containerLogs/default/web/app", code: 400, body: `container "app" in pod "web" is waiting to start: ContainerCreating`,
			state: &v1.ContainerStatus{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}},
		{path: "/containerLogs/default/web/app", code: 400, body: `container "app" in pod "web" is waiting to start - no logs yet`,
			state: &v1.ContainerStatus{Name: "app"}},
		{path: "/containerLogs/default/web/app", code: 400, body: `container "app" in pod "web" is terminated`,
			state: &v1.ContainerStatus{Name: "app", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{}}}},
		{path: "/containerLogs/default/web/app", code: 400, body: `container "app" in pod "web" is not available`,
			state: &v1.ContainerStatus{Name: "other"}},
		// Known to the agent, gone from the runtime: the 200 is committed
		// already, as the kubelet's zero-byte write does.
		{path: "/containerLogs/default/web/app", code: 200, body: `unable to retrieve container logs for containerd://gone`,
			state: &v1.ContainerStatus{Name: "app", ContainerID: "containerd://gone", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}},
	} {
		saved := h.state
		if tc.state != nil {
			h.state = *tc.state
		}
		code, body, _ := do(t, mustNew(t, h.opts).Handler(), "GET", tc.path, nil)
		h.state = saved
		if code != tc.code || body != tc.body {
			t.Errorf("%s: %d %q, want %d %q", tc.path, code, body, tc.code, tc.body)
		}
	}
	// Terminated with no ID: the last terminated instance's log.
	h.state = v1.ContainerStatus{Name: "app", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{}},
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ContainerID: "containerd://c0"}}}
	if code, body := h.get(""); code != 200 || body != plain(0, 0) {
		t.Errorf("terminated without ID: %d %q", code, body)
	}
	// Without an agent status, the pod's own status is used.
	h.opts.PodStatus = nil
	h.pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", ContainerID: "containerd://c0", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ContainerID: "containerd://c0"}}}}
	if code, body := h.get(""); code != 200 || body != plain(0, 0) {
		t.Errorf("pod's own status: %d %q", code, body)
	}
}

func TestContainerLogsPartialLines(t *testing.T) {
	h := newLogHarness(t)
	ts := logT0.Add(10 * time.Second).Format(time.RFC3339Nano)
	h.write("1.log", ts+" stdout P first \n"+ts+" stdout P second \n"+ts+" stdout F end\n"+ts+" stderr F next\nnot a cri line\n"+ts+" stdout F last")
	want := logT0.Add(10*time.Second).Format(timeFormatOut) + " first second end\n" +
		logT0.Add(10*time.Second).Format(timeFormatOut) + " next\n" +
		logT0.Add(10*time.Second).Format(timeFormatOut) + " last"
	if code, body := h.get("timestamps=1"); code != 200 || body != want {
		t.Errorf("partial lines: %d %q, want %q", code, body, want)
	}
}

func TestContainerLogsRotated(t *testing.T) {
	h := newLogHarness(t)
	h.writeGz("1.log.20260301-120001.gz", criLines(1, 3))
	h.write("1.log.20260301-120004", criLines(4, 6))
	h.write("1.log.20260301-120007.tmp", criLines(100, 100))
	h.write("1.log", criLines(7, 9))
	if code, body := h.get(""); code != 200 || body != plain(7, 9) {
		t.Errorf("rotated files not read by default: %d %q", code, body)
	}
	h.opts.ReadRotatedLogs = true
	for _, tc := range []struct{ query, want string }{
		{"", plain(1, 9)},
		{"tailLines=2", plain(8, 9)},
		{"tailLines=3", plain(7, 9)},
		{"tailLines=5", plain(5, 9)},
		{"tailLines=8", plain(2, 9)},
		{"tailLines=50", plain(1, 9)},
		{"limitBytes=14", "line1\nline2\nli"},
		{"sinceTime=" + url.QueryEscape(logT0.Add(5*time.Second).Format(time.RFC3339)), plain(5, 9)},
	} {
		if code, body := h.get(tc.query); code != 200 || body != tc.want {
			t.Errorf("rotated ?%s: %d %q, want %q", tc.query, code, body, tc.want)
		}
	}
}

// follower reads a followed log's lines as they arrive.
type follower struct {
	lines chan string
	done  chan struct{}
}

func follow(t *testing.T, h http.Handler, target string) *follower {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + target)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("follow %s: %d", target, resp.StatusCode)
	}
	// Cleanups run last-registered first: closing the body ends the
	// request, so the server can close.
	t.Cleanup(func() { resp.Body.Close() })
	f := &follower{lines: make(chan string, 100), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		for {
			l, err := r.ReadString('\n')
			if l != "" {
				f.lines <- l
			}
			if err != nil {
				return
			}
		}
	}()
	return f
}

// expect steps the clock until the follower delivers want (or fails the
// test after a generous deadline).
func (f *follower) expect(t *testing.T, clk *clocktesting.FakeClock, want string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l := <-f.lines:
			if l != want {
				t.Fatalf("followed line %q, want %q", l, want)
			}
			return
		case <-deadline:
			t.Fatalf("no followed line %q", want)
		case <-time.After(5 * time.Millisecond):
			clk.Step(followPollInterval)
		}
	}
}

func appendFile(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

func TestContainerLogsFollow(t *testing.T) {
	h := newLogHarness(t)
	f := follow(t, mustNew(t, h.opts).Handler(), "/containerLogs/default/web/app?follow=true&tailLines=1")
	f.expect(t, h.clk, "line4\n")

	// Appended lines arrive, an incomplete one once it is complete.
	appendFile(t, h.logPath("1.log"), criLines(5, 5))
	f.expect(t, h.clk, "line5\n")
	line6 := criLines(6, 6)
	appendFile(t, h.logPath("1.log"), line6[:20])
	appendFile(t, h.logPath("1.log"), line6[20:])
	f.expect(t, h.clk, "line6\n")

	// Rotation: what reached the old file is read, then the new file.
	appendFile(t, h.logPath("1.log"), criLines(7, 7))
	if err := os.Rename(h.logPath("1.log"), h.logPath("1.log.20260301-120008")); err != nil {
		t.Fatal(err)
	}
	h.write("1.log", criLines(8, 8))
	f.expect(t, h.clk, "line7\n")
	f.expect(t, h.clk, "line8\n")

	// The container stops: the rest is read and the response ends.
	appendFile(t, h.logPath("1.log"), criLines(9, 9))
	h.rt.setState("c1", runtimeapi.ContainerState_CONTAINER_EXITED)
	f.expect(t, h.clk, "line9\n")
	deadline := time.After(20 * time.Second)
	for {
		select {
		case <-f.done:
			return
		case <-deadline:
			t.Fatal("follow did not end after the container stopped")
		case <-time.After(5 * time.Millisecond):
			h.clk.Step(followPollInterval)
		}
	}
}

func TestContainerLogsFollowLimitAndTruncate(t *testing.T) {
	h := newLogHarness(t)
	f := follow(t, mustNew(t, h.opts).Handler(), "/containerLogs/default/web/app?follow=true&tailLines=0&limitBytes=12")
	// Wait until the reader has taken its position (the end of the file)
	// and polls.
	for deadline := time.Now().Add(20 * time.Second); !h.clk.HasWaiters(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the follower never started polling")
		}
	}
	// copytruncate: the file shrinks and starts over.
	h.write("1.log", criLines(5, 5))
	f.expect(t, h.clk, "line5\n")
	appendFile(t, h.logPath("1.log"), criLines(6, 7))
	f.expect(t, h.clk, "line6\n")
	select {
	case <-f.done:
	case <-time.After(20 * time.Second):
		t.Fatal("follow did not end at limitBytes")
	}
}
