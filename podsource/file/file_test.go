package file_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/file"
)

const nodeName = "node-a"

func manifestYAML(name, image string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  containers:\n  - name: c\n    image: %s\n", name, image)
}

// write replaces dir/name atomically (a dot file renamed over it), so the
// source never reads a half-written manifest.
func write(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// run starts a Source and returns the channel of its snapshots. Its clock
// is a fake one that the tests do not step: every change they see after the
// first snapshot comes from inotify.
func run(t *testing.T, opts file.Options) <-chan []*v1.Pod {
	t.Helper()
	if opts.NodeName == "" {
		opts.NodeName = nodeName
	}
	if opts.Clock == nil {
		opts.Clock = testingclock.NewFakeClock(time.Now())
	}
	src, err := file.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan []*v1.Pod)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(wait.ForeverTestTimeout):
			t.Error("Run did not return")
		}
	})
	return out
}

// next takes the next snapshot and checks the pod names in it.
func next(t *testing.T, out <-chan []*v1.Pod, names ...string) []*v1.Pod {
	t.Helper()
	select {
	case pods := <-out:
		var got []string
		for _, p := range pods {
			got = append(got, p.Name)
		}
		if pods == nil || !slices.Equal(got, names) {
			t.Fatalf("snapshot %v, want %v", got, names)
		}
		return pods
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("no snapshot, want %v", names)
		return nil
	}
}

func expectEvent(t *testing.T, rec *record.FakeRecorder, parts ...string) {
	t.Helper()
	select {
	case e := <-rec.Events:
		for _, p := range parts {
			if !strings.Contains(e, p) {
				t.Errorf("event %q does not contain %q", e, p)
			}
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("no event with %v", parts)
	}
}

func noEvent(t *testing.T, rec *record.FakeRecorder) {
	t.Helper()
	select {
	case e := <-rec.Events:
		t.Errorf("unexpected event %q", e)
	default:
	}
}

func TestDirectoryLifecycle(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "b.yaml", manifestYAML("b", "nginx:1"))
	write(t, dir, "a.json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`)
	write(t, dir, ".hidden.yaml", manifestYAML("hidden", "nginx"))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "sub"), "deep.yaml", manifestYAML("deep", "nginx"))
	rec := record.NewFakeRecorder(20)
	out := run(t, file.Options{Path: dir + "/", Recorder: rec})

	// Sorted by file name; dot files and subdirectories ignored.
	pods := next(t, out, "a-node-a", "b-node-a")
	a := pods[0]
	if a.Annotations[podsource.ConfigHashAnnotationKey] != string(a.UID) || a.Spec.NodeName != nodeName ||
		a.Spec.Containers[0].ImagePullPolicy != v1.PullAlways {
		t.Errorf("pod a not completed: %v %v", a.Annotations, a.Spec)
	}

	// Added (inotify), edited, renamed, removed.
	write(t, dir, "c.yaml", manifestYAML("c", "nginx:1"))
	pods = next(t, out, "a-node-a", "b-node-a", "c-node-a")
	c := pods[2]
	write(t, dir, "c.yaml", manifestYAML("c", "nginx:2"))
	pods = next(t, out, "a-node-a", "b-node-a", "c-node-a")
	if pods[2].Spec.Containers[0].Image != "nginx:2" || pods[2].UID == c.UID {
		t.Errorf("edit: image %s, UID %s (was %s)", pods[2].Spec.Containers[0].Image, pods[2].UID, c.UID)
	}
	if pods[0] != a {
		t.Error("an unchanged file's pod was read again")
	}
	c = pods[2]
	if err := os.Rename(filepath.Join(dir, "c.yaml"), filepath.Join(dir, "d.yaml")); err != nil {
		t.Fatal(err)
	}
	pods = next(t, out, "a-node-a", "b-node-a", "c-node-a")
	if pods[2].UID == c.UID {
		t.Error("a renamed manifest kept its UID (the path is part of it)")
	}
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	next(t, out, "a-node-a", "c-node-a")

	// Dot files and subdirectories do not matter.
	write(t, dir, ".swp", "garbage")
	write(t, filepath.Join(dir, "sub"), "deeper.yaml", manifestYAML("deeper", "nginx"))
	write(t, dir, "e.yaml", manifestYAML("e", "nginx"))
	next(t, out, "a-node-a", "c-node-a", "e-node-a")
	noEvent(t, rec)
}

func TestBadManifestsAreReportedAndPickedUpWhenFixed(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "good.yaml", manifestYAML("good", "nginx"))
	write(t, dir, "bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [\n")
	rec := record.NewFakeRecorder(20)
	out := run(t, file.Options{Path: dir, Recorder: rec})
	next(t, out, "good-node-a")
	bad := filepath.Join(dir, "bad.yaml")
	expectEvent(t, rec, "Warning InvalidStaticPodManifest", bad, "YAML")

	// Fixed: picked up. Broken again: reported, and the pod stays as it
	// was last read.
	write(t, dir, "bad.yaml", manifestYAML("fixed", "nginx"))
	pods := next(t, out, "fixed-node-a", "good-node-a")
	fixed := pods[0]
	write(t, dir, "bad.yaml", strings.Replace(manifestYAML("fixed", "nginx:2"), "name: fixed", "name: Fixed_", 1))
	expectEvent(t, rec, "Warning InvalidStaticPodManifest", bad, "metadata.name: Invalid value", "keeps running as last read")

	// A second file naming the same pod: the later file is dropped, though
	// it comes first in name order: the running pod stays.
	write(t, dir, "dup.yaml", manifestYAML("good", "busybox"))
	expectEvent(t, rec, "Warning InvalidStaticPodManifest", filepath.Join(dir, "dup.yaml"), "has the name of the pod of "+filepath.Join(dir, "good.yaml"))
	// Unknown fields are accepted with a warning.
	write(t, dir, "extra.yaml", manifestYAML("extra", "nginx")+"    colour: blue\n")
	pods = next(t, out, "fixed-node-a", "extra-node-a", "good-node-a")
	if pods[0] != fixed {
		t.Error("the invalid file's last valid pod was not kept")
	}
	expectEvent(t, rec, "Warning StaticPodManifestWarning", "extra.yaml", `unknown field "spec.containers[0].colour"`)

	// Problems are reported once, not at every read.
	write(t, dir, "other.yaml", manifestYAML("other", "nginx"))
	next(t, out, "fixed-node-a", "extra-node-a", "good-node-a", "other-node-a")
	noEvent(t, rec)

	// Removing the broken file removes its kept pod.
	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}
	next(t, out, "extra-node-a", "good-node-a", "other-node-a")
}

func TestSameNameInNewFilesFirstInNameOrderWins(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "b.yaml", manifestYAML("same", "b"))
	write(t, dir, "a.yaml", manifestYAML("same", "a"))
	rec := record.NewFakeRecorder(20)
	out := run(t, file.Options{Path: dir, Recorder: rec})
	pods := next(t, out, "same-node-a")
	if pods[0].Spec.Containers[0].Image != "a" {
		t.Errorf("the pod of %s won", pods[0].Spec.Containers[0].Image)
	}
	expectEvent(t, rec, filepath.Join(dir, "b.yaml"), "has the name of the pod of "+filepath.Join(dir, "a.yaml"))
	// Once a.yaml is gone, b.yaml's pod runs.
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	pods = next(t, out, "same-node-a")
	if pods[0].Spec.Containers[0].Image != "b" {
		t.Errorf("the pod of %s runs", pods[0].Spec.Containers[0].Image)
	}
}

func TestStrictRejectsUnknownFields(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "extra.yaml", manifestYAML("extra", "nginx")+"    colour: blue\n")
	rec := record.NewFakeRecorder(20)
	out := run(t, file.Options{Path: dir, Recorder: rec, Strict: true})
	next(t, out)
	expectEvent(t, rec, "InvalidStaticPodManifest", `strict decoding: unknown field "spec.containers[0].colour"`)
}

func TestMissingPathSendsAnEmptySnapshotThenItsPods(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "manifests")
	out := run(t, file.Options{Path: dir})
	next(t, out)
	// The directory appears (seen through the parent's watch), then a
	// manifest in it.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "a.yaml", manifestYAML("a", "nginx"))
	next(t, out, "a-node-a")
	// The directory goes away with its pods, and comes back.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	next(t, out)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "b.yaml", manifestYAML("b", "nginx"))
	next(t, out, "b-node-a")

	// Watches that ended are closed: one inotify descriptor at a time.
	for i := range 3 {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		next(t, out)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, dir, "c.yaml", manifestYAML(fmt.Sprintf("c%d", i), "nginx"))
		next(t, out, fmt.Sprintf("c%d-node-a", i))
	}
	// (The source may be between two watches for a moment.)
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return inotifyDescriptors(t) == 1, nil }); err != nil {
		t.Errorf("%d inotify descriptors open, want 1", inotifyDescriptors(t))
	}
}

// inotifyDescriptors counts the process' open inotify descriptors.
func inotifyDescriptors(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list descriptors: %v", err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

func TestSingleFilePath(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "pod.yaml", manifestYAML("one", "nginx:1"))
	write(t, dir, "other.yaml", manifestYAML("other", "nginx"))
	out := run(t, file.Options{Path: filepath.Join(dir, "pod.yaml")})
	next(t, out, "one-node-a")
	// Replaced by a rename (as editors and config management do).
	write(t, dir, "pod.yaml", manifestYAML("one", "nginx:2"))
	pods := next(t, out, "one-node-a")
	if pods[0].Spec.Containers[0].Image != "nginx:2" {
		t.Errorf("image %s", pods[0].Spec.Containers[0].Image)
	}
	// Other files of the directory do not matter.
	write(t, dir, "other.yaml", manifestYAML("other", "nginx:2"))
	if err := os.Remove(filepath.Join(dir, "pod.yaml")); err != nil {
		t.Fatal(err)
	}
	next(t, out)
}

func TestEmptyDirectoryIsReported(t *testing.T) {
	out := run(t, file.Options{Path: t.TempDir()})
	next(t, out)
}

func TestNewValidates(t *testing.T) {
	for name, opts := range map[string]file.Options{
		"no path":  {NodeName: nodeName},
		"no node":  {Path: "/x"},
		"bad node": {Path: "/x", NodeName: "Bad_Node"},
		"negative": {Path: "/x", NodeName: nodeName, CheckFrequency: -time.Second},
	} {
		if _, err := file.New(opts); err == nil {
			t.Errorf("%s: New accepted %+v", name, opts)
		}
	}
	src, err := file.New(file.Options{Path: "/does/not/matter", NodeName: nodeName})
	if err != nil || src.Name() != podsource.FileSource {
		t.Errorf("New = %v, %v", src, err)
	}
}

func TestFileWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	rec := record.NewFakeRecorder(20)
	out := run(t, file.Options{Path: dir, Recorder: rec})
	next(t, out)
	// Created empty, then written and closed, as cp does: read once
	// closed, without a report about the empty file.
	f, err := os.Create(filepath.Join(dir, "a.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	data := manifestYAML("a", "nginx")
	if _, err := f.WriteString(data[:20]); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data[20:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	next(t, out, "a-node-a")
	// Rewritten in place (truncated, then written).
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(manifestYAML("a", "nginx:2")), 0o644); err != nil {
		t.Fatal(err)
	}
	pods := next(t, out, "a-node-a")
	if pods[0].Spec.Containers[0].Image != "nginx:2" {
		t.Errorf("image %s", pods[0].Spec.Containers[0].Image)
	}
	noEvent(t, rec)
}
