package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestUserNamespacesOnContainerd: on containerd 2 (runc reports user
// namespaces and idmapped mounts) the node reports userNamespaces on its
// runtime handlers; a pod with hostUsers: false runs in a user namespace
// of its own: its /proc/self/uid_map maps container IDs 0-65535 to a host
// range starting above 0, the agent kept that range in the pod
// directory's userns file (the kubelet's JSON), and its volumes are
// idmapped (root in the pod writes an emptyDir file owned by host root,
// reads its configMap). A second pod gets a disjoint range. The agent
// SIGKILLed and restarted restarts no container, keeps both pods' files
// unchanged, and gives a third pod a range disjoint from both, read back
// from the pod directories.
func TestUserNamespacesOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	n := newContainerdPodNode(t, "ctr-userns")
	waitForNode(t, n.name, "runtime handlers with user namespaces", readyTimeout, func(node *v1.Node) bool {
		for _, h := range node.Status.RuntimeHandlers {
			if h.Name == "" {
				return h.Features != nil && ptr.Deref(h.Features.UserNamespaces, false)
			}
		}
		return false
	})
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "userns-config", Namespace: n.ns}, Data: map[string]string{"key": "from-configmap"}}
	if _, err := env.cp.Client().CoreV1().ConfigMaps(n.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	first := n.runUsernsPod(t, "userns-a")
	second := n.runUsernsPod(t, "userns-b")
	if overlap(first.host, second.host) {
		t.Errorf("the second pod's range %d+65536 overlaps the first's %d+65536", second.host, first.host)
	}

	running := waitPods(t, n.ns, []string{first.pod.Name, second.pod.Name}, "Running and Ready", podTimeout, isPodReady)
	snap := snapshotContainers(running)
	n.agent.Kill()
	if err := n.agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []usernsPod{first, second} {
		if got := n.usernsFileHost(t, p.pod); got != p.host {
			t.Errorf("pod %s's userns file says %d after the agent's restart, want %d", p.pod.Name, got, p.host)
		}
	}
	third := n.runUsernsPod(t, "userns-c")
	if overlap(third.host, first.host) || overlap(third.host, second.host) {
		t.Errorf("the pod started after the agent's restart got %d+65536, overlapping the earlier pods' %d and %d", third.host, first.host, second.host)
	}
	after := waitPods(t, n.ns, []string{first.pod.Name, second.pod.Name}, "Running and Ready", podTimeout, isPodReady)
	if changed := compareContainers(snap, after); len(changed) > 0 {
		t.Errorf("containers restarted by the agent's restart:\n  %s", strings.Join(changed, "\n  "))
	}
	m, err := n.agent.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("kubelet_started_user_namespaced_pods_total", nil); got < 1 {
		t.Errorf("kubelet_started_user_namespaced_pods_total = %v after the restart, want the third pod counted", got)
	}
}

// usernsPod is a running pod with hostUsers: false and the first host ID
// of its user namespace.
type usernsPod struct {
	pod  *v1.Pod
	host uint32
}

func overlap(a, b uint32) bool {
	return max(a, b)-min(a, b) < 65536
}

// runUsernsPod runs a pod with hostUsers: false mounting an emptyDir and
// the userns-config config map, whose container prints its uid_map and
// gid_map, writes an emptyDir file as root and prints the config map's
// key. It checks the mapping (container IDs 0-65535 on a host range
// starting above 0, the same for groups, the one in the pod's userns
// file) and the volumes (the file is host root's on the node: the mount
// is idmapped; the key is readable) and returns the range's first ID.
func (n *podNode) runUsernsPod(t *testing.T, name string) usernsPod {
	t.Helper()
	pod := n.pod(name, "sh", "-c", `echo "uid_map=$(cat /proc/self/uid_map)"; echo "gid_map=$(cat /proc/self/gid_map)"; echo "id=$(id -u)"; `+
		`touch /data/written && echo data=ok; echo "cfg=$(cat /cfg/key)"; sleep 3600`)
	pod.Spec.HostUsers = ptr.To(false)
	pod.Spec.Volumes = []v1.Volume{
		{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "userns-config"}}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "cfg", MountPath: "/cfg"}}
	pod = n.createPod(t, pod)
	pod = waitForPod(t, pod.Namespace, pod.Name, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	line := func(prefix string) string {
		return strings.TrimPrefix(n.waitForLogLine(t, pod, "main", prefix, func(l string) bool { return strings.HasPrefix(l, prefix) }), prefix)
	}
	uidMap, gidMap := strings.Fields(line("uid_map=")), strings.Fields(line("gid_map="))
	if len(uidMap) != 3 || uidMap[0] != "0" || uidMap[2] != "65536" || strings.Join(uidMap, " ") != strings.Join(gidMap, " ") {
		t.Fatalf("pod %s's uid_map %q, gid_map %q; want one mapping of container IDs 0-65535, the same for groups", name, uidMap, gidMap)
	}
	host, err := strconv.ParseUint(uidMap[1], 10, 32)
	if err != nil || host == 0 {
		t.Fatalf("pod %s's uid_map maps to host ID %q, want a range of its own, not the node's", name, uidMap[1])
	}
	if id := line("id="); id != "0" {
		t.Errorf("pod %s runs as %s in its namespace, want root (0)", name, id)
	}
	if got := line("data="); got != "ok" {
		t.Errorf("pod %s could not write its emptyDir: %q", name, got)
	}
	if got := line("cfg="); got != "from-configmap" {
		t.Errorf("pod %s reads %q from its config map, want from-configmap", name, got)
	}
	if got := n.usernsFileHost(t, pod); got != uint32(host) {
		t.Errorf("pod %s's userns file says host ID %d, its uid_map %d", name, got, host)
	}
	written := filepath.Join(n.agent.Dir, "root", "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "data", "written")
	fi, err := os.Stat(written)
	if err != nil {
		t.Fatalf("pod %s's emptyDir file on the node: %v", name, err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
		t.Errorf("the file pod %s's root wrote in its emptyDir is owned by %d:%d on the node, want 0:0 (an idmapped mount)", name, st.Uid, st.Gid)
	}
	return usernsPod{pod: pod, host: uint32(host)}
}

// usernsFileHost reads pod's userns file in the agent's pod directory, the
// kubelet's format, and returns its host ID, checking the mapping is the
// same for users and groups, 65536 IDs from container ID 0.
func (n *podNode) usernsFileHost(t *testing.T, pod *v1.Pod) uint32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.agent.Dir, "root", "pods", string(pod.UID), "userns"))
	if err != nil {
		t.Fatalf("pod %s's userns file: %v", pod.Name, err)
	}
	type mapping struct {
		HostID      uint32 `json:"hostId"`
		ContainerID uint32 `json:"containerId"`
		Length      uint32 `json:"length"`
	}
	var f struct {
		UIDMappings []mapping `json:"uidMappings"`
		GIDMappings []mapping `json:"gidMappings"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("pod %s's userns file %s: %v", pod.Name, b, err)
	}
	if len(f.UIDMappings) != 1 || len(f.GIDMappings) != 1 || f.UIDMappings[0] != f.GIDMappings[0] || f.UIDMappings[0].ContainerID != 0 || f.UIDMappings[0].Length != 65536 {
		t.Fatalf("pod %s's userns file %s, want one mapping of 65536 IDs from container ID 0, the same for groups", pod.Name, b)
	}
	return f.UIDMappings[0].HostID
}
