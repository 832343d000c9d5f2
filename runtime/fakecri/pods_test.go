package fakecri_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/runtime/fakecri"
)

var t0 = time.Unix(1_700_000_000, 0)

// fixture is a fake runtime on a fake clock with busybox stored.
type fixture struct {
	s   *fakecri.Server
	clk *clocktesting.FakeClock
	c   clients
	img string // the stored image's ID
}

func newFixture(t *testing.T, opts fakecri.Options) *fixture {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	opts.Clock = clk
	s := fakecri.New(opts)
	id := s.AddImage(mustImage(t, "busybox", 1000))
	return &fixture{s: s, clk: clk, c: start(t, s), img: id}
}

func sandboxConfig(name string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: "uid-" + name},
		Labels:      map[string]string{"io.kubernetes.pod.uid": "uid-" + name},
		Annotations: annotations,
	}
}

func (f *fixture) runSandbox(t *testing.T, cfg *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	resp, err := f.c.rt.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return resp.PodSandboxId
}

// startContainer creates and starts a container named name with the given
// command in sandbox sb, returning its ID and the start error.
func (f *fixture) startContainer(t *testing.T, sb string, cfg *runtimeapi.PodSandboxConfig, name string, command ...string) (string, error) {
	t.Helper()
	resp, err := f.c.rt.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{
		PodSandboxId:  sb,
		SandboxConfig: cfg,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name},
			Image:    &runtimeapi.ImageSpec{Image: f.img},
			Command:  command,
			Labels:   map[string]string{"io.kubernetes.container.name": name},
			LogPath:  name + ".log",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.c.rt.StartContainer(ctx(t), &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId})
	return resp.ContainerId, err
}

func (f *fixture) status(t *testing.T, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	resp, err := f.c.rt.ContainerStatus(ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status
}

func TestSandboxLifecycleAndIPs(t *testing.T) {
	f := newFixture(t, fakecri.Options{PodCIDRs: []string{"10.1.0.0/29", "fd00::/120"}})
	a := f.runSandbox(t, sandboxConfig("a", nil))
	b := f.runSandbox(t, sandboxConfig("b", nil))
	st, err := f.c.rt.PodSandboxStatus(ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: a})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Status.Network.Ip != "10.1.0.2" ||
		len(st.Status.Network.AdditionalIps) != 1 || st.Status.Network.AdditionalIps[0].Ip != "fd00::2" {
		t.Fatalf("sandbox a status = %v", st.Status)
	}
	st, _ = f.c.rt.PodSandboxStatus(ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: b})
	if st.Status.Network.Ip != "10.1.0.3" {
		t.Fatalf("sandbox b IP = %q, want the next address", st.Status.Network.Ip)
	}

	// The same name and attempt cannot be created twice.
	_, err = f.c.rt.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("a", nil)})
	wantCode(t, err, codes.AlreadyExists)

	// Host network sandboxes get no IP; the /29 holds 5 pod IPs.
	host := sandboxConfig("host", nil)
	host.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}}
	h := f.runSandbox(t, host)
	st, _ = f.c.rt.PodSandboxStatus(ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: h})
	if st.Status.Network.Ip != "" || st.Status.Linux.Namespaces.Options.Network != runtimeapi.NamespaceMode_NODE {
		t.Fatalf("host network sandbox status = %v", st.Status)
	}
	for _, n := range []string{"c", "d", "e"} {
		f.runSandbox(t, sandboxConfig(n, nil))
	}
	_, err = f.c.rt.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("full", nil)})
	if err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("RunPodSandbox with the CIDR exhausted: %v", err)
	}
	// Stopping releases the IP; stop and remove are idempotent.
	if _, err := f.c.rt.StopPodSandbox(ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: a}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.rt.StopPodSandbox(ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: a}); err != nil {
		t.Fatal(err)
	}
	f.runSandbox(t, sandboxConfig("full", nil))
	ready, err := f.c.rt.ListPodSandbox(ctx(t), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}})
	if err != nil || len(ready.Items) != 1 || ready.Items[0].Id != a {
		t.Fatalf("not ready sandboxes = %v, %v; want only a", ready.GetItems(), err)
	}
	for range 2 {
		if _, err := f.c.rt.RemovePodSandbox(ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: a}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = f.c.rt.PodSandboxStatus(ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: a})
	wantCode(t, err, codes.NotFound)
	byLabel, _ := f.c.rt.ListPodSandbox(ctx(t), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": "uid-b"}}})
	if len(byLabel.Items) != 1 || byLabel.Items[0].Id != b {
		t.Fatalf("sandboxes by label = %v", byLabel.Items)
	}
}

func TestSandboxNeedsNetwork(t *testing.T) {
	f := newFixture(t, fakecri.Options{})
	f.s.SetNetworkReady(false, "NetworkPluginNotReady", "cni plugin not initialized")
	_, err := f.c.rt.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("a", nil)})
	if err == nil || !strings.Contains(err.Error(), "cni plugin not initialized") {
		t.Fatalf("RunPodSandbox without network: %v", err)
	}
	_, err = f.c.rt.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("a", nil), RuntimeHandler: "kata"})
	wantCode(t, err, codes.NotFound)
}

func TestContainerExitsOnSchedule(t *testing.T) {
	f := newFixture(t, fakecri.Options{})
	logDir := t.TempDir()
	cfg := sandboxConfig("job", map[string]string{fakecri.BehaviorAnnotationPrefix + "main": "exit 3 after 10s; log hello"})
	cfg.LogDirectory = logDir
	sb := f.runSandbox(t, cfg)
	id, err := f.startContainer(t, sb, cfg, "main")
	if err != nil {
		t.Fatal(err)
	}
	if st := f.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt != t0.UnixNano() {
		t.Fatalf("status after start = %v", st)
	}
	f.clk.Step(9 * time.Second)
	if st := f.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("exited before its time: %v", st)
	}
	f.clk.Step(5 * time.Second)
	st := f.status(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 3 || st.Reason != "Error" ||
		st.FinishedAt != t0.Add(10*time.Second).UnixNano() {
		t.Fatalf("status after 14s = %v, want exited 3 at 10s", st)
	}
	if st.LogPath != filepath.Join(logDir, "main.log") {
		t.Fatalf("log path %q", st.LogPath)
	}
	data, err := os.ReadFile(st.LogPath)
	if err != nil || !strings.HasSuffix(string(data), " stdout F hello\n") {
		t.Fatalf("log = %q, %v", data, err)
	}
	// A running container must be stopped before its sandbox's log
	// directory disappears; a missing directory fails the start.
	cfg2 := sandboxConfig("nolog", nil)
	cfg2.LogDirectory = filepath.Join(logDir, "missing")
	sb2 := f.runSandbox(t, cfg2)
	if _, err := f.startContainer(t, sb2, cfg2, "main"); err == nil || !strings.Contains(err.Error(), "log") {
		t.Fatalf("start with a missing log directory: %v", err)
	}
}

func TestCommandsAreInterpreted(t *testing.T) {
	f := newFixture(t, fakecri.Options{})
	cfg := sandboxConfig("cmd", nil)
	sb := f.runSandbox(t, cfg)
	for _, tc := range []struct {
		name    string
		command []string
		exits   bool
		code    int32
		after   time.Duration
	}{
		{"true", []string{"true"}, true, 0, 0},
		{"false", []string{"/bin/false"}, true, 1, 0},
		{"sleep", []string{"sleep", "30"}, true, 0, 30 * time.Second},
		{"script", []string{"sh", "-c", "echo start; sleep 5 && exit 7"}, true, 7, 5 * time.Second},
		{"andchain", []string{"sh", "-c", "false && sleep 100; exit"}, true, 1, 0},
		{"forever", []string{"sleep", "infinity"}, false, 0, 0},
		{"server", []string{"nginx", "-g", "daemon off;"}, false, 0, 0},
		{"entrypoint", nil, false, 0, 0},
	} {
		id, err := f.startContainer(t, sb, cfg, tc.name, tc.command...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		f.clk.Step(tc.after)
		st := f.status(t, id)
		if !tc.exits {
			if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				t.Errorf("%s: state %v, want running", tc.name, st.State)
			}
			continue
		}
		if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != tc.code || st.FinishedAt != f.clk.Now().UnixNano() {
			t.Errorf("%s: status %v, want exited %d after %v", tc.name, st, tc.code, tc.after)
		}
	}
}

func TestBehaviorErrorsAndCrashOnStart(t *testing.T) {
	f := newFixture(t, fakecri.Options{})
	bad := sandboxConfig("bad", map[string]string{fakecri.BehaviorAnnotation: "exit soon"})
	sb := f.runSandbox(t, bad)
	_, err := f.c.rt.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: f.img}}})
	wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(err.Error(), "exit soon") {
		t.Errorf("error %v does not quote the script", err)
	}

	crash := sandboxConfig("crash", map[string]string{fakecri.BehaviorAnnotation: "crash-on-start"})
	sb = f.runSandbox(t, crash)
	id, err := f.startContainer(t, sb, crash, "c")
	if err == nil {
		t.Fatal("a crash-on-start container started")
	}
	if st := f.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 128 || st.Reason != "StartError" {
		t.Fatalf("status after a failed start = %v", st)
	}

	_, err = f.c.rt.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c2"}, Image: &runtimeapi.ImageSpec{Image: "nginx"}}})
	wantCode(t, err, codes.NotFound)

	for _, script := range []string{"exit 1 after 2s; memory 64Mi; cpu 250m", "oom after 1m", "run; ignore-sigterm; sigterm-delay 5s; log a b"} {
		if _, err := fakecri.ParseBehavior(script); err != nil {
			t.Errorf("ParseBehavior(%q): %v", script, err)
		}
	}
	for _, script := range []string{"exit 256", "exit 1 after -1s", "cpu lots", "jump", "run now"} {
		if _, err := fakecri.ParseBehavior(script); err == nil {
			t.Errorf("ParseBehavior(%q) accepted a bad script", script)
		}
	}
}

// stopAsync runs StopContainer in the background.
func (f *fixture) stopAsync(t *testing.T, id string, timeout int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := f.c.rt.StopContainer(ctx(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: timeout})
		done <- err
	}()
	return done
}

// waitForWaiter waits until something (a StopContainer) waits on the clock
// besides the server's exit timer.
func (f *fixture) waitForWaiters(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.clk.Waiters() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d clock waiters, want %d", f.clk.Waiters(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStopContainerGrace(t *testing.T) {
	f := newFixture(t, fakecri.Options{})
	cfg := sandboxConfig("stop", map[string]string{
		fakecri.BehaviorAnnotationPrefix + "stubborn": "ignore-sigterm",
		fakecri.BehaviorAnnotationPrefix + "slow":     "sigterm-delay 3s",
	})
	sb := f.runSandbox(t, cfg)

	// The default reacts to SIGTERM at once.
	quick, _ := f.startContainer(t, sb, cfg, "quick")
	if err := <-f.stopAsync(t, quick, 30); err != nil {
		t.Fatal(err)
	}
	if st := f.status(t, quick); st.ExitCode != 143 || st.FinishedAt != t0.UnixNano() {
		t.Fatalf("quick stop: %v", st)
	}

	// A slow one takes its delay when the grace period allows it.
	slow, _ := f.startContainer(t, sb, cfg, "slow")
	done := f.stopAsync(t, slow, 30)
	f.waitForWaiters(t, 1)
	f.clk.Step(3 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := f.status(t, slow); st.ExitCode != 143 || st.FinishedAt != t0.Add(3*time.Second).UnixNano() {
		t.Fatalf("slow stop: %v", st)
	}

	// One that ignores SIGTERM is killed when the timeout expires.
	stubborn, _ := f.startContainer(t, sb, cfg, "stubborn")
	done = f.stopAsync(t, stubborn, 10)
	f.waitForWaiters(t, 1)
	f.clk.Step(9 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("stop returned %v before the timeout", err)
	default:
	}
	if st := f.status(t, stubborn); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("stubborn container stopped early: %v", st)
	}
	f.clk.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := f.status(t, stubborn); st.ExitCode != 137 || st.Reason != "Error" {
		t.Fatalf("stubborn stop: %v", st)
	}

	// Stopping a stopped container succeeds; an unknown one is NotFound.
	if err := <-f.stopAsync(t, stubborn, 10); err != nil {
		t.Fatal(err)
	}
	wantCode(t, <-f.stopAsync(t, "nope", 10), codes.NotFound)

	// Stopping the sandbox kills what still runs.
	last, _ := f.startContainer(t, sb, cfg, "last")
	if _, err := f.c.rt.StopPodSandbox(ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	if st := f.status(t, last); st.ExitCode != 137 {
		t.Fatalf("container of a stopped sandbox: %v", st)
	}
	_, err := f.c.rt.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "late"}, Image: &runtimeapi.ImageSpec{Image: f.img}}})
	wantCode(t, err, codes.FailedPrecondition)
}

func TestRemoveAndList(t *testing.T) {
	f := newFixture(t, fakecri.Options{})
	cfg := sandboxConfig("rm", nil)
	sb := f.runSandbox(t, cfg)
	a, _ := f.startContainer(t, sb, cfg, "a")
	b, _ := f.startContainer(t, sb, cfg, "b", "true")
	running, err := f.c.rt.ListContainers(ctx(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	if err != nil || len(running.Containers) != 1 || running.Containers[0].Id != a {
		t.Fatalf("running containers = %v, %v", running.GetContainers(), err)
	}
	byName, _ := f.c.rt.ListContainers(ctx(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.container.name": "b"}}})
	if len(byName.Containers) != 1 || byName.Containers[0].Id != b {
		t.Fatalf("containers by label = %v", byName.Containers)
	}
	// Truncated IDs work as with containerd.
	if st := f.status(t, a[:12]); st.Id != a {
		t.Fatalf("status by prefix = %v", st)
	}
	if _, err := f.c.rt.RemoveContainer(ctx(t), &runtimeapi.RemoveContainerRequest{ContainerId: a}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.rt.RemoveContainer(ctx(t), &runtimeapi.RemoveContainerRequest{ContainerId: a}); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
	if _, err := f.c.rt.RemovePodSandbox(ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	all, _ := f.c.rt.ListContainers(ctx(t), &runtimeapi.ListContainersRequest{})
	if len(all.Containers) != 0 {
		t.Fatalf("containers left after removing the sandbox: %v", all.Containers)
	}
}

func TestExecAndStats(t *testing.T) {
	f := newFixture(t, fakecri.Options{})
	cfg := sandboxConfig("exec", map[string]string{fakecri.BehaviorAnnotation: "memory 64Mi; cpu 500m"})
	sb := f.runSandbox(t, cfg)
	id, _ := f.startContainer(t, sb, cfg, "app")
	f.s.SetExecHandler(func(r fakecri.ExecRequest) fakecri.ExecResult {
		switch r.Cmd[0] {
		case "slow":
			return fakecri.ExecResult{Delay: 5 * time.Second}
		case "ready":
			if r.PodName != "exec" || r.ContainerName != "app" {
				return fakecri.ExecResult{ExitCode: 2}
			}
			return fakecri.ExecResult{Stdout: []byte("ok")}
		}
		return fakecri.ExecResult{ExitCode: 1, Stderr: []byte("no")}
	})
	resp, err := f.c.rt.ExecSync(ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"ready"}})
	if err != nil || resp.ExitCode != 0 || string(resp.Stdout) != "ok" {
		t.Fatalf("exec ready = %v, %v", resp, err)
	}
	resp, _ = f.c.rt.ExecSync(ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"other"}})
	if resp.ExitCode != 1 || string(resp.Stderr) != "no" {
		t.Fatalf("exec other = %v", resp)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.c.rt.ExecSync(ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"slow"}, Timeout: 2})
		done <- err
	}()
	f.waitForWaiters(t, 1)
	f.clk.Step(2 * time.Second)
	wantCode(t, <-done, codes.DeadlineExceeded)

	f.clk.Step(8 * time.Second)
	stats, err := f.c.rt.ContainerStats(ctx(t), &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	// 500m for 10s is 5 CPU-seconds.
	if got := stats.Stats.Cpu.UsageCoreNanoSeconds.Value; got != 5e9 {
		t.Errorf("cpu usage %d ns, want 5e9", got)
	}
	if got := stats.Stats.Memory.WorkingSetBytes.Value; got != 64<<20 {
		t.Errorf("working set %d, want 64Mi", got)
	}
	sbStats, err := f.c.rt.PodSandboxStats(ctx(t), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: sb})
	if err != nil || sbStats.Stats.Linux.Memory.WorkingSetBytes.Value != 64<<20 || len(sbStats.Stats.Linux.Containers) != 1 {
		t.Fatalf("sandbox stats = %v, %v", sbStats, err)
	}
	list, _ := f.c.rt.ListPodSandboxStats(ctx(t), &runtimeapi.ListPodSandboxStatsRequest{})
	if len(list.Stats) != 1 {
		t.Fatalf("%d sandbox stats, want 1", len(list.Stats))
	}
	if _, err := f.c.rt.UpdateContainerResources(ctx(t), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id,
		Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	if st := f.status(t, id); st.Resources.GetLinux().GetMemoryLimitInBytes() != 1<<30 {
		t.Fatalf("resources after update = %v", st.Resources)
	}
	if err := f.s.ExitContainer(id, 137, true); err != nil {
		t.Fatal(err)
	}
	if st := f.status(t, id); st.Reason != "OOMKilled" || st.ExitCode != 137 {
		t.Fatalf("status after an OOM kill = %v", st)
	}
	_, err = f.c.rt.ExecSync(ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"ready"}})
	wantCode(t, err, codes.FailedPrecondition)
}

func TestContainerEvents(t *testing.T) {
	f := newFixture(t, fakecri.Options{})
	stream, err := f.c.rt.GetContainerEvents(ctx(t), &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.s.EventStreams() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the event stream did not reach the server")
		}
		time.Sleep(time.Millisecond)
	}
	cfg := sandboxConfig("ev", map[string]string{fakecri.BehaviorAnnotation: "exit 0 after 1s"})
	sb := f.runSandbox(t, cfg)
	next := func(want runtimeapi.ContainerEventType) *runtimeapi.ContainerEventResponse {
		t.Helper()
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.ContainerEventType != want {
			t.Fatalf("event %v for %s, want %v", ev.ContainerEventType, ev.ContainerId, want)
		}
		return ev
	}
	if ev := next(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT); ev.ContainerId != sb {
		t.Fatalf("first event is for %s, want the sandbox", ev.ContainerId)
	}
	next(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	id, err := f.startContainer(t, sb, cfg, "c")
	if err != nil {
		t.Fatal(err)
	}
	next(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	ev := next(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	if ev.ContainerId != id || ev.PodSandboxStatus.GetMetadata().GetName() != "ev" || len(ev.ContainersStatuses) != 1 {
		t.Fatalf("started event = %v", ev)
	}
	// The exit happens on the clock without anyone asking.
	f.clk.Step(time.Second)
	ev = next(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	if ev.ContainerId != id || ev.ContainersStatuses[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("stopped event = %v", ev)
	}
	if _, err := f.c.rt.RemovePodSandbox(ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	if ev := next(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT); ev.ContainerId != sb {
		t.Fatalf("stopped event for %s, want the sandbox", ev.ContainerId)
	}
	if ev := next(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT); ev.ContainerId != id {
		t.Fatalf("deleted event for %s, want the container", ev.ContainerId)
	}
	ev = next(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	if ev.ContainerId != sb || ev.PodSandboxStatus == nil {
		t.Fatalf("sandbox deleted event = %v", ev)
	}
	if f.s.DroppedEvents() != 0 {
		t.Errorf("%d events dropped", f.s.DroppedEvents())
	}
}

func TestRequireAuth(t *testing.T) {
	f := newFixture(t, fakecri.Options{PullAny: true})
	if err := f.s.RequireAuth("registry.example.com/private/app", "u", "p"); err != nil {
		t.Fatal(err)
	}
	if err := f.s.RequireAuth("Not A Ref", "u", "p"); err == nil {
		t.Fatal("RequireAuth accepted an invalid reference")
	}
	pull := func(ref string, auth *runtimeapi.AuthConfig) error {
		_, err := f.c.img.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}, Auth: auth})
		return err
	}
	wantCode(t, pull("registry.example.com/private/app:1", nil), codes.Unauthenticated)
	wantCode(t, pull("registry.example.com/private/app:1", &runtimeapi.AuthConfig{Username: "u", Password: "x"}), codes.Unauthenticated)
	if err := pull("registry.example.com/private/app:2", &runtimeapi.AuthConfig{Username: "u", Password: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := pull("registry.example.com/public/app:1", nil); err != nil {
		t.Fatalf("an image of another repository needs no credentials: %v", err)
	}
}
