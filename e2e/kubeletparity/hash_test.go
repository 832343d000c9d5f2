package kubeletparity

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/runtime"
)

// hashContainers are containers of every shape a pod spec can carry, so the
// test would notice a kubelet release that hashed more than name and image.
func hashContainers() map[string]v1.Container {
	full := v1.Container{
		Name:       "app",
		Image:      "registry.example/app:v1.2.3@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Command:    []string{"/bin/app", "--serve"},
		Args:       []string{"--port=8080", "--name=<&>"},
		WorkingDir: "/srv",
		Ports: []v1.ContainerPort{
			{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP},
			{Name: "dns", ContainerPort: 53, HostPort: 5353, Protocol: v1.ProtocolUDP, HostIP: "10.0.0.1"},
		},
		EnvFrom: []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}},
		Env: []v1.EnvVar{
			{Name: "A", Value: "1"},
			{Name: "NODE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		},
		Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("128Mi")},
		},
		ResizePolicy: []v1.ContainerResizePolicy{{ResourceName: v1.ResourceCPU, RestartPolicy: v1.NotRequired}},
		VolumeMounts: []v1.VolumeMount{
			{Name: "data", MountPath: "/data"},
			{Name: "cfg", MountPath: "/etc/app", ReadOnly: true, SubPath: "app"},
		},
		VolumeDevices: []v1.VolumeDevice{{Name: "blk", DevicePath: "/dev/xvda"}},
		LivenessProbe: &v1.Probe{
			ProbeHandler:     v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
			PeriodSeconds:    10,
			FailureThreshold: 3,
		},
		ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
		StartupProbe:   &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}},
		Lifecycle: &v1.Lifecycle{
			PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo hi"}}},
			PreStop:   &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}},
		},
		TerminationMessagePath:   "/dev/termination-log",
		TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError,
		ImagePullPolicy:          v1.PullIfNotPresent,
		SecurityContext: &v1.SecurityContext{
			Capabilities:             &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}, Drop: []v1.Capability{"ALL"}},
			Privileged:               ptr.To(false),
			RunAsUser:                ptr.To[int64](1000),
			RunAsNonRoot:             ptr.To(true),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			SeccompProfile:           &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault},
		},
		Stdin:     true,
		StdinOnce: true,
		TTY:       true,
	}
	sidecar := v1.Container{Name: "sidecar", Image: "busybox", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}
	return map[string]v1.Container{
		"empty":                  {},
		"name only":              {Name: "c"},
		"image only":             {Image: "nginx"},
		"name and image":         {Name: "nginx", Image: "nginx:1.27"},
		"full spec":              full,
		"full spec, other image": func() v1.Container { c := *full.DeepCopy(); c.Image = "registry.example/app:v1.2.4"; return c }(),
		"restartable init":       sidecar,
		"html-escaped":           {Name: "x", Image: "example.com/<weird>&image"},
		"unicode":                {Name: "ünïcødé", Image: "例え/イメージ:最新"},
		"invalid utf-8":          {Name: "bad\xff", Image: "img\xfe"},
		"quotes and controls":    {Name: "q\"uo\\te", Image: "tab\tnewline\n\x01"},
		"long": {Name: "a-very-long-container-name-that-is-sixty-three-characters-long-x",
			Image: "registry.k8s.io/very/deep/path/to/an/image/that/goes/on/and/on/for/a/while:v0.0.0-20260101000000-abcdef012345"},
	}
}

// TestHashContainerMatchesKubelet checks that runtime.HashContainer, which
// nodekit records in io.kubernetes.container.hash and compares to decide
// whether a running container's spec changed, is the kubelet's own
// HashContainer: an agent that takes over a kubelet's node must see the
// kubelet's containers as unchanged, and the other way round.
func TestHashContainerMatchesKubelet(t *testing.T) {
	for name, c := range hashContainers() {
		t.Run(name, func(t *testing.T) {
			want := kubecontainer.HashContainer(&c)
			if got := runtime.HashContainer(&c); got != want {
				t.Errorf("runtime.HashContainer = %x, the kubelet's HashContainer = %x", got, want)
			}
		})
	}
}

// TestHashContainerIgnoresWhatTheKubeletIgnores checks the contract the
// handover rests on from the other side: a change the kubelet does not
// restart a container for (resources, probes, env, ...) leaves both hashes
// unchanged, and a new image changes both.
func TestHashContainerIgnoresWhatTheKubeletIgnores(t *testing.T) {
	cs := hashContainers()
	base, other := cs["full spec"], cs["name and image"]
	mutated := other
	mutated.Resources = base.Resources
	mutated.LivenessProbe = base.LivenessProbe
	mutated.Env = base.Env
	if runtime.HashContainer(&mutated) != runtime.HashContainer(&other) || kubecontainer.HashContainer(&mutated) != kubecontainer.HashContainer(&other) {
		t.Error("changing resources, a probe or env changed a hash; the kubelet v1.37 hashes only name and image")
	}
	newImage := other
	newImage.Image += "-new"
	if runtime.HashContainer(&newImage) == runtime.HashContainer(&other) {
		t.Error("a new image left runtime.HashContainer unchanged")
	}
}
