package podstatus_test

import (
	"time"

	"github.com/nodekit/nodekit/podstate"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	t1 = t0.Add(time.Minute)
	t2 = t0.Add(2 * time.Minute)
)

// testPod is a pod named web with the given regular containers.
func testPod(policy v1.RestartPolicy, containers ...string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-1", Generation: 3},
		Spec:       v1.PodSpec{RestartPolicy: policy, NodeName: "node-a"},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c, Image: c + ":1"})
	}
	return p
}

// withInit adds regular init containers.
func withInit(p *v1.Pod, names ...string) *v1.Pod {
	for _, n := range names {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: n + ":1"})
	}
	return p
}

// withSidecar adds a restartable init container.
func withSidecar(p *v1.Pod, name string, mutate ...func(*v1.Container)) *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	c := v1.Container{Name: name, Image: name + ":1", RestartPolicy: &always}
	for _, m := range mutate {
		m(&c)
	}
	p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	return p
}

// rt is a runtime status with one ready sandbox "sb1" at 10.0.0.5.
func rt(containers ...*podstate.ContainerStatus) *podstate.PodStatus {
	return &podstate.PodStatus{
		ID: "uid-1", Name: "web", Namespace: "default",
		IPs: []string{"10.0.0.5"},
		Sandboxes: []*podstate.SandboxStatus{{
			ID: "sb1", Ready: true, IP: "10.0.0.5", NetworkReported: true,
		}},
		Containers: containers,
	}
}

// running is a running container instance created at created.
func running(name string, created time.Time) *podstate.ContainerStatus {
	return &podstate.ContainerStatus{
		ID: name + "-" + created.Format("150405"), Type: "containerd", Name: name,
		State: podstate.ContainerStateRunning, CreatedAt: created, StartedAt: created.Add(time.Second),
		Image: "docker.io/library/" + name + ":1", ImageRef: "sha256:" + name, SandboxID: "sb1",
	}
}

// exited is an exited container instance.
func exited(name string, created time.Time, code int) *podstate.ContainerStatus {
	c := running(name, created)
	c.State = podstate.ContainerStateExited
	c.ExitCode = code
	c.FinishedAt = created.Add(30 * time.Second)
	c.Reason = "Completed"
	if code != 0 {
		c.Reason = "Error"
	}
	return c
}

func withRestarts(c *podstate.ContainerStatus, n int) *podstate.ContainerStatus {
	c.RestartCount = n
	return c
}

func findCond(s v1.PodStatus, t v1.PodConditionType) *v1.PodCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

func findCS(list []v1.ContainerStatus, name string) *v1.ContainerStatus {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}
