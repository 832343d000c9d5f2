package runtime_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// fakeUserns is a runtime.UserNamespaces giving hostUsers: false pods host
// IDs 131072-196607, or refusing them with err; it records its calls.
type fakeUserns struct {
	mu    sync.Mutex
	err   error
	calls []string
}

var podMapping = []*runtimeapi.IDMapping{{HostId: 131072, ContainerId: 0, Length: 65536}}

func (f *fakeUserns) PodUserNamespace(_ context.Context, pod *v1.Pod, handler string) (*runtimeapi.UserNamespace, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "get "+pod.Name+" handler="+handler)
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, nil
	}
	if f.err != nil {
		return nil, f.err
	}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: podMapping, Gids: podMapping}, nil
}

func (f *fakeUserns) Release(_ context.Context, uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "release "+string(uid))
}

func (f *fakeUserns) history() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// TestUserNamespaces: a pod with hostUsers: false gets its user namespace
// (mode POD, its mappings) in the sandbox config and each container's
// security context, and every mount of its containers is idmapped with
// the mappings, as the kubelet's; other pods get mode NODE and plain
// mounts; KillPod releases the mappings once the containers stopped. A
// refused pod fails its sandbox with the kubelet's FailedCreatePodSandBox
// message and creates nothing.
func TestUserNamespaces(t *testing.T) {
	userns := &fakeUserns{err: errors.New("can't set `spec.hostUsers: false`, runtime does not support user namespaces")}
	reg := prometheus.NewRegistry()
	h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		o.UserNamespaces = userns
		o.Registerer = reg
	})
	pleg, err := runtime.NewPLEG(runtime.PLEGOptions{Pods: h.pm, Runtime: h.client.RuntimeService(), Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	vols := &fakeVolumes{dir: t.TempDir()}
	b, err := runtime.NewBackend(runtime.BackendOptions{Pods: h.pm, PLEG: pleg, Clock: h.clk, Volumes: vols})
	if err != nil {
		t.Fatal(err)
	}
	withVolume := func(pod *v1.Pod) *v1.Pod {
		pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return pod
	}
	pod := withVolume(newPod("userns", ctr("app", "sleep", "3600")))
	pod.Spec.HostUsers = ptr.To(false)

	if res := b.SyncPod(h.ctx, pod); res.Err == nil || h.cri.Calls("RunPodSandbox") != 0 {
		t.Fatalf("sync of a refused pod: %v, %d sandboxes; want an error and no sandbox", res.Err, h.cri.Calls("RunPodSandbox"))
	}
	wantEvents(t, h.events(), "Warning FailedCreatePodSandBox Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces")
	if got := counterValue(t, reg, "kubelet_started_user_namespaced_pods_errors_total"); got != 1 {
		t.Errorf("kubelet_started_user_namespaced_pods_errors_total = %v, want 1", got)
	}

	userns.mu.Lock()
	userns.err = nil
	userns.mu.Unlock()
	if res := b.SyncPod(h.ctx, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	sb := h.sandboxConfig(pod).GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if sb.GetMode() != runtimeapi.NamespaceMode_POD || len(sb.GetUids()) != 1 || sb.GetUids()[0].GetHostId() != 131072 || sb.GetGids()[0].GetLength() != 65536 {
		t.Fatalf("sandbox user namespace %v, want mode POD with the pod's mappings", sb)
	}
	cfg := h.cri.ContainerConfig(h.container(pod, "app").ID)
	if ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); ns.GetMode() != runtimeapi.NamespaceMode_POD || ns.GetUids()[0].GetHostId() != 131072 {
		t.Errorf("container user namespace %v, want the sandbox's", ns)
	}
	if len(cfg.Mounts) < 3 { // the volume, /etc/hosts, the termination log
		t.Fatalf("container mounts %v, want the volume, /etc/hosts and the termination log", cfg.Mounts)
	}
	for _, m := range cfg.Mounts {
		if len(m.UidMappings) != 1 || m.UidMappings[0].GetHostId() != 131072 || len(m.GidMappings) != 1 || m.GidMappings[0].GetLength() != 65536 {
			t.Errorf("mount %s → %s not idmapped with the pod's mappings: uid %v gid %v", m.HostPath, m.ContainerPath, m.UidMappings, m.GidMappings)
		}
	}
	for name, want := range map[string]float64{"kubelet_started_user_namespaced_pods_total": 2, "kubelet_started_user_namespaced_pods_errors_total": 1} {
		if got := counterValue(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	plain := withVolume(newPod("plain", ctr("app", "sleep", "3600")))
	if res := b.SyncPod(h.ctx, plain); res.Err != nil {
		t.Fatal(res.Err)
	}
	if ns := h.sandboxConfig(plain).GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); ns.GetMode() != runtimeapi.NamespaceMode_NODE || len(ns.GetUids()) != 0 {
		t.Errorf("sandbox user namespace of a pod without hostUsers %v, want mode NODE", ns)
	}
	for _, m := range h.cri.ContainerConfig(h.container(plain, "app").ID).Mounts {
		if len(m.UidMappings)+len(m.GidMappings) != 0 {
			t.Errorf("mount %s of a pod in the node's user namespace is idmapped", m.ContainerPath)
		}
	}

	if err := b.KillPod(h.ctx, pod, nil); err != nil {
		t.Fatal(err)
	}
	calls := userns.history()
	if i, j := slices.Index(calls, "release uid-userns"), slices.Index(vols.history(), "unmount uid-userns"); i < 0 || j < 0 {
		t.Errorf("KillPod: userns calls %v, volume calls %v; want the volumes unmounted and the mappings released", calls, vols.history())
	}
	for _, c := range calls {
		if strings.HasPrefix(c, "get ") && !strings.HasSuffix(c, "handler=") {
			t.Errorf("call %q, want the default handler", c)
		}
	}
}

// TestHostUsersWithoutManager: a pod manager without UserNamespaces sends
// no user namespace and fails a hostUsers: false pod's sandbox rather than
// running it in the node's.
func TestHostUsersWithoutManager(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	plain := newPod("plain", ctr("app", "sleep", "3600"))
	if res := h.sync(plain, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	if ns := h.sandboxConfig(plain).GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); ns != nil {
		t.Errorf("user namespace %v without a manager, want none", ns)
	}
	pod := newPod("userns", ctr("app", "sleep", "3600"))
	pod.Spec.HostUsers = ptr.To(false)
	if res := h.sync(pod, nil); res.Err == nil {
		t.Fatal("a hostUsers: false pod synced without a user namespace manager")
	}
	wantEvents(t, h.events(), "Warning FailedCreatePodSandBox Failed to create pod sandbox: can't set `spec.hostUsers: false`, this node does not support user namespaces")
	if n := h.cri.Calls("RunPodSandbox"); n != 1 {
		t.Errorf("%d sandboxes, want only the plain pod's", n)
	}
}

// counterValue returns the value of the counter registered as name.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}
