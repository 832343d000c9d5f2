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

// TestContainerdRunsPodsAndTearsDownClean starts the harness containerd of
// each series, runs a pod with a busybox container on the pod network
// through the CRI (on containerd 2 with a CDI device, whose spec sets an
// environment variable), stops and restarts the daemon, and checks that
// Close leaves no process, mount, shim socket, CNI result or bridge behind.
func TestContainerdRunsPodsAndTearsDownClean(t *testing.T) {
	for _, series := range []ContainerdSeries{ContainerdSeries2, ContainerdSeries16} {
		t.Run("containerd-"+string(series), func(t *testing.T) {
			testContainerdRunsPodsAndTearsDownClean(t, series)
		})
	}
}

// cdiSpec is a CDI spec of one device, vendor.example/test=one, whose
// only edit is an environment variable.
const cdiSpec = `{
  "cdiVersion": "0.6.0",
  "kind": "vendor.example/test",
  "devices": [{"name": "one", "containerEdits": {"env": ["CDI_DEVICE=one"]}}]
}`

func testContainerdRunsPodsAndTearsDownClean(t *testing.T, series ContainerdSeries) {
	if err := CheckContainerdSeries(series); err != nil {
		requireOrSkip(t, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	c, err := StartContainerd(ctx, ContainerdOptions{Series: series, Log: testLog{t}})
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
	if wantPrefix := map[ContainerdSeries]string{ContainerdSeries2: "v2.", ContainerdSeries16: "1.6."}[series]; name != "containerd" || !strings.HasPrefix(version, wantPrefix) {
		t.Fatalf("CRI version = %q %q, want containerd and %s*", name, version, wantPrefix)
	}
	var cdiDevices []*runtimeapi.CDIDevice
	if series == ContainerdSeries2 {
		if err := os.WriteFile(filepath.Join(c.CDISpecDir, "test.json"), []byte(cdiSpec), 0o644); err != nil {
			t.Fatal(err)
		}
		cdiDevices = []*runtimeapi.CDIDevice{{Name: "vendor.example/test=one"}}
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
			Metadata:   &runtimeapi.ContainerMetadata{Name: "sleep"},
			Image:      &runtimeapi.ImageSpec{Image: BusyboxImage},
			Command:    []string{"sleep", "3600"},
			LogPath:    "sleep.log",
			CDIDevices: cdiDevices,
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
	if cdiDevices != nil {
		env, err := rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctr.ContainerId, Cmd: []string{"sh", "-c", "echo $CDI_DEVICE"}, Timeout: 30})
		if err != nil || strings.TrimSpace(string(env.GetStdout())) != "one" {
			t.Fatalf("CDI device's environment in the container: %v, stdout %q, want one", err, env.GetStdout())
		}
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
