package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// TestAgentUserNamespaces checks the user namespace wiring on fakecri: on
// a runtime whose default handler reports user namespaces, a pod with
// hostUsers: false is admitted, its containers get mode POD with 65536 IDs
// of the default range (kept in the pod directory's userns file) and
// idmapped mounts, and the
// file goes when the pod is deleted; on a runtime without them, the pod
// is admitted but its sandbox fails with the kubelet's
// FailedCreatePodSandBox message and nothing is created.
func TestAgentUserNamespaces(t *testing.T) {
	t.Run("supported", func(t *testing.T) {
		n := agenttest.Start(t, agenttest.Options{CRI: &fakecri.Options{
			CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS, PullAny: true,
			RuntimeHandlers: []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}}},
		}})
		ctx := agenttest.Context(t)
		n.WaitReady(ctx)
		pod := agenttest.Pod("userns", "busybox")
		pod.Spec.HostUsers = ptr.To(false)
		pod = n.CreatePod(ctx, pod)
		running := n.WaitForPod(ctx, pod, agenttest.PodRunningAndReady)
		_, id, _ := strings.Cut(running.Status.ContainerStatuses[0].ContainerID, "://")
		cfg := n.CRI.ContainerConfig(id)
		ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
		if ns.GetMode() != runtimeapi.NamespaceMode_POD || len(ns.GetUids()) != 1 || ns.GetUids()[0].GetLength() != 65536 ||
			ns.GetUids()[0].GetHostId() < 65536 || ns.GetUids()[0].GetHostId()%65536 != 0 {
			t.Fatalf("container user namespace %v, want mode POD with 65536 IDs of the default range", ns)
		}
		for _, m := range cfg.GetMounts() {
			if len(m.GetUidMappings()) != 1 || m.GetUidMappings()[0].GetHostId() != ns.GetUids()[0].GetHostId() {
				t.Errorf("mount %s not idmapped with the pod's mappings: %v", m.GetContainerPath(), m.GetUidMappings())
			}
		}
		file := filepath.Join(n.Config.RootDir, "pods", string(pod.UID), "userns")
		if b, err := os.ReadFile(file); err != nil || !strings.Contains(string(b), `"length":65536`) {
			t.Fatalf("the pod's userns file: %s, %v", b, err)
		}
		if err := n.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "the deleted pod's userns file removed", func() bool {
			_, err := os.Stat(file)
			return errors.Is(err, os.ErrNotExist)
		})
	})
	t.Run("not supported", func(t *testing.T) {
		n := agenttest.Start(t, agenttest.Options{})
		ctx := agenttest.Context(t)
		n.WaitReady(ctx)
		pod := agenttest.Pod("userns", "busybox")
		pod.Spec.HostUsers = ptr.To(false)
		pod = n.CreatePod(ctx, pod)
		const want = "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
		poll(ctx, t, "FailedCreatePodSandBox", func() bool {
			evs := podEvents(ctx, n.Client, pod, "FailedCreatePodSandBox")
			return len(evs) > 0 && evs[0].Message == want
		})
		if c := n.CRI.Calls("RunPodSandbox"); c != 0 {
			t.Errorf("%d sandboxes created for a pod the runtime cannot run in a user namespace", c)
		}
	})
}
