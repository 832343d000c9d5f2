package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// plegRelists is the agent's count of full relists.
func plegRelists(t *testing.T, n *podNode) float64 {
	t.Helper()
	m, err := n.agent.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return histogramCount(m, "kubelet_pleg_relist_duration_seconds")
}

// testContainerEvents: on containerd 2 the agent's PLEG follows the
// runtime's container event stream (GetContainerEvents, the kubelet's
// evented PLEG): the stream connected and never failed
// (kubelet_evented_pleg_connection_success_count and _error_count), and a
// container's exit reaches the API server while the PLEG relists at most
// once a minute, so the exit came by the stream. On containerd 1.6, which
// does not implement the stream, the agent logs that it relists only.
func testContainerEvents(t *testing.T, n *podNode) {
	if n.containerd.Series == cluster.ContainerdSeries16 {
		const line = "Container runtime does not stream container events; relisting only"
		err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
			data, err := os.ReadFile(n.agent.LogPath)
			return err == nil && strings.Contains(string(data), line), nil
		})
		if err != nil {
			t.Fatalf("containerd 1.6: the agent's log (%s) never says %q", n.agent.LogPath, line)
		}
		return
	}
	if got := metricValue(t, n.agent, "kubelet_evented_pleg_connection_success_count", nil); got < 1 {
		t.Fatalf("kubelet_evented_pleg_connection_success_count = %v on containerd %s, want at least 1", got, n.containerd.Series)
	}
	relists := plegRelists(t, n)
	start := time.Now()
	pod := n.pod("exits", "sh", "-c", "sleep 3; exit 3")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	n.createPod(t, pod)
	waitForPod(t, n.ns, pod.Name, "Failed with exit code 3", func(p *v1.Pod) bool {
		if p.Status.Phase != v1.PodFailed || len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		term := p.Status.ContainerStatuses[0].State.Terminated
		return term != nil && term.ExitCode == 3
	})
	elapsed := time.Since(start)
	// While the stream is up the PLEG relists every minute
	// (runtime.DefaultEventedRelistPeriod); the generic PLEG every second.
	// Allow the one-a-minute relists the window spans, and one more.
	got := plegRelists(t, n) - relists
	if allowed := float64(elapsed/time.Minute) + 2; got > allowed {
		t.Errorf("the PLEG relisted %v times in %s while following the event stream, want at most %v", got, elapsed.Round(time.Millisecond), allowed)
	}
	if errs := metricValue(t, n.agent, "kubelet_evented_pleg_connection_error_count", nil); errs != 0 {
		t.Errorf("kubelet_evented_pleg_connection_error_count = %v, want 0: the container event stream failed", errs)
	}
	t.Logf("containerd %s: exit reached the API server %s after the pod's creation with %v relists", n.containerd.Series, elapsed.Round(time.Millisecond), got)
}
