package agent_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodekit/nodekit/agent/agenttest"
)

// TestAgentServesPodResources checks the wiring: the agent serves the pod
// resources API on <root-dir>/pod-resources/kubelet.sock and lists its
// running pod there.
func TestAgentServesPodResources(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	pod := n.CreatePod(ctx, agenttest.Pod("listed", "busybox"))
	n.WaitForPod(ctx, pod, agenttest.PodRunningAndReady)

	conn, err := grpc.NewClient("unix://"+filepath.Join(n.Config.RootDir, "pod-resources", "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
		if err != nil {
			return false, err
		}
		for _, p := range resp.PodResources {
			if p.Namespace == pod.Namespace && p.Name == pod.Name && len(p.Containers) == 1 && p.Containers[0].Name == "app" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the pod resources API does not list the running pod: %v", err)
	}
}
