package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// TestStandaloneOnContainerd: the example agent with no kubeconfig (README's
// standalone mode) on containerd: the static pod of its --pod-manifest-path
// runs, the node API's read-only port lists it in /pods, the node never
// registers, and removing the manifest stops the pod and removes its
// containers and sandbox.
func TestStandaloneOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	const name = "ctr-standalone"
	ctx := t.Context()
	cgroupRoot := newCgroupRoot(t, name)
	c := startNodeContainerd(t, name)
	cri := dialCRI(t, c)
	const ns = "standalone"
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	manifestPath := filepath.Join(manifests, "web.yaml")
	writeManifest(t, manifestPath, staticManifest(ns, "web", "1"))

	ip := env.cp.AllocateNodeIP()
	ports, err := cluster.FreePorts(ip, 2)
	if err != nil {
		t.Fatal(err)
	}
	healthzPort, roPort := ports[0], ports[1]
	cfg, err := yaml.Marshal(map[string]any{
		"apiVersion":         "kubelet.config.k8s.io/v1beta1",
		"kind":               "KubeletConfiguration",
		"healthzBindAddress": ip,
		"healthzPort":        healthzPort,
		"address":            ip,
		"readOnlyPort":       roPort,
		"cgroupDriver":       "cgroupfs",
		"cgroupRoot":         cgroupRoot,
		"staticPodPath":      manifests,
		"fileCheckFrequency": "1s",
		"podLogsDir":         filepath.Join(dir, "pod-logs"),
		// As NewAgent's: the side-loaded images stay, swap is tolerated.
		"imageGCHighThresholdPercent": 100,
		"failSwapOn":                  false,
	})
	if err != nil {
		t.Fatal(err)
	}
	configPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	agent, err := cluster.NewCommandAgent(cluster.CommandAgentOptions{
		Name: name, IP: ip, Dir: filepath.Join(dir, "agent"),
		HealthzURL: fmt.Sprintf("http://%s/healthz", netJoin(ip, healthzPort)),
		Argv: []string{env.agent, "--config=" + configPath, "--hostname-override=" + name, "--node-ip=" + ip,
			"--container-runtime-endpoint=" + c.Endpoint, "--root-dir=" + filepath.Join(dir, "root"),
			"--container-logs-dir=" + filepath.Join(dir, "container-logs"), "--v=2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	startAgentNode(t, agent)

	web := "web-" + name
	running := waitForContainers(t, cri.Runtime, ns, web, "the static pod to run", func(cs []*runtimeapi.ContainerStatus) bool {
		return len(runningStatuses(cs)) == 1
	})
	t.Logf("static pod running %v after the agent started, with no API server", time.Since(start).Round(time.Millisecond))

	// The read-only port's /pods lists it, Running, with the container
	// the runtime runs.
	podsURL := fmt.Sprintf("http://%s/pods", netJoin(ip, roPort))
	var listed *v1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := getPodList(ctx, podsURL)
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			if p := &list.Items[i]; p.Namespace == ns && p.Name == web && p.Status.Phase == v1.PodRunning {
				listed = p
			}
		}
		return listed != nil, nil
	})
	if err != nil {
		t.Fatalf("%s never listed %s/%s Running: %v", podsURL, ns, web, err)
	}
	if len(listed.Status.ContainerStatuses) != 1 || listed.Status.ContainerStatuses[0].ContainerID != "containerd://"+running[0].Id {
		t.Errorf("/pods lists container statuses %+v, want the running container containerd://%s", listed.Status.ContainerStatuses, running[0].Id)
	}
	if _, err := env.cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Errorf("node %s registered: a standalone agent has no API server", name)
	}

	// Removing the manifest stops the pod: no container, no sandbox left.
	if err := os.Remove(manifestPath); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	waitForContainers(t, cri.Runtime, ns, web, "the pod's containers to go", func(cs []*runtimeapi.ContainerStatus) bool { return len(cs) == 0 })
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		resp, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			LabelSelector: map[string]string{labelPodNamespace: ns, labelPodName: web}}})
		return err == nil && len(resp.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("the pod's sandbox is still in the runtime %s after its manifest was removed", podTimeout)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := getPodList(ctx, podsURL)
		if err != nil {
			return false, nil
		}
		for _, p := range list.Items {
			if p.Namespace == ns && p.Name == web {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("%s still lists %s/%s after its manifest was removed", podsURL, ns, web)
	}
	t.Logf("manifest removed: pod stopped and gone from the runtime and /pods in %v", time.Since(removed).Round(time.Millisecond))
}

// getPodList GETs a kubelet API /pods URL.
func getPodList(ctx context.Context, url string) (*v1.PodList, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var list v1.PodList
	return &list, json.NewDecoder(resp.Body).Decode(&list)
}

func netJoin(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }
