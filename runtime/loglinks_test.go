package runtime_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// linkTarget returns where link points, failing if it is no symlink.
func linkTarget(t *testing.T, link string) string {
	t.Helper()
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatalf("container log link: %v", err)
	}
	return target
}

// gone fails unless path (a link itself, not its target) is absent.
func gone(t *testing.T, path, what string) {
	t.Helper()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("%s %s still there: %v", what, path, err)
	}
}

// TestContainerLogLinks: a started container gets the kubelet's link in
// ContainerLogsDir to its log file; the link goes with the container; the
// garbage collector removes dead links but those of containers that still
// run (a log rotation moves the file away for a moment).
func TestContainerLogLinks(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	dir := h.opts.ContainerLogsDir
	pod := newPod("web", ctr("app"))
	pod.Annotations = map[string]string{fakecri.BehaviorAnnotationPrefix + "app": "log hello from app"}
	h.sync(pod, nil)
	first := h.container(pod, "app").ID
	link := filepath.Join(dir, "web_default_app-"+first+".log")
	if got := runtime.ContainerLogLink(dir, "web", "default", "app", first); got != link {
		t.Errorf("ContainerLogLink = %s, want %s", got, link)
	}
	log0 := runtime.ContainerLogPath(h.logsDir, "default", "web", pod.UID, "app", 0)
	if target := linkTarget(t, link); target != log0 {
		t.Errorf("link points to %s, want the container's log %s", target, log0)
	}
	if b, err := os.ReadFile(link); err != nil || !strings.Contains(string(b), " stdout F hello from app\n") {
		t.Errorf("reading the link: %q, %v; want the container's output", b, err)
	}

	// A log rotation has moved the file aside: the running container's
	// link stays.
	must(t, os.Rename(log0, log0+".rotating"))
	must(t, h.pm.GarbageCollect(h.ctx, keepAll))
	linkTarget(t, link)
	must(t, os.Rename(log0+".rotating", log0))

	// The container restarts: the new instance has a link of its own; the
	// dead one keeps its link while its log is there.
	h.exitNow(pod, "app", 1)
	h.clk.Step(time.Minute)
	h.sync(pod, nil)
	second := h.container(pod, "app").ID
	if second == first {
		t.Fatal("the container did not restart")
	}
	link2 := runtime.ContainerLogLink(dir, "web", "default", "app", second)
	if target := linkTarget(t, link2); target != runtime.ContainerLogPath(h.logsDir, "default", "web", pod.UID, "app", 1) {
		t.Errorf("the restarted container's link points to %s", target)
	}
	must(t, h.pm.GarbageCollect(h.ctx, keepAll))
	linkTarget(t, link)

	// Dead links: the exited container's (its log removed), one whose
	// container the runtime does not know, one whose name holds no
	// container ID. A link that is not dead stays, whatever its name.
	must(t, os.Remove(log0))
	unknown := filepath.Join(dir, "old_default_app-0123456789abcdef.log")
	noID := filepath.Join(dir, "old_default_app-abc.log")
	alive := filepath.Join(dir, "other_default_app-fedcba9876543210.log")
	for _, l := range []string{unknown, noID} {
		must(t, os.Symlink(filepath.Join(h.logsDir, "nothing"), l))
	}
	must(t, os.Symlink(runtime.ContainerLogPath(h.logsDir, "default", "web", pod.UID, "app", 1), alive))
	must(t, h.pm.GarbageCollect(h.ctx, keepAll))
	for _, l := range []string{link, unknown, noID} {
		gone(t, l, "dead link")
	}
	linkTarget(t, alive)
	linkTarget(t, link2)
	if n := len(h.dead(pod)); n != 1 {
		t.Fatalf("%d dead instances, want the one the policy keeps", n)
	}

	// The pod goes: its containers' links go with them.
	must(t, h.pm.KillPod(h.ctx, pod, h.status(pod).RunningPod(), nil))
	must(t, h.pm.RemovePod(h.ctx, pod.UID))
	gone(t, link2, "link of a removed container")
}

// TestContainerLogLinkRemovedWithContainer: the garbage collector removing
// a dead instance removes its link, the running instance's stays.
func TestContainerLogLinkRemovedWithContainer(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, gcPolicy(runtime.ContainerGCPolicy{MaxPerPodContainer: 0, MaxContainers: -1}))
	pod := newPod("web", ctr("app"))
	h.sync(pod, nil)
	first := h.container(pod, "app").ID
	h.exitNow(pod, "app", 1)
	h.clk.Step(time.Minute)
	h.sync(pod, nil)
	second := h.container(pod, "app").ID
	must(t, h.pm.GarbageCollect(h.ctx, keepAll))
	if n := len(h.dead(pod)); n != 0 {
		t.Fatalf("%d dead instances after GC keeping none", n)
	}
	gone(t, runtime.ContainerLogLink(h.opts.ContainerLogsDir, "web", "default", "app", first), "link of a removed container")
	linkTarget(t, runtime.ContainerLogLink(h.opts.ContainerLogsDir, "web", "default", "app", second))
}

// TestContainerLogLinkName: the kubelet's name, cut before ".log" to keep
// within ext4's 255 bytes.
func TestContainerLogLinkName(t *testing.T) {
	id := strings.Repeat("0123456789abcdef", 4)
	if got, want := runtime.ContainerLogLink("/var/log/containers", "web", "kube-system", "app", id),
		"/var/log/containers/web_kube-system_app-"+id+".log"; got != want {
		t.Errorf("ContainerLogLink = %s, want %s", got, want)
	}
	long := strings.Repeat("p", 253)
	got := runtime.ContainerLogLink("/var/log/containers", long, "default", "app", id)
	if want := "/var/log/containers/" + long[:251] + ".log"; got != want {
		t.Errorf("ContainerLogLink of a 253-byte pod name = %s, want %s", got, want)
	}
	mid := strings.Repeat("p", 190)
	name := mid + "_default_app-" + id
	got = filepath.Base(runtime.ContainerLogLink("/var/log/containers", mid, "default", "app", id))
	if want := name[:251] + ".log"; got != want || len(got) != 255 {
		t.Errorf("ContainerLogLink of a %d-byte name = %s (%d bytes), want %s", len(name), got, len(got), want)
	}
}

// TestContainerLogLinkTruncated: a pod whose link name is cut gets the
// link under the cut name, and loses it with its container.
func TestContainerLogLinkTruncated(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod(strings.Repeat("p", 200), ctr("app"))
	pod.UID = types.UID("uid-long")
	h.sync(pod, nil)
	id := h.container(pod, "app").ID
	link := runtime.ContainerLogLink(h.opts.ContainerLogsDir, pod.Name, "default", "app", id)
	if len(filepath.Base(link)) != 255 {
		t.Fatalf("link name of %d bytes, want 255", len(filepath.Base(link)))
	}
	if target := linkTarget(t, link); target != runtime.ContainerLogPath(h.logsDir, "default", pod.Name, pod.UID, "app", 0) {
		t.Errorf("link points to %s", target)
	}
	must(t, h.pm.KillPod(h.ctx, pod, h.status(pod).RunningPod(), nil))
	must(t, h.pm.RemovePod(h.ctx, pod.UID))
	gone(t, link, "link of a removed container")
}

// TestContainerLogLinkFailure: a link that cannot be made does not keep
// the container from running; a missing directory is made.
func TestContainerLogLinkFailure(t *testing.T) {
	var notDir string
	h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		notDir = filepath.Join(filepath.Dir(o.ContainerLogsDir), "a-file")
		o.ContainerLogsDir = notDir
	})
	must(t, os.WriteFile(notDir, nil, 0o644))
	pod := newPod("web", ctr("app"))
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatalf("sync with links that cannot be made: %v", res.Err)
	}
	if c := h.container(pod, "app"); c.State != podstate.ContainerStateRunning {
		t.Errorf("container %s, want running", c.State)
	}

	h2 := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		o.ContainerLogsDir = filepath.Join(o.ContainerLogsDir, "not", "yet")
	})
	h2.sync(pod, nil)
	linkTarget(t, runtime.ContainerLogLink(h2.opts.ContainerLogsDir, "web", "default", "app", h2.container(pod, "app").ID))
}
