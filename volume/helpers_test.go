package volume

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/mount-utils"
	clocktesting "k8s.io/utils/clock/testing"
)

// fixture is a Manager on fakes: a fake clientset, a fake mounter, a fake
// clock and a fake event recorder, in a temporary root directory.
type fixture struct {
	t        testing.TB
	m        *Manager
	client   *fake.Clientset
	mounter  *mount.FakeMounter
	clock    *clocktesting.FakeClock
	recorder *record.FakeRecorder
	root     string
	ctx      context.Context
}

// newFixture builds the fixture; tweak adjusts the Options before New.
func newFixture(t testing.TB, objs []runtime.Object, tweak func(*Options)) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	f := &fixture{
		t:        t,
		client:   fake.NewClientset(objs...),
		mounter:  mount.NewFakeMounter(nil),
		clock:    clocktesting.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)),
		recorder: record.NewFakeRecorder(100),
		root:     t.TempDir(),
		ctx:      ctx,
	}
	noswap := false
	opts := Options{
		RootDir:     f.root,
		Client:      f.client,
		NodeName:    "node-1",
		Recorder:    f.recorder,
		Clock:       f.clock,
		Mounter:     f.mounter,
		TmpfsNoswap: &noswap,
		NodeAllocatable: func() v1.ResourceList {
			return v1.ResourceList{v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourceCPU: resource.MustParse("4")}
		},
	}
	if tweak != nil {
		tweak(&opts)
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

// run runs the Manager until the test ends.
func (f *fixture) run() {
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := f.m.Run(ctx); err != nil {
			f.t.Errorf("Run: %v", err)
		}
	}()
	f.t.Cleanup(func() { cancel(); wg.Wait() })
	f.eventually("the reconciler to start", f.m.ReconcilerSynced)
}

// eventually waits for cond, failing the test after 10s. It waits for
// asynchronous work; no test asserts how long it takes.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// events drains the recorded events.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (f *fixture) podDir(uid types.UID) string {
	return filepath.Join(f.root, "pods", string(uid))
}

func (f *fixture) volDir(uid types.UID, plugin, name string) string {
	return filepath.Join(f.podDir(uid), "volumes", escapePluginName(plugin), name)
}

// mounted reports whether the fake mounter has something mounted at path.
func (f *fixture) mounted(path string) bool {
	mps, _ := f.mounter.List()
	for _, mp := range mps {
		if mp.Path == path {
			return true
		}
	}
	return false
}

// mountOpts returns the options of the fake mount at path.
func (f *fixture) mountOpts(path string) []string {
	mps, _ := f.mounter.List()
	for _, mp := range mps {
		if mp.Path == path {
			return mp.Opts
		}
	}
	return nil
}

func (f *fixture) mountPod(pod *v1.Pod) map[string]Mounted {
	f.t.Helper()
	out, err := f.m.MountPod(f.ctx, pod)
	if err != nil {
		f.t.Fatalf("MountPod: %v", err)
	}
	return out
}

// apiCalls counts the client's actions with verb.
func (f *fixture) apiCalls(verb string) int {
	n := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == verb {
			n++
		}
	}
	return n
}

// testPod returns a pod with one container mounting every volume at
// /mnt/<name>.
func testPod(uid types.UID, vols ...v1.Volume) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: uid, ResourceVersion: "1"},
		Spec: v1.PodSpec{
			ServiceAccountName: "sa",
			Containers:         []v1.Container{{Name: "app", Image: "app"}},
			Volumes:            vols,
		},
	}
	for _, v := range vols {
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: v.Name, MountPath: "/mnt/" + v.Name})
	}
	return pod
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fileMode0(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func ptr[T any](v T) *T { return &v }

func hasEvent(events []string, substr string) bool {
	for _, e := range events {
		if strings.Contains(e, substr) {
			return true
		}
	}
	return false
}
