package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseFlagsDefaultsMatchKubelet(t *testing.T) {
	cfg, err := ParseFlags(klog.Background(), []string{"--hostname-override=Node-A"})
	if err != nil {
		t.Fatal(err)
	}
	kc := cfg.Kubelet
	checks := []struct {
		name      string
		got, want any
	}{
		{"nodeName lower-cased", cfg.NodeName, "node-a"},
		{"nodeStatusUpdateFrequency", kc.NodeStatusUpdateFrequency.Duration, 10 * time.Second},
		{"nodeStatusReportFrequency", kc.NodeStatusReportFrequency.Duration, 5 * time.Minute},
		{"nodeLeaseDurationSeconds", kc.NodeLeaseDurationSeconds, int32(40)},
		{"maxPods", kc.MaxPods, int32(110)},
		{"cgroupDriver", kc.CgroupDriver, "cgroupfs"},
		{"containerRuntimeEndpoint", kc.ContainerRuntimeEndpoint, "unix:///run/containerd/containerd.sock"},
		{"healthz", healthzAddress(cfg), "127.0.0.1:10248"},
		{"anonymous auth", *kc.Authentication.Anonymous.Enabled, false},
		{"authorization mode", string(kc.Authorization.Mode), "Webhook"},
		{"evictionHard memory", kc.EvictionHard["memory.available"], "100Mi"},
		{"kubeAPIQPS", *kc.KubeAPIQPS, int32(50)},
		{"contentType", kc.ContentType, "application/vnd.kubernetes.protobuf"},
		{"rootDir", cfg.RootDir, "/var/lib/kubelet"},
		{"certDir", cfg.CertDir, "/var/lib/kubelet/pki"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestParseFlagsOverrideConfigFile(t *testing.T) {
	file := writeFile(t, "kubelet.yaml", `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
nodeStatusUpdateFrequency: 4s
maxPods: 20
containerRuntimeEndpoint: unix:///from/file.sock
healthzPort: 12345
registerWithTaints:
- key: from-file
  effect: NoSchedule
`)
	cfg, err := ParseFlags(klog.Background(), []string{
		"--config=" + file,
		"--hostname-override=n1",
		"--max-pods=30",
		"--node-ip=127.0.0.7",
		"--node-labels=a=b,c=d",
		"--register-with-taints=dedicated=infra:NoExecute",
		"--pod-infra-container-image=ignored:1",
	})
	if err != nil {
		t.Fatal(err)
	}
	kc := cfg.Kubelet
	if kc.MaxPods != 30 {
		t.Errorf("maxPods = %d, want the flag's 30", kc.MaxPods)
	}
	if kc.ContainerRuntimeEndpoint != "unix:///from/file.sock" {
		t.Errorf("runtime endpoint = %q, want the file's", kc.ContainerRuntimeEndpoint)
	}
	if kc.NodeStatusUpdateFrequency.Duration != 4*time.Second || kc.NodeStatusReportFrequency.Duration != 4*time.Second {
		t.Errorf("update/report = %v/%v, want 4s/4s (report follows an explicit update frequency)",
			kc.NodeStatusUpdateFrequency.Duration, kc.NodeStatusReportFrequency.Duration)
	}
	if *kc.HealthzPort != 12345 {
		t.Errorf("healthzPort = %d, want the file's 12345", *kc.HealthzPort)
	}
	if len(kc.RegisterWithTaints) != 1 || kc.RegisterWithTaints[0] != (v1.Taint{Key: "dedicated", Value: "infra", Effect: v1.TaintEffectNoExecute}) {
		t.Errorf("taints = %v, want the flag's one taint", kc.RegisterWithTaints)
	}
	if len(cfg.NodeIPs) != 1 || cfg.NodeIPs[0].String() != "127.0.0.7" {
		t.Errorf("node IPs = %v", cfg.NodeIPs)
	}
	if cfg.NodeLabels["a"] != "b" || cfg.NodeLabels["c"] != "d" {
		t.Errorf("node labels = %v", cfg.NodeLabels)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	unknownField := writeFile(t, "unknown.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnotAField: 1\nmaxPods: 7\n")
	cfg, err := ParseFlags(klog.Background(), []string{"--config=" + unknownField, "--hostname-override=n"})
	if err != nil {
		t.Fatalf("a file with an unknown field must load leniently, got %v", err)
	}
	if cfg.Kubelet.MaxPods != 7 {
		t.Errorf("maxPods = %d, want 7 from the lenient decode", cfg.Kubelet.MaxPods)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing file", []string{"--config=/does/not/exist"}, "read kubelet config file"},
		{"wrong kind", []string{"--config=" + writeFile(t, "kind.yaml", "apiVersion: v1\nkind: Pod\n")}, "decode kubelet config file"},
		{"malformed yaml", []string{"--config=" + writeFile(t, "bad.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: [\n")}, "decode kubelet config file"},
		{"empty file", []string{"--config=" + writeFile(t, "empty.yaml", "\n")}, "is empty"},
		{"bad node ip", []string{"--node-ip=not-an-ip"}, "not an IP address"},
		{"two ipv4", []string{"--node-ip=10.0.0.1,10.0.0.2"}, "at most one IPv4"},
		{"bad taint effect", []string{"--register-with-taints=a=b:Sometimes"}, "effect"},
		{"bad label", []string{"--node-labels=bad key=v"}, "node label key"},
		{"bad cgroup driver", []string{"--cgroup-driver=magic"}, "cgroupDriver"},
		{"bad node name", []string{"--hostname-override=Not_Valid"}, "node name"},
		{"unknown flag", []string{"--no-such-flag"}, "unknown flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--hostname-override=n"}, tc.args...)
			_, err := ParseFlags(klog.Background(), args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestFlagUsageListsKubeletFlags(t *testing.T) {
	usage := FlagUsage()
	for _, f := range []string{"--kubeconfig", "--config", "--node-ip", "--container-runtime-endpoint", "--register-with-taints", "--v "} {
		if !strings.Contains(usage, f) {
			t.Errorf("usage lacks %s", f)
		}
	}
}

// TestGCAndLogFlags: the kubelet's container and image GC and log rotation
// flags reach the modules' options with the kubelet's defaults, and bad
// values are refused with the kubelet's messages.
func TestGCAndLogFlags(t *testing.T) {
	cfg, err := ParseFlags(klog.Background(), []string{"--hostname-override=n"})
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.ContainerGCPolicy(); p.MinAge != 0 || p.MaxPerPodContainer != 1 || p.MaxContainers != -1 {
		t.Errorf("default container GC policy %+v, want the kubelet's 0, 1, -1", p)
	}
	ig := cfg.ImageGCOptions()
	if *ig.HighThresholdPercent != 85 || *ig.LowThresholdPercent != 80 || *ig.MinAge != 2*time.Minute || ig.MaxAge != 0 || ig.PinnedImages != nil {
		t.Errorf("default image GC options %+v", ig)
	}
	lr, err := cfg.LogRotatorOptions()
	if err != nil || lr.MaxSize != 10<<20 || lr.MaxFiles != 5 || lr.Workers != 1 || lr.MonitorInterval != 10*time.Second {
		t.Errorf("default log rotation options %+v, %v", lr, err)
	}

	cfg, err = ParseFlags(klog.Background(), []string{"--hostname-override=n",
		"--minimum-container-ttl-duration=1m", "--maximum-dead-containers-per-container=3", "--maximum-dead-containers=50",
		"--image-gc-high-threshold=60", "--image-gc-low-threshold=30", "--minimum-image-ttl-duration=5m",
		"--pod-infra-container-image=registry.k8s.io/pause:3.10", "--container-log-max-size=1Mi", "--container-log-max-files=2"})
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.ContainerGCPolicy(); p.MinAge != time.Minute || p.MaxPerPodContainer != 3 || p.MaxContainers != 50 {
		t.Errorf("container GC policy %+v", p)
	}
	ig = cfg.ImageGCOptions()
	if *ig.HighThresholdPercent != 60 || *ig.LowThresholdPercent != 30 || *ig.MinAge != 5*time.Minute || len(ig.PinnedImages) != 1 {
		t.Errorf("image GC options %+v", ig)
	}
	if lr, _ := cfg.LogRotatorOptions(); lr.MaxSize != 1<<20 || lr.MaxFiles != 2 {
		t.Errorf("log rotation options %+v", lr)
	}

	// A zero given on the command line is not taken for "unset".
	cfg, err = ParseFlags(klog.Background(), []string{"--hostname-override=n", "--minimum-image-ttl-duration=0s"})
	if err != nil || *cfg.ImageGCOptions().MinAge != 0 {
		t.Errorf("--minimum-image-ttl-duration=0s gives a minimum age of %v (%v), want 0", *cfg.ImageGCOptions().MinAge, err)
	}

	for _, tc := range []struct{ args, want string }{
		{"--image-gc-low-threshold=90", "must be less than imageGCHighThresholdPercent"},
		{"--image-gc-high-threshold=101", "must be between 0 and 100"},
		{"--container-log-max-files=1", "containerLogMaxFiles must be greater than 1"},
		{"--container-log-max-size=lots", "containerLogMaxSize"},
		{"--minimum-container-ttl-duration=-1s", "must not be negative"},
	} {
		if _, err := ParseFlags(klog.Background(), []string{"--hostname-override=n", tc.args}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}
