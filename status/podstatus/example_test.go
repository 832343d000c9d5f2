package podstatus_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nodekit/nodekit/podstate"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/status/podstatus"
)

// A pod worker's sync: the runtime's view of the pod becomes its API
// status, which the Manager writes to the API server.
func ExampleGenerate() {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "1234"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "nginx"}, {Name: "proxy", Image: "envoy"}}},
	}
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rs := &podstate.PodStatus{
		IPs: []string{"10.244.0.7"},
		Sandboxes: []*podstate.SandboxStatus{{
			ID: "sb", Ready: true, IP: "10.244.0.7", NetworkReported: true,
		}},
		Containers: []*podstate.ContainerStatus{{
			ID: "c1", Type: "containerd", Name: "app", State: podstate.ContainerStateRunning,
			CreatedAt: started, StartedAt: started, Image: "docker.io/library/nginx:latest", ImageRef: "sha256:abc", SandboxID: "sb",
		}},
	}
	// The proxy's image cannot be pulled.
	waiting := map[string]podstate.ContainerWaiting{
		"proxy": {Reason: podstate.ErrImagePullBackOff, Message: `Back-off pulling image "envoy"`},
	}
	status := podstatus.Generate(pod, rs, waiting, podstatus.GenerateOptions{})
	fmt.Println("phase:", status.Phase, "podIP:", status.PodIP)
	for _, cs := range status.ContainerStatuses {
		state := "running"
		if cs.State.Waiting != nil {
			state = "waiting: " + cs.State.Waiting.Reason
		}
		fmt.Printf("%s %s ready=%v %s\n", cs.Name, cs.ContainerID, cs.Ready, state)
	}
	for _, c := range status.Conditions {
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s %s %s %s", c.Type, c.Status, c.Reason, c.Message)))
	}

	client := fake.NewClientset(pod.DeepCopy())
	m, err := podstatus.NewManager(podstatus.Options{Client: client})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = m.Run(ctx) }()
	m.SetPodStatus(pod, status)
	_ = wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Status.Phase != "", nil
	})
	p, _ := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	fmt.Println("API server:", p.Status.Phase, p.Status.PodIP)
	// Output:
	// phase: Pending podIP: 10.244.0.7
	// app containerd://c1 ready=true running
	// proxy  ready=false waiting: ImagePullBackOff
	// PodReadyToStartContainers True
	// Initialized True
	// Ready False ContainersNotReady containers with unready status: [proxy]
	// ContainersReady False ContainersNotReady containers with unready status: [proxy]
	// PodScheduled True
	// API server: Pending 10.244.0.7
}
