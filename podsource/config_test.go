package podsource_test

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/podsource"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 890, time.UTC)

// chanSource forwards the snapshots a test sends on in.
type chanSource struct {
	name string
	in   chan []*v1.Pod
	err  chan error
}

func newChanSource(name string) *chanSource {
	return &chanSource{name: name, in: make(chan []*v1.Pod), err: make(chan error, 1)}
}

func (s *chanSource) Name() string { return s.name }

func (s *chanSource) Run(ctx context.Context, out chan<- []*v1.Pod) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-s.err:
			return err
		case pods := <-s.in:
			select {
			case out <- pods:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// send hands one snapshot to the source.
func (s *chanSource) send(t *testing.T, pods ...*v1.Pod) {
	t.Helper()
	select {
	case s.in <- pods:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("source %s: snapshot not taken", s.name)
	}
}

func pod(uid, name string, mutate ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID(uid),
			Labels:      map[string]string{"app": name},
			Annotations: map[string]string{"team": "a"},
		},
		Spec:   v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{Name: "c", Image: "busybox"}}},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// harness runs a Config over the given sources.
type harness struct {
	cfg    *podsource.Config
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, opts podsource.Options) *harness {
	t.Helper()
	if opts.Clock == nil {
		opts.Clock = testingclock.NewFakeClock(t0)
	}
	cfg, err := podsource.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- cfg.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(wait.ForeverTestTimeout):
			t.Error("Run did not return")
		}
	})
	return h
}

func (h *harness) next(t *testing.T) podsource.Update {
	t.Helper()
	select {
	case u := <-h.cfg.Updates():
		return u
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no update")
		return podsource.Update{}
	}
}

// expect takes the next update and checks its op, source and pod UIDs.
func (h *harness) expect(t *testing.T, op podsource.Op, source string, uids ...string) podsource.Update {
	t.Helper()
	u := h.next(t)
	var got []string
	for _, p := range u.Pods {
		got = append(got, string(p.UID))
	}
	if u.Op != op || u.Source != source || strings.Join(got, ",") != strings.Join(uids, ",") {
		t.Fatalf("update = %v %s %v, want %v %s %v", u.Op, u.Source, got, op, source, uids)
	}
	if u.Pods == nil {
		t.Fatal("update carries nil Pods")
	}
	return u
}

func TestFirstSnapshotAddsAnnotatedCopies(t *testing.T) {
	src := newChanSource(podsource.APIServerSource)
	h := start(t, podsource.Options{Sources: []podsource.Source{src}})
	a := pod("uid-a", "a")
	src.send(t, a)
	u := h.expect(t, podsource.OpAdd, "api", "uid-a")
	got := u.Pods[0]
	if v := got.Annotations[podsource.ConfigSourceAnnotationKey]; v != "api" {
		t.Errorf("config.source = %q, want api", v)
	}
	if v := got.Annotations[podsource.ConfigFirstSeenAnnotationKey]; v != "2026-03-04T05:06:07.00000089Z" {
		t.Errorf("config.seen = %q", v)
	}
	if got.Annotations["team"] != "a" {
		t.Errorf("author annotation lost: %v", got.Annotations)
	}
	// The source's object is untouched, and the update's pod is the
	// consumer's own copy.
	if len(a.Annotations) != 1 {
		t.Errorf("source pod modified: %v", a.Annotations)
	}
	got.Labels["app"] = "changed"
	stored, ok := h.cfg.GetPodByUID("uid-a")
	if !ok || stored.Labels["app"] != "a" || stored.Annotations[podsource.ConfigSourceAnnotationKey] != "api" {
		t.Errorf("GetPodByUID = %v, %v", stored, ok)
	}
	if a.Labels["app"] != "a" {
		t.Errorf("the consumer's copy shares the source's labels: %v", a.Labels)
	}
	if _, ok := h.cfg.GetPodByUID("nope"); ok {
		t.Error("GetPodByUID found an unknown pod")
	}
}

func TestOps(t *testing.T) {
	deleted := metav1.NewTime(t0.Add(time.Minute))
	tests := []struct {
		name   string
		change func(*v1.Pod)
		op     podsource.Op // -1: no update
	}{
		{"image", func(p *v1.Pod) { p.Spec.Containers[0].Image = "nginx" }, podsource.OpUpdate},
		{"label", func(p *v1.Pod) { p.Labels["tier"] = "web" }, podsource.OpUpdate},
		{"annotation added", func(p *v1.Pod) { p.Annotations["x"] = "y" }, podsource.OpUpdate},
		{"annotation removed", func(p *v1.Pod) { delete(p.Annotations, "team") }, podsource.OpUpdate},
		{"grace period", func(p *v1.Pod) { p.DeletionGracePeriodSeconds = new(int64) }, podsource.OpUpdate},
		{"status", func(p *v1.Pod) { p.Status.Phase = v1.PodRunning }, podsource.OpReconcile},
		{"condition", func(p *v1.Pod) {
			p.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue}}
		}, podsource.OpReconcile},
		{"spec and status", func(p *v1.Pod) { p.Spec.Containers[0].Image = "nginx"; p.Status.Phase = v1.PodRunning }, podsource.OpUpdate},
		{"deletion", func(p *v1.Pod) { p.DeletionTimestamp = &deleted; p.DeletionGracePeriodSeconds = ptrInt64(30) }, podsource.OpDelete},
		{"local annotations", func(p *v1.Pod) {
			p.Annotations[podsource.ConfigSourceAnnotationKey] = "file"
			p.Annotations[podsource.ConfigFirstSeenAnnotationKey] = "yesterday"
		}, -1},
		{"metadata only", func(p *v1.Pod) { p.Finalizers = []string{"f"}; p.ResourceVersion = "2" }, -1},
		{"nothing", func(*v1.Pod) {}, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := newChanSource("api")
			clk := testingclock.NewFakeClock(t0)
			h := start(t, podsource.Options{Sources: []podsource.Source{src}, Clock: clk})
			src.send(t, pod("uid-a", "a"))
			h.expect(t, podsource.OpAdd, "api", "uid-a")
			clk.Step(time.Hour)

			changed := pod("uid-a", "a", tc.change)
			// A second pod added with the change proves what the change
			// itself produced: its ADD comes first, then the change's op.
			src.send(t, changed, pod("uid-b", "b"))
			h.expect(t, podsource.OpAdd, "api", "uid-b")
			stored, _ := h.cfg.GetPodByUID("uid-a")
			if tc.op < 0 {
				// Nothing else is queued: the next snapshot's update is next.
				src.send(t, changed)
				h.expect(t, podsource.OpRemove, "api", "uid-b")
				if tc.name == "metadata only" && len(stored.Finalizers) != 1 {
					t.Errorf("stored pod not refreshed: %v", stored.ObjectMeta)
				}
				return
			}
			u := h.expect(t, tc.op, "api", "uid-a")
			got := u.Pods[0]
			want := pod("uid-a", "a", tc.change)
			if got.Spec.Containers[0].Image != want.Spec.Containers[0].Image || got.Status.Phase != want.Status.Phase ||
				len(got.Labels) != len(want.Labels) || (got.DeletionTimestamp == nil) != (want.DeletionTimestamp == nil) {
				t.Errorf("update carries %+v, want the new version", got)
			}
			// The first-seen time and source stay the first ones.
			if v := got.Annotations[podsource.ConfigFirstSeenAnnotationKey]; v != t0.Format(time.RFC3339Nano) {
				t.Errorf("config.seen = %q, want the first-seen time", v)
			}
			if got.Annotations[podsource.ConfigSourceAnnotationKey] != "api" {
				t.Errorf("config.source = %q", got.Annotations[podsource.ConfigSourceAnnotationKey])
			}
			if stored.Status.Phase != want.Status.Phase || stored.Spec.Containers[0].Image != want.Spec.Containers[0].Image {
				t.Errorf("GetPodByUID returned the old version")
			}
		})
	}
}

func ptrInt64(v int64) *int64 { return &v }

func TestSameResourceVersionIsUnchanged(t *testing.T) {
	src := newChanSource("api")
	h := start(t, podsource.Options{Sources: []podsource.Source{src}})
	src.send(t, pod("uid-a", "a", func(p *v1.Pod) { p.ResourceVersion = "7" }))
	h.expect(t, podsource.OpAdd, "api", "uid-a")
	// Same resourceVersion: the object is the one already seen.
	src.send(t, pod("uid-a", "a", func(p *v1.Pod) { p.ResourceVersion = "7" }))
	src.send(t)
	h.expect(t, podsource.OpRemove, "api", "uid-a")
}

func TestUpdateOrderWithinOneSnapshot(t *testing.T) {
	src := newChanSource("file")
	h := start(t, podsource.Options{Sources: []podsource.Source{src}})
	src.send(t, pod("upd", "upd"), pod("del", "del"), pod("rec", "rec"), pod("gone", "gone"))
	h.expect(t, podsource.OpAdd, "file", "upd", "del", "rec", "gone")
	now := metav1.NewTime(t0)
	src.send(t,
		pod("rec", "rec", func(p *v1.Pod) { p.Status.Message = "hi" }),
		pod("del", "del", func(p *v1.Pod) { p.DeletionTimestamp = &now }),
		pod("new", "new"),
		pod("upd", "upd", func(p *v1.Pod) { p.Labels["v"] = "2" }),
	)
	h.expect(t, podsource.OpRemove, "file", "gone")
	h.expect(t, podsource.OpAdd, "file", "new")
	h.expect(t, podsource.OpUpdate, "file", "upd")
	h.expect(t, podsource.OpDelete, "file", "del")
	h.expect(t, podsource.OpReconcile, "file", "rec")
}

func TestDuplicateNamesAreIgnored(t *testing.T) {
	src := newChanSource("api")
	rec := record.NewFakeRecorder(10)
	h := start(t, podsource.Options{Sources: []podsource.Source{src}, Recorder: rec})
	src.send(t, pod("uid-a", "same"), pod("uid-b", "same"), pod("uid-a", "other"), nil)
	h.expect(t, podsource.OpAdd, "api", "uid-a")
	select {
	case e := <-rec.Events:
		if !strings.HasPrefix(e, "Warning FailedValidation") || !strings.Contains(e, `duplicate pod name "same"`) {
			t.Errorf("event = %q", e)
		}
	default:
		t.Error("no FailedValidation event")
	}
}

func TestAllReadyWaitsForEverySourceToBeConsumed(t *testing.T) {
	api, file := newChanSource("api"), newChanSource("file")
	h := start(t, podsource.Options{Sources: []podsource.Source{api, file}})
	if h.cfg.AllReady() {
		t.Fatal("ready before any source reported")
	}
	file.send(t) // an empty first snapshot
	api.send(t, pod("uid-a", "a"))
	first := h.next(t)
	second := h.next(t)
	if first.Source == second.Source || first.Op != podsource.OpAdd || second.Op != podsource.OpAdd {
		t.Fatalf("updates = %+v, %+v", first, second)
	}
	for _, u := range []podsource.Update{first, second} {
		if (u.Source == "file") != (len(u.Pods) == 0) {
			t.Errorf("%s update carries %d pods", u.Source, len(u.Pods))
		}
	}
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return h.cfg.AllReady(), nil })
	if err != nil {
		t.Fatal("not ready after both first updates were received")
	}
	if !h.cfg.SeenSource("api") || !h.cfg.SeenSource("file") || h.cfg.SeenSource("http") {
		t.Error("SeenSource disagrees")
	}
}

func TestNotReadyUntilTheUpdateIsReceived(t *testing.T) {
	src := newChanSource("api")
	h := start(t, podsource.Options{Sources: []podsource.Source{src}})
	src.send(t, pod("uid-a", "a"))
	// The source's snapshot is merged, but nobody took the update yet.
	src.send(t, pod("uid-a", "a"), pod("uid-b", "b"))
	if h.cfg.SeenSource("api") || h.cfg.AllReady() {
		t.Fatal("ready before the consumer received anything")
	}
	h.expect(t, podsource.OpAdd, "api", "uid-a")
	h.expect(t, podsource.OpAdd, "api", "uid-b")
}

func TestSourcesAreIndependent(t *testing.T) {
	api, file := newChanSource("api"), newChanSource("file")
	h := start(t, podsource.Options{Sources: []podsource.Source{api, file}})
	api.send(t, pod("uid-a", "a"))
	h.expect(t, podsource.OpAdd, "api", "uid-a")
	file.send(t, pod("uid-s", "static"))
	h.expect(t, podsource.OpAdd, "file", "uid-s")
	// An empty file snapshot removes only the file's pods.
	file.send(t)
	h.expect(t, podsource.OpRemove, "file", "uid-s")
	if _, ok := h.cfg.GetPodByUID("uid-a"); !ok {
		t.Error("api pod lost")
	}
	if _, ok := h.cfg.GetPodByUID("uid-s"); ok {
		t.Error("removed pod still stored")
	}
}

func TestNewRejectsBadSources(t *testing.T) {
	for name, sources := range map[string][]podsource.Source{
		"nil":       {nil},
		"empty":     {newChanSource("")},
		"duplicate": {newChanSource("api"), newChanSource("api")},
	} {
		if _, err := podsource.New(podsource.Options{Sources: sources}); err == nil {
			t.Errorf("%s: New accepted %v", name, sources)
		}
	}
}

func TestNoSourcesIsReady(t *testing.T) {
	cfg, err := podsource.New(podsource.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.AllReady() {
		t.Error("a Config without sources is not ready")
	}
}

func TestRunStopsOnSourceErrorAndClosesUpdates(t *testing.T) {
	src := newChanSource("api")
	cfg, err := podsource.New(podsource.Options{Sources: []podsource.Source{src}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cfg.Run(context.Background()) }()
	src.err <- errors.New("boom")
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), `source "api": boom`) {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("Run did not return")
	}
	if _, open := <-cfg.Updates(); open {
		t.Error("Updates not closed")
	}
	if err := cfg.Run(context.Background()); err == nil {
		t.Error("second Run accepted")
	}
}

func TestOpString(t *testing.T) {
	for op, want := range map[podsource.Op]string{
		podsource.OpAdd: "ADD", podsource.OpUpdate: "UPDATE", podsource.OpDelete: "DELETE",
		podsource.OpRemove: "REMOVE", podsource.OpReconcile: "RECONCILE", podsource.OpMirror: "MIRROR", 9: "Op(9)",
	} {
		if got := op.String(); got != want {
			t.Errorf("%d: %q, want %q", int(op), got, want)
		}
	}
}

// TestPodsListsEverySourceWithoutMirrorPods checks Pods: the pods of every
// source as stored, without mirror pods, until their source removes them.
func TestPodsListsEverySourceWithoutMirrorPods(t *testing.T) {
	api, file := newChanSource("api"), newChanSource("file")
	h := start(t, podsource.Options{Sources: []podsource.Source{api, file}})
	mirror := pod("uid-m", "static-node", func(p *v1.Pod) {
		p.Annotations = map[string]string{podsource.ConfigMirrorAnnotationKey: "hash"}
	})
	api.send(t, pod("uid-a", "a"), mirror)
	h.expect(t, podsource.OpAdd, "api", "uid-a") // the mirror pod is kept apart
	file.send(t, pod("uid-s", "static"))
	h.expect(t, podsource.OpAdd, "file", "uid-s")
	names := func() []string {
		var out []string
		for _, p := range h.cfg.Pods() {
			out = append(out, p.Name)
		}
		sort.Strings(out)
		return out
	}
	if got := names(); !reflect.DeepEqual(got, []string{"a", "static"}) {
		t.Errorf("Pods = %v, want [a static]", got)
	}
	file.send(t)
	h.expect(t, podsource.OpRemove, "file", "uid-s")
	if got := names(); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("Pods after the file source emptied = %v, want [a]", got)
	}
}
