package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// resources is a container's requests and limits of cpu and memory.
func resources(cpuReq, cpuLim, memReq, memLim string) v1.ResourceRequirements {
	return v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuReq), v1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuLim), v1.ResourceMemory: resource.MustParse(memLim)},
	}
}

// resizeDone: the agent caught up with the pod's generation, no resize is
// pending or in progress, and the pod is Ready.
func resizeDone(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodResizePending || c.Type == v1.PodResizeInProgress {
			return false
		}
	}
	return pod.Status.ObservedGeneration >= pod.Generation && isPodReady(pod)
}

// containerCgroup returns the cgroup containerd runs a container in (from
// its OCI spec).
func (n *podNode) containerCgroup(t *testing.T, cs v1.ContainerStatus) string {
	t.Helper()
	id := strings.TrimPrefix(cs.ContainerID, n.runtimeName+"://")
	status, err := n.cri.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	path, err := ociCgroupsPath(status.Info["info"])
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func statusOf(pod *v1.Pod, name string) v1.ContainerStatus {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == name {
			return cs
		}
	}
	return v1.ContainerStatus{}
}

// testInPlaceResize resizes a running Burstable pod through the resize
// subresource, as the kubelet v1.37 does it: container app (resizePolicy
// NotRequired) keeps running, its cgroup (cpu.shares, cpu.cfs_quota_us,
// memory.limit_in_bytes) and the pod's carry the new values, and its status
// reports them as resources and its requests as allocatedResources;
// container restarter, whose memory resizePolicy is RestartContainer, is
// restarted once with its new memory limit; then a resize that cannot fit
// the node is left PodResizePending, Deferred with the kubelet's message,
// and the pod keeps running with what it had.
func testInPlaceResize(t *testing.T, n *podNode) {
	ctx := t.Context()
	pod := n.pod("resize", "sleep", "3600")
	app := pod.Spec.Containers[0]
	app.Name = "app"
	app.Resources = resources("100m", "200m", "32Mi", "64Mi")
	restarter := app
	restarter.Name = "restarter"
	restarter.ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	pod.Spec.Containers = []v1.Container{app, restarter}
	pod = n.createPod(t, pod)
	pod = waitForPod(t, pod.Namespace, pod.Name, "Running and Ready", isPodReady)
	before := map[string]v1.ContainerStatus{"app": statusOf(pod, "app"), "restarter": statusOf(pod, "restarter")}

	patch := func(containers ...v1.Container) *v1.Pod {
		t.Helper()
		type ctr struct {
			Name      string                  `json:"name"`
			Resources v1.ResourceRequirements `json:"resources"`
		}
		var list []ctr
		for _, c := range containers {
			list = append(list, ctr{Name: c.Name, Resources: c.Resources})
		}
		body, err := json.Marshal(map[string]any{"spec": map[string]any{"containers": list}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := env.cp.Client().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "resize")
		if err != nil {
			t.Fatalf("resize pod %s/%s: %v", pod.Namespace, pod.Name, err)
		}
		return p
	}
	app.Resources = resources("150m", "300m", "32Mi", "96Mi")
	restarter.Resources = resources("100m", "200m", "48Mi", "96Mi")
	patched := patch(app, restarter)
	pod = waitForPod(t, pod.Namespace, pod.Name, "resized", func(p *v1.Pod) bool { return p.Generation == patched.Generation && resizeDone(p) })

	for _, want := range []v1.Container{app, restarter} {
		cs := statusOf(pod, want.Name)
		if cs.Resources == nil || !equality.Semantic.DeepEqual(*cs.Resources, want.Resources) {
			t.Errorf("%s: status resources %v, want %v", want.Name, cs.Resources, want.Resources)
		}
		if !equality.Semantic.DeepEqual(cs.AllocatedResources, want.Resources.Requests) {
			t.Errorf("%s: allocatedResources %v, want %v", want.Name, cs.AllocatedResources, want.Resources.Requests)
		}
	}
	if cs := statusOf(pod, "app"); cs.ContainerID != before["app"].ContainerID || cs.RestartCount != 0 {
		t.Errorf("app: container %s restarts %d, want %s resized in place", cs.ContainerID, cs.RestartCount, before["app"].ContainerID)
	}
	if cs := statusOf(pod, "restarter"); cs.ContainerID == before["restarter"].ContainerID || cs.RestartCount != 1 {
		t.Errorf("restarter: container %s restarts %d, want a restart for its RestartContainer policy", cs.ContainerID, cs.RestartCount)
	}
	appCgroup := n.containerCgroup(t, statusOf(pod, "app"))
	checkCgroupFile(t, "cpu", appCgroup, "cpu.shares", "153")
	checkCgroupFile(t, "cpu", appCgroup, "cpu.cfs_quota_us", "30000")
	checkCgroupFile(t, "memory", appCgroup, "memory.limit_in_bytes", fmt.Sprint(96<<20))
	checkCgroupFile(t, "memory", n.containerCgroup(t, statusOf(pod, "restarter")), "memory.limit_in_bytes", fmt.Sprint(96<<20))
	podCgroup := filepath.Join(n.cgroupRoot, "kubepods", "burstable", "pod"+string(pod.UID))
	checkCgroupFile(t, "cpu", podCgroup, "cpu.cfs_quota_us", "50000")
	checkCgroupFile(t, "memory", podCgroup, "memory.limit_in_bytes", fmt.Sprint(192<<20))
	checkCgroupFile(t, "cpu", podCgroup, "cpu.shares", "256")
	waitForPodEvent(t, pod.Namespace, pod.Name, "ResizeStarted")
	waitForPodEvent(t, pod.Namespace, pod.Name, "ResizeCompleted")

	// A resize that fits the node but not beside another pod: Deferred
	// (the kubelet v1.37 leaves making room to the scheduler), nothing
	// changes on the node, and once the other pod is gone the resize is
	// allocated and applied. (The API server itself refuses a resize
	// beyond the node's allocatable.)
	node, err := env.cp.Client().CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	half := node.Status.Allocatable.Cpu().MilliValue() / 2
	filler := n.pod("resize-filler", "sleep", "3600")
	filler.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(half, resource.DecimalSI)}}
	filler = n.createPod(t, filler)
	t.Cleanup(func() {
		_ = env.cp.Client().CoreV1().Pods(filler.Namespace).Delete(context.Background(), filler.Name, metav1.DeleteOptions{})
	})
	waitForPod(t, filler.Namespace, filler.Name, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	big := app
	big.Resources = resources(fmt.Sprintf("%dm", half), fmt.Sprintf("%dm", half), "32Mi", "96Mi")
	patched = patch(big)
	pod = waitForPod(t, pod.Namespace, pod.Name, "resize pending", func(p *v1.Pod) bool {
		return p.Status.ObservedGeneration >= patched.Generation && podCondition(p, v1.PodResizePending) == v1.ConditionTrue
	})
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodResizePending && (c.Reason != v1.PodReasonDeferred || !strings.HasPrefix(c.Message, fmt.Sprintf("Node didn't have enough resource: cpu, requested: %d, used: ", half+100)) || c.ObservedGeneration != patched.Generation) {
			t.Errorf("PodResizePending %+v, want Deferred for cpu at generation %d", c, patched.Generation)
		}
	}
	if cs := statusOf(pod, "app"); !equality.Semantic.DeepEqual(cs.AllocatedResources, app.Resources.Requests) || cs.RestartCount != 0 {
		t.Errorf("app after a deferred resize: allocated %v restarts %d, want %v and no restart", cs.AllocatedResources, cs.RestartCount, app.Resources.Requests)
	}
	checkCgroupFile(t, "cpu", appCgroup, "cpu.cfs_quota_us", "30000")
	waitForPodEvent(t, pod.Namespace, pod.Name, "ResizeDeferred")

	if err := env.cp.Client().CoreV1().Pods(filler.Namespace).Delete(ctx, filler.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pod = waitForPod(t, pod.Namespace, pod.Name, "deferred resize applied once room was made", resizeDone)
	if cs := statusOf(pod, "app"); cs.Resources == nil || !equality.Semantic.DeepEqual(*cs.Resources, big.Resources) {
		t.Errorf("app after the deferred resize: resources %v, want %v", cs.Resources, big.Resources)
	}
	checkCgroupFile(t, "cpu", appCgroup, "cpu.cfs_quota_us", fmt.Sprint(half*100))
}

// testPodLevelResize resizes the pod-level resources (spec.resources) of a
// running Burstable pod through the resize subresource, as the kubelet
// v1.37 does with InPlacePodLevelResourcesVerticalScaling (which the node
// declares, so the API server accepts the resize): the pod's cgroup
// (cpu.shares, cpu.cfs_quota_us, memory.limit_in_bytes) takes the new
// values, container app, which sets no limits of its own and so runs with
// the pod's, is updated in place (same container, no restart), and the
// pod's status.resources report the new values once applied.
func testPodLevelResize(t *testing.T, n *podNode) {
	ctx := t.Context()
	node, err := env.cp.Client().CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(node.Status.DeclaredFeatures, "InPlacePodLevelResourcesVerticalScaling") {
		t.Fatalf("declaredFeatures %v lack InPlacePodLevelResourcesVerticalScaling", node.Status.DeclaredFeatures)
	}
	pod := n.pod("plr-resize", "sleep", "3600")
	pod.Spec.Containers[0].Name = "app"
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	pod.Spec.Resources = ptr.To(resources("100m", "200m", "32Mi", "64Mi"))
	pod = n.createPod(t, pod)
	pod = waitForPod(t, pod.Namespace, pod.Name, "Running and Ready", isPodReady)
	before := statusOf(pod, "app")
	podCgroup := filepath.Join(n.cgroupRoot, "kubepods", "burstable", "pod"+string(pod.UID))
	appCgroup := n.containerCgroup(t, before)
	checkCgroupFile(t, "cpu", podCgroup, "cpu.cfs_quota_us", "20000")
	checkCgroupFile(t, "memory", podCgroup, "memory.limit_in_bytes", fmt.Sprint(64<<20))
	// The container's limits are the pod's.
	checkCgroupFile(t, "cpu", appCgroup, "cpu.cfs_quota_us", "20000")
	checkCgroupFile(t, "memory", appCgroup, "memory.limit_in_bytes", fmt.Sprint(64<<20))

	want := resources("150m", "300m", "32Mi", "96Mi")
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"resources": want}})
	if err != nil {
		t.Fatal(err)
	}
	patched, err := env.cp.Client().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "resize")
	if err != nil {
		t.Fatalf("resize the pod-level resources of pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	pod = waitForPod(t, pod.Namespace, pod.Name, "resized", func(p *v1.Pod) bool {
		return p.Generation == patched.Generation && resizeDone(p) && p.Status.Resources != nil && equality.Semantic.DeepEqual(*p.Status.Resources, want)
	})
	if cs := statusOf(pod, "app"); cs.ContainerID != before.ContainerID || cs.RestartCount != 0 {
		t.Errorf("app: container %s restarts %d, want %s resized in place", cs.ContainerID, cs.RestartCount, before.ContainerID)
	}
	if got := pod.Status.AllocatedResources[v1.ResourceCPU]; got.Cmp(resource.MustParse("150m")) != 0 {
		t.Errorf("pod allocatedResources cpu %s, want 150m", got.String())
	}
	checkCgroupFile(t, "cpu", podCgroup, "cpu.cfs_quota_us", "30000")
	checkCgroupFile(t, "cpu", podCgroup, "cpu.shares", "153")
	checkCgroupFile(t, "memory", podCgroup, "memory.limit_in_bytes", fmt.Sprint(96<<20))
	checkCgroupFile(t, "cpu", appCgroup, "cpu.cfs_quota_us", "30000")
	checkCgroupFile(t, "memory", appCgroup, "memory.limit_in_bytes", fmt.Sprint(96<<20))
	waitForPodEvent(t, pod.Namespace, pod.Name, "ResizeStarted")
	waitForPodEvent(t, pod.Namespace, pod.Name, "ResizeCompleted")
	t.Logf("pod-level resize applied in place: status.resources %v, container %s kept", pod.Status.Resources, before.ContainerID)
}
