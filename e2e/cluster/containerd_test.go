package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestContainerdRunsPodsAndTearsDownClean starts the harness containerd,
// runs a pod with a busybox container on the pod network through the CRI,
// stops and restarts the daemon, and checks that Close leaves no process,
// mount, shim socket, CNI result or bridge behind.
func TestContainerdRunsPodsAndTearsDownClean(t *testing.T) {
	if err := CheckContainerd(); err != nil {
		requireOrSkip(t, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c, err := StartContainerd(ctx, ContainerdOptions{Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = c.Close(context.Background())
		}
	})

	name, version, err := c.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if name != "containerd" || version == "" {
		t.Fatalf("CRI version = %q %q, want containerd and a version", name, version)
	}

	conn, rs, err := c.dialCRI()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	logDir := filepath.Join(c.Dir, "pod-logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sbConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "harness", Namespace: "default", Uid: "harness-uid"},
		LogDirectory: logDir,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	sb, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbConfig})
	if err != nil {
		t.Fatalf("run pod sandbox: %v\n%s", err, LogTail(c.LogPath, 30))
	}
	sbStatus, err := rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})
	if err != nil {
		t.Fatal(err)
	}
	podIP := sbStatus.GetStatus().GetNetwork().GetIp()
	if podIP == "" || !strings.HasPrefix(podIP, strings.TrimSuffix(c.PodSubnet, "0/24")) {
		t.Fatalf("pod IP %q is not in the pod subnet %s", podIP, c.PodSubnet)
	}
	ctr, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sb.PodSandboxId,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"},
			Image:    &runtimeapi.ImageSpec{Image: BusyboxImage},
			Command:  []string{"sleep", "3600"},
			LogPath:  "sleep.log",
		},
		SandboxConfig: sbConfig,
	})
	if err != nil {
		t.Fatalf("create container: %v", err)
	}
	if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatalf("start container: %v", err)
	}
	exec, err := rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctr.ContainerId, Cmd: []string{"sh", "-c", "echo hello from $(hostname)"}, Timeout: 30})
	if err != nil || exec.ExitCode != 0 || !strings.Contains(string(exec.Stdout), "hello from") {
		t.Fatalf("exec in container: %v, exit %d, stdout %q stderr %q", err, exec.GetExitCode(), exec.GetStdout(), exec.GetStderr())
	}

	// Stopping the daemon leaves the container running; a restart finds it.
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if c.Running() {
		t.Fatal("containerd still running after Stop")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		st, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.ContainerId})
		if err != nil {
			return false, nil
		}
		return st.Status.State == runtimeapi.ContainerState_CONTAINER_RUNNING, nil
	})
	if err != nil {
		t.Fatalf("container not running after containerd restart: %v", err)
	}

	shimSocket := shimSocketPath(c.Socket, criNamespace, sb.PodSandboxId)
	if _, err := os.Stat(shimSocket); err != nil {
		t.Fatalf("shim socket not where expected: %v", err)
	}
	closed = true
	if err := c.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	procs, err := listProcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if strings.Contains(strings.Join(p.args, " "), c.Dir) {
			t.Errorf("process %d survived Close: %v", p.pid, p.args)
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), c.Dir) {
		t.Errorf("mounts under %s survived Close", c.Dir)
	}
	for _, leftover := range []string{shimSocket, c.Dir, "/sys/class/net/" + c.bridge} {
		if _, err := os.Lstat(leftover); err == nil {
			t.Errorf("%s survived Close", leftover)
		}
	}
	if results, _ := filepath.Glob(filepath.Join(cniResultsDir, c.network+"-*")); len(results) > 0 {
		t.Errorf("CNI results survived Close: %v", results)
	}
}
