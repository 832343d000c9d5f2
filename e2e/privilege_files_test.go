package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestAgentFileModes runs a node on fakecri with its serving certificate
// requested through the CSR API (--rotate-server-certificates, approved
// as a cluster's approver would) and a pod with a ConfigMap volume, then
// checks the modes of everything the agent wrote under its root directory
// (TestGracefulShutdownAndFiles does the same on containerd, without a
// serving certificate): the issued key and certificate 0600 in a 0700
// directory, the pod directories closed to others, nothing writable by
// group or others. The client certificate is the harness's (the agent does
// not implement --bootstrap-kubeconfig, so it writes none). It prints the
// modes it found.
func TestAgentFileModes(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := t.Context()
	n := newRelNode(t, "priv-files", relOptions{fake: true, extraArgs: []string{"--rotate-server-certificates"}})
	approver := &apiNode{name: n.name, ip: n.agent.IP}
	approverCtx, stopApprover := context.WithCancel(context.Background())
	approverDone := make(chan struct{})
	go func() {
		defer close(approverDone)
		approver.approveServingCSRs(approverCtx, t)
	}()
	defer func() {
		stopApprover()
		<-approverDone
	}()

	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: n.ns}, Data: map[string]string{"a": "1"}}
	if _, err := env.cp.Client().CoreV1().ConfigMaps(n.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := n.pod("files", sleeper...)
	pod.Spec.Volumes = []v1.Volume{{Name: "settings", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "settings"},
	}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "settings", MountPath: "/settings"}}
	if _, err := env.cp.Client().CoreV1().Pods(n.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, n.ns, []string{"files"}, "Running", podTimeout, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	root := filepath.Join(n.agent.Dir, "root")
	current := filepath.Join(root, "pki", "kubelet-server-current.pem")
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(current)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no serving certificate issued through the CSR API at %s: %v", current, err)
	}
	approver.approvedMu.Lock()
	approved := len(approver.approved)
	approver.approvedMu.Unlock()

	modes, problems := checkModes(root)
	for _, p := range problems {
		t.Error(p)
	}
	for path, want := range map[string]os.FileMode{current: 0o600, filepath.Dir(current): 0o700} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
		} else if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %04o, want %04o", path, fi.Mode().Perm(), want)
		}
	}
	t.Logf("%d serving CSRs approved, certificate stored %s after the pod ran; modes under %s: %s", approved, time.Since(start).Round(100*time.Millisecond), root, modes)
}
