package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/e2e/deviceplugin"
)

const sampleResource = "example.com/sample"

// TestDevicePluginsOnContainerd: the e2e module's sample device plugin
// registers 4 devices with the agent's kubelet.sock, they reach the node's
// capacity and allocatable, a pod asking for 2 gets their env and device
// nodes, and killing the plugin drops allocatable to 0 with capacity kept
// (the kubelet's 5-minute grace).
func TestDevicePluginsOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	n := newContainerdPodNode(t, "ctr-devices")
	dir := filepath.Join(n.agent.Dir, "root", "device-plugins")
	deadline := time.Now().Add(readyTimeout)
	for {
		if _, err := os.Stat(filepath.Join(dir, "kubelet.sock")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s/kubelet.sock within %s", dir, readyTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	p, err := deviceplugin.Start(t.Context(), dir, "sample", sampleResource, 4)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			p.Stop()
		}
	})
	devices := func(list v1.ResourceList) int64 {
		q, ok := list[sampleResource]
		if !ok {
			return -1
		}
		return q.Value()
	}
	waitForNode(t, n.name, "4 sample devices allocatable", readyTimeout, func(node *v1.Node) bool {
		return devices(node.Status.Capacity) == 4 && devices(node.Status.Allocatable) == 4
	})

	pod := n.pod("devices", "sh", "-c", `echo "devices=$SAMPLE_DEVICES"; echo "nodes=$(ls /dev | grep sample- | tr '\n' ' ')"; sleep 3600`)
	two := v1.ResourceList{sampleResource: resource.MustParse("2")}
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Limits: two, Requests: two}
	pod = n.createPod(t, pod)
	waitForPod(t, pod.Namespace, pod.Name, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	envLine := n.waitForLogLine(t, pod, "main", "devices=", func(l string) bool { return strings.HasPrefix(l, "devices=") })
	ids := strings.Split(strings.TrimPrefix(envLine, "devices="), ",")
	if len(ids) != 2 || ids[0] == ids[1] || !strings.HasPrefix(ids[0], "dev-") || !strings.HasPrefix(ids[1], "dev-") {
		t.Fatalf("the container's SAMPLE_DEVICES is %q, want 2 distinct devices", envLine)
	}
	nodesLine := n.waitForLogLine(t, pod, "main", "nodes=", func(l string) bool { return strings.HasPrefix(l, "nodes=") })
	for _, id := range ids {
		if !strings.Contains(nodesLine, "sample-"+id) {
			t.Errorf("the container's /dev has %q, want sample-%s", nodesLine, id)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "kubelet_internal_checkpoint")); err != nil {
		t.Errorf("no device manager checkpoint: %v", err)
	}

	p.Stop()
	stopped = true
	waitForNode(t, n.name, "sample devices not allocatable after the plugin is killed", readyTimeout, func(node *v1.Node) bool {
		return devices(node.Status.Capacity) == 4 && devices(node.Status.Allocatable) == 0
	})
}
