package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/eviction"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// podEvents lists the events about a pod with the given reason.
func podEvents(ctx context.Context, client *fake.Clientset, pod *v1.Pod, reason string) []v1.Event {
	list, err := client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []v1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == pod.Name && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

func poll(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestVolumesWiredIntoPods: a pod's configMap, secret, downwardAPI,
// projected service-account token and memory emptyDir volumes are set up
// by the volume manager in the kubelet's layout and mounted into its
// container, its env comes from the same watched configMap and secret (no
// GET per sync), an edited configMap is rewritten in place, and a deleted
// pod's directory goes away.
func TestVolumesWiredIntoPods(t *testing.T) {
	client := fake.NewClientset(
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: "default"}, Data: map[string]string{"greeting": "hello"}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-secret", Namespace: "default"}, Data: map[string][]byte{"password": []byte("s3cret")}},
	)
	client.PrependReactor("create", "serviceaccounts", func(a clienttesting.Action) (bool, k8sruntime.Object, error) {
		ca, ok := a.(clienttesting.CreateAction)
		if !ok || a.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := ca.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		tr.Status.Token = "token-for-" + tr.Spec.BoundObjectRef.Name
		tr.Status.ExpirationTimestamp = metav1.NewTime(time.Now().Add(time.Hour))
		return true, tr, nil
	})
	n := agenttest.Start(t, agenttest.Options{Client: client})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)

	pod := agenttest.Pod("web", "busybox")
	pod.Labels = map[string]string{"app": "web"}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []v1.VolumeMount{
		{Name: "config", MountPath: "/config"}, {Name: "secret", MountPath: "/secret"},
		{Name: "labels", MountPath: "/labels"}, {Name: "token", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
		{Name: "scratch", MountPath: "/scratch"},
	}
	c.Env = []v1.EnvVar{{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "app-secret"}, Key: "password"}}}}
	c.EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}}}}
	pod.Spec.ServiceAccountName = "default"
	pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "app-secret"}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}}}},
		{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "app-secret"}}},
		{Name: "labels", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
		{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3600)}}}}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
	}
	pod = n.CreatePod(ctx, pod)
	running := n.WaitForPod(ctx, pod, agenttest.PodRunningAndReady)

	podDir := filepath.Join(n.Config.RootDir, "pods", string(pod.UID))
	_, id, _ := strings.Cut(running.Status.ContainerStatuses[0].ContainerID, "://")
	cfg := n.CRI.ContainerConfig(id)
	if cfg == nil {
		t.Fatalf("no container %s in the runtime", id)
	}
	mounts := map[string]string{}
	readOnly := map[string]bool{}
	for _, m := range cfg.Mounts {
		mounts[m.ContainerPath], readOnly[m.ContainerPath] = m.HostPath, m.Readonly
	}
	for path, want := range map[string]string{
		"/config": "volumes/kubernetes.io~configmap/config",
		"/secret": "volumes/kubernetes.io~secret/secret",
		"/labels": "volumes/kubernetes.io~downward-api/labels",
		"/var/run/secrets/kubernetes.io/serviceaccount": "volumes/kubernetes.io~projected/token",
		"/scratch": "volumes/kubernetes.io~empty-dir/scratch",
	} {
		if mounts[path] != filepath.Join(podDir, want) {
			t.Errorf("mount %s from %q, want %q", path, mounts[path], filepath.Join(podDir, want))
		}
		if readOnly[path] != (path != "/scratch") {
			t.Errorf("mount %s read-only %t", path, readOnly[path])
		}
	}
	for file, want := range map[string]string{
		"volumes/kubernetes.io~configmap/config/greeting":  "hello",
		"volumes/kubernetes.io~secret/secret/password":     "s3cret",
		"volumes/kubernetes.io~downward-api/labels/labels": `app="web"`,
		"volumes/kubernetes.io~projected/token/token":      "token-for-web",
	} {
		if data, err := os.ReadFile(filepath.Join(podDir, file)); err != nil || string(data) != want {
			t.Errorf("%s = %q, %v; want %q", file, data, err, want)
		}
	}
	env := map[string]string{}
	for _, kv := range cfg.Envs {
		env[kv.Key] = string(kv.Value)
	}
	if env["PASSWORD"] != "s3cret" || env["greeting"] != "hello" {
		t.Errorf("env %v, want PASSWORD and greeting from the secret and configMap", env)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" && (a.GetResource().Resource == "configmaps" || a.GetResource().Resource == "secrets") {
			t.Errorf("a %s was read with a GET; the volume manager's watches must serve it", a.GetResource().Resource)
		}
	}

	// The configMap changes: the file follows.
	cm, err := client.CoreV1().ConfigMaps("default").Get(ctx, "app-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["greeting"] = "bonjour"
	if _, err := client.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "configMap file rewritten", func() bool {
		data, _ := os.ReadFile(filepath.Join(podDir, "volumes/kubernetes.io~configmap/config/greeting"))
		return string(data) == "bonjour"
	})

	// Deleted, the pod's volumes and directory go.
	if err := client.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "pod directory removed", func() bool {
		_, err := os.Stat(podDir)
		return os.IsNotExist(err)
	})
}

// TestVolumeWithoutPluginFailsMount: a pod with an nfs volume
// stays ContainerCreating with a FailedMount event naming the volume; no
// sandbox is made for it.
func TestVolumeWithoutPluginFailsMount(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	pod := agenttest.Pod("claims", "busybox")
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		NFS: &v1.NFSVolumeSource{Server: "nfs.example.com", Path: "/export"}}}}
	pod = n.CreatePod(ctx, pod)
	var events []v1.Event
	poll(ctx, t, "FailedMount event", func() bool {
		events = podEvents(ctx, n.Client, pod, "FailedMount")
		return len(events) > 0
	})
	if ev := events[0]; ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Message, `unmounted volumes=[data]`) ||
		!strings.Contains(ev.Message, "nfs volumes are not supported by this node agent") {
		t.Errorf("FailedMount event %s %q", ev.Type, ev.Message)
	}
	got := n.WaitForPod(ctx, pod, func(p *v1.Pod) bool {
		return p != nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil
	})
	if got.Status.Phase != v1.PodPending || got.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
		t.Errorf("pod %s, container %+v; want Pending, ContainerCreating", got.Status.Phase, got.Status.ContainerStatuses[0].State)
	}
	if n.CRI.Calls("RunPodSandbox") != 0 {
		t.Error("a sandbox was created for a pod whose volumes are not mounted")
	}
}

// TestRuntimeGCWired: the kubelet's image GC and log rotation settings
// reach the image garbage collector, which runs at start, and the log
// rotator; the eviction manager reclaims images and containers.
func TestRuntimeGCWired(t *testing.T) {
	unused, err := fakecri.NewImage("unused:1", 10<<20)
	if err != nil {
		t.Fatal(err)
	}
	var rotator *runtime.LogRotator
	var gcs *runtime.ImageGC
	var evictionOpts eviction.Options
	n := agenttest.Start(t, agenttest.Options{
		CRI:  &fakecri.Options{PullAny: true, Images: []*runtimeapi.Image{unused}},
		Args: []string{"--image-gc-high-threshold=50", "--image-gc-low-threshold=40", "--minimum-image-ttl-duration=1ms", "--container-log-max-size=1Ki"},
		Extra: []fx.Option{
			// 90 % of the image filesystem is used.
			fx.Decorate(func(o runtime.ImageGCOptions) runtime.ImageGCOptions {
				o.FsStats = func(context.Context) (uint64, uint64, error) { return 100 << 20, 10 << 20, nil }
				return o
			}),
			fx.Populate(&rotator, &gcs, &evictionOpts),
		},
	})
	if evictionOpts.DeleteUnusedImages == nil || evictionOpts.DeleteUnusedContainers == nil {
		t.Error("the eviction manager has no image or container reclaim")
	}
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	pod := n.CreatePod(ctx, agenttest.Pod("logs", "busybox"))
	n.WaitForPod(ctx, pod, agenttest.PodRunningAndReady)
	// Once unused:1 was first seen 1ms ago, a collection removes it (it
	// cannot free all it wants: that is an error), never the image in use.
	var refs []string
	poll(ctx, t, "unused image collected", func() bool {
		_ = gcs.GarbageCollect(ctx)
		refs = refs[:0]
		for _, img := range n.CRI.Images() {
			refs = append(refs, img.RepoTags...)
		}
		return !slices.Contains(refs, "docker.io/library/unused:1")
	})
	if !slices.Contains(refs, "docker.io/library/busybox:latest") {
		t.Errorf("images after GC: %v, want busybox kept", refs)
	}

	logDir := runtime.PodLogsDirectory(n.Config.Kubelet.PodLogsDir, pod.Namespace, pod.Name, pod.UID)
	log := filepath.Join(logDir, "app", "0.log")
	if err := os.WriteFile(log, []byte(strings.Repeat("x", 2048)), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := rotator.RotateLogs(ctx); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(log + ".*")
	if len(files) != 1 {
		t.Errorf("rotated logs %v, want one: containerLogMaxSize 1Ki did not reach the rotator", files)
	}
}
