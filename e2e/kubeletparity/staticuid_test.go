package kubeletparity

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/config"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/manifest"
)

type noSLI struct{}

func (noSLI) ObservedPodOnWatch(klog.Logger, *v1.Pod, time.Time) {}

// kubeletStaticPods reads the manifests in dir with the kubelet's own file
// source, as a kubelet with staticPodPath dir on node nodeName does, and
// returns its pods by name.
func kubeletStaticPods(t *testing.T, dir, nodeName string, want int) map[string]*v1.Pod {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := kubeletconfig.NewPodConfig(record.NewFakeRecorder(100), noSLI{})
	go kubeletconfig.NewSourceFile(klog.Background(), dir, types.NodeName(nodeName), time.Hour, cfg.Channel(ctx, kubetypes.FileSource))
	got := map[string]*v1.Pod{}
	timeout := time.After(30 * time.Second)
	for len(got) < want {
		select {
		case u := <-cfg.Updates():
			for _, p := range u.Pods {
				got[p.Name] = p
			}
		case <-timeout:
			t.Fatalf("the kubelet's file source gave %d pods of %d", len(got), want)
		}
	}
	return got
}

// TestStaticPodUIDMatchesKubelet checks that a static pod read by nodekit
// (podsource/manifest, as its file source reads it) gets the UID the
// kubelet's own file source gives the same manifest on the same node: a
// node handed over from the kubelet to nodekit (or back) finds its static
// pods, kubeadm's control plane among them, unchanged and keeps them
// running, and their mirror pods keep their config hash.
func TestStaticPodUIDMatchesKubelet(t *testing.T) {
	const node = "node-a"
	src := filepath.Join("testdata", "static")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want := kubeletStaticPods(t, dir, node, len(entries))
	dec, err := manifest.NewDecoder(manifest.Options{NodeName: node, Source: podsource.FileSource})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			path := filepath.Join(dir, e.Name())
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := dec.Pod(data, path)
			if err != nil {
				t.Fatal(err)
			}
			kubelet := want[got.Name]
			if kubelet == nil {
				t.Fatalf("the kubelet did not read %s (pod %s)", e.Name(), got.Name)
			}
			if got.UID != kubelet.UID {
				t.Errorf("UID %s, the kubelet's %s", got.UID, kubelet.UID)
			}
			if h := got.Annotations[podsource.ConfigHashAnnotationKey]; h != kubelet.Annotations[kubetypes.ConfigHashAnnotationKey] {
				t.Errorf("config hash %s, the kubelet's %s", h, kubelet.Annotations[kubetypes.ConfigHashAnnotationKey])
			}
			if got.Namespace != kubelet.Namespace {
				t.Errorf("namespace %s, the kubelet's %s", got.Namespace, kubelet.Namespace)
			}
		})
	}
}
