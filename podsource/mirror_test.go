package podsource_test

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/podsource"
)

// staticPod is a pod as the file source sends it.
func staticPod(uid, name, hash string) *v1.Pod {
	return pod(uid, name, func(p *v1.Pod) {
		p.Annotations[podsource.ConfigHashAnnotationKey] = hash
	})
}

// mirrorPod is the API object of a static pod.
func mirrorPod(uid, name, hash string, mutate ...func(*v1.Pod)) *v1.Pod {
	return pod(uid, name, append([]func(*v1.Pod){func(p *v1.Pod) {
		p.Annotations[podsource.ConfigHashAnnotationKey] = hash
		p.Annotations[podsource.ConfigMirrorAnnotationKey] = hash
		p.Annotations[podsource.ConfigSourceAnnotationKey] = "file"
	}}, mutate...)...)
}

func TestMirrorPodsAreNotDeliveredAsPods(t *testing.T) {
	api, file := newChanSource("api"), newChanSource("file")
	h := start(t, podsource.Options{Sources: []podsource.Source{api, file}})

	// The API server reports first (after a restart): the mirror pod of a
	// static pod the file source has not read yet, and a regular pod.
	api.send(t, mirrorPod("m1", "web", "h1"), pod("uid-a", "a"))
	h.expect(t, podsource.OpAdd, "api", "uid-a")
	if _, ok := h.cfg.GetPodByUID("m1"); ok {
		t.Error("GetPodByUID finds a mirror pod")
	}
	if orphans := h.cfg.OrphanedMirrorPods(); len(orphans) != 0 {
		t.Errorf("orphans before every source reported: %v", orphans)
	}

	static := staticPod("s1", "web", "h1")
	file.send(t, static)
	u := h.expect(t, podsource.OpAdd, "file", "s1")
	got := u.Pods[0]
	if !podsource.IsStaticPod(got) || podsource.IsMirrorPod(got) {
		t.Errorf("static pod %v: IsStaticPod %v, IsMirrorPod %v", got.Annotations, podsource.IsStaticPod(got), podsource.IsMirrorPod(got))
	}
	m, ok := h.cfg.MirrorPodFor(got)
	if !ok || m.UID != "m1" || !podsource.IsMirrorPodOf(m, got) {
		t.Errorf("MirrorPodFor = %v, %v", m, ok)
	}
	s, ok := h.cfg.StaticPodFor(m)
	if !ok || s.UID != "s1" {
		t.Errorf("StaticPodFor = %v, %v", s, ok)
	}
	waitReady(t, h.cfg)
	if orphans := h.cfg.OrphanedMirrorPods(); len(orphans) != 0 {
		t.Errorf("orphans = %v", orphans)
	}

	// Someone deletes the mirror pod gracefully: the static pod is to be
	// synced, no pod is deleted.
	now := metav1.NewTime(t0)
	api.send(t, mirrorPod("m1", "web", "h1", func(p *v1.Pod) { p.DeletionTimestamp = &now }), pod("uid-a", "a"))
	u = h.expect(t, podsource.OpMirror, "api", "s1")
	if podsource.IsMirrorPod(u.Pods[0]) || u.Pods[0].Annotations[podsource.ConfigSourceAnnotationKey] != "file" {
		t.Errorf("OpMirror carries %v, want the static pod", u.Pods[0].Annotations)
	}
	if m, _ := h.cfg.MirrorPodFor(got); m.DeletionTimestamp == nil {
		t.Error("MirrorPodFor returned the old version")
	}

	// A status-only change of the mirror pod (the agent's own write) is
	// not delivered; its removal is.
	api.send(t, mirrorPod("m1", "web", "h1", func(p *v1.Pod) { p.DeletionTimestamp = &now; p.Status.Phase = v1.PodRunning }), pod("uid-a", "a"))
	api.send(t, pod("uid-a", "a"))
	h.expect(t, podsource.OpMirror, "api", "s1")
	if _, ok := h.cfg.MirrorPodFor(got); ok {
		t.Error("MirrorPodFor finds a removed mirror pod")
	}

	// A new mirror pod appears (the agent created it): OpMirror again. The
	// mirror pod of a static pod that is gone is an orphan.
	api.send(t, mirrorPod("m2", "web", "h1"), mirrorPod("m3", "gone", "h9"), pod("uid-a", "a"))
	h.expect(t, podsource.OpMirror, "api", "s1")
	orphans := h.cfg.OrphanedMirrorPods()
	if len(orphans) != 1 || orphans[0].UID != "m3" {
		t.Errorf("orphans = %v", orphans)
	}
	// Removing the static pod orphans its mirror pod.
	file.send(t)
	h.expect(t, podsource.OpRemove, "file", "s1")
	if orphans := h.cfg.OrphanedMirrorPods(); len(orphans) != 2 {
		t.Errorf("orphans = %v", orphans)
	}
}

func TestMirrorPodOfAnUnknownStaticPodIsSilent(t *testing.T) {
	api := newChanSource("api")
	h := start(t, podsource.Options{Sources: []podsource.Source{api}})
	api.send(t, mirrorPod("m1", "web", "h1"))
	// The first snapshot still yields its (empty) ADD, and nothing else.
	h.expect(t, podsource.OpAdd, "api")
	api.send(t)
	api.send(t, pod("uid-a", "a"))
	h.expect(t, podsource.OpAdd, "api", "uid-a")
}

func TestIsMirrorPodOf(t *testing.T) {
	static := staticPod("s", "web", "h1")
	for name, tc := range map[string]struct {
		mirror *v1.Pod
		want   bool
	}{
		"current":    {mirrorPod("m", "web", "h1"), true},
		"old hash":   {mirrorPod("m", "web", "h0"), false},
		"other name": {mirrorPod("m", "api", "h1"), false},
		"not mirror": {staticPod("m", "web", "h1"), false},
		"namespace":  {mirrorPod("m", "web", "h1", func(p *v1.Pod) { p.Namespace = "kube-system" }), false},
	} {
		if got := podsource.IsMirrorPodOf(tc.mirror, static); got != tc.want {
			t.Errorf("%s: IsMirrorPodOf = %v", name, got)
		}
	}
	if podsource.IsStaticPod(pod("u", "a")) {
		t.Error("a pod without source annotation is static")
	}
	api := pod("u", "a", func(p *v1.Pod) { p.Annotations[podsource.ConfigSourceAnnotationKey] = "api" })
	if podsource.IsStaticPod(api) {
		t.Error("an API pod is static")
	}
}

func waitReady(t *testing.T, cfg *podsource.Config) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return cfg.AllReady(), nil }); err != nil {
		t.Fatal("not AllReady")
	}
}
