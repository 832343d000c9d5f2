package runtime_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

const mib = 1 << 20

// imageDisk is a fake image filesystem of capacity bytes whose usage is
// other bytes plus the fake runtime's images.
type imageDisk struct {
	cri             *fakecri.Server
	capacity, other uint64
	err             error
}

func (d *imageDisk) stats(context.Context) (uint64, uint64, error) {
	if d.err != nil {
		return 0, 0, d.err
	}
	used := d.other
	for _, img := range d.cri.Images() {
		used += img.GetSize()
	}
	return d.capacity, d.capacity - min(used, d.capacity), nil
}

// imageGCHarness is an ImageGC on the harness's fakecri, whose images are
// "busybox", "nginx:1.27" and "registry.k8s.io/pause:3.10", 4 MiB each,
// plus the images a test adds.
type imageGCHarness struct {
	*harness
	gc   *runtime.ImageGC
	disk *imageDisk
	reg  *prometheus.Registry
	rec  *record.FakeRecorder
}

func newImageGCHarness(t *testing.T, mutate func(*runtime.ImageGCOptions)) *imageGCHarness {
	t.Helper()
	return newImageGCHarnessOn(t, fakecri.Options{}, mutate)
}

func newImageGCHarnessOn(t *testing.T, fopts fakecri.Options, mutate func(*runtime.ImageGCOptions)) *imageGCHarness {
	t.Helper()
	h := newHarness(t, fopts, nil)
	disk := &imageDisk{cri: h.cri, capacity: 100 * mib}
	reg := prometheus.NewRegistry()
	rec := record.NewFakeRecorder(100)
	opts := runtime.ImageGCOptions{
		Runtime: h.client.RuntimeService(), Images: h.client.ImageService(),
		FsStats: disk.stats, NodeName: "node-1", Recorder: rec, Clock: h.clk, Registerer: reg,
	}
	if mutate != nil {
		mutate(&opts)
	}
	gc, err := runtime.NewImageGC(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &imageGCHarness{harness: h, gc: gc, disk: disk, reg: reg, rec: rec}
}

// add puts an image of size MiB into the runtime and returns its ID.
func (h *imageGCHarness) add(ref string, size uint64, pinned bool) string {
	h.t.Helper()
	img, err := fakecri.NewImage(ref, size*mib)
	if err != nil {
		h.t.Fatal(err)
	}
	img.Pinned = pinned
	return h.cri.AddImage(img)
}

func (h *imageGCHarness) refs() []string {
	var out []string
	for _, img := range h.cri.Images() {
		out = append(out, img.GetRepoTags()...)
	}
	slices.Sort(out)
	return out
}

func (h *imageGCHarness) collected(reason string) float64 {
	m, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, f := range m {
		if f.GetName() != "kubelet_image_garbage_collected_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			if s.GetLabel()[0].GetValue() == reason {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestImageGCByDiskUsage: over the high threshold, unused images go, least
// recently used first, until the low threshold; an image a container uses
// (even an exited one), a pinned image and one seen for less than the
// minimum age stay.
func TestImageGCByDiskUsage(t *testing.T) {
	h := newImageGCHarness(t, func(o *runtime.ImageGCOptions) {
		o.HighThresholdPercent, o.LowThresholdPercent = ptr.To(50), ptr.To(40)
		o.PinnedImages = []string{"registry.k8s.io/pause:3.10"}
	})
	// busybox runs a pod's container; nginx ran one that exited.
	h.sync(newPod("runs", ctr("app")), nil)
	exited := newPod("exited", v1.Container{Name: "app", Image: "nginx:1.27", ImagePullPolicy: v1.PullIfNotPresent})
	exited.Spec.RestartPolicy = v1.RestartPolicyNever
	h.sync(exited, nil)
	h.exitNow(exited, "app", 0)
	h.add("old:1", 10, false)
	h.add("pinned:1", 10, true)

	// 42 MiB of 100 used: below the high threshold, nothing goes.
	h.disk.other = 10 * mib
	if err := h.gc.GarbageCollect(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(h.cri.Images()); n != 5 {
		t.Fatalf("%d images after a collection below the threshold, want 5", n)
	}

	// A new image, seen after old:1; the disk fills to 60 %.
	h.clk.Step(time.Minute)
	h.add("newer:1", 10, false)
	h.disk.other = 18 * mib
	// Within the minimum age (2m since old:1 was first seen) nothing can go.
	err := h.gc.GarbageCollect(h.ctx)
	if err == nil || !strings.Contains(err.Error(), "Failed to free sufficient space") {
		t.Fatalf("collection within the minimum age: %v, want an insufficient space error", err)
	}
	if ev := <-h.rec.Events; !strings.HasPrefix(ev, "Warning FreeDiskSpaceFailed Insufficient free disk space on the node's image filesystem (60% of 100.0 MiB used)") {
		t.Errorf("event %q", ev)
	}
	// Later old:1 is old enough and goes first: that is 50 %, above the
	// low threshold, so newer:1 (old enough now too) goes as well.
	h.clk.Step(2 * time.Minute)
	if err := h.gc.GarbageCollect(h.ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"docker.io/library/busybox:latest", "docker.io/library/nginx:1.27", "docker.io/library/pinned:1", "registry.k8s.io/pause:3.10"}
	if got := h.refs(); !slices.Equal(got, want) {
		t.Fatalf("images after the collection %q, want %q", got, want)
	}
	if n := h.collected("space"); n != 2 {
		t.Errorf("kubelet_image_garbage_collected_total{reason=space} = %v, want 2", n)
	}
}

// TestImageGCMaxAge: an image unused for longer than imageMaximumGCAge
// goes whatever the disk usage, but only once the collector has run that
// long (before, its last use is unknown).
func TestImageGCMaxAge(t *testing.T) {
	h := newImageGCHarness(t, func(o *runtime.ImageGCOptions) { o.MaxAge = time.Hour })
	h.sync(newPod("runs", ctr("app")), nil)
	h.add("stale:1", 1, false)
	if err := h.gc.GarbageCollect(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.clk.Step(30 * time.Minute)
	if err := h.gc.GarbageCollect(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(h.cri.Images()); n != 4 {
		t.Fatalf("%d images before MaxAge, want 4", n)
	}
	h.clk.Step(31 * time.Minute)
	if err := h.gc.GarbageCollect(h.ctx); err != nil {
		t.Fatal(err)
	}
	for _, ref := range h.refs() {
		if ref == "docker.io/library/stale:1" || ref == "docker.io/library/nginx:1.27" {
			t.Errorf("%s unused for over an hour is still there", ref)
		}
	}
	if !slices.Contains(h.refs(), "docker.io/library/busybox:latest") {
		t.Error("the image in use was removed")
	}
	if n := h.collected("age"); n != 3 {
		// stale:1, nginx and the pause image (not pinned here).
		t.Errorf("kubelet_image_garbage_collected_total{reason=age} = %v, want 3", n)
	}
}

// TestDeleteUnusedImages: for the eviction manager, every unused image old
// enough goes whatever the disk usage.
func TestDeleteUnusedImages(t *testing.T) {
	h := newImageGCHarness(t, nil)
	h.sync(newPod("runs", ctr("app")), nil)
	h.add("pinned:1", 1, true)
	if err := h.gc.DeleteUnusedImages(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(h.cri.Images()); n != 4 {
		t.Fatalf("%d images, want all 4: none is older than the minimum age yet", n)
	}
	h.clk.Step(3 * time.Minute)
	if err := h.gc.DeleteUnusedImages(h.ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"docker.io/library/busybox:latest", "docker.io/library/pinned:1"}
	if got := h.refs(); !slices.Equal(got, want) {
		t.Fatalf("images %q, want %q", got, want)
	}
}

// TestImageGCKeepsTheSandboxImage: the sandbox image a containerd 1.6
// names in its configuration (and does not mark pinned) is never removed.
func TestImageGCKeepsTheSandboxImage(t *testing.T) {
	h := newImageGCHarnessOn(t, fakecri.Options{SandboxImage: "registry.k8s.io/pause:3.10"}, nil)
	if err := h.gc.DeleteUnusedImages(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.clk.Step(time.Hour)
	if err := h.gc.DeleteUnusedImages(h.ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.refs(); !slices.Equal(got, []string{"registry.k8s.io/pause:3.10"}) {
		t.Fatalf("images %q, want only the sandbox image", got)
	}
}

// TestImageGCRun: Run collects at once and every period; a failure that
// repeats is an ImageGCFailed event on the node. A high threshold of 100
// without a maximum age disables it, as the kubelet.
func TestImageGCRun(t *testing.T) {
	h := newImageGCHarness(t, nil)
	h.disk.err = errors.New("statfs: no such file")
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error)
	go func() { done <- h.gc.Run(ctx) }()
	// Two failed collections: at once and one period later.
	poll(t, func() bool { return h.clk.Waiters() > 0 })
	h.clk.Step(runtime.DefaultImageGCPeriod)
	select {
	case ev := <-h.rec.Events:
		if !strings.HasPrefix(ev, "Warning ImageGCFailed image filesystem usage: statfs: no such file") {
			t.Errorf("event %q", ev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no ImageGCFailed event after two failures")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if testutil.CollectAndCount(h.reg) != 0 {
		t.Error("images counted as collected")
	}

	off := newImageGCHarness(t, func(o *runtime.ImageGCOptions) {
		o.HighThresholdPercent = ptr.To(100)
		o.LowThresholdPercent = ptr.To(80)
	})
	if off.gc.Enabled() {
		t.Error("image GC with a high threshold of 100 and no MaxAge is enabled")
	}
	if _, err := runtime.NewImageGC(runtime.ImageGCOptions{Runtime: h.client.RuntimeService(), Images: h.client.ImageService(),
		HighThresholdPercent: ptr.To(50), LowThresholdPercent: ptr.To(60)}); err == nil {
		t.Error("a low threshold above the high one was accepted")
	}
}

// TestImageGCWithoutImageFilesystem: a runtime whose image filesystem is
// not on this machine (fakecri's default mount point) skips collection for
// space instead of failing every period.
func TestImageGCWithoutImageFilesystem(t *testing.T) {
	h := newImageGCHarness(t, func(o *runtime.ImageGCOptions) { o.FsStats = nil })
	if err := h.gc.GarbageCollect(h.ctx); err != nil {
		t.Fatalf("collection on fakecri's default image filesystem: %v", err)
	}
	if n := len(h.cri.Images()); n != 3 {
		t.Errorf("%d images left, want all 3", n)
	}
}
