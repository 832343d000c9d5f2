package runtime

import (
	"context"
	"testing"

	"github.com/nodekit/nodekit/podstate"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func reqs(cpuReq, cpuLim, memReq, memLim string) v1.ResourceRequirements {
	r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	set := func(l v1.ResourceList, n v1.ResourceName, v string) {
		if v != "" {
			l[n] = resource.MustParse(v)
		}
	}
	set(r.Requests, v1.ResourceCPU, cpuReq)
	set(r.Limits, v1.ResourceCPU, cpuLim)
	set(r.Requests, v1.ResourceMemory, memReq)
	set(r.Limits, v1.ResourceMemory, memLim)
	return r
}

// resizePod returns a running pod whose containers run with actuated and
// are allocated allocated (by container name), and its runtime status.
func resizePod(actuated, allocated map[string]v1.ResourceRequirements, policies map[string][]v1.ContainerResizePolicy) (*v1.Pod, *podstate.PodStatus) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	st := &podstate.PodStatus{ID: "u", Sandboxes: []*podstate.SandboxStatus{{ID: "sb", Ready: true, IP: "10.0.0.1", NetworkReported: true}}, IPs: []string{"10.0.0.1"}}
	for _, name := range []string{"c1", "c2", "c3"} {
		a, ok := allocated[name]
		if !ok {
			continue
		}
		c := v1.Container{Name: name, Image: "busybox", Resources: a, ResizePolicy: policies[name]}
		pod.Spec.Containers = append(pod.Spec.Containers, c)
		r := actuated[name]
		st.Containers = append(st.Containers, &podstate.ContainerStatus{ID: "id-" + name, Name: name, State: podstate.ContainerStateRunning,
			SandboxID: "sb", Hash: HashContainer(&c), Resources: &r})
	}
	return pod, st
}

func updateIDs(list []containerToUpdate) []string {
	var out []string
	for _, u := range list {
		out = append(out, u.id)
	}
	return out
}

// TestComputeResizeActions: running containers whose actuated resources
// differ from their allocation are resized in place, per resource, with
// decreases first; a changed resource whose resizePolicy is
// RestartContainer restarts the container instead; unchanged containers are
// left alone.
func TestComputeResizeActions(t *testing.T) {
	ctx := context.Background()
	actuated := map[string]v1.ResourceRequirements{
		"c1": reqs("100m", "200m", "64Mi", "128Mi"),
		"c2": reqs("100m", "200m", "64Mi", "128Mi"),
		"c3": reqs("100m", "200m", "64Mi", "128Mi"),
	}
	allocated := map[string]v1.ResourceRequirements{
		"c1": reqs("200m", "400m", "64Mi", "256Mi"), // cpu and memory up
		"c2": reqs("50m", "100m", "64Mi", "64Mi"),   // cpu and memory down
		"c3": reqs("100m", "200m", "64Mi", "128Mi"), // unchanged
	}
	pod, st := resizePod(actuated, allocated, nil)
	a := computePodActions(ctx, pod, st, nil)
	if a.killPod || len(a.containersToKill) != 0 || len(a.containersToStart) != 0 || !a.resizePod {
		t.Fatalf("actions %+v, want in-place updates only", a)
	}
	for _, name := range []v1.ResourceName{v1.ResourceMemory, v1.ResourceCPU} {
		if got := updateIDs(a.containersToUpdate[name]); len(got) != 2 || got[0] != "id-c2" || got[1] != "id-c1" {
			t.Errorf("%s updates %v, want the decrease (c2) before the increase (c1)", name, got)
		}
	}

	// Only the request changes: still an update (memory requests are not
	// in cgroups, but are actuated).
	pod, st = resizePod(map[string]v1.ResourceRequirements{"c1": reqs("100m", "", "64Mi", "")},
		map[string]v1.ResourceRequirements{"c1": reqs("100m", "", "96Mi", "")}, nil)
	a = computePodActions(ctx, pod, st, nil)
	if got := updateIDs(a.containersToUpdate[v1.ResourceMemory]); len(got) != 1 || len(a.containersToUpdate[v1.ResourceCPU]) != 0 {
		t.Errorf("memory request change: updates %v", a.containersToUpdate)
	}

	// RestartContainer for memory: a memory change restarts, a cpu change
	// alone does not.
	policies := map[string][]v1.ContainerResizePolicy{"c1": {
		{ResourceName: v1.ResourceCPU, RestartPolicy: v1.NotRequired},
		{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer},
	}}
	pod, st = resizePod(map[string]v1.ResourceRequirements{"c1": reqs("100m", "100m", "64Mi", "64Mi")},
		map[string]v1.ResourceRequirements{"c1": reqs("100m", "100m", "96Mi", "96Mi")}, policies)
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	a = computePodActions(ctx, pod, st, nil)
	k, killed := a.containersToKill["id-c1"]
	if !killed || k.message != "Container c1 resize requires restart" || len(a.containersToStart) != 1 || len(a.containersToUpdate) != 0 || a.killPod {
		t.Errorf("memory resize with RestartContainer (restartPolicy Never): %+v", a)
	}
	pod, st = resizePod(map[string]v1.ResourceRequirements{"c1": reqs("100m", "100m", "64Mi", "64Mi")},
		map[string]v1.ResourceRequirements{"c1": reqs("200m", "200m", "64Mi", "64Mi")}, policies)
	a = computePodActions(ctx, pod, st, nil)
	if len(a.containersToKill) != 0 || len(a.containersToUpdate[v1.ResourceCPU]) != 1 {
		t.Errorf("cpu resize with NotRequired: %+v", a)
	}

	// Nothing actuated is known (a container the agent did not create):
	// no resize is guessed.
	pod, st = resizePod(nil, map[string]v1.ResourceRequirements{"c1": reqs("200m", "", "", "")}, nil)
	st.Containers[0].Resources = nil
	if a = computePodActions(ctx, pod, st, nil); a.resizePod {
		t.Errorf("unknown actuated resources: %+v", a)
	}
}

// TestPodResourceChange: the pod's aggregate grows or shrinks per
// resource; a container without a limit leaves the pod unlimited.
func TestPodResourceChange(t *testing.T) {
	pod := func(rs ...v1.ResourceRequirements) *v1.Pod {
		p := &v1.Pod{}
		for _, r := range rs {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Resources: r})
		}
		return p
	}
	for _, tc := range []struct {
		name           string
		before, after  *v1.Pod
		res            v1.ResourceName
		grows, shrinks bool
	}{
		{"limit up", pod(reqs("", "", "", "64Mi")), pod(reqs("", "", "", "128Mi")), v1.ResourceMemory, true, false},
		{"limit down", pod(reqs("", "200m", "", "")), pod(reqs("", "100m", "", "")), v1.ResourceCPU, false, true},
		{"request up, limit down", pod(reqs("100m", "400m", "", "")), pod(reqs("200m", "300m", "", "")), v1.ResourceCPU, true, true},
		{"limit added (was unlimited)", pod(reqs("100m", "", "", "")), pod(reqs("100m", "200m", "", "")), v1.ResourceCPU, false, true},
		{"one container unlimited", pod(reqs("", "", "", "64Mi"), reqs("", "", "", "")), pod(reqs("", "", "", "128Mi"), reqs("", "", "", "")), v1.ResourceMemory, false, false},
		{"unchanged", pod(reqs("100m", "", "", "")), pod(reqs("100m", "", "", "")), v1.ResourceCPU, false, false},
	} {
		g, s := podResourceChange(tc.before, tc.after, tc.res)
		if g != tc.grows || s != tc.shrinks {
			t.Errorf("%s: grows %v shrinks %v, want %v %v", tc.name, g, s, tc.grows, tc.shrinks)
		}
	}
}
