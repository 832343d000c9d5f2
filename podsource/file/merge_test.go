package file_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/apiserver"
	"github.com/nodekit/nodekit/podsource/file"
)

// expectUpdate takes the next update of cfg and checks it.
func expectUpdate(t *testing.T, cfg *podsource.Config, op podsource.Op, source string, names ...string) podsource.Update {
	t.Helper()
	select {
	case u := <-cfg.Updates():
		var got []string
		for _, p := range u.Pods {
			got = append(got, p.Namespace+"/"+p.Name)
		}
		if u.Op != op || u.Source != source || strings.Join(got, ",") != strings.Join(names, ",") {
			t.Fatalf("update %v %s %v, want %v %s %v", u.Op, u.Source, got, op, source, names)
		}
		return u
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("no update, want %v %s %v", op, source, names)
		return podsource.Update{}
	}
}

// The file and API server sources merged by one Config, as the agent runs
// them: static pods come and go with their files, the mirror pods the API
// server shows are never pods to run, and AllReady waits for both.
func TestFileAndAPIServerSourcesMerged(t *testing.T) {
	dir := t.TempDir()
	withUID := strings.Replace(manifestYAML("etcd", "etcd:3.5"), "  name: etcd\n", "  name: etcd\n  uid: etcd-uid\n", 1)
	write(t, dir, "etcd.yaml", withUID)
	write(t, dir, "web.yaml", manifestYAML("web", "nginx:1"))

	regular := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app", UID: "app-uid"},
		Spec:       v1.PodSpec{NodeName: nodeName, Containers: []v1.Container{{Name: "c", Image: "app"}}},
	}
	mirror := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "etcd-node-a", UID: "mirror-uid",
			Annotations: map[string]string{podsource.ConfigMirrorAnnotationKey: "etcd-uid", podsource.ConfigHashAnnotationKey: "etcd-uid"}},
		Spec: v1.PodSpec{NodeName: nodeName, Containers: []v1.Container{{Name: "c", Image: "etcd:3.5"}}},
	}
	client := fake.NewClientset(regular, mirror)
	api, err := apiserver.New(apiserver.Options{Client: client, NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	files, err := file.New(file.Options{Path: dir, NodeName: nodeName, Clock: testingclock.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := podsource.New(podsource.Options{Sources: []podsource.Source{api, files}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cfg.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()

	// The two first updates, in either order; ready only after both.
	var static *v1.Pod
	fileFirst := false
	for i := range 2 {
		if cfg.AllReady() {
			t.Fatalf("AllReady after %d of 2 sources", i)
		}
		select {
		case u := <-cfg.Updates():
			switch u.Source {
			case "api":
				if u.Op != podsource.OpAdd || len(u.Pods) != 1 || u.Pods[0].UID != "app-uid" {
					t.Fatalf("api update %v %v: the mirror pod must not be delivered", u.Op, u.Pods)
				}
			case "file":
				if u.Op != podsource.OpAdd || len(u.Pods) != 2 {
					t.Fatalf("file update %v %v", u.Op, u.Pods)
				}
				static = u.Pods[0]
				fileFirst = i == 0
			}
		case <-time.After(wait.ForeverTestTimeout):
			t.Fatal("no first update")
		}
	}
	if fileFirst {
		// The API server then showed a mirror pod of a known static pod:
		// the static pod is to be synced.
		expectUpdate(t, cfg, podsource.OpMirror, "api", "default/etcd-node-a")
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return cfg.AllReady(), nil }); err != nil {
		t.Fatal("not AllReady after both sources reported")
	}
	if static.UID != "etcd-uid" || static.Annotations[podsource.ConfigSourceAnnotationKey] != "file" ||
		static.Annotations[podsource.ConfigFirstSeenAnnotationKey] == "" {
		t.Errorf("static pod %s %v", static.UID, static.Annotations)
	}
	if m, ok := cfg.MirrorPodFor(static); !ok || m.UID != "mirror-uid" || !podsource.IsMirrorPodOf(m, static) {
		t.Errorf("MirrorPodFor = %v, %v", m, ok)
	}

	// Editing a manifest with metadata.uid: UPDATE with the new spec.
	write(t, dir, "etcd.yaml", strings.Replace(withUID, "etcd:3.5", "etcd:3.6", 1))
	u := expectUpdate(t, cfg, podsource.OpUpdate, "file", "default/etcd-node-a")
	if u.Pods[0].Spec.Containers[0].Image != "etcd:3.6" || u.Pods[0].UID != "etcd-uid" {
		t.Errorf("update carries %s %s", u.Pods[0].UID, u.Pods[0].Spec.Containers[0].Image)
	}
	// Editing one without: its UID changes, the pod is replaced.
	write(t, dir, "web.yaml", manifestYAML("web", "nginx:2"))
	old := expectUpdate(t, cfg, podsource.OpRemove, "file", "default/web-node-a").Pods[0]
	u = expectUpdate(t, cfg, podsource.OpAdd, "file", "default/web-node-a")
	if u.Pods[0].UID == old.UID || u.Pods[0].Spec.Containers[0].Image != "nginx:2" {
		t.Errorf("replacement %s %s (old %s)", u.Pods[0].UID, u.Pods[0].Spec.Containers[0].Image, old.UID)
	}
	// Removing a manifest: REMOVE; its mirror pod is now an orphan.
	if err := os.Remove(filepath.Join(dir, "etcd.yaml")); err != nil {
		t.Fatal(err)
	}
	expectUpdate(t, cfg, podsource.OpRemove, "file", "default/etcd-node-a")
	if orphans := cfg.OrphanedMirrorPods(); len(orphans) != 1 || orphans[0].UID != "mirror-uid" {
		t.Errorf("orphans = %v", orphans)
	}
	// The mirror pod goes away on the API server: nothing to deliver.
	if err := client.CoreV1().Pods("default").Delete(ctx, "etcd-node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods("default").Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectUpdate(t, cfg, podsource.OpRemove, "api", "default/app")
}
