package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// TestPodLevelNode runs examples/podsim, a node whose pods a pod-level
// backend simulates (agent.PodBackend), against the real control plane: the
// node registers and turns Ready with the backend's runtime version, the
// scheduler places a Deployment's pods on it and they turn Running and
// Ready (the Deployment available), a Job's pod Succeeds and the Job
// completes, and a deleted pod's object goes away.
func TestPodLevelNode(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := t.Context()
	src, err := cluster.LocateSource()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := cluster.BuildExample(ctx, src, "podsim", filepath.Join(env.dir, "bin"), nil)
	if err != nil {
		t.Fatal(err)
	}
	const name = "podsim-1"
	agent, err := env.cp.NewAgent(cluster.AgentOptions{
		Binary: bin, NodeName: name,
		// No CRI runtime: the endpoint is never dialled.
		RuntimeEndpoint: "unix:///nonexistent/podsim.sock",
		ExtraArgs:       []string{"--cgroups-per-qos=false"},
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	startAgentNode(t, agent)
	node := waitForNode(t, name, "Ready", readyTimeout, isReady)
	t.Logf("podsim node Ready %v after start", time.Since(start).Round(time.Millisecond))
	if v := node.Status.NodeInfo.ContainerRuntimeVersion; v != "podsim://0.1.0" {
		t.Errorf("containerRuntimeVersion = %q, want podsim://0.1.0", v)
	}
	ns := newNamespace(t, name)
	spec := v1.PodSpec{
		NodeSelector:                 map[string]string{v1.LabelHostname: name},
		AutomountServiceAccountToken: ptr.To(false),
		Containers:                   []v1.Container{{Name: "main", Image: "example.com/app:1"}},
	}

	labels := map[string]string{"app": "sim"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "sim", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	created := time.Now()
	if _, err := env.cp.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := env.cp.Kubectl(ctx, env.cp.AdminKubeconfig, "rollout", "status", "--namespace", ns, "deployment/sim", "--timeout="+podTimeout.String()); err != nil {
		t.Fatalf("kubectl rollout status: %v: %s", err, out)
	}
	t.Logf("deployment of 3 available %v after creation", time.Since(created).Round(time.Millisecond))
	pods, err := env.cp.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=sim"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !strings.HasPrefix(p.Status.PodIP, "10.88.") || p.Status.HostIP == "" || !isPodReady(p) {
			t.Errorf("pod %s: podIP %q hostIP %q ready %t\n%s", p.Name, p.Status.PodIP, p.Status.HostIP, isPodReady(p), describePod(t, p))
		}
		if cs, ok := mainStatus(p); !ok || !strings.HasPrefix(cs.ContainerID, "podsim://") || cs.State.Running == nil {
			t.Errorf("pod %s container: %+v", p.Name, cs)
		}
	}

	jobSpec := spec.DeepCopy()
	jobSpec.RestartPolicy = v1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"podsim.nodekit.io/run-seconds": "2"}},
				Spec:       *jobSpec,
			},
		},
	}
	if _, err := env.cp.Client().BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		j, err := env.cp.Client().BatchV1().Jobs(ns).Get(ctx, "once", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == v1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("job once did not complete: %v", err)
	}

	victim := pods.Items[0]
	if err := env.cp.Client().CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := env.cp.Client().CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("deleted pod %s still exists: %v", victim.Name, err)
	}
	t.Logf("deleted pod gone %v after the delete", time.Since(deleted).Round(time.Millisecond))
}
