package agent

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// kubeadmConfig is the KubeletConfiguration kubeadm v1.37 writes to
// /var/lib/kubelet/config.yaml, zero durations and all.
const kubeadmConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
`

// kubeadmArgs is the command line systemd builds from kubeadm's drop-in
// (10-kubeadm.conf: $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS
// $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS), with the flags kubeadm
// writes to /var/lib/kubelet/kubeadm-flags.env.
func kubeadmArgs(config string) []string {
	return []string{
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=" + config,
		"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
		"--pod-infra-container-image=registry.k8s.io/pause:3.10.1",
		"--node-ip=10.0.0.10", "--hostname-override=CP-1", "--cloud-provider=external",
		"--provider-id=kind://docker/kind/cp-1", "--node-labels=node-role.example/worker=",
	}
}

// TestKubeadmCommandLine: the agent starts with exactly the files and
// flags kubeadm writes for the kubelet, acts on each, and names the ones
// it does not implement.
func TestKubeadmCommandLine(t *testing.T) {
	file := writeFile(t, "config.yaml", kubeadmConfig)
	logger, lines := logLines()
	cfg, err := ParseFlags(logger, kubeadmArgs(file))
	if err != nil {
		t.Fatal(err)
	}
	// nodekit implements every setting kubeadm gives.
	if len(*lines) != 0 {
		t.Errorf("logged as not implemented:\n%s", strings.Join(*lines, "\n"))
	}
	kc := &cfg.Kubelet
	checks := []struct {
		name      string
		got, want any
	}{
		{"kubeconfig", cfg.KubeconfigPath, "/etc/kubernetes/kubelet.conf"},
		{"bootstrap kubeconfig", cfg.BootstrapOptions().BootstrapKubeconfigPath, "/etc/kubernetes/bootstrap-kubelet.conf"},
		{"cert dir", cfg.BootstrapOptions().CertDir, "/var/lib/kubelet/pki"},
		{"node name", cfg.NodeName, "cp-1"},
		{"node IPs", len(cfg.NodeIPs) == 1 && cfg.NodeIPs[0].String() == "10.0.0.10", true},
		{"runtime endpoint", kc.ContainerRuntimeEndpoint, "unix:///var/run/containerd/containerd.sock"},
		{"sandbox image kept", cfg.PodInfraContainerImage, "registry.k8s.io/pause:3.10.1"},
		{"static pods", kc.StaticPodPath, "/etc/kubernetes/manifests"},
		{"client CA", kc.Authentication.X509.ClientCAFile, "/etc/kubernetes/pki/ca.crt"},
		{"cgroup driver", kc.CgroupDriver, "systemd"},
		{"sync frequency defaulted", kc.SyncFrequency.Duration.String(), "1m0s"},
		{"cloud provider", cfg.CloudProvider, "external"},
		{"rotation", cfg.Kubelet.RotateCertificates && cfg.RotationOptions().CertDir == "/var/lib/kubelet/pki", true},
		{"provider ID", kc.ProviderID, "kind://docker/kind/cp-1"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	st := cfg.StatusOptions(nil)
	if !st.ExternalCloudProvider || st.ProviderID != "kind://docker/kind/cp-1" || st.NoRegister {
		t.Errorf("status options: external cloud provider %v, providerID %q, no registration %v", st.ExternalCloudProvider, st.ProviderID, st.NoRegister)
	}
}

// TestRegisterNodeFalse: registerNode false leaves the Node's creation to
// someone else, and registerWithTaints with it, as the kubelet.
func TestRegisterNodeFalse(t *testing.T) {
	cfg, err := ParseFlags(klog.Background(), []string{"--hostname-override=n", "--register-node=false", "--register-with-taints=a=b:NoSchedule"})
	if err != nil {
		t.Fatal(err)
	}
	st := cfg.StatusOptions(nil)
	if !st.NoRegister || len(st.Taints) != 0 || st.ExternalCloudProvider {
		t.Errorf("status options: no registration %v, taints %v, external cloud provider %v; want true, none, false", st.NoRegister, st.Taints, st.ExternalCloudProvider)
	}
	cfg, err = ParseFlags(klog.Background(), []string{"--hostname-override=n", "--register-with-taints=a=b:NoSchedule"})
	if err != nil {
		t.Fatal(err)
	}
	if st := cfg.StatusOptions(nil); st.NoRegister || !reflect.DeepEqual(st.Taints, []v1.Taint{{Key: "a", Value: "b", Effect: v1.TaintEffectNoSchedule}}) {
		t.Errorf("by default: no registration %v, taints %v", st.NoRegister, st.Taints)
	}
}

// TestVersionFlag: --version (and --version=raw) answer ErrVersion before
// anything else is checked, and the line printed is the kubelet's;
// --version=false runs the agent.
func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"--version=raw"}, {"--version=true", "--config=/does/not/exist"}} {
		if _, err := ParseFlags(klog.Background(), args); !errors.Is(err, ErrVersion) {
			t.Errorf("ParseFlags(%q) = %v, want ErrVersion", args, err)
		}
	}
	if _, err := ParseFlags(klog.Background(), []string{"--version=false", "--hostname-override=n"}); err != nil {
		t.Errorf("--version=false: %v", err)
	}
	if got := VersionLine(); got != "Kubernetes v1.37.2" {
		t.Errorf("VersionLine() = %q, want the kubelet's %q", got, "Kubernetes v1.37.2")
	}
	if !strings.Contains(FlagUsage(), "--version") {
		t.Error("the usage does not list --version")
	}
}
