package runtime_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodekit/nodekit/podstate"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/volume"
)

func TestEnvFromSources(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		o.ConfigMaps = func(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
			if ns == "default" && name == "settings" {
				return &v1.ConfigMap{Data: map[string]string{"MODE": "fast", "LEVEL": "3"}}, nil
			}
			return nil, apierrors.NewNotFound(v1.Resource("configmaps"), name)
		}
		o.Secrets = func(_ context.Context, ns, name string) (*v1.Secret, error) {
			return &v1.Secret{Data: map[string][]byte{"token": []byte("t0k3n")}}, nil
		}
		o.Services = func() ([]*v1.Service, error) {
			return []*v1.Service{
				{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.1",
					Ports: []v1.ServicePort{{Name: "https", Port: 443, Protocol: v1.ProtocolTCP}}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "my-db", Namespace: "default"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.7",
					Ports: []v1.ServicePort{{Port: 5432}}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "other"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.8",
					Ports: []v1.ServicePort{{Port: 80}}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "headless", Namespace: "default"}, Spec: v1.ServiceSpec{ClusterIP: v1.ClusterIPNone}},
			}, nil
		}
	})
	c := ctr("app")
	c.EnvFrom = []v1.EnvFromSource{
		{Prefix: "CFG_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "settings"}}},
		{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Optional: ptr.To(true)}},
	}
	c.Env = []v1.EnvVar{
		{Name: "TOKEN", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "s"}, Key: "token"}}},
		{Name: "MODE", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "settings"}, Key: "MODE"}}},
		{Name: "CFG_LEVEL", Value: "override"},
		{Name: "DB", Value: "$(MY_DB_SERVICE_HOST):$(MY_DB_SERVICE_PORT)"},
	}
	pod := newPod("env", c)
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	env := map[string]string{}
	for _, kv := range h.cri.ContainerConfig(h.container(pod, "app").ID).Envs {
		env[kv.Key] = string(kv.Value)
	}
	for k, v := range map[string]string{
		"CFG_MODE": "fast", "CFG_LEVEL": "override", "TOKEN": "t0k3n", "MODE": "fast", "DB": "10.96.0.7:5432",
		"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT": "tcp://10.96.0.1:443", "KUBERNETES_PORT_443_TCP_ADDR": "10.96.0.1",
		"MY_DB_SERVICE_HOST": "10.96.0.7", "MY_DB_PORT_5432_TCP": "tcp://10.96.0.7:5432",
	} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["ELSEWHERE_SERVICE_HOST"]; ok {
		t.Error("a service of another namespace leaked into the environment")
	}
	// enableServiceLinks: false keeps only the kubernetes service.
	c2 := ctr("app")
	pod2 := newPod("nolinks", c2)
	pod2.Spec.EnableServiceLinks = ptr.To(false)
	h.sync(pod2, nil)
	env = map[string]string{}
	for _, kv := range h.cri.ContainerConfig(h.container(pod2, "app").ID).Envs {
		env[kv.Key] = string(kv.Value)
	}
	if env["KUBERNETES_SERVICE_HOST"] != "10.96.0.1" || env["MY_DB_SERVICE_HOST"] != "" {
		t.Errorf("enableServiceLinks false: env %v", env)
	}
	// A required missing config map keeps the container waiting.
	c3 := ctr("app")
	c3.EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}}}}
	res := h.sync(newPod("missingcm", c3), nil)
	if !errors.Is(res.Waiting["app"].Reason, podstate.ErrCreateContainerConfig) || !strings.Contains(res.Waiting["app"].Message, "absent") {
		t.Errorf("missing config map: %+v", res.Waiting)
	}
}

// TestVolumeMounts: containers mount the volumes the volume manager set up,
// as the kubelet's makeMounts: read-only when the volume or the mount says
// so, subPath and subPathExpr through the resolver with the mount's index,
// and the kubelet's errors for a volume that was not set up or a
// subPathExpr without its variable.
func TestVolumeMounts(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	hostDir := t.TempDir()
	c := ctr("app")
	c.Env = []v1.EnvVar{{Name: "SUB", Value: "from-env"}}
	c.VolumeMounts = []v1.VolumeMount{
		{Name: "host", MountPath: "/host", ReadOnly: true},
		{Name: "scratch", MountPath: "/scratch"},
		{Name: "scratch", MountPath: "/sub", SubPath: "a/b"},
		{Name: "scratch", MountPath: "/expr", SubPathExpr: "x-$(SUB)"},
		{Name: "config", MountPath: "/etc/hosts"},
	}
	pod := newPod("vols", c)
	pod.Spec.Volumes = []v1.Volume{
		{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: hostDir}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
	}
	vols := h.volumes(pod)
	var subPaths []volume.SubPathSpec
	vols.SubPath = func(_ context.Context, s volume.SubPathSpec) (string, error) {
		subPaths = append(subPaths, s)
		return "/bound/" + strconv.Itoa(s.MountIndex), nil
	}
	res := h.pm.SyncPod(h.ctx, pod, h.status(pod), runtime.SyncInput{Volumes: vols})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	got := map[string]*runtimeapi.Mount{}
	for _, m := range h.cri.ContainerConfig(h.container(pod, "app").ID).Mounts {
		got[m.ContainerPath] = m
	}
	scratch := vols.Mounted["scratch"].Path
	for path, want := range map[string]*runtimeapi.Mount{
		"/host":      {HostPath: hostDir, Readonly: true},
		"/scratch":   {HostPath: scratch, SelinuxRelabel: true},
		"/sub":       {HostPath: "/bound/2", SelinuxRelabel: true},
		"/expr":      {HostPath: "/bound/3", SelinuxRelabel: true},
		"/etc/hosts": {HostPath: vols.Mounted["config"].Path, Readonly: true, SelinuxRelabel: true},
	} {
		m := got[path]
		if m == nil || m.HostPath != want.HostPath || m.Readonly != want.Readonly || m.SelinuxRelabel != want.SelinuxRelabel {
			t.Errorf("mount %s = %v, want %v", path, m, want)
		}
	}
	if len(subPaths) != 2 || subPaths[0].SubPath != "a/b" || subPaths[1].SubPath != "x-from-env" || subPaths[1].VolumePath != scratch ||
		subPaths[1].ContainerName != "app" || subPaths[1].PodUID != pod.UID || subPaths[1].VolumeName != "scratch" {
		t.Errorf("subPaths resolved %+v", subPaths)
	}

	// A volume the manager did not set up, or a subPathExpr whose variable
	// is empty, keeps the container from starting, in the kubelet's words.
	missing := newPod("missing", ctr("app"))
	missing.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	res = h.pm.SyncPod(h.ctx, missing, h.status(missing), runtime.SyncInput{})
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrCreateContainerConfig) || w.Message != `cannot find volume "data" to mount into container "app"` {
		t.Errorf("mount of a volume not set up: %+v", res.Waiting)
	}
	rro := newPod("rro", ctr("app"))
	rro.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/x", ReadOnly: true,
		RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyEnabled)}}
	rro.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	if res := h.sync(rro, nil); res.Waiting["app"].Message != `volume "scratch" requested recursive read-only mode, but it is not supported by the runtime` {
		t.Errorf("recursiveReadOnly Enabled: %+v", res.Waiting)
	}
	expr := newPod("expr", ctr("app"))
	expr.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/x", SubPathExpr: "$(NOPE)/$(ALSO)"}}
	expr.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	if res := h.sync(expr, nil); res.Waiting["app"].Message != "missing value for ALSO, NOPE" {
		t.Errorf("subPathExpr without its variables: %+v", res.Waiting)
	}
}

func TestLifecycleHooks(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/shutdown" && r.Header.Get("X-Why") == "stop" {
			hits.Add(1)
		}
		w.WriteHeader(http.StatusInternalServerError) // status codes do not fail hooks
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	portNum, _ := strconv.Atoi(port)

	c := ctr("app")
	c.Ports = []v1.ContainerPort{{Name: "admin", ContainerPort: int32(portNum)}}
	c.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{
		Host: host, Port: intstr.FromString("admin"), Path: "shutdown", HTTPHeaders: []v1.HTTPHeader{{Name: "X-Why", Value: "stop"}}}}}
	pod := newPod("hooks", c)
	h.sync(pod, nil)
	h.inBackground(time.Second, func() {
		must(t, h.pm.KillPod(h.ctx, pod, h.status(pod).RunningPod(), nil))
	})
	if hits.Load() != 1 {
		t.Fatalf("httpGet preStop hook reached the server %d times, want 1", hits.Load())
	}

	// A failing postStart hook kills the container and keeps it waiting.
	h.cri.SetExecHandler(func(r fakecri.ExecRequest) fakecri.ExecResult {
		return fakecri.ExecResult{ExitCode: 1, Stderr: []byte("not ready")}
	})
	c2 := ctr("app")
	c2.Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"warm-up"}}}}
	pod2 := newPod("poststart", c2)
	h.events()
	res := h.sync(pod2, nil)
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrPostStartHook) || !strings.Contains(w.Message, "warm-up") {
		t.Fatalf("failed postStart hook: %+v", res.Waiting)
	}
	if c := h.container(pod2, "app"); c.State != podstate.ContainerStateExited {
		t.Fatalf("container after a failed postStart hook: %v", c.State)
	}
	wantEvents(t, h.events(), "Normal Started", "Warning FailedPostStartHook PostStartHook failed", "Normal Killing FailedPostStartHook")
}

func TestNewPodManagerValidates(t *testing.T) {
	if _, err := runtime.NewPodManager(runtime.PodManagerOptions{}); err == nil {
		t.Error("NewPodManager accepted options without CRI services")
	}
	h := newHarness(t, fakecri.Options{}, nil)
	_, err := runtime.NewPodManager(runtime.PodManagerOptions{Runtime: h.client.RuntimeService(), Images: h.client.ImageService(),
		MemoryCapacity: 1, CPUCFSQuotaPeriod: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "quota period") {
		t.Errorf("NewPodManager with a 1h quota period: %v", err)
	}
	if _, err := runtime.NewPLEG(runtime.PLEGOptions{}); err == nil {
		t.Error("NewPLEG accepted options without a pod lister")
	}
}

// TestEphemeralContainers: an ephemeral container added to a running pod
// (kubectl debug) starts in the pod's sandbox, joins its target's process
// namespace, is never restarted, and does not keep a finished pod alive.
func TestEphemeralContainers(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod("debugged", ctr("app"))
	h.sync(pod, nil)
	sandbox := h.status(pod).Sandboxes[0].ID
	app := h.container(pod, "app")

	pod = pod.DeepCopy()
	pod.Spec.EphemeralContainers = []v1.EphemeralContainer{{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger", Image: "busybox", Command: []string{"sh"},
			ImagePullPolicy: v1.PullIfNotPresent, TerminationMessagePolicy: v1.TerminationMessageReadFile},
		TargetContainerName: "app",
	}}
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	dbg := h.container(pod, "debugger")
	if dbg.State != podstate.ContainerStateRunning || dbg.SandboxID != sandbox {
		t.Fatalf("ephemeral container %+v, want running in sandbox %s", dbg, sandbox)
	}
	ns := h.cri.ContainerConfig(dbg.ID).Linux.SecurityContext.NamespaceOptions
	if ns.Pid != runtimeapi.NamespaceMode_TARGET || ns.TargetId != app.ID {
		t.Errorf("ephemeral container PID namespace %v target %q, want TARGET %s", ns.Pid, ns.TargetId, app.ID)
	}
	wantEvents(t, h.events(), "Normal Created Container created", "Normal Started Container started")
	if h.container(pod, "app").ID != app.ID {
		t.Error("the pod's container was restarted")
	}

	// It exits: it is never started again.
	h.exitNow(pod, "debugger", 1)
	h.clk.Step(time.Hour)
	before := h.cri.Calls("CreateContainer")
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	if h.cri.Calls("CreateContainer") != before {
		t.Fatal("an exited ephemeral container was restarted")
	}

	// A target that does not exist keeps it waiting, in the kubelet's words.
	bad := pod.DeepCopy()
	bad.Spec.EphemeralContainers = append(bad.Spec.EphemeralContainers, v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "lost", Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent},
		TargetContainerName:      "nope",
	})
	res := h.sync(bad, nil)
	if w := res.Waiting["lost"]; !errors.Is(w.Reason, podstate.ErrCreateContainerConfig) || w.Message != "unable to find target container nope" {
		t.Errorf("unknown target: %+v", res.Waiting)
	}
}
