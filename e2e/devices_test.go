package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/wait"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodekit/nodekit/e2e/deviceplugin"
)

const sampleResource = "example.com/sample"

// TestDevicePluginsOnContainerd: the e2e module's sample device plugin
// registers 4 devices with the agent's kubelet.sock, they reach the node's
// capacity and allocatable, a pod asking for 2 gets their env and device
// nodes, and the pod resources API (pod-resources/kubelet.sock) reports
// them in List and Get, the node's 4 devices in GetAllocatableResources.
// Killing the plugin drops allocatable to 0 with capacity kept (the
// kubelet's 5-minute grace); the plugin started again registers again and
// a second pod gets the 2 other devices. The agent SIGKILLed and restarted
// while the plugin is down keeps both allocations from
// kubelet_internal_checkpoint: no container restarts, List reports the
// same devices, and once the plugin is back a third pod asking for 2 is
// rejected with UnexpectedAdmissionError since all 4 are still taken.
func TestDevicePluginsOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	n := newContainerdPodNode(t, "ctr-devices")
	dir := filepath.Join(n.agent.Dir, "root", "device-plugins")
	waitForSocket(t, filepath.Join(dir, "kubelet.sock"))
	p, err := deviceplugin.Start(ctx, dir, "sample", sampleResource, 4)
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

	first := n.runDevicePod(t, "devices", 2)
	if _, err := os.Stat(filepath.Join(dir, "kubelet_internal_checkpoint")); err != nil {
		t.Errorf("no device manager checkpoint: %v", err)
	}

	// The devices' health in the pod's status (ResourceHealthStatus, on by
	// default in 1.37): a device turning unhealthy shows there and leaves
	// allocatable, then comes back.
	waitForDeviceHealth(t, first, map[string]v1.ResourceHealthStatus{first.ids[0]: v1.ResourceHealthStatusHealthy, first.ids[1]: v1.ResourceHealthStatusHealthy})
	p.SetHealth(first.ids[0], false)
	waitForDeviceHealth(t, first, map[string]v1.ResourceHealthStatus{first.ids[0]: v1.ResourceHealthStatusUnhealthy, first.ids[1]: v1.ResourceHealthStatusHealthy})
	waitForNode(t, n.name, "3 sample devices allocatable with one unhealthy", readyTimeout, func(node *v1.Node) bool {
		return devices(node.Status.Capacity) == 4 && devices(node.Status.Allocatable) == 3
	})
	p.SetHealth(first.ids[0], true)
	waitForDeviceHealth(t, first, map[string]v1.ResourceHealthStatus{first.ids[0]: v1.ResourceHealthStatusHealthy, first.ids[1]: v1.ResourceHealthStatusHealthy})
	waitForNode(t, n.name, "4 sample devices allocatable again", readyTimeout, func(node *v1.Node) bool {
		return devices(node.Status.Allocatable) == 4
	})

	// The pod resources API, as a GPU exporter reads it.
	podResources := filepath.Join(n.agent.Dir, "root", "pod-resources", "kubelet.sock")
	waitForSocket(t, podResources)
	conn, err := grpc.NewClient("unix://"+podResources, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pr := podresourcesv1.NewPodResourcesListerClient(conn)
	waitForListedDevices(t, pr, n.ns, map[string][]string{first.pod.Name: first.ids})
	got, err := pr.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: first.pod.Name, PodNamespace: first.pod.Namespace})
	if err != nil {
		t.Fatalf("pod resources Get of %s: %v", first.pod.Name, err)
	}
	if ids := sampleDeviceIDs(got.PodResources, "main"); !slices.Equal(ids, first.ids) {
		t.Errorf("pod resources Get of %s reports devices %v, want %v", first.pod.Name, ids, first.ids)
	}
	alloc, err := pr.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, d := range alloc.Devices {
		if d.ResourceName == sampleResource {
			all = append(all, d.DeviceIds...)
		}
	}
	slices.Sort(all)
	if want := []string{"dev-0", "dev-1", "dev-2", "dev-3"}; !slices.Equal(all, want) {
		t.Errorf("pod resources GetAllocatableResources reports %v, want %v", all, want)
	}
	if len(alloc.CpuIds) != 0 || len(alloc.Memory) != 0 {
		t.Errorf("pod resources GetAllocatableResources reports CPUs %v and memory %v, want none without CPU and memory managers", alloc.CpuIds, alloc.Memory)
	}
	m, err := n.agent.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("kubelet_pod_resources_endpoint_requests_total", map[string]string{"server_api_version": "v1"}); got < 3 {
		t.Errorf("kubelet_pod_resources_endpoint_requests_total{server_api_version=v1} = %v, want at least the test's 3 calls", got)
	}

	// The plugin killed, then started again.
	p.Stop()
	stopped = true
	waitForNode(t, n.name, "sample devices not allocatable after the plugin is killed", readyTimeout, func(node *v1.Node) bool {
		return devices(node.Status.Capacity) == 4 && devices(node.Status.Allocatable) == 0
	})
	p, err = deviceplugin.Start(ctx, dir, "sample", sampleResource, 4)
	if err != nil {
		t.Fatal(err)
	}
	stopped = false
	waitForNode(t, n.name, "4 sample devices allocatable after the plugin registered again", readyTimeout, func(node *v1.Node) bool {
		return devices(node.Status.Capacity) == 4 && devices(node.Status.Allocatable) == 4
	})
	second := n.runDevicePod(t, "devices-again", 2)
	if slices.ContainsFunc(second.ids, func(id string) bool { return slices.Contains(first.ids, id) }) {
		t.Errorf("the second pod got devices %v, overlapping the first pod's %v", second.ids, first.ids)
	}

	// The agent SIGKILLed and restarted while the plugin is down: the
	// running containers keep their devices (the checkpoint, and the
	// containers found running before the pod sources are handled), then
	// the plugin comes back.
	running := waitPods(t, n.ns, []string{first.pod.Name, second.pod.Name}, "Running and Ready", podTimeout, isPodReady)
	snap := snapshotContainers(running)
	p.Stop()
	stopped = true
	// Allocatable 0 first, so that 4 below is the restarted agent's
	// report of the plugin registered again, not the old one's.
	waitForNode(t, n.name, "sample devices not allocatable before the agent's restart", readyTimeout, func(node *v1.Node) bool {
		return devices(node.Status.Allocatable) == 0
	})
	n.agent.Kill()
	if err := n.agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitForListedDevices(t, pr, n.ns, map[string][]string{first.pod.Name: first.ids, second.pod.Name: second.ids})
	p, err = deviceplugin.Start(ctx, dir, "sample", sampleResource, 4)
	if err != nil {
		t.Fatal(err)
	}
	stopped = false
	waitForNode(t, n.name, "4 sample devices allocatable after the agent's restart", readyTimeout, func(node *v1.Node) bool {
		return devices(node.Status.Capacity) == 4 && devices(node.Status.Allocatable) == 4
	})
	third := n.boundPod("devices-none-left", "sleep", "3600")
	two := v1.ResourceList{sampleResource: resource.MustParse("2")}
	third.Spec.Containers[0].Resources = v1.ResourceRequirements{Limits: two, Requests: two}
	n.createPod(t, third)
	rejected := waitForPod(t, third.Namespace, third.Name, "Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if rejected.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(rejected.Status.Message, "requested number of devices unavailable for "+sampleResource) {
		t.Errorf("a pod asking for 2 devices while all 4 are allocated: %s: %s, want UnexpectedAdmissionError, requested number of devices unavailable", rejected.Status.Reason, rejected.Status.Message)
	}
	after := waitPods(t, n.ns, []string{first.pod.Name, second.pod.Name}, "Running and Ready", podTimeout, isPodReady)
	if changed := compareContainers(snap, after); len(changed) > 0 {
		t.Errorf("containers restarted by the agent's restart:\n  %s", strings.Join(changed, "\n  "))
	}
}

// devicePod is a running pod and the sample devices it got.
type devicePod struct {
	pod *v1.Pod
	ids []string
}

// runDevicePod runs a pod whose container asks for count sample devices and
// prints what it got; it checks the env and device nodes match and returns
// the sorted device IDs.
func (n *podNode) runDevicePod(t *testing.T, name string, count int64) devicePod {
	t.Helper()
	pod := n.pod(name, "sh", "-c", `echo "devices=$SAMPLE_DEVICES"; echo "nodes=$(ls /dev | grep sample- | tr '\n' ' ')"; sleep 3600`)
	q := *resource.NewQuantity(count, resource.DecimalSI)
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Limits: v1.ResourceList{sampleResource: q}, Requests: v1.ResourceList{sampleResource: q}}
	pod = n.createPod(t, pod)
	pod = waitForPod(t, pod.Namespace, pod.Name, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	envLine := n.waitForLogLine(t, pod, "main", "devices=", func(l string) bool { return strings.HasPrefix(l, "devices=") })
	ids := strings.Split(strings.TrimPrefix(envLine, "devices="), ",")
	slices.Sort(ids)
	if len(slices.Compact(slices.Clone(ids))) != int(count) || !strings.HasPrefix(ids[0], "dev-") {
		t.Fatalf("the container's SAMPLE_DEVICES is %q, want %d distinct devices", envLine, count)
	}
	nodesLine := n.waitForLogLine(t, pod, "main", "nodes=", func(l string) bool { return strings.HasPrefix(l, "nodes=") })
	for _, id := range ids {
		if !strings.Contains(nodesLine, "sample-"+id) {
			t.Errorf("the container's /dev has %q, want sample-%s", nodesLine, id)
		}
	}
	return devicePod{pod: pod, ids: ids}
}

// waitForDeviceHealth waits until the status of p's container "main"
// reports exactly its sample devices with the given health in
// allocatedResourcesStatus.
func waitForDeviceHealth(t *testing.T, p devicePod, want map[string]v1.ResourceHealthStatus) {
	t.Helper()
	waitForPod(t, p.pod.Namespace, p.pod.Name, fmt.Sprintf("allocatedResourcesStatus %v", want), func(pod *v1.Pod) bool {
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name != "main" {
				continue
			}
			for _, rs := range cs.AllocatedResourcesStatus {
				if rs.Name != sampleResource || len(rs.Resources) != len(want) {
					continue
				}
				for _, r := range rs.Resources {
					if want[string(r.ResourceID)] != r.Health {
						return false
					}
				}
				return true
			}
		}
		return false
	})
}

// waitForSocket waits until path exists.
func waitForSocket(t *testing.T, path string) {
	t.Helper()
	waitForCondition(t, path, readyTimeout, func() (bool, error) {
		_, err := os.Stat(path)
		return err == nil, nil
	})
}

// waitForListedDevices waits until the pod resources API's List reports
// each pod of ns (by name) with its container "main" holding exactly its
// sample devices.
func waitForListedDevices(t *testing.T, pr podresourcesv1.PodResourcesListerClient, ns string, want map[string][]string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
		resp, err := pr.List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprint(resp.PodResources)
		for name, ids := range want {
			i := slices.IndexFunc(resp.PodResources, func(p *podresourcesv1.PodResources) bool {
				return p.Namespace == ns && p.Name == name
			})
			if i < 0 || !slices.Equal(sampleDeviceIDs(resp.PodResources[i], "main"), ids) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the pod resources API's List does not report the pods' devices %v: %v; last answer: %s", want, err, last)
	}
}

// sampleDeviceIDs returns the sorted sample device IDs of the named
// container in p.
func sampleDeviceIDs(p *podresourcesv1.PodResources, container string) []string {
	var ids []string
	for _, c := range p.GetContainers() {
		if c.Name != container {
			continue
		}
		for _, d := range c.Devices {
			if d.ResourceName == sampleResource {
				ids = append(ids, d.DeviceIds...)
			}
		}
	}
	slices.Sort(ids)
	return ids
}
