package runtime_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodekit/nodekit/podstate"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/volume"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// harness is a PodManager on fakecri over a real unix socket, sharing one
// fake clock.
type harness struct {
	t       testing.TB
	ctx     context.Context
	clk     *clocktesting.FakeClock
	cri     *fakecri.Server
	client  *runtime.Client
	pm      *runtime.PodManager
	rec     *record.FakeRecorder
	logsDir string
	podsDir string
	// opts are the PodManager's options (restart makes another on them).
	opts runtime.PodManagerOptions
}

func newHarness(t testing.TB, fopts fakecri.Options, mutate func(*runtime.PodManagerOptions)) *harness {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	fopts.Clock = clk
	srv := fakecri.New(fopts)
	for _, ref := range []string{"busybox", "nginx:1.27", "registry.k8s.io/pause:3.10"} {
		img, err := fakecri.NewImage(ref, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		srv.AddImage(img)
	}
	endpoint, _ := serve(t, srv, socketPath(t))
	client := newClient(t, runtime.Options{Endpoint: endpoint})
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 192.0.2.53\nsearch corp.example\noptions timeout:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "containers"), 0o755); err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(10000)
	opts := runtime.PodManagerOptions{
		Runtime:          client.RuntimeService(),
		Images:           client.ImageService(),
		NodeName:         "node-1",
		NodeIPs:          []net.IP{net.ParseIP("192.0.2.10")},
		PodLogsDir:       filepath.Join(dir, "logs"),
		ContainerLogsDir: filepath.Join(dir, "containers"),
		PodsDir:          filepath.Join(dir, "pods"),
		HostsFile:        filepath.Join(dir, "no-hosts"),
		ClusterDNS:       []net.IP{net.ParseIP("10.96.0.10")},
		ClusterDomain:    "cluster.local",
		ResolverConfig:   resolv,
		MemoryCapacity:   8 << 30,
		CgroupParent: func(_ context.Context, pod *v1.Pod) (string, error) {
			return "/kubepods/burstable/pod" + string(pod.UID), nil
		},
		Recorder: rec,
		Clock:    clk,
	}
	if mutate != nil {
		mutate(&opts)
	}
	pm, err := runtime.NewPodManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, ctx: testCtx(t), clk: clk, cri: srv, client: client, pm: pm, rec: rec, logsDir: opts.PodLogsDir, podsDir: opts.PodsDir, opts: opts}
}

func newPod(name string, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Labels: map[string]string{"app": name}},
		Spec: v1.PodSpec{
			NodeName:                      "node-1",
			RestartPolicy:                 v1.RestartPolicyAlways,
			DNSPolicy:                     v1.DNSClusterFirst,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    containers,
		},
	}
}

func ctr(name string, command ...string) v1.Container {
	return v1.Container{
		Name: name, Image: "busybox", Command: command, ImagePullPolicy: v1.PullIfNotPresent,
		TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: v1.TerminationMessageReadFile,
	}
}

// status reads the pod's runtime status.
func (h *harness) status(pod *v1.Pod) *podstate.PodStatus {
	h.t.Helper()
	st, err := h.pm.GetPodStatus(h.ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// sync runs one pod worker iteration: read the status, sync.
func (h *harness) sync(pod *v1.Pod, probes runtime.ProbeResults, secrets ...v1.Secret) runtime.SyncResult {
	h.t.Helper()
	return h.pm.SyncPod(h.ctx, pod, h.status(pod), runtime.SyncInput{PullSecrets: secrets, Probes: probes, Volumes: h.volumes(pod)})
}

// volumes mounts the pod's volumes as a volume manager would, in the
// kubelet's layout: a directory per volume (a hostPath volume's own path),
// configMap, secret, downwardAPI and projected volumes read-only, every
// volume but hostPath relabeled; subPaths are joined to the volume's path.
func (h *harness) volumes(pod *v1.Pod) runtime.PodVolumes {
	h.t.Helper()
	out := runtime.PodVolumes{Mounted: map[string]volume.Mounted{},
		SubPath: func(_ context.Context, s volume.SubPathSpec) (string, error) {
			return filepath.Join(s.VolumePath, s.SubPath), nil
		}}
	for _, vol := range pod.Spec.Volumes {
		if vol.HostPath != nil {
			out.Mounted[vol.Name] = volume.Mounted{Path: vol.HostPath.Path}
			continue
		}
		if vol.Image != nil {
			out.Mounted[vol.Name] = volume.Mounted{ReadOnly: true}
			continue
		}
		kind := "empty-dir"
		switch {
		case vol.ConfigMap != nil:
			kind = "configmap"
		case vol.Secret != nil:
			kind = "secret"
		}
		dir := filepath.Join(h.podsDir, string(pod.UID), "volumes", "kubernetes.io~"+kind, vol.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			h.t.Fatal(err)
		}
		out.Mounted[vol.Name] = volume.Mounted{Path: dir, ReadOnly: vol.EmptyDir == nil, SELinuxRelabel: true}
	}
	return out
}

// container returns the newest status of a container, failing if absent.
func (h *harness) container(pod *v1.Pod, name string) *podstate.ContainerStatus {
	h.t.Helper()
	c := h.status(pod).Container(name)
	if c == nil {
		h.t.Fatalf("no container %s in pod %s", name, pod.Name)
	}
	return c
}

// events drains the recorded events.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// wantEvents checks that each wanted event (a prefix such as
// "Normal Started") occurs in order among events.
func wantEvents(t *testing.T, events []string, want ...string) {
	t.Helper()
	i := 0
	for _, e := range events {
		if i < len(want) && strings.HasPrefix(e, want[i]) {
			i++
		}
	}
	if i < len(want) {
		t.Fatalf("events %q\ndo not contain, in order, %q (missing %q)", events, want, want[i])
	}
}

// inBackground runs f in a goroutine and waits for it, stepping the fake
// clock by step while it blocks on the clock.
func (h *harness) inBackground(step time.Duration, f func()) {
	h.t.Helper()
	h.inBackgroundOnce(nil, step, f)
}

// inBackgroundOnce is inBackground that steps the clock only once ready
// (if not nil) holds: f may wait on the clock for a call still on its way
// to fakecri (a preStop hook's timeout while its ExecSync is in flight),
// which stepping would time out before it arrives.
func (h *harness) inBackgroundOnce(ready func() bool, step time.Duration, f func()) {
	h.t.Helper()
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		f()
	}()
	err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-done:
			return true, nil
		default:
		}
		// Step only while something other than fakecri's exit timer
		// waits on the clock.
		if (ready == nil || ready()) && h.clk.Waiters() > 0 {
			h.clk.Step(step)
		}
		return false, nil
	})
	wg.Wait()
	if err != nil {
		h.t.Fatalf("background call did not finish: %v", err)
	}
}

// sandboxConfig returns the config of the pod's newest sandbox.
func (h *harness) sandboxConfig(pod *v1.Pod) *runtimeapi.PodSandboxConfig {
	h.t.Helper()
	st := h.status(pod)
	if len(st.Sandboxes) == 0 {
		h.t.Fatalf("pod %s has no sandbox", pod.Name)
	}
	return h.cri.SandboxConfig(st.Sandboxes[0].ID)
}

// fakeProbes is a ProbeResults set by tests.
type fakeProbes struct {
	mu       sync.Mutex
	liveness map[string]podstate.ProbeResult
	startup  map[string]podstate.ProbeResult
}

func newFakeProbes() *fakeProbes {
	return &fakeProbes{liveness: map[string]podstate.ProbeResult{}, startup: map[string]podstate.ProbeResult{}}
}

func (p *fakeProbes) Liveness(id string) podstate.ProbeResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.liveness[id]
}

func (p *fakeProbes) Startup(id string) podstate.ProbeResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startup[id]
}

func (p *fakeProbes) set(m map[string]podstate.ProbeResult, id string, r podstate.ProbeResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m[id] = r
}
