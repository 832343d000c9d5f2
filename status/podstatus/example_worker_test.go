package podstatus_test

import (
	"fmt"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/status/podstatus"
)

// How the pod loop (pods.Controller) wires a Manager, as the kubelet's
// syncPod does: on every sync of a pod, status first, then the runtime's
// actions. The runtime's view of the pod (pods.Runtime.PodStatus; the CRI
// backend reads it from its PLEG cache) becomes the API status through
// Generate, with the status last generated as Previous; SetPodStatus
// caches it for the Manager's Run to write. Once the pod's containers all
// stopped for good, TerminatePod; once its source removed it, RemovePod.
// Without a Client, as here, the Manager keeps the statuses and writes
// nothing.
func Example_podWorker() {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "job", UID: "5678"},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyNever,
			Containers:    []v1.Container{{Name: "work", Image: "busybox"}},
		},
	}
	m, err := podstatus.NewManager(podstatus.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	// One sync: Generate from the runtime's status, then SetPodStatus
	// (pods.Runtime.SyncPod would act on the pod next).
	sync := func(rs *podstate.PodStatus, terminal bool) {
		opts := podstatus.GenerateOptions{Terminal: terminal, HostIPs: []net.IP{net.ParseIP("192.0.2.10")}}
		if prev, ok := m.GetPodStatus(pod.UID); ok {
			opts.Previous = &prev
		}
		m.SetPodStatus(pod, podstatus.Generate(pod, rs, nil, opts))
		st, _ := m.GetPodStatus(pod.UID)
		fmt.Println(st.Phase, st.HostIP)
	}

	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sandbox := []*podstate.SandboxStatus{{ID: "sb", Ready: true, IP: "10.244.0.9", NetworkReported: true}}
	work := &podstate.ContainerStatus{
		ID: "c1", Type: "containerd", Name: "work", State: podstate.ContainerStateRunning,
		CreatedAt: started, StartedAt: started, SandboxID: "sb",
	}
	sync(&podstate.PodStatus{IPs: []string{"10.244.0.9"}, Sandboxes: sandbox, Containers: []*podstate.ContainerStatus{work}}, false)

	done := *work
	done.State, done.ExitCode, done.FinishedAt = podstate.ContainerStateExited, 0, started.Add(time.Minute)
	sync(&podstate.PodStatus{IPs: []string{"10.244.0.9"}, Sandboxes: sandbox, Containers: []*podstate.ContainerStatus{&done}}, false)

	// Its containers will not run again.
	m.TerminatePod(pod)
	// Its source removed it.
	m.RemovePod(pod.UID)
	_, known := m.GetPodStatus(pod.UID)
	fmt.Println("status kept after RemovePod:", known)
	// Output:
	// Running 192.0.2.10
	// Succeeded 192.0.2.10
	// status kept after RemovePod: false
}
