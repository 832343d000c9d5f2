package agent

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/features"
	"github.com/nodekit/nodekit/pods"
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
		// Without --config nodekit keeps the secure v1beta1 defaults, not the
		// kubelet's older command-line ones (open API, read-only port).
		{"anonymous auth", *kc.Authentication.Anonymous.Enabled, false},
		{"webhook authentication", *kc.Authentication.Webhook.Enabled, true},
		{"authorization mode", string(kc.Authorization.Mode), "Webhook"},
		{"readOnlyPort", kc.ReadOnlyPort, int32(0)},
		{"evictionHard", len(kc.EvictionHard), 0},
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
	if kc.EvictionHard["memory.available"] != "100Mi" {
		t.Errorf("evictionHard = %v, want the kubelet's defaults for a file that sets none", kc.EvictionHard)
	}
	if *kc.Authentication.Anonymous.Enabled || kc.Authorization.Mode != "Webhook" || kc.ReadOnlyPort != 0 {
		t.Errorf("anonymous %v, authorization %s, readOnlyPort %d: want the v1beta1 defaults false, Webhook, 0 with a file",
			*kc.Authentication.Anonymous.Enabled, kc.Authorization.Mode, kc.ReadOnlyPort)
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
		{"two bad settings", []string{"--cgroup-driver=magic", "--max-pods=-1"}, "maxPods"},
		{"unknown flag", []string{"--no-such-flag"}, "unknown flag"},
		{"flag without value", []string{"--max-pods"}, "flag needs an argument"},
		{"malformed value", []string{"--max-pods=many"}, "invalid argument"},
		{"argument", []string{"run"}, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--hostname-override=n"}, tc.args...)
			_, err := ParseFlags(klog.Background(), args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			// One line: a bad setting is not buried in a wall of text.
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("err spans several lines: %q", err)
			}
			var usage *UsageError
			if isUsage := errors.As(err, &usage); isUsage != (tc.name == "unknown flag" || tc.name == "flag without value" || tc.name == "argument") {
				t.Errorf("usage error = %v for %q, want it only for a command line that does not parse", isUsage, err)
			}
		})
	}
}

// TestFlagsSetTheirFields checks the flag → field table the
// not-implemented report rests on: each flag bound to a
// KubeletConfiguration field, given a value other than its default,
// changes exactly the field it names.
func TestFlagsSetTheirFields(t *testing.T) {
	b := &flagBinder{cfg: &Config{}}
	SetDefaults(&b.cfg.Kubelet)
	b.flagSet("probe")
	if len(b.fields) < 60 {
		t.Fatalf("only %d flags bound to fields", len(b.fields))
	}
	paths := map[string]bool{}
	for _, p := range settingPaths() {
		paths[p] = true
	}
	for name, path := range b.fields {
		t.Run(name, func(t *testing.T) {
			if !paths[path] {
				t.Fatalf("flag --%s names %q, which is no KubeletConfiguration setting", name, path)
			}
			cfg := &Config{}
			SetDefaults(&cfg.Kubelet)
			base := *cfg.Kubelet.DeepCopy()
			fb := &flagBinder{cfg: cfg}
			fs := fb.flagSet("test")
			value := map[string]string{
				"bool": strconv.FormatBool(!fsBool(fs, name)), "int32": "4242", "int64": "4242", "duration": "42s",
				"string": "x", "stringSlice": "x,y", "taints": "k=v:NoSchedule", "mapStringString": "a=1",
				"mapStringBool": "Gate=true", "colonSeparatedMultimapStringString": "a:1",
			}[fs.Lookup(name).Value.Type()]
			if name == "eviction-hard" || name == "eviction-soft" {
				value = "memory.available<1Gi"
			}
			if err := fs.Parse([]string{"--" + name + "=" + value}); err != nil {
				t.Fatal(err)
			}
			if got := changedSettings(&cfg.Kubelet, &base); len(got) != 1 || got[0] != path {
				t.Errorf("--%s=%s changed %v, want exactly %s", name, value, got, path)
			}
		})
	}
}

func fsBool(fs *pflag.FlagSet, name string) bool {
	v, _ := fs.GetBool(name)
	return v
}

// TestImplementedSettingsAreReal checks that every entry of the table of
// implemented settings names a KubeletConfiguration setting or a flag, so
// an entry cannot silently go stale.
// TestCrashLoopBackOffMax: crashLoopBackOff.maxContainerRestartPeriod
// reaches the runtime's back-off cap (300s by default, as the kubelet's),
// and a value outside 1s…300s is refused with the kubelet's message.
func TestCrashLoopBackOffMax(t *testing.T) {
	for _, tc := range []struct {
		file string
		want time.Duration
		err  string
	}{
		{"", 300 * time.Second, ""},
		{"crashLoopBackOff:\n  maxContainerRestartPeriod: 30s\n", 30 * time.Second, ""},
		{"crashLoopBackOff:\n  maxContainerRestartPeriod: 500ms\n", 0, "must be set between 1s and 300s"},
		{"crashLoopBackOff:\n  maxContainerRestartPeriod: 301s\n", 0, "must be set between 1s and 300s"},
	} {
		file := writeFile(t, "kubelet.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+tc.file)
		cfg, err := ParseFlags(klog.Background(), []string{"--config=" + file, "--hostname-override=n"})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want it to mention %q", tc.file, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.file, err)
		}
		o, err := cfg.PodManagerOptions(nil, nil)
		if err != nil || o.MaxContainerBackOff != tc.want {
			t.Errorf("%q: MaxContainerBackOff %v (%v), want %v", tc.file, o.MaxContainerBackOff, err, tc.want)
		}
	}
}

func TestImplementedSettingsAreReal(t *testing.T) {
	paths := map[string]bool{}
	for _, p := range settingPaths() {
		paths[p] = true
	}
	b := &flagBinder{cfg: &Config{}}
	SetDefaults(&b.cfg.Kubelet)
	fs := b.flagSet("probe")
	for name := range implementedSettings {
		if flag, ok := strings.CutPrefix(name, "--"); ok {
			if fs.Lookup(flag) == nil {
				t.Errorf("implementedSettings lists %s, which is no flag", name)
			} else if _, bound := b.fields[flag]; bound {
				t.Errorf("implementedSettings lists %s, which sets field %s: list the field", name, b.fields[flag])
			}
			continue
		}
		if !paths[name] {
			t.Errorf("implementedSettings lists %q, which is no KubeletConfiguration setting", name)
		}
	}
}

// logLines returns a logger that records each line as "msg k=v k=v".
func logLines() (klog.Logger, *[]string) {
	var lines []string
	return funcr.New(func(prefix, args string) {
		lines = append(lines, strings.TrimPrefix(args, `"level"=0 `))
	}, funcr.Options{}), &lines
}

// TestParseFlagsLogsUnimplementedSettings: every setting given a value
// other than its default that nodekit does not implement is logged once,
// by name, and nothing else is.
func TestParseFlagsLogsUnimplementedSettings(t *testing.T) {
	file := writeFile(t, "kubelet.yaml", `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/kubernetes/manifests
tlsCertFile: /pki/kubelet.crt
maxPods: 20
evictionHard:
  memory.available: 1Gi
authentication:
  x509:
    clientCAFile: /pki/ca.crt
logging:
  format: json
`)
	logger, lines := logLines()
	_, err := ParseFlags(logger, []string{"--config=" + file, "--hostname-override=n", "--cert-dir=/pki",
		"--anonymous-auth=true", "--node-status-update-frequency=3s", "--v=0", "--feature-gates=KubeletSeparateDiskGC=false,ExtendWebSocketsToKubelet=false,MemoryQoS=true,RestartAllContainersOnContainerExits=false",
		"--lock-file=/run/lock", "--register-node=true", "--cgroup-root=/x"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`"msg"="Kubelet setting accepted but not implemented by nodekit; it has no effect" "node"="n" "setting"="--lock-file"`,
		`"msg"="Kubelet setting accepted but not implemented by nodekit; it has no effect" "node"="n" "setting"="featureGates.KubeletSeparateDiskGC" "flag"="--feature-gates"`,
		`"msg"="Kubelet setting accepted but only partly implemented by nodekit" "node"="n" "setting"="featureGates.RestartAllContainersOnContainerExits" "flag"="--feature-gates" "implemented"="the node's declared feature follows the gate; the behaviour does not"`,
		`"msg"="Kubelet setting accepted but not implemented by nodekit; it has no effect" "node"="n" "setting"="logging.format"`,
	}
	if got := strings.Join(*lines, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("logged:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}

	// Flags alone: the secure defaults are kept, the pull-credential check
	// included, so nothing is logged; nor for another verification policy.
	for _, args := range [][]string{{"--hostname-override=n"}, {"--hostname-override=n", "--config=" + writeFile(t, "always.yaml", `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages
preloadedImagesVerificationAllowlist: ["registry.example/team/*"]
`)}} {
		logger, lines = logLines()
		if _, err := ParseFlags(logger, args); err != nil {
			t.Fatal(err)
		}
		if len(*lines) != 0 {
			t.Errorf("%v: logged %q, want nothing", args, *lines)
		}
	}
}

// TestImagePullCredentialsValidation: the policy and its allowlist are
// checked with the kubelet's rules and messages.
func TestImagePullCredentialsValidation(t *testing.T) {
	for _, tc := range []struct {
		name, config, want string
	}{
		{"unknown policy", "imagePullCredentialsVerificationPolicy: Sometimes", `option "Sometimes" specified for imagePullCredentialsVerificationPolicy`},
		{"allowlist without its policy", "preloadedImagesVerificationAllowlist: [registry.example/a]", "can't set `preloadedImagesVerificationAllowlist`"},
		{"allowlist with a tag", "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [registry.example/a:1]",
			"neither tag nor digest is accepted"},
		{"allowlist with an inner wildcard", "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [registry.example/*/a]",
			"only patterns ending with '/*' are allowed"},
		{"policy with the gate off", "featureGates: {KubeletEnsureSecretPulledImages: false}\nimagePullCredentialsVerificationPolicy: AlwaysVerify",
			"must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeFile(t, "kubelet.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+tc.config+"\n")
			_, err := ParseFlags(klog.Background(), []string{"--hostname-override=n", "--config=" + file})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestFeatureGates: the configuration's gates are validated as the
// kubelet's at start (an unknown gate, a locked one changed, a dependency
// off are the kubelet's errors), given to the modules' options, and the
// two gated defaults follow them.
func TestFeatureGates(t *testing.T) {
	for _, tc := range []struct{ gates, want string }{
		{"NoSuchGate=true", "failed to set feature gates from initial flags-based config: unrecognized feature gate: NoSuchGate"},
		{"UserNamespacesSupport=false", "cannot set feature gate UserNamespacesSupport to false, feature is locked to true"},
		{"ContainerRestartRules=false", "RestartAllContainersOnContainerExits is enabled, but depends on features that are disabled: [ContainerRestartRules]"},
		// As on the kubelet, the flags come after the defaults, which the
		// gate on by default filled.
		{"KubeletCrashLoopBackOffMax=false", "FeatureGate KubeletCrashLoopBackOffMax not enabled, CrashLoopBackOff.MaxContainerRestartPeriod must not be set"},
	} {
		_, err := ParseFlags(klog.Background(), []string{"--hostname-override=n", "--feature-gates=" + tc.gates})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--feature-gates=%s: %v, want %q", tc.gates, err, tc.want)
		}
	}

	file := writeFile(t, "kubelet.yaml", `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
featureGates:
  ExtendWebSocketsToKubelet: false
  InPlacePodLevelResourcesVerticalScaling: false
  KubeletCrashLoopBackOffMax: false
`)
	cfg, err := ParseFlags(klog.Background(), []string{"--hostname-override=n", "--config=" + file})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []featuregate.Feature{features.ExtendWebSocketsToKubelet, features.InPlacePodLevelResourcesVerticalScaling, features.KubeletCrashLoopBackOffMax} {
		if cfg.Features.Enabled(g) {
			t.Errorf("%s is on after --feature-gates turned it off", g)
		}
	}
	if !cfg.Features.Enabled(features.ResourceHealthStatus) {
		t.Error("ResourceHealthStatus, on by default, is off")
	}
	if cfg.ServerOptions(nil).Features != cfg.Features || cfg.PodsOptions(nil).Features != cfg.Features {
		t.Error("the server's and the pods loop's options do not carry the configuration's gates")
	}
	if cfg.Kubelet.CrashLoopBackOff.MaxContainerRestartPeriod != nil {
		t.Errorf("KubeletCrashLoopBackOffMax off: maxContainerRestartPeriod defaulted to %v", cfg.Kubelet.CrashLoopBackOff.MaxContainerRestartPeriod)
	}
	so, err := cfg.SetterOptions(criFeatureRuntime{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}; !slices.Equal(so.DeclaredFeatures, want) {
		t.Errorf("declared features with two gates off: %v, want %v", so.DeclaredFeatures, want)
	}
}

// criFeatureRuntime is a pods.Runtime that supports the CRI path's node
// features (only SupportedNodeFeatures is called).
type criFeatureRuntime struct{ pods.Runtime }

func (criFeatureRuntime) SupportedNodeFeatures() []string { return pods.CRIFeatures() }

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
