package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodekit/nodekit/podstate"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

func TestSyncPodCreatesSandboxAndContainer(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	app := ctr("app", "sh", "-c", "echo $(GREETING) from $(POD_NAME)")
	app.Args = []string{"--name=$(POD_NAME)", "$$(POD_NAME)"}
	app.WorkingDir = "/work"
	app.Ports = []v1.ContainerPort{{Name: "http", ContainerPort: 8080, HostPort: 30080, Protocol: v1.ProtocolTCP}}
	app.Env = []v1.EnvVar{
		{Name: "GREETING", Value: "hello"},
		{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "HOST_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
		{Name: "NODE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "APP_LABEL", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
		{Name: "MEM_MI", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		{Name: "GREETING_COPY", Value: "$(GREETING)!"},
	}
	app.Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}
	app.SecurityContext = &v1.SecurityContext{
		RunAsUser:                ptr.To[int64](1000),
		ReadOnlyRootFilesystem:   ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}, Drop: []v1.Capability{"ALL"}},
	}
	app.VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "config", MountPath: "/config"}}
	pod := newPod("web", app)
	pod.Annotations = map[string]string{"team": "blue"}
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsGroup: ptr.To[int64](3000), FSGroup: ptr.To[int64](2000),
		Sysctls: []v1.Sysctl{{Name: "net/ipv4/ip_unprivileged_port_start", Value: "0"}}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
	}
	pod.Spec.HostAliases = []v1.HostAlias{{IP: "192.0.2.1", Hostnames: []string{"db"}}}
	pod.Status.QOSClass = v1.PodQOSBurstable

	res := h.sync(pod, nil)
	if res.Err != nil || len(res.Waiting) != 0 {
		t.Fatalf("SyncPod = %+v", res)
	}
	wantEvents(t, h.events(),
		`Normal Pulled Container image "busybox" already present on machine`,
		"Normal Created Container created",
		"Normal Started Container started")

	st := h.status(pod)
	if len(st.Sandboxes) != 1 || len(st.IPs) != 1 || !strings.HasPrefix(st.IPs[0], "10.88.") {
		t.Fatalf("status: sandboxes %d, IPs %v", len(st.Sandboxes), st.IPs)
	}
	c := st.Container("app")
	if c == nil || c.State != podstate.ContainerStateRunning || c.RestartCount != 0 || c.Hash != runtime.HashContainer(&pod.Spec.Containers[0]) ||
		c.Type != fakecri.DefaultRuntimeName || !strings.HasPrefix(c.ImageID, "sha256:") {
		t.Fatalf("container status %+v", c)
	}

	sb := h.cri.SandboxConfig(st.Sandboxes[0].ID)
	for k, v := range map[string]string{"app": "web", runtime.LabelPodName: "web", runtime.LabelPodNamespace: "default", runtime.LabelPodUID: "uid-web"} {
		if sb.Labels[k] != v {
			t.Errorf("sandbox label %s = %q, want %q", k, sb.Labels[k], v)
		}
	}
	if sb.Annotations["team"] != "blue" || sb.Hostname != "web" || sb.Metadata.Attempt != 0 {
		t.Errorf("sandbox annotations %v, hostname %q, attempt %d", sb.Annotations, sb.Hostname, sb.Metadata.Attempt)
	}
	if want := filepath.Join(h.logsDir, "default_web_uid-web"); sb.LogDirectory != want {
		t.Errorf("log directory %q, want %q", sb.LogDirectory, want)
	}
	dns := sb.DnsConfig
	if !slices.Equal(dns.Servers, []string{"10.96.0.10"}) ||
		!slices.Equal(dns.Searches, []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}) ||
		!slices.Equal(dns.Options, []string{"ndots:5"}) {
		t.Errorf("DNS config %v", dns)
	}
	if len(sb.PortMappings) != 1 || sb.PortMappings[0].HostPort != 30080 || sb.PortMappings[0].ContainerPort != 8080 {
		t.Errorf("port mappings %v", sb.PortMappings)
	}
	linux := sb.Linux
	if linux.CgroupParent != "/kubepods/burstable/poduid-web" || linux.Sysctls["net.ipv4.ip_unprivileged_port_start"] != "0" ||
		linux.SecurityContext.NamespaceOptions.Network != runtimeapi.NamespaceMode_POD ||
		linux.SecurityContext.NamespaceOptions.Pid != runtimeapi.NamespaceMode_CONTAINER ||
		linux.SecurityContext.RunAsGroup.GetValue() != 3000 || !slices.Equal(linux.SecurityContext.SupplementalGroups, []int64{2000}) {
		t.Errorf("sandbox linux config %v", linux)
	}

	cc := h.cri.ContainerConfig(c.ID)
	if cc.Labels[runtime.LabelContainerName] != "app" || cc.Labels[runtime.LabelPodName] != "web" || cc.Labels[runtime.LabelPodNamespace] != "default" {
		t.Errorf("container labels %v", cc.Labels)
	}
	if cc.Annotations[runtime.AnnotationRestartCount] != "0" || cc.Annotations[runtime.AnnotationTerminationGracePeriod] != "30" ||
		cc.Annotations[runtime.AnnotationContainerHash] != fmt.Sprintf("%x", runtime.HashContainer(&pod.Spec.Containers[0])) ||
		!strings.Contains(cc.Annotations[runtime.AnnotationContainerPorts], `"containerPort":8080`) {
		t.Errorf("container annotations %v", cc.Annotations)
	}
	if cc.LogPath != "app/0.log" || cc.WorkingDir != "/work" || cc.Image.UserSpecifiedImage != "busybox" || !strings.HasPrefix(cc.Image.Image, "sha256:") {
		t.Errorf("log path %q, working dir %q, image %v", cc.LogPath, cc.WorkingDir, cc.Image)
	}
	if _, err := os.Stat(filepath.Join(sb.LogDirectory, "app", "0.log")); err != nil {
		t.Errorf("container log: %v", err)
	}
	if !slices.Equal(cc.Command, []string{"sh", "-c", "echo hello from web"}) || !slices.Equal(cc.Args, []string{"--name=web", "$(POD_NAME)"}) {
		t.Errorf("command %q args %q", cc.Command, cc.Args)
	}
	env := map[string]string{}
	for _, kv := range cc.Envs {
		env[kv.Key] = string(kv.Value)
	}
	for k, v := range map[string]string{"GREETING": "hello", "POD_NAME": "web", "POD_IP": st.IPs[0], "HOST_IP": "192.0.2.10",
		"NODE": "node-1", "APP_LABEL": "web", "MEM_MI": "128", "GREETING_COPY": "hello!"} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	r := cc.Linux.Resources
	// 250m is 256 shares; a 500m limit is 50ms of every 100ms; Burstable
	// with 64Mi of 8Gi is 1000-7.
	if r.CpuShares != 256 || r.CpuQuota != 50000 || r.CpuPeriod != 100000 || r.MemoryLimitInBytes != 128<<20 || r.OomScoreAdj != 993 {
		t.Errorf("resources %v", r)
	}
	sc := cc.Linux.SecurityContext
	if sc.RunAsUser.GetValue() != 1000 || sc.RunAsGroup.GetValue() != 3000 || !sc.ReadonlyRootfs || !sc.NoNewPrivs ||
		!slices.Equal(sc.Capabilities.AddCapabilities, []string{"NET_ADMIN"}) || !slices.Equal(sc.Capabilities.DropCapabilities, []string{"ALL"}) ||
		sc.Seccomp.ProfileType != runtimeapi.SecurityProfile_Unconfined || len(sc.MaskedPaths) == 0 {
		t.Errorf("security context %v", sc)
	}
	mounts := map[string]*runtimeapi.Mount{}
	for _, m := range cc.Mounts {
		mounts[m.ContainerPath] = m
	}
	if m := mounts["/scratch"]; m == nil || m.HostPath != filepath.Join(h.podsDir, "uid-web", "volumes", "kubernetes.io~empty-dir", "scratch") ||
		m.Readonly || !m.SelinuxRelabel {
		t.Errorf("emptyDir mount %v", m)
	}
	if m := mounts["/config"]; m == nil || m.HostPath != filepath.Join(h.podsDir, "uid-web", "volumes", "kubernetes.io~configmap", "config") || !m.Readonly {
		t.Errorf("configMap mount %v, want the volume manager's path, read-only", m)
	}
	if m := mounts["/dev/termination-log"]; m == nil {
		t.Error("no termination message mount")
	}
	hosts, err := os.ReadFile(mounts["/etc/hosts"].GetHostPath())
	if err != nil || !strings.Contains(string(hosts), st.IPs[0]+"\tweb\n") || !strings.Contains(string(hosts), "192.0.2.1\tdb\n") {
		t.Errorf("/etc/hosts = %q, %v", hosts, err)
	}

	// A second sync with nothing changed does nothing.
	before := h.cri.Calls("CreateContainer")
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	if h.cri.Calls("CreateContainer") != before || h.cri.Calls("RunPodSandbox") != 1 {
		t.Fatal("a steady pod was touched")
	}
}

func TestDNSPolicies(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	for _, tc := range []struct {
		name        string
		policy      v1.DNSPolicy
		hostNetwork bool
		config      *v1.PodDNSConfig
		servers     []string
		searches    []string
		options     []string
	}{
		{name: "default", policy: v1.DNSDefault, servers: []string{"192.0.2.53"}, searches: []string{"corp.example"}, options: []string{"timeout:2"}},
		{name: "hostnet", policy: v1.DNSClusterFirst, hostNetwork: true, servers: []string{"192.0.2.53"}, searches: []string{"corp.example"}, options: []string{"timeout:2"}},
		{name: "hostnetcluster", policy: v1.DNSClusterFirstWithHostNet, hostNetwork: true, servers: []string{"10.96.0.10"},
			searches: []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, options: []string{"ndots:5"}},
		{name: "none", policy: v1.DNSNone, config: &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"},
			Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}}},
			servers: []string{"1.1.1.1"}, searches: []string{"a.example"}, options: []string{"ndots:2", "edns0"}},
		{name: "merged", policy: v1.DNSClusterFirst, config: &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1"},
			Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}}},
			servers: []string{"10.96.0.10", "1.1.1.1"}, searches: []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"},
			options: []string{"ndots:1"}},
	} {
		pod := newPod("dns-"+tc.name, ctr("app"))
		pod.Spec.DNSPolicy, pod.Spec.HostNetwork, pod.Spec.DNSConfig = tc.policy, tc.hostNetwork, tc.config
		if res := h.sync(pod, nil); res.Err != nil {
			t.Fatalf("%s: %v", tc.name, res.Err)
		}
		sb := h.sandboxConfig(pod)
		got := sb.DnsConfig
		if !slices.Equal(got.Servers, tc.servers) || !slices.Equal(got.Searches, tc.searches) || !slices.Equal(got.Options, tc.options) {
			t.Errorf("%s: DNS %v, want servers %v searches %v options %v", tc.name, got, tc.servers, tc.searches, tc.options)
		}
		if tc.hostNetwork {
			if sb.Hostname != "" || sb.Linux.SecurityContext.NamespaceOptions.Network != runtimeapi.NamespaceMode_NODE {
				t.Errorf("%s: host network sandbox %v", tc.name, sb)
			}
			// Host network pods have the node's IPs.
			if ips := h.status(pod).IPs; !slices.Equal(ips, []string{"192.0.2.10"}) {
				t.Errorf("%s: IPs %v, want the node's", tc.name, ips)
			}
		}
	}
}

// exitNow makes the running container name of pod exit with code.
func (h *harness) exitNow(pod *v1.Pod, name string, code int32) {
	h.t.Helper()
	if err := h.cri.ExitContainer(h.container(pod, name).ID, code, false); err != nil {
		h.t.Fatal(err)
	}
}

func TestRestartPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy   v1.RestartPolicy
		exitCode int32
		restart  bool
	}{
		{v1.RestartPolicyAlways, 0, true},
		{v1.RestartPolicyAlways, 1, true},
		{v1.RestartPolicyOnFailure, 0, false},
		{v1.RestartPolicyOnFailure, 2, true},
		{v1.RestartPolicyNever, 0, false},
		{v1.RestartPolicyNever, 3, false},
	} {
		name := fmt.Sprintf("%s-%d", strings.ToLower(string(tc.policy)), tc.exitCode)
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, fakecri.Options{}, nil)
			pod := newPod("p", ctr("app"))
			pod.Spec.RestartPolicy = tc.policy
			if res := h.sync(pod, nil); res.Err != nil {
				t.Fatal(res.Err)
			}
			h.exitNow(pod, "app", tc.exitCode)
			res := h.sync(pod, nil)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			st := h.status(pod)
			c := st.Container("app")
			if tc.restart {
				if c.State != podstate.ContainerStateRunning || c.RestartCount != 1 {
					t.Fatalf("container %v restarts %d, want running again with restart count 1", c.State, c.RestartCount)
				}
				return
			}
			if c.State != podstate.ContainerStateExited || c.ExitCode != int(tc.exitCode) || c.RestartCount != 0 {
				t.Fatalf("container %+v, want exited %d without restart", c, tc.exitCode)
			}
			// Nothing left to run: the sandbox is stopped, no new one made.
			if st.Sandboxes[0].Ready || len(st.Sandboxes) != 1 {
				t.Fatalf("sandboxes %v, want the one sandbox stopped", st.Sandboxes)
			}
			if res := h.sync(pod, nil); res.Err != nil || h.cri.Calls("RunPodSandbox") != 1 {
				t.Fatalf("a finished pod was started again: %v", res.Err)
			}
		})
	}
}

func TestCrashLoopBackOff(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod("crash", ctr("app"))
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	// The first crash restarts at once; later ones wait 10s, 20s, ... 5m.
	h.exitNow(pod, "app", 1)
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	for i, delay := range []time.Duration{10, 20, 40, 80, 160, 300, 300} {
		delay *= time.Second
		h.exitNow(pod, "app", 1)
		crashed := h.clk.Now()
		h.events()
		res := h.sync(pod, nil)
		w, ok := res.Waiting["app"]
		wantMsg := fmt.Sprintf("back-off %s restarting failed container=app pod=crash_default(uid-crash)", delay)
		if !ok || !errors.Is(w.Reason, podstate.ErrCrashLoopBackOff) || w.Message != wantMsg || !errors.Is(res.Err, podstate.ErrCrashLoopBackOff) {
			t.Fatalf("crash %d: waiting %+v, err %v; want CrashLoopBackOff %q", i, res.Waiting, res.Err, wantMsg)
		}
		if !res.RetryAt.Equal(crashed.Add(delay)) {
			t.Fatalf("crash %d: retry at %v, want %v", i, res.RetryAt, crashed.Add(delay))
		}
		wantEvents(t, h.events(), "Warning BackOff Back-off restarting failed container app in pod crash_default(uid-crash)")
		h.clk.Step(delay - time.Second)
		if res := h.sync(pod, nil); res.Waiting["app"].Reason == nil {
			t.Fatalf("crash %d: restarted before the back-off ended", i)
		}
		h.clk.Step(time.Second)
		res = h.sync(pod, nil)
		if res.Err != nil || len(res.Waiting) != 0 {
			t.Fatalf("crash %d: sync after back-off: %+v", i, res)
		}
		if c := h.container(pod, "app"); c.State != podstate.ContainerStateRunning || c.RestartCount != i+2 {
			t.Fatalf("crash %d: container %v restart %d", i, c.State, c.RestartCount)
		}
	}
	// Ten minutes of running resets the back-off.
	h.clk.Step(11 * time.Minute)
	h.exitNow(pod, "app", 1)
	if res := h.sync(pod, nil); res.Err != nil || h.container(pod, "app").State != podstate.ContainerStateRunning {
		t.Fatalf("after a long run a crash is restarted at once: %v", res.Err)
	}
	h.exitNow(pod, "app", 1)
	if res := h.sync(pod, nil); !strings.HasPrefix(res.Waiting["app"].Message, "back-off 10s") {
		t.Fatalf("back-off after reset: %+v, want 10s again", res.Waiting)
	}
}

// TestMaxContainerBackOff: crashLoopBackOff.maxContainerRestartPeriod
// caps the restart delays (10s, 20s, then the cap), and a cap under 10s is
// the first delay too, as the kubelet's.
func TestMaxContainerBackOff(t *testing.T) {
	for _, tc := range []struct {
		limit  time.Duration
		delays []time.Duration
	}{
		{30 * time.Second, []time.Duration{10, 20, 30, 30}},
		{5 * time.Second, []time.Duration{5, 5, 5}},
	} {
		t.Run(tc.limit.String(), func(t *testing.T) {
			h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) { o.MaxContainerBackOff = tc.limit })
			pod := newPod("crash", ctr("app"))
			if res := h.sync(pod, nil); res.Err != nil {
				t.Fatal(res.Err)
			}
			h.exitNow(pod, "app", 1)
			if res := h.sync(pod, nil); res.Err != nil {
				t.Fatal(res.Err)
			}
			for i, delay := range tc.delays {
				delay *= time.Second
				h.exitNow(pod, "app", 1)
				crashed := h.clk.Now()
				res := h.sync(pod, nil)
				if !errors.Is(res.Err, podstate.ErrCrashLoopBackOff) || !res.RetryAt.Equal(crashed.Add(delay)) {
					t.Fatalf("crash %d: err %v, retry at %v; want CrashLoopBackOff until %v", i, res.Err, res.RetryAt, crashed.Add(delay))
				}
				h.clk.Step(delay)
				if res := h.sync(pod, nil); res.Err != nil || len(res.Waiting) != 0 {
					t.Fatalf("crash %d: sync after back-off: %+v", i, res)
				}
			}
		})
	}
}

func TestInitContainersRunInOrder(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod("init", ctr("app"))
	pod.Spec.InitContainers = []v1.Container{ctr("first", "sleep", "5"), ctr("second", "true")}
	running := func() []string {
		var out []string
		for _, c := range h.status(pod).Containers {
			if c.State == podstate.ContainerStateRunning {
				out = append(out, c.Name)
			}
		}
		return out
	}
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	if got := running(); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("running %v, want only the first init container", got)
	}
	if res := h.sync(pod, nil); res.Err != nil || h.cri.Calls("CreateContainer") != 1 {
		t.Fatal("the second init container started before the first finished")
	}
	h.clk.Step(5 * time.Second)
	h.sync(pod, nil) // first done: start second (which exits at once)
	if c := h.container(pod, "second"); c.State != podstate.ContainerStateExited || c.ExitCode != 0 {
		t.Fatalf("second init container %+v", c)
	}
	if h.status(pod).Container("app") != nil {
		t.Fatal("app started before initialization finished")
	}
	h.sync(pod, nil) // initialized: start app
	if got := running(); !slices.Equal(got, []string{"app"}) {
		t.Fatalf("running %v, want app", got)
	}
	// Finished init containers are not run again.
	h.sync(pod, nil)
	if n := h.cri.Calls("CreateContainer"); n != 3 {
		t.Fatalf("%d containers created, want 3", n)
	}
}

func TestFailedInitContainer(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod("initfail", ctr("app"))
	pod.Spec.InitContainers = []v1.Container{ctr("setup", "sh", "-c", "exit 3")}
	h.sync(pod, nil)
	if c := h.container(pod, "setup"); c.State != podstate.ContainerStateExited || c.ExitCode != 3 {
		t.Fatalf("setup %+v", c)
	}
	// Restart policy Always: retried with back-off.
	h.sync(pod, nil)
	if c := h.container(pod, "setup"); c.RestartCount != 1 {
		t.Fatalf("setup restart count %d, want 1", c.RestartCount)
	}
	if res := h.sync(pod, nil); !errors.Is(res.Waiting["setup"].Reason, podstate.ErrCrashLoopBackOff) {
		t.Fatalf("waiting %+v, want setup in CrashLoopBackOff", res.Waiting)
	}
	// Only the newest instance of an init container is kept.
	n := 0
	for _, c := range h.status(pod).Containers {
		if c.Name == "setup" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d instances of the init container kept, want 1", n)
	}

	// Restart policy Never: the pod is done.
	never := newPod("initnever", ctr("app"))
	never.Spec.RestartPolicy = v1.RestartPolicyNever
	never.Spec.InitContainers = []v1.Container{ctr("setup", "false")}
	h.sync(never, nil)
	h.sync(never, nil)
	st := h.status(never)
	if st.Container("app") != nil || st.Sandboxes[0].Ready || st.Container("setup").RestartCount != 0 {
		t.Fatalf("failed init with restartPolicy Never: %+v", st)
	}
}

func TestSidecars(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	probes := newFakeProbes()
	sidecar := ctr("proxy")
	sidecar.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	sidecar.StartupProbe = &v1.Probe{}
	app := ctr("app")
	pod := newPod("side", app)
	pod.Annotations = map[string]string{fakecri.BehaviorAnnotationPrefix + "app": "sigterm-delay 3s"}
	pod.Spec.InitContainers = []v1.Container{sidecar, ctr("migrate", "true")}

	h.sync(pod, probes)
	proxy := h.container(pod, "proxy")
	if proxy.State != podstate.ContainerStateRunning {
		t.Fatalf("proxy %v", proxy.State)
	}
	// Until its startup probe passes the sidecar holds initialization.
	h.sync(pod, probes)
	if h.status(pod).Container("migrate") != nil {
		t.Fatal("next init container started before the sidecar's startup probe passed")
	}
	probes.set(probes.startup, proxy.ID, podstate.ProbeSuccess)
	h.sync(pod, probes) // starts migrate, which exits 0
	h.sync(pod, probes) // starts app
	st := h.status(pod)
	if st.Container("app").State != podstate.ContainerStateRunning || st.Container("proxy").State != podstate.ContainerStateRunning {
		t.Fatalf("app %v proxy %v, want both running", st.Container("app").State, st.Container("proxy").State)
	}
	// A sidecar that exits is restarted.
	h.exitNow(pod, "proxy", 1)
	h.sync(pod, probes)
	if c := h.container(pod, "proxy"); c.State != podstate.ContainerStateRunning || c.RestartCount != 1 {
		t.Fatalf("proxy after exit: %v restart %d", c.State, c.RestartCount)
	}
	// On kill the sidecar stops after the app (which takes 3s).
	killed := h.clk.Now()
	h.inBackground(time.Second, func() {
		if err := h.pm.KillPod(h.ctx, pod, h.status(pod).RunningPod(), nil); err != nil {
			t.Error(err)
		}
	})
	st = h.status(pod)
	appC, proxyC := st.Container("app"), st.Container("proxy")
	if appC.ExitCode != 143 || appC.FinishedAt.Sub(killed) < 3*time.Second || proxyC.FinishedAt.Before(appC.FinishedAt) {
		t.Fatalf("app stopped %v after the kill (code %d), proxy %v after; want app after its 3s and proxy after the app",
			appC.FinishedAt.Sub(killed), appC.ExitCode, proxyC.FinishedAt.Sub(killed))
	}
}

func TestKillOnDefinitionChangeAndLiveness(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	probes := newFakeProbes()
	app := ctr("app")
	app.LivenessProbe = &v1.Probe{}
	pod := newPod("change", app)
	h.sync(pod, probes)
	first := h.container(pod, "app")

	probes.set(probes.liveness, first.ID, podstate.ProbeFailure)
	h.events()
	h.sync(pod, probes)
	second := h.container(pod, "app")
	if second.ID == first.ID || second.State != podstate.ContainerStateRunning || second.RestartCount != 1 {
		t.Fatalf("after a liveness failure: %+v", second)
	}
	wantEvents(t, h.events(), "Normal Killing Container app failed liveness probe, will be restarted", "Normal Started")

	pod.Spec.Containers[0].Image = "nginx:1.27"
	h.sync(pod, probes)
	third := h.container(pod, "app")
	if third.ID == second.ID || !strings.Contains(third.Image, "nginx") || third.RestartCount != 2 {
		t.Fatalf("after an image change: %+v", third)
	}
	wantEvents(t, h.events(), "Normal Killing Container app definition changed, will be restarted")
}

func TestSandboxDeathRecreatesPod(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod("sb", ctr("app"))
	pod.Spec.InitContainers = []v1.Container{ctr("init", "true")}
	h.sync(pod, nil)
	h.sync(pod, nil)
	st := h.status(pod)
	if err := h.cri.StopSandbox(st.Sandboxes[0].ID); err != nil {
		t.Fatal(err)
	}
	h.events()
	h.sync(pod, nil) // new sandbox, init containers from scratch
	wantEvents(t, h.events(), "Normal SandboxChanged Pod sandbox changed, it will be killed and re-created.")
	st = h.status(pod)
	if len(st.Sandboxes) != 2 || st.Sandboxes[0].Attempt != 1 || !st.Sandboxes[0].Ready {
		t.Fatalf("sandboxes after the old one died: %v", st.Sandboxes)
	}
	if c := st.Container("init"); c.SandboxID != st.Sandboxes[0].ID {
		t.Fatal("init containers did not run again in the new sandbox")
	}
	h.sync(pod, nil)
	if c := h.container(pod, "app"); c.State != podstate.ContainerStateRunning || c.RestartCount != 1 || c.SandboxID != st.Sandboxes[0].ID {
		t.Fatalf("app after the sandbox was recreated: %+v", c)
	}
}

func TestImagePullPolicies(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pullable, _ := fakecri.NewImage("registry.example.com/team/tool:v2", 12345)
	h.cri.AddPullable(pullable)

	never := ctr("app")
	never.Image, never.ImagePullPolicy = "registry.example.com/team/tool:v2", v1.PullNever
	pod := newPod("never", never)
	res := h.sync(pod, nil)
	if !errors.Is(res.Waiting["app"].Reason, podstate.ErrImageNeverPull) || h.cri.Calls("PullImage") != 0 {
		t.Fatalf("Never with the image absent: %+v", res.Waiting)
	}
	wantEvents(t, h.events(), `Warning ErrImageNeverPull Container image "registry.example.com/team/tool:v2" is not present with pull policy of Never`)

	ifNotPresent := newPod("present", ctr("app"))
	h.sync(ifNotPresent, nil)
	if h.cri.Calls("PullImage") != 0 {
		t.Fatal("IfNotPresent pulled a present image")
	}

	always := ctr("app")
	always.ImagePullPolicy = v1.PullAlways
	always.Image = "registry.example.com/team/tool:v2"
	pod = newPod("always", always)
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	if h.cri.Calls("PullImage") != 1 {
		t.Fatalf("%d pulls, want 1", h.cri.Calls("PullImage"))
	}
	wantEvents(t, h.events(), `Normal Pulling Pulling image "registry.example.com/team/tool:v2"`,
		`Normal Pulled Successfully pulled image "registry.example.com/team/tool:v2" in 0s (0s including waiting). Image size: 12345 bytes.`)
	// Now present, Never works too.
	if res := h.sync(newPod("never2", never), nil); res.Err != nil {
		t.Fatal(res.Err)
	}
}

func TestPullSecretsAuthenticate(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	for _, ref := range []string{"registry.example.com/team/app:1", "private/hub:1", "other.example.com:5000/x:1"} {
		img, _ := fakecri.NewImage(ref, 1)
		h.cri.AddPullable(img)
	}
	must(t, h.cri.RequireAuth("registry.example.com/team/app", "alice", "s3cret"))
	must(t, h.cri.RequireAuth("private/hub", "bob", "hunter2"))
	must(t, h.cri.RequireAuth("other.example.com:5000/x", "carol", "pw"))
	secrets := []v1.Secret{
		{Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(
			`{"auths":{"https://registry.example.com/v2/":{"username":"wrong","password":"x"},` +
				`"registry.example.com/team":{"auth":"YWxpY2U6czNjcmV0"},` +
				`"https://index.docker.io/v1/":{"username":"bob","password":"hunter2"}}}`)}},
		{Type: v1.SecretTypeDockercfg, Data: map[string][]byte{v1.DockerConfigKey: []byte(
			`{"*.example.com:5000":{"username":"carol","password":"pw"}}`)}},
		{Type: v1.SecretTypeOpaque, Data: map[string][]byte{"x": []byte("ignored")}},
	}
	for i, ref := range []string{"registry.example.com/team/app:1", "private/hub:1", "other.example.com:5000/x:1"} {
		c := ctr("app")
		c.Image = ref
		pod := newPod(fmt.Sprintf("auth%d", i), c)
		if res := h.sync(pod, nil, secrets...); res.Err != nil {
			t.Fatalf("%s with pull secrets: %v", ref, res.Err)
		}
	}
	// Without the secrets the registry refuses.
	c := ctr("app")
	c.Image = "registry.example.com/team/app:1"
	c.ImagePullPolicy = v1.PullAlways
	res := h.sync(newPod("noauth", c), nil)
	if !errors.Is(res.Waiting["app"].Reason, podstate.ErrImagePull) || !strings.Contains(res.Waiting["app"].Message, "401") {
		t.Fatalf("pull without credentials: %+v", res.Waiting)
	}
	// A malformed secret is a pull error naming it.
	bad := v1.Secret{Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{v1.DockerConfigJsonKey: []byte("{")}}
	bad.Name, bad.Namespace = "broken", "default"
	res = h.sync(newPod("badsecret", c), nil, bad)
	if !strings.Contains(res.Waiting["app"].Message, "default/broken") {
		t.Fatalf("malformed secret: %+v", res.Waiting)
	}
}

func TestErrImagePullThenBackOff(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	c := ctr("app")
	c.Image = "missing.example.com/nothing:1"
	pod := newPod("pull", c)
	res := h.sync(pod, nil)
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrImagePull) || !strings.Contains(w.Message, "not found") {
		t.Fatalf("first sync: %+v", res.Waiting)
	}
	if !res.RetryAt.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("retry at %v, want +10s", res.RetryAt)
	}
	wantEvents(t, h.events(), `Normal Pulling Pulling image "missing.example.com/nothing:1"`,
		`Warning Failed Failed to pull image "missing.example.com/nothing:1"`, "Warning Failed Error: ErrImagePull")

	res = h.sync(pod, nil)
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrImagePullBackOff) || !strings.Contains(w.Message, `Back-off pulling image "missing.example.com/nothing:1": ErrImagePull:`) {
		t.Fatalf("second sync: %+v", res.Waiting)
	}
	wantEvents(t, h.events(), `Normal BackOff Back-off pulling image "missing.example.com/nothing:1"`, "Warning Failed Error: ImagePullBackOff")
	if h.cri.Calls("PullImage") != 1 {
		t.Fatal("pulled during the back-off")
	}
	h.clk.Step(10 * time.Second)
	res = h.sync(pod, nil)
	if !errors.Is(res.Waiting["app"].Reason, podstate.ErrImagePull) || !res.RetryAt.Equal(h.clk.Now().Add(20*time.Second)) {
		t.Fatalf("third sync: %+v, retry at %v", res.Waiting, res.RetryAt)
	}
	img, _ := fakecri.NewImage("missing.example.com/nothing:1", 1)
	h.cri.AddPullable(img)
	h.clk.Step(20 * time.Second)
	if res := h.sync(pod, nil); res.Err != nil || len(res.Waiting) != 0 {
		t.Fatalf("once the image exists: %+v", res)
	}
}

func TestContainerConfigErrors(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	c := ctr("app")
	c.Env = []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "token"}}}}
	res := h.sync(newPod("cfg", c), nil)
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrCreateContainerConfig) || !strings.Contains(w.Message, "secret default/creds") {
		t.Fatalf("missing secret source: %+v", res.Waiting)
	}
	nonRoot := ctr("app")
	nonRoot.SecurityContext = &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}
	res = h.sync(newPod("root", nonRoot), nil)
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrCreateContainerConfig) || !strings.Contains(w.Message, "runAsNonRoot") {
		t.Fatalf("runAsNonRoot with a root image: %+v", res.Waiting)
	}
	crash := newPod("crash", ctr("app"))
	crash.Annotations = map[string]string{fakecri.BehaviorAnnotation: "crash-on-start"}
	res = h.sync(crash, nil)
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrRunContainer) || !strings.Contains(w.Message, "crash-on-start") {
		t.Fatalf("start failure: %+v", res.Waiting)
	}
}

func TestKillPodGracePeriod(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	stubborn := func(name string) *v1.Pod {
		pod := newPod(name, ctr("app"))
		pod.Annotations = map[string]string{fakecri.BehaviorAnnotation: "ignore-sigterm"}
		if res := h.sync(pod, nil); res.Err != nil {
			t.Fatal(res.Err)
		}
		return pod
	}
	// kill kills pod, stepping the clock once ready (if not nil) holds.
	kill := func(pod *v1.Pod, override *int64, ready func() bool) time.Duration {
		start := h.clk.Now()
		h.inBackgroundOnce(ready, time.Second, func() {
			if err := h.pm.KillPod(h.ctx, pod, h.status(pod).RunningPod(), override); err != nil {
				t.Error(err)
			}
		})
		st := h.status(pod)
		c := st.Container("app")
		if c.State != podstate.ContainerStateExited || c.ExitCode != 137 || st.Sandboxes[0].Ready {
			t.Fatalf("after KillPod: container %+v sandbox %v", c, st.Sandboxes[0].Ready)
		}
		return c.FinishedAt.Sub(start)
	}
	if d := kill(stubborn("term"), nil, nil); d != 30*time.Second {
		t.Errorf("terminationGracePeriodSeconds 30: killed after %v", d)
	}
	del := stubborn("deleted")
	del.DeletionGracePeriodSeconds = ptr.To[int64](5)
	if d := kill(del, nil, nil); d != 5*time.Second {
		t.Errorf("deletionGracePeriodSeconds 5: killed after %v", d)
	}
	if d := kill(stubborn("forced"), ptr.To[int64](0), nil); d != 2*time.Second {
		t.Errorf("override 0: killed after %v, want the 2s minimum", d)
	}
	wantEvents(t, h.events(), "Normal Killing Stopping container app")

	// A preStop hook runs first and uses up part of the grace period. The
	// clock steps only once the hook reached fakecri: the grace period's
	// timer starts before the hook's ExecSync is sent.
	var (
		hookMu sync.Mutex
		hooked []string
	)
	hookCalled := func() bool {
		hookMu.Lock()
		defer hookMu.Unlock()
		return len(hooked) > 0
	}
	h.cri.SetExecHandler(func(r fakecri.ExecRequest) fakecri.ExecResult {
		hookMu.Lock()
		hooked = append(hooked, strings.Join(r.Cmd, " "))
		hookMu.Unlock()
		return fakecri.ExecResult{Delay: 10 * time.Second}
	})
	hook := newPod("hook", ctr("app"))
	hook.Annotations = map[string]string{fakecri.BehaviorAnnotation: "ignore-sigterm"}
	hook.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"nginx", "-s", "quit"}}}}
	h.sync(hook, nil)
	if d := kill(hook, nil, hookCalled); d != 30*time.Second {
		t.Errorf("with a 10s preStop hook: killed after %v, want 30s in all", d)
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	if !slices.Equal(hooked, []string{"nginx -s quit"}) {
		t.Errorf("preStop hook calls %q", hooked)
	}
}

func TestOrphansAndRemoval(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod("orphan", ctr("app"))
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](7)
	pod.Annotations = map[string]string{fakecri.BehaviorAnnotation: "ignore-sigterm"}
	h.sync(pod, nil)
	other := newPod("kept", ctr("app"))
	h.sync(other, nil)

	// A restarted agent finds the pods by their labels.
	pods, err := h.pm.ListPods(h.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	var orphan *podstate.RunningPod
	for i := range pods {
		if pods[i].ID == pod.UID {
			orphan = &pods[i]
		}
	}
	if len(pods) != 2 || orphan == nil || orphan.Name != "orphan" || orphan.Namespace != "default" ||
		len(orphan.Containers) != 1 || orphan.Containers[0].Name != "app" || len(orphan.Sandboxes) != 1 {
		t.Fatalf("ListPods = %+v", pods)
	}
	// Without its spec, the grace period comes from the annotations.
	start := h.clk.Now()
	h.inBackground(time.Second, func() {
		if err := h.pm.KillPod(h.ctx, nil, *orphan, nil); err != nil {
			t.Error(err)
		}
	})
	if c := h.container(pod, "app"); c.FinishedAt.Sub(start) != 7*time.Second {
		t.Fatalf("orphan killed after %v, want its 7s grace period", c.FinishedAt.Sub(start))
	}
	if running, _ := h.pm.ListPods(h.ctx, false); len(running) != 1 || running[0].ID != other.UID {
		t.Fatalf("running pods after the kill: %+v", running)
	}
	logDir := runtime.PodLogsDirectory(h.logsDir, "default", "orphan", pod.UID)
	if _, err := os.Stat(logDir); err != nil {
		t.Fatal(err)
	}
	removed := func(uid types.UID) bool { return uid == pod.UID }
	if err := h.pm.GarbageCollect(h.ctx, removed); err != nil {
		t.Fatal(err)
	}
	all, _ := h.pm.ListPods(h.ctx, true)
	if len(all) != 1 || all[0].ID != other.UID {
		t.Fatalf("pods after GC: %+v", all)
	}
	for _, dir := range []string{logDir, filepath.Join(h.podsDir, string(pod.UID))} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s still there after GC: %v", dir, err)
		}
	}
}

func TestGarbageCollectKeepsNewestDeadContainer(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod("gc", ctr("app"))
	h.sync(pod, nil)
	for range 3 {
		h.exitNow(pod, "app", 0)
		h.clk.Step(10 * time.Minute)
		h.sync(pod, nil)
	}
	if n := len(h.status(pod).Containers); n != 4 {
		t.Fatalf("%d instances before GC, want 4", n)
	}
	if err := h.pm.GarbageCollect(h.ctx, func(types.UID) bool { return false }); err != nil {
		t.Fatal(err)
	}
	st := h.status(pod)
	if len(st.Containers) != 2 || st.Containers[0].State != podstate.ContainerStateRunning || st.Containers[1].RestartCount != 2 {
		t.Fatalf("after GC: %+v", st.Containers)
	}
	// The restart count survives on the kept instance.
	h.exitNow(pod, "app", 0)
	h.clk.Step(10 * time.Minute)
	h.sync(pod, nil)
	if c := h.container(pod, "app"); c.RestartCount != 4 {
		t.Fatalf("restart count %d after GC, want 4", c.RestartCount)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestContainerRestartPolicyAndRules: the runtime restarts by the
// container's restartPolicy and restartPolicyRules (ContainerRestartRules,
// on since 1.35), not the pod's policy alone: a Never pod whose rule
// restarts exit 42 restarts the container, an OnFailure pod whose container
// says Never leaves it exited, and a probe kill follows the container's
// policy.
func TestContainerRestartPolicyAndRules(t *testing.T) {
	never, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyAlways
	rule42 := []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	for _, tc := range []struct {
		name      string
		podPolicy v1.RestartPolicy
		policy    *v1.ContainerRestartPolicy
		rules     []v1.ContainerRestartRule
		exitCode  int32
		restart   bool
	}{
		{"never-pod-rule-42", v1.RestartPolicyNever, &never, rule42, 42, true},
		{"never-pod-rule-other-code", v1.RestartPolicyNever, &never, rule42, 1, false},
		{"onfailure-pod-container-never", v1.RestartPolicyOnFailure, &never, nil, 1, false},
		{"never-pod-container-always", v1.RestartPolicyNever, &always, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, fakecri.Options{}, nil)
			app := ctr("app")
			app.RestartPolicy, app.RestartPolicyRules = tc.policy, tc.rules
			pod := newPod("p", app)
			pod.Spec.RestartPolicy = tc.podPolicy
			if res := h.sync(pod, nil); res.Err != nil {
				t.Fatal(res.Err)
			}
			h.exitNow(pod, "app", tc.exitCode)
			if res := h.sync(pod, nil); res.Err != nil {
				t.Fatal(res.Err)
			}
			c := h.status(pod).Container("app")
			if tc.restart {
				if c.State != podstate.ContainerStateRunning || c.RestartCount != 1 {
					t.Fatalf("container %v restarts %d, want running again with restart count 1", c.State, c.RestartCount)
				}
				return
			}
			if c.State != podstate.ContainerStateExited || c.RestartCount != 0 {
				t.Fatalf("container %+v, want exited without restart", c)
			}
		})
	}

	t.Run("liveness-kill-container-never", func(t *testing.T) {
		h := newHarness(t, fakecri.Options{}, nil)
		probes := newFakeProbes()
		app := ctr("app")
		app.RestartPolicy = &never
		app.LivenessProbe = &v1.Probe{}
		pod := newPod("probe", app)
		h.sync(pod, probes)
		first := h.container(pod, "app")
		probes.set(probes.liveness, first.ID, podstate.ProbeFailure)
		h.events()
		h.sync(pod, probes)
		if c := h.container(pod, "app"); c.ID != first.ID || c.State != podstate.ContainerStateExited {
			t.Fatalf("after a liveness failure of a Never container: %+v, want the first instance exited", c)
		}
		// Nothing left to run: the whole pod stops, as the kubelet's
		// computePodActions decides.
		wantEvents(t, h.events(), "Normal Killing Stopping container app")
	})

	t.Run("init-container-never-in-always-pod", func(t *testing.T) {
		h := newHarness(t, fakecri.Options{}, nil)
		pod := newPod("initnever", ctr("app"))
		setup := ctr("setup", "false")
		setup.RestartPolicy = &never
		pod.Spec.InitContainers = []v1.Container{setup}
		h.sync(pod, nil)
		h.sync(pod, nil)
		st := h.status(pod)
		if st.Container("app") != nil || st.Sandboxes[0].Ready || st.Container("setup").RestartCount != 0 {
			t.Fatalf("failed init container with restartPolicy Never: %+v", st)
		}
	})
}

// TestAppArmorProfiles: a container's AppArmor profile (field, deprecated
// annotation, pod field) reaches the runtime in the CRI field and in the
// deprecated string containerd 1.6 reads; none leaves the runtime's
// default.
func TestAppArmorProfiles(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	local := "k8s-deny-write"
	field := ctr("field")
	field.SecurityContext = &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: &local}}
	pod := newPod("aa", field, ctr("annotated"), ctr("podlevel"))
	pod.Annotations = map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "annotated": "unconfined"}
	pod.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	for name, want := range map[string]struct {
		typ runtimeapi.SecurityProfile_ProfileType
		ref string
		old string
	}{
		"field":     {runtimeapi.SecurityProfile_Localhost, local, "localhost/" + local},
		"annotated": {runtimeapi.SecurityProfile_Unconfined, "", "unconfined"},
		"podlevel":  {runtimeapi.SecurityProfile_RuntimeDefault, "", "runtime/default"},
	} {
		sc := h.cri.ContainerConfig(h.container(pod, name).ID).Linux.SecurityContext
		if sc.Apparmor.GetProfileType() != want.typ || sc.Apparmor.GetLocalhostRef() != want.ref || sc.ApparmorProfile != want.old {
			t.Errorf("%s: apparmor %v / %q, want %v %q / %q", name, sc.Apparmor, sc.ApparmorProfile, want.typ, want.ref, want.old)
		}
	}
	plain := newPod("plain", ctr("app"))
	h.sync(plain, nil)
	if sc := h.cri.ContainerConfig(h.container(plain, "app").ID).Linux.SecurityContext; sc.Apparmor != nil || sc.ApparmorProfile != "" {
		t.Errorf("no profile asked: apparmor %v / %q, want the runtime's default", sc.Apparmor, sc.ApparmorProfile)
	}
}

// TestSupplementalGroupsPolicy: the pod's supplementalGroupsPolicy reaches
// the runtime in the sandbox's and the containers' security contexts
// (Merge when unset).
func TestSupplementalGroupsPolicy(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	strict := v1.SupplementalGroupsPolicyStrict
	pod := newPod("sgp", ctr("app"))
	pod.Spec.SecurityContext = &v1.PodSecurityContext{SupplementalGroupsPolicy: &strict}
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	st := h.status(pod)
	if p := h.cri.SandboxConfig(st.Sandboxes[0].ID).Linux.SecurityContext.SupplementalGroupsPolicy; p != runtimeapi.SupplementalGroupsPolicy_Strict {
		t.Errorf("sandbox policy %v, want Strict", p)
	}
	if p := h.cri.ContainerConfig(h.container(pod, "app").ID).Linux.SecurityContext.SupplementalGroupsPolicy; p != runtimeapi.SupplementalGroupsPolicy_Strict {
		t.Errorf("container policy %v, want Strict", p)
	}
}

// TestHostnameOverride: spec.hostnameOverride (GA in 1.37) is the
// sandbox's hostname and the pod's /etc/hosts name, ahead of hostname and
// subdomain.
func TestHostnameOverride(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod("ho", ctr("app"))
	pod.Spec.Hostname, pod.Spec.Subdomain = "short", "sub"
	pod.Spec.HostnameOverride = ptr.To("my.host-name")
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	st := h.status(pod)
	if hn := h.cri.SandboxConfig(st.Sandboxes[0].ID).Hostname; hn != "my.host-name" {
		t.Errorf("sandbox hostname %q, want the override", hn)
	}
	var hostsPath string
	for _, m := range h.cri.ContainerConfig(h.container(pod, "app").ID).Mounts {
		if m.ContainerPath == "/etc/hosts" {
			hostsPath = m.HostPath
		}
	}
	hosts, err := os.ReadFile(hostsPath)
	if err != nil || !strings.Contains(string(hosts), st.IPs[0]+"\tmy.host-name\n") {
		t.Errorf("/etc/hosts = %q, %v; want %s\tmy.host-name", hosts, err, st.IPs[0])
	}
	bad := newPod("bad", ctr("app"))
	bad.Spec.HostnameOverride = ptr.To("Not_Valid")
	if res := h.sync(bad, nil); res.Err == nil || !strings.Contains(res.Err.Error(), "not a valid DNS subdomain") {
		t.Errorf("invalid override: %v", res.Err)
	}
}

// TestResizeInPlace: a running container whose allocation changes is
// resized with UpdateContainerResources (same container, no restart), its
// status reports the new actuated resources and what the runtime reports,
// and the pod's cgroup grows before the containers and shrinks after them:
// memory grows here (pod cgroup first, the container still at its old
// limit), cpu shrinks (container first).
func TestResizeInPlace(t *testing.T) {
	type podCgroupCall struct {
		memLimit, cpuLimit   string
		ctrMemory, ctrCPUQta int64
	}
	var calls []podCgroupCall
	var h *harness
	h = newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		o.UpdatePodCgroup = func(_ context.Context, pod *v1.Pod) error {
			c := pod.Spec.Containers[0]
			l := h.status(pod).Container("app").Reported.Limits
			q := l[v1.ResourceCPU]
			calls = append(calls, podCgroupCall{memLimit: c.Resources.Limits.Memory().String(), cpuLimit: c.Resources.Limits.Cpu().String(),
				ctrMemory: l.Memory().Value(), ctrCPUQta: q.MilliValue()})
			return nil
		}
	})
	app := ctr("app")
	app.Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("400m"), v1.ResourceMemory: resource.MustParse("64Mi")},
	}
	pod := newPod("res", app)
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	before := h.container(pod, "app")
	if before.Reported == nil || before.Reported.Limits.Memory().Value() != 64<<20 {
		t.Fatalf("runtime-reported resources %v, want the 64Mi limit", before.Reported)
	}

	pod.Spec.Containers[0].Resources.Limits[v1.ResourceMemory] = resource.MustParse("128Mi")
	pod.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("100m")
	pod.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse("300m")
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	c := h.container(pod, "app")
	if c.ID != before.ID || c.RestartCount != 0 {
		t.Fatalf("container %s (restarts %d), want %s resized in place", c.ID, c.RestartCount, before.ID)
	}
	if podstate.ResizeNeeded(c.Resources, &pod.Spec.Containers[0].Resources) {
		t.Errorf("actuated %v, want the allocation %v", c.Resources, pod.Spec.Containers[0].Resources)
	}
	if got := c.Reported.Limits.Memory().Value(); got != 128<<20 {
		t.Errorf("runtime memory limit %d, want 128Mi", got)
	}
	if q := c.Reported.Limits[v1.ResourceCPU]; q.MilliValue() != 300 {
		t.Errorf("runtime cpu limit %s, want 300m", q.String())
	}
	want := []podCgroupCall{
		{memLimit: "128Mi", cpuLimit: "400m", ctrMemory: 64 << 20, ctrCPUQta: 400},  // memory grows: pod first
		{memLimit: "128Mi", cpuLimit: "300m", ctrMemory: 128 << 20, ctrCPUQta: 300}, // cpu shrinks: containers first
	}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("pod cgroup updates %+v, want %+v", calls, want)
	}
	if n := h.cri.Calls("UpdateContainerResources"); n != 2 {
		t.Errorf("UpdateContainerResources called %d times, want 2 (memory, then cpu)", n)
	}
	// Nothing left to do: no further calls.
	if res := h.sync(pod, nil); res.Err != nil || h.cri.Calls("UpdateContainerResources") != 2 || len(calls) != 2 {
		t.Errorf("second sync: %v, %d updates, %d pod cgroup updates", res.Err, h.cri.Calls("UpdateContainerResources"), len(calls))
	}
}

// TestResizeRestartContainer: a resize of a resource whose resizePolicy is
// RestartContainer restarts the container (whatever the pod's restart
// policy), which comes back with its allocation.
func TestResizeRestartContainer(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	app := ctr("app")
	app.Resources = v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}}
	app.ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	pod := newPod("res", app)
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	before := h.container(pod, "app")
	pod.Spec.Containers[0].Resources.Limits[v1.ResourceMemory] = resource.MustParse("128Mi")
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	c := h.container(pod, "app")
	if c.ID == before.ID || c.RestartCount != 1 || c.State != podstate.ContainerStateRunning {
		t.Fatalf("container %s restarts %d state %s, want a new running instance", c.ID, c.RestartCount, c.State)
	}
	if !c.Resources.Limits.Memory().Equal(resource.MustParse("128Mi")) {
		t.Errorf("new instance created with %v, want the 128Mi allocation", c.Resources)
	}
	if n := h.cri.Calls("UpdateContainerResources"); n != 0 {
		t.Errorf("UpdateContainerResources called %d times, want a restart only", n)
	}
	found := false
	for _, e := range h.events() {
		found = found || strings.Contains(e, "Container app resize requires restart")
	}
	if !found {
		t.Errorf("no kill event with the resize restart message: %v", h.events())
	}
}

// TestResizeFailureRetried: a runtime that refuses the update fails the
// sync with ErrResizePodInPlace and a ResizeError event; what runs is
// unchanged and the next sync tries again.
func TestResizeFailureRetried(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	app := ctr("app")
	app.Resources = v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}}
	pod := newPod("res", app)
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	pod.Spec.Containers[0].Resources.Limits[v1.ResourceMemory] = resource.MustParse("32Mi")
	if err := h.cri.SetError("UpdateContainerResources", status.Error(codes.Unknown, "memory usage above the new limit")); err != nil {
		t.Fatal(err)
	}
	res := h.sync(pod, nil)
	if !errors.Is(res.Err, runtime.ErrResizePodInPlace) {
		t.Fatalf("sync error %v, want ErrResizePodInPlace", res.Err)
	}
	if msg := h.pm.ResizeError(pod.UID); !strings.Contains(msg, "memory usage above the new limit") {
		t.Errorf("ResizeError %q, want the runtime's refusal", msg)
	}
	if c := h.container(pod, "app"); !c.Resources.Limits.Memory().Equal(resource.MustParse("64Mi")) {
		t.Errorf("actuated %v after a refused resize, want 64Mi", c.Resources)
	}
	if err := h.cri.SetError("UpdateContainerResources", nil); err != nil {
		t.Fatal(err)
	}
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	if c := h.container(pod, "app"); !c.Resources.Limits.Memory().Equal(resource.MustParse("32Mi")) {
		t.Errorf("actuated %v after the retry, want 32Mi", c.Resources)
	}
	if msg := h.pm.ResizeError(pod.UID); msg != "" {
		t.Errorf("ResizeError %q after a successful retry", msg)
	}
}

// TestResizeMemoryBelowUsage: a memory limit cut below what the container
// uses (fakecri reports 4 MiB) is refused before anything changes, with the
// kubelet's message, and no UpdateContainerResources call.
func TestResizeMemoryBelowUsage(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	app := ctr("app")
	app.Resources = v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}}
	pod := newPod("res", app)
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	pod.Spec.Containers[0].Resources.Limits[v1.ResourceMemory] = resource.MustParse("2Mi")
	res := h.sync(pod, nil)
	want := fmt.Sprintf(`cannot decrease memory limits: attempting to set container "app" memory limit (%d) below current usage (%d)`, 2<<20, fakecri.DefaultContainerMemory)
	if !errors.Is(res.Err, runtime.ErrResizePodInPlace) || !strings.Contains(h.pm.ResizeError(pod.UID), want) {
		t.Fatalf("sync error %v, ResizeError %q; want %q", res.Err, h.pm.ResizeError(pod.UID), want)
	}
	if n := h.cri.Calls("UpdateContainerResources"); n != 0 {
		t.Errorf("UpdateContainerResources called %d times", n)
	}
}
