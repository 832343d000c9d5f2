package bench

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Labels the kubelet (and nodekit) put on every sandbox and container.
const (
	labelPodNamespace = "io.kubernetes.pod.namespace"
	labelPodUID       = "io.kubernetes.pod.uid"
)

// CRISpan is the runtime's own time to start one pod, by its timestamps:
// from the sandbox's creation to its first container's start.
type CRISpan struct {
	// SandboxCreated is the sandbox's CreatedAt.
	SandboxCreated time.Time
	// Started is the StartedAt of the pod's first container to start.
	Started time.Time
}

// Duration is the span's length.
func (s CRISpan) Duration() time.Duration { return s.Started.Sub(s.SandboxCreated) }

// CRITimes returns, for every pod of namespace ns on the runtime at
// endpoint (unix://…), the runtime's own time to start it: from the
// sandbox's creation to its first container's start (StartContainer
// done), by the runtime's timestamps. The span also holds the agent's work
// between those calls (image status, container config), so subtracting it
// from a pod's startup time gives a lower bound of the agent's share; it
// does not hold what the runtime does in RunPodSandbox before the
// sandbox's CreatedAt (see SandboxRequests). Pods without a started
// container are left out.
func CRITimes(ctx context.Context, endpoint, ns string) (map[types.UID]CRISpan, error) {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("CRI times: dial %s: %w", endpoint, err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	filter := map[string]string{labelPodNamespace: ns}
	sandboxes, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: filter}})
	if err != nil {
		return nil, fmt.Errorf("CRI times: list sandboxes of %s on %s: %w", ns, endpoint, err)
	}
	created := map[string]int64{}
	for _, sb := range sandboxes.Items {
		created[sb.Id] = sb.CreatedAt
	}
	containers, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: filter}})
	if err != nil {
		return nil, fmt.Errorf("CRI times: list containers of %s on %s: %w", ns, endpoint, err)
	}
	times := map[types.UID]CRISpan{}
	for _, c := range containers.Containers {
		sbCreated, ok := created[c.PodSandboxId]
		if !ok {
			continue
		}
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		if err != nil {
			return nil, fmt.Errorf("CRI times: status of container %s on %s: %w", c.Id, endpoint, err)
		}
		started := st.GetStatus().GetStartedAt()
		if started == 0 {
			continue
		}
		uid := types.UID(c.Labels[labelPodUID])
		span := CRISpan{SandboxCreated: time.Unix(0, sbCreated), Started: time.Unix(0, started)}
		if prev, ok := times[uid]; !ok || span.Duration() < prev.Duration() {
			times[uid] = span
		}
	}
	return times, nil
}
