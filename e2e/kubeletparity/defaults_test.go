package kubeletparity

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	kubeletdefaults "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent"
)

// semantic compares quantities by value, as the kubelet's own tests do.
var semantic = cmp.Comparer(func(a, b kubeletconfig.KubeletConfiguration) bool {
	return equality.Semantic.DeepEqual(a, b)
})

// diff reports the fields in which want (the kubelet's) and got (nodekit's)
// differ, one line each, or "" when they do not.
func diff(want, got *kubeletconfig.KubeletConfiguration) string {
	if equality.Semantic.DeepEqual(want, got) {
		return ""
	}
	return cmp.Diff(want, got)
}

// TestSetDefaultsMatchesKubelet defaults the same configurations with
// agent.SetDefaults and the kubelet's SetDefaults_KubeletConfiguration and
// requires every field to agree: the empty configuration, and ones whose
// set fields steer other defaults.
func TestSetDefaultsMatchesKubelet(t *testing.T) {
	for _, tc := range []struct {
		name string
		kc   kubeletconfig.KubeletConfiguration
	}{
		{"empty", kubeletconfig.KubeletConfiguration{}},
		{"update frequency set: report frequency follows", kubeletconfig.KubeletConfiguration{
			NodeStatusUpdateFrequency: metav1.Duration{Duration: 4 * time.Second},
		}},
		{"both frequencies set", kubeletconfig.KubeletConfiguration{
			NodeStatusUpdateFrequency: metav1.Duration{Duration: 4 * time.Second},
			NodeStatusReportFrequency: metav1.Duration{Duration: time.Minute},
		}},
		{"parallel image pulls: not serialized", kubeletconfig.KubeletConfiguration{MaxParallelImagePulls: ptr.To[int32](5)}},
		{"one parallel image pull: serialized", kubeletconfig.KubeletConfiguration{MaxParallelImagePulls: ptr.To[int32](1)}},
		{"negative pod pids limit", kubeletconfig.KubeletConfiguration{PodPidsLimit: ptr.To[int64](-7)}},
		{"gated defaults off", kubeletconfig.KubeletConfiguration{FeatureGates: map[string]bool{
			"KubeletCrashLoopBackOffMax": false, "KubeletEnsureSecretPulledImages": false,
		}}},
		{"set fields kept", kubeletconfig.KubeletConfiguration{
			MaxPods:                ptrValue[int32](7),
			CgroupDriver:           "systemd",
			Authorization:          kubeletconfig.KubeletAuthorization{Mode: kubeletconfig.KubeletAuthorizationModeAlwaysAllow},
			HealthzPort:            ptr.To[int32](0),
			EnforceNodeAllocatable: []string{},
			EvictionHard:           map[string]string{"memory.available": "1Gi"},
			SerializeImagePulls:    ptr.To(false),
			RegisterNode:           ptr.To(false),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, got := tc.kc.DeepCopy(), tc.kc.DeepCopy()
			kubeletdefaults.SetDefaults_KubeletConfiguration(want)
			agent.SetDefaults(got)
			if d := diff(want, got); d != "" {
				t.Errorf("agent.SetDefaults differs from the kubelet's defaults (-kubelet +nodekit):\n%s", d)
			}
		})
	}
}

func ptrValue[T any](v T) T { return v }

// TestCommandLineDefaultsMatchKubelet compares the configuration of an agent
// run with flags only (no --config) with the kubelet's for the same command
// line: the kubelet keeps its older command-line defaults then, but for the
// insecure ones (anonymous access, no webhook authentication, AlwaysAllow,
// the read-only port), where nodekit keeps the secure v1beta1 defaults.
func TestCommandLineDefaultsMatchKubelet(t *testing.T) {
	internal, err := options.NewKubeletConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	want := toV1beta1(t, internal)
	want.Authentication.Anonymous.Enabled = ptr.To(false)
	want.Authentication.Webhook.Enabled = ptr.To(true)
	want.Authorization.Mode = kubeletconfig.KubeletAuthorizationModeWebhook
	want.ReadOnlyPort = 0
	cfg, err := agent.ParseFlags(klog.Background(), []string{"--hostname-override=n"})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, asKubeletRuns(t, &cfg.Kubelet)); d != "" {
		t.Errorf("the agent's configuration without --config differs from the kubelet's (-kubelet +nodekit):\n%s", d)
	}
}

// TestConfigFileDefaultsMatchKubelet loads the same configuration files as
// the kubelet does (decode, default) and compares the results; the
// kubelet's defaulting of evictionHard on load is in an unexported function
// of cmd/kubelet/app, so the expected thresholds are written out here.
func TestConfigFileDefaultsMatchKubelet(t *testing.T) {
	for _, tc := range []struct {
		name, file   string
		evictionHard map[string]string
	}{
		{"minimal", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n", agent.DefaultEvictionHard},
		{"eviction set", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n  memory.available: 1Gi\nnodeStatusUpdateFrequency: 3s\n",
			map[string]string{"memory.available": "1Gi"}},
		{"eviction merged", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmergeDefaultEvictionSettings: true\nevictionHard:\n  memory.available: 1Gi\n",
			map[string]string{"memory.available": "1Gi", "nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%", "imagefs.inodesFree": "5%"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			_, codecs, err := kubeletscheme.NewSchemeAndCodecs()
			if err != nil {
				t.Fatal(err)
			}
			internal, err := decodeInternal(codecs, []byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			want := toV1beta1(t, internal)
			want.EvictionHard = tc.evictionHard
			cfg, err := agent.ParseFlags(klog.Background(), []string{"--config=" + path, "--hostname-override=n"})
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(want, asKubeletRuns(t, &cfg.Kubelet)); d != "" {
				t.Errorf("the agent's configuration from the file differs from the kubelet's (-kubelet +nodekit):\n%s", d)
			}
		})
	}
}
