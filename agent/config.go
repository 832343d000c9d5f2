package agent

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/features"
	"github.com/nodekit/nodekit/imagepull"
	nkruntime "github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/userns"
)

// Config is what a node agent is configured with: the kubelet's own
// configuration file type, KubeletConfiguration, plus the settings the kubelet
// takes only on its command line. An operator who replaces the kubelet with a
// nodekit agent keeps both unchanged.
//
// A Config is built by ParseFlags (or by hand, then Complete) and is read-only
// once the agent starts; modules receive copies of the parts they need.
type Config struct {
	// Kubelet is the KubeletConfiguration, defaulted as the kubelet defaults it.
	Kubelet kubeletconfig.KubeletConfiguration

	// KubeconfigPath is the kubeconfig the agent authenticates with
	// (--kubeconfig). Empty means "standalone": no apiserver.
	KubeconfigPath string
	// HostnameOverride replaces the machine's hostname as the node name
	// (--hostname-override).
	HostnameOverride string
	// NodeIPs are the node's addresses (--node-ip, comma separated, at most
	// one per family).
	NodeIPs []net.IP
	// NodeLabels are added to the Node at registration (--node-labels).
	NodeLabels map[string]string
	// RootDir is the agent's state directory (--root-dir, /var/lib/kubelet).
	RootDir string
	// CertDir holds the serving certificate (--cert-dir, <root-dir>/pki).
	CertDir string
	// ContainerLogsDir is where the agent links each started container's
	// log file for log shippers (--container-logs-dir, nodekit's own: the
	// kubelet hard-codes /var/log/containers, DefaultContainerLogsDir).
	// Agents sharing a machine give each its own.
	ContainerLogsDir string
	// BootstrapKubeconfigPath is --bootstrap-kubeconfig: credentials
	// (typically a bootstrap token) that may request the node's client
	// certificate when KubeconfigPath does not hold a valid one (TLS
	// bootstrap, see package certificate). RunWith bootstraps before it
	// builds the agent; an embedder calling NewWith calls
	// certificate.Bootstrap with BootstrapOptions first. It needs
	// KubeconfigPath, where the resulting kubeconfig is written.
	BootstrapKubeconfigPath string
	// CloudProvider is --cloud-provider: "external" registers the node
	// with the node.cloudprovider.kubernetes.io/uninitialized NoSchedule
	// taint for the external cloud controller manager to remove, as the
	// kubelet does; empty (the default) means no cloud provider. The
	// kubelet v1.37 has no in-tree provider left, and nodekit does the
	// same as it for any other value: nothing.
	CloudProvider string

	// MinimumContainerTTLDuration, MaxPerPodContainerCount and
	// MaxContainerCount are the container garbage collection policy, the
	// kubelet's flags --minimum-container-ttl-duration (default 0),
	// --maximum-dead-containers-per-container (default 1) and
	// --maximum-dead-containers (default -1, no limit); Complete sets the
	// counts' defaults when nil.
	MinimumContainerTTLDuration time.Duration
	MaxPerPodContainerCount     *int32
	MaxContainerCount           *int32
	// PodInfraContainerImage (--pod-infra-container-image) is never removed
	// by the image garbage collector, as with the kubelet; the sandbox
	// image itself is the runtime's setting.
	PodInfraContainerImage string
	// NodeShutdownSignal makes the agent take nodeshutdown.DefaultSignal
	// (SIGPWR on Linux) as a node shutdown when a shutdown grace period is
	// set (--node-shutdown-signal, nodekit's own flag; off by default, as
	// the kubelet catches no such signal): for machines without
	// systemd-logind, whose init system or operator sends it before
	// stopping the node. Off, SIGPWR keeps its default action.
	NodeShutdownSignal bool
	// MaxParallelPodStarts is runtime.PodManagerOptions.MaxParallelPodStarts
	// (--max-parallel-pod-starts, nodekit's own flag): how many pods create
	// their sandbox and start their containers at once, the earliest bound
	// first. 0 means runtime.DefaultMaxParallelPodStarts() (four per CPU), a
	// negative value no bound (every pod at once, as the kubelet).
	MaxParallelPodStarts int

	// HealthzListener and NodeAPIListener, when set, are where the healthz
	// and metrics server and the node API (server.Options.Listener) serve
	// instead of listening on healthzBindAddress:healthzPort and
	// address:port themselves: sockets the caller bound (socket activation,
	// or a test that binds port 0 and reads it back). The servers close
	// them when they stop, so a Config with them starts one agent.
	HealthzListener, NodeAPIListener net.Listener

	// Features are the feature gates of Kubelet.FeatureGates (featureGates,
	// --feature-gates), derived and validated by Complete as the kubelet
	// validates them at start; the agent gives them to every module in its
	// options.
	Features *features.Gates

	// NodeName is the Node's name, derived by Complete: HostnameOverride or
	// the machine's hostname, lower-cased.
	NodeName string
	// Hostname is the name reported as the node's Hostname address; it
	// equals NodeName as in the kubelet.
	Hostname string
}

// DefaultRootDir is the kubelet's default state directory.
const DefaultRootDir = "/var/lib/kubelet"

// DefaultContainerLogsDir is the kubelet's directory of container log
// links, which log shippers read.
const DefaultContainerLogsDir = nkruntime.DefaultContainerLogsDir

// LoadKubeletConfiguration reads a KubeletConfiguration file (YAML or JSON,
// kubelet.config.k8s.io/v1beta1). Like the kubelet it decodes strictly first
// and, when only strictness fails (an unknown or duplicated field), logs the
// problem and accepts the lenient result, so a file written for a newer
// kubelet still loads. Defaults are not applied; the kubelet applies
// SetDefaults, then ApplyConfigFileDefaults (ParseFlags does both).
func LoadKubeletConfiguration(logger klog.Logger, path string) (*kubeletconfig.KubeletConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kubelet config file %q: %w", path, err)
	}
	return DecodeKubeletConfiguration(logger, data, path)
}

var configScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := kubeletconfig.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// DecodeKubeletConfiguration decodes data as LoadKubeletConfiguration does;
// source names the data in errors and logs.
func DecodeKubeletConfiguration(logger klog.Logger, data []byte, source string) (*kubeletconfig.KubeletConfiguration, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, fmt.Errorf("kubelet config file %q is empty", source)
	}
	strict := serializer.NewCodecFactory(configScheme, serializer.EnableStrict).UniversalDeserializer()
	obj, gvk, err := strict.Decode(data, nil, &kubeletconfig.KubeletConfiguration{})
	if err != nil && runtime.IsStrictDecodingError(err) {
		logger.Info("Kubelet config file has fields nodekit does not know; they are ignored", "file", source, "err", err)
		lenient := serializer.NewCodecFactory(configScheme).UniversalDeserializer()
		obj, gvk, err = lenient.Decode(data, nil, &kubeletconfig.KubeletConfiguration{})
	}
	if err != nil {
		return nil, fmt.Errorf("decode kubelet config file %q: %w", source, err)
	}
	kc, ok := obj.(*kubeletconfig.KubeletConfiguration)
	if !ok {
		return nil, fmt.Errorf("kubelet config file %q holds %s, want KubeletConfiguration", source, gvk)
	}
	return kc, nil
}

// DefaultEvictionHard is the kubelet's default hard eviction thresholds on
// Linux. The kubelet applies it when it loads a configuration file that
// sets no evictionHard (see ApplyConfigFileDefaults), not in SetDefaults.
var DefaultEvictionHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "10%",
	"nodefs.inodesFree":  "5%",
	"imagefs.available":  "15%",
	"imagefs.inodesFree": "5%",
}

// Defaults of the kubelet v1.37 that SetDefaults applies and no other
// package names.
const (
	defaultVolumePluginDir       = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"
	defaultPodLogsDir            = "/var/log/pods"
	defaultIPTablesMasqueradeBit = 14
	defaultIPTablesDropBit       = 15
	defaultKubeletOOMScoreAdj    = -999
	defaultMaxContainerBackOff   = 300 * time.Second
)

func setDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

func setString[T ~string](s *T, def T) {
	if *s == "" {
		*s = def
	}
}

func setPtr[T any](p **T, def T) {
	if *p == nil {
		*p = ptr.To(def)
	}
}

func setZero[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// featureEnabled reports whether kc's featureGates enable gate, or the
// gate's default when they do not name it: the kubelet's defaulting reads
// two gates (before the gates are validated, as the kubelet's).
func featureEnabled(kc *kubeletconfig.KubeletConfiguration, gate featuregate.Feature) bool {
	if on, ok := kc.FeatureGates[string(gate)]; ok {
		return on
	}
	return (*features.Gates)(nil).Enabled(gate)
}

// SetDefaults fills every unset field of kc with the value the kubelet
// v1.37 defaults a v1beta1 KubeletConfiguration to
// (SetDefaults_KubeletConfiguration in pkg/kubelet/apis/config/v1beta1),
// field for field, including the fields nodekit does not act on: the
// result is the configuration the kubelet would run with. It only fills: a
// field already set is kept. As in the kubelet, evictionHard is not among
// them (see ApplyConfigFileDefaults), and the two feature-gated defaults
// (crashLoopBackOff.maxContainerRestartPeriod,
// imagePullCredentialsVerificationPolicy) follow kc.FeatureGates, where the
// gates default to on. e2e/kubeletparity compares it with the kubelet's.
func SetDefaults(kc *kubeletconfig.KubeletConfiguration) {
	setPtr(&kc.EnableServer, true)
	setDuration(&kc.SyncFrequency, time.Minute)
	setDuration(&kc.FileCheckFrequency, 20*time.Second)
	setDuration(&kc.HTTPCheckFrequency, 20*time.Second)
	setString(&kc.Address, "0.0.0.0")
	setZero(&kc.Port, 10250)
	setPtr(&kc.Authentication.Anonymous.Enabled, false)
	setPtr(&kc.Authentication.Webhook.Enabled, true)
	setDuration(&kc.Authentication.Webhook.CacheTTL, 2*time.Minute)
	setString(&kc.Authorization.Mode, kubeletconfig.KubeletAuthorizationModeWebhook)
	setDuration(&kc.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	setDuration(&kc.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)
	setPtr(&kc.RegistryPullQPS, 5)
	setZero(&kc.RegistryBurst, 10)
	setPtr(&kc.EventRecordQPS, 50)
	setZero(&kc.EventBurst, 100)
	setPtr(&kc.EnableDebuggingHandlers, true)
	setPtr(&kc.HealthzPort, 10248)
	setString(&kc.HealthzBindAddress, "127.0.0.1")
	setPtr(&kc.OOMScoreAdj, defaultKubeletOOMScoreAdj)
	setDuration(&kc.StreamingConnectionIdleTimeout, 4*time.Hour)
	if kc.NodeStatusReportFrequency.Duration == 0 {
		// As in the kubelet: an explicitly set update frequency also
		// becomes the report frequency, else the report is every 5m.
		if kc.NodeStatusUpdateFrequency.Duration == 0 {
			kc.NodeStatusReportFrequency.Duration = 5 * time.Minute
		} else {
			kc.NodeStatusReportFrequency = kc.NodeStatusUpdateFrequency
		}
	}
	setDuration(&kc.NodeStatusUpdateFrequency, 10*time.Second)
	setZero(&kc.NodeLeaseDurationSeconds, 40)
	setDuration(&kc.ImageMinimumGCAge, 2*time.Minute)
	setPtr(&kc.ImageGCHighThresholdPercent, 85)
	setPtr(&kc.ImageGCLowThresholdPercent, 80)
	setDuration(&kc.VolumeStatsAggPeriod, time.Minute)
	setPtr(&kc.CgroupsPerQOS, true)
	setString(&kc.CgroupDriver, "cgroupfs")
	setString(&kc.CPUManagerPolicy, "none")
	setDuration(&kc.CPUManagerReconcilePeriod, 10*time.Second)
	setString(&kc.MemoryManagerPolicy, kubeletconfig.NoneMemoryManagerPolicy)
	setString(&kc.TopologyManagerPolicy, kubeletconfig.NoneTopologyManagerPolicy)
	setString(&kc.TopologyManagerScope, kubeletconfig.ContainerTopologyManagerScope)
	setDuration(&kc.RuntimeRequestTimeout, 2*time.Minute)
	setString(&kc.HairpinMode, kubeletconfig.PromiscuousBridge)
	setZero(&kc.MaxPods, 110)
	if kc.PodPidsLimit == nil || *kc.PodPidsLimit < 0 {
		kc.PodPidsLimit = ptr.To[int64](-1)
	}
	setPtr(&kc.ResolverConfig, "/etc/resolv.conf")
	setPtr(&kc.CPUCFSQuota, true)
	setPtr(&kc.CPUCFSQuotaPeriod, metav1.Duration{Duration: 100 * time.Millisecond})
	setPtr(&kc.NodeStatusMaxImages, 50)
	setZero(&kc.MaxOpenFiles, 1000000)
	setString(&kc.ContentType, "application/vnd.kubernetes.protobuf")
	setPtr(&kc.KubeAPIQPS, 50)
	setZero(&kc.KubeAPIBurst, 100)
	// Serialized unless maxParallelImagePulls allows parallel pulls.
	setPtr(&kc.SerializeImagePulls, kc.MaxParallelImagePulls == nil || *kc.MaxParallelImagePulls < 2)
	setDuration(&kc.EvictionPressureTransitionPeriod, 5*time.Minute)
	setPtr(&kc.MergeDefaultEvictionSettings, false)
	setPtr(&kc.EnableControllerAttachDetach, true)
	setPtr(&kc.MakeIPTablesUtilChains, true)
	setPtr(&kc.IPTablesMasqueradeBit, defaultIPTablesMasqueradeBit)
	setPtr(&kc.IPTablesDropBit, defaultIPTablesDropBit)
	setPtr(&kc.FailSwapOn, true)
	setString(&kc.ContainerLogMaxSize, "10Mi")
	setPtr(&kc.ContainerLogMaxFiles, 5)
	setPtr(&kc.ContainerLogMaxWorkers, 1)
	setPtr(&kc.ContainerLogMonitorInterval, metav1.Duration{Duration: 10 * time.Second})
	setString(&kc.ConfigMapAndSecretChangeDetectionStrategy, kubeletconfig.WatchChangeDetectionStrategy)
	if kc.EnforceNodeAllocatable == nil {
		kc.EnforceNodeAllocatable = []string{"pods"}
	}
	setString(&kc.VolumePluginDir, defaultVolumePluginDir)
	logsapi.SetRecommendedLoggingConfiguration(&kc.Logging)
	setPtr(&kc.EnableSystemLogHandler, true)
	setPtr(&kc.EnableProfilingHandler, true)
	setPtr(&kc.EnableDebugFlagsHandler, true)
	setPtr(&kc.SeccompDefault, false)
	setPtr(&kc.FailCgroupV1, true)
	setString(&kc.MemoryReservationPolicy, kubeletconfig.NoneMemoryReservationPolicy)
	setPtr(&kc.RegisterNode, true)
	setPtr(&kc.LocalStorageCapacityIsolation, true)
	setString(&kc.ContainerRuntimeEndpoint, "unix:///run/containerd/containerd.sock")
	setString(&kc.PodLogsDir, defaultPodLogsDir)
	if featureEnabled(kc, features.KubeletCrashLoopBackOffMax) {
		setPtr(&kc.CrashLoopBackOff.MaxContainerRestartPeriod, metav1.Duration{Duration: defaultMaxContainerBackOff})
	}
	if featureEnabled(kc, features.KubeletEnsureSecretPulledImages) {
		setString(&kc.ImagePullCredentialsVerificationPolicy, kubeletconfig.NeverVerifyPreloadedImages)
	}
}

// ApplyConfigFileDefaults does what the kubelet does to a configuration it
// loaded from a file, after SetDefaults: an unset evictionHard becomes
// DefaultEvictionHard and, with mergeDefaultEvictionSettings, a set one
// gains the default thresholds it does not name. A configuration made from
// flags alone gets neither (the kubelet then has no hard eviction
// thresholds).
func ApplyConfigFileDefaults(kc *kubeletconfig.KubeletConfiguration) {
	switch {
	case kc.EvictionHard == nil:
		kc.EvictionHard = maps.Clone(DefaultEvictionHard)
	case kc.MergeDefaultEvictionSettings != nil && *kc.MergeDefaultEvictionSettings:
		for k, v := range DefaultEvictionHard {
			if _, ok := kc.EvictionHard[k]; !ok {
				kc.EvictionHard[k] = v
			}
		}
	}
}

// Complete derives the fields computed from others (NodeName, Hostname,
// CertDir), applies SetDefaults to Kubelet and validates the result. It is
// idempotent.
func (c *Config) Complete() error {
	SetDefaults(&c.Kubelet)
	return c.complete(klog.Background())
}

// complete is Complete without SetDefaults: ParseFlags defaults before it
// applies the flags, so a flag set to a zero value (say
// --minimum-image-ttl-duration=0s) keeps it, as with the kubelet.
// The feature gates log through logger (setting a GA or deprecated gate is
// a warning, as on the kubelet).
func (c *Config) complete(logger klog.Logger) error {
	if c.RootDir == "" {
		c.RootDir = DefaultRootDir
	}
	if c.CertDir == "" {
		c.CertDir = c.RootDir + "/pki"
	}
	if c.ContainerLogsDir == "" {
		c.ContainerLogsDir = DefaultContainerLogsDir
	}
	if c.MaxPerPodContainerCount == nil {
		c.MaxPerPodContainerCount = ptr.To[int32](1)
	}
	if c.MaxContainerCount == nil {
		c.MaxContainerCount = ptr.To[int32](-1)
	}
	name := c.HostnameOverride
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("determine node name: %w (set --hostname-override)", err)
		}
		name = h
	}
	c.NodeName = strings.ToLower(strings.TrimSpace(name))
	c.Hostname = c.NodeName
	gates, err := features.New(logger.WithValues("node", c.NodeName), c.Kubelet.FeatureGates)
	if err != nil {
		return fmt.Errorf("failed to set feature gates from initial flags-based config: %w", err)
	}
	c.Features = gates
	if err := c.Validate(); err != nil {
		return err
	}
	c.applyReservedSystemCPUs()
	return nil
}

// Validate reports every invalid setting at once, in one line.
func (c *Config) Validate() error {
	var errs []error
	if c.BootstrapKubeconfigPath != "" && c.KubeconfigPath == "" {
		errs = append(errs, errors.New("--bootstrap-kubeconfig needs --kubeconfig, where the bootstrapped kubeconfig is written"))
	}
	if msgs := validation.IsDNS1123Subdomain(c.NodeName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("node name %q: %s", c.NodeName, strings.Join(msgs, "; ")))
	}
	kc := &c.Kubelet
	if kc.NodeStatusUpdateFrequency.Duration <= 0 {
		errs = append(errs, fmt.Errorf("nodeStatusUpdateFrequency must be positive, got %v", kc.NodeStatusUpdateFrequency.Duration))
	}
	if kc.NodeStatusReportFrequency.Duration < kc.NodeStatusUpdateFrequency.Duration {
		errs = append(errs, fmt.Errorf("nodeStatusReportFrequency (%v) must not be shorter than nodeStatusUpdateFrequency (%v)",
			kc.NodeStatusReportFrequency.Duration, kc.NodeStatusUpdateFrequency.Duration))
	}
	if kc.NodeLeaseDurationSeconds <= 0 {
		errs = append(errs, fmt.Errorf("nodeLeaseDurationSeconds must be positive, got %d", kc.NodeLeaseDurationSeconds))
	}
	if kc.MaxPods < 0 {
		errs = append(errs, fmt.Errorf("maxPods must not be negative, got %d", kc.MaxPods))
	}
	if kc.CgroupDriver != "cgroupfs" && kc.CgroupDriver != "systemd" {
		errs = append(errs, fmt.Errorf("cgroupDriver must be cgroupfs or systemd, got %q", kc.CgroupDriver))
	}
	if p := *kc.HealthzPort; p < 0 || p > 65535 {
		errs = append(errs, fmt.Errorf("healthzPort %d out of range", p))
	}
	if net.ParseIP(kc.HealthzBindAddress) == nil {
		errs = append(errs, fmt.Errorf("healthzBindAddress %q is not an IP address", kc.HealthzBindAddress))
	}
	if kc.ContainerRuntimeEndpoint == "" {
		errs = append(errs, errors.New("containerRuntimeEndpoint must be set"))
	}
	if len(c.NodeIPs) > 2 || (len(c.NodeIPs) == 2 && (c.NodeIPs[0].To4() == nil) == (c.NodeIPs[1].To4() == nil)) {
		errs = append(errs, fmt.Errorf("node IPs %v: at most one IPv4 and one IPv6 address", c.NodeIPs))
	}
	for k, v := range c.NodeLabels {
		for _, m := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Errorf("node label key %q: %s", k, m))
		}
		for _, m := range validation.IsValidLabelValue(v) {
			errs = append(errs, fmt.Errorf("node label %q value %q: %s", k, v, m))
		}
	}
	for _, t := range kc.RegisterWithTaints {
		if err := validateTaint(t); err != nil {
			errs = append(errs, err)
		}
	}
	if !featureEnabled(kc, features.KubeletCrashLoopBackOffMax) && kc.CrashLoopBackOff.MaxContainerRestartPeriod != nil {
		errs = append(errs, errors.New("invalid configuration: FeatureGate KubeletCrashLoopBackOffMax not enabled, CrashLoopBackOff.MaxContainerRestartPeriod must not be set"))
	}
	errs = append(errs, validateImagePullCredentials(kc)...)
	if p := kc.CrashLoopBackOff.MaxContainerRestartPeriod; p != nil && (p.Duration < time.Second || p.Duration > defaultMaxContainerBackOff) {
		errs = append(errs, fmt.Errorf("invalid configuration: CrashLoopBackOff.MaxContainerRestartPeriod (got: %v seconds) must be set between 1s and 300s", p.Duration.Seconds()))
	}
	if u := kc.UserNamespaces; u != nil && u.IDsPerPod != nil {
		if err := userns.ValidateIDsPerPod(*u.IDsPerPod); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.validateGC()...)
	errs = append(errs, c.validateResourceManagers()...)
	return joinInline(errs)
}

// validateImagePullCredentials checks imagePullCredentialsVerificationPolicy
// and preloadedImagesVerificationAllowlist with the kubelet's rules and
// messages.
func validateImagePullCredentials(kc *kubeletconfig.KubeletConfiguration) []error {
	var errs []error
	if !featureEnabled(kc, features.KubeletEnsureSecretPulledImages) {
		if kc.ImagePullCredentialsVerificationPolicy != "" {
			errs = append(errs, errors.New("invalid configuration: `imagePullCredentialsVerificationPolicy` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled"))
		}
		if len(kc.PreloadedImagesVerificationAllowlist) > 0 {
			errs = append(errs, errors.New("invalid configuration: `preloadedImagesVerificationAllowlist` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled"))
		}
		return errs
	}
	switch p := kc.ImagePullCredentialsVerificationPolicy; p {
	case kubeletconfig.NeverVerify, kubeletconfig.NeverVerifyPreloadedImages, kubeletconfig.NeverVerifyAllowlistedImages, kubeletconfig.AlwaysVerify:
	default:
		errs = append(errs, fmt.Errorf("invalid configuration: option %q specified for imagePullCredentialsVerificationPolicy. Valid options are %q, %q, %q or %q",
			p, kubeletconfig.NeverVerify, kubeletconfig.NeverVerifyPreloadedImages, kubeletconfig.NeverVerifyAllowlistedImages, kubeletconfig.AlwaysVerify))
	}
	if len(kc.PreloadedImagesVerificationAllowlist) > 0 && kc.ImagePullCredentialsVerificationPolicy != kubeletconfig.NeverVerifyAllowlistedImages {
		errs = append(errs, errors.New("invalid configuration: can't set `preloadedImagesVerificationAllowlist` if `imagePullCredentialsVertificationPolicy` is not \"NeverVerifyAllowlistedImages\""))
	} else if err := imagepull.ValidateAllowlist(kc.PreloadedImagesVerificationAllowlist); err != nil {
		errs = append(errs, fmt.Errorf("invalid configuration: invalid image pattern in `preloadedImagesVerificationAllowlist`: %w", err))
	}
	return errs
}

// validateGC checks the garbage collection and log rotation settings with
// the kubelet's rules and messages.
func (c *Config) validateGC() []error {
	kc := &c.Kubelet
	var errs []error
	high, low := *kc.ImageGCHighThresholdPercent, *kc.ImageGCLowThresholdPercent
	if high < 0 || high > 100 {
		errs = append(errs, fmt.Errorf("imageGCHighThresholdPercent (--image-gc-high-threshold) %d must be between 0 and 100, inclusive", high))
	}
	if low < 0 || low > 100 {
		errs = append(errs, fmt.Errorf("imageGCLowThresholdPercent (--image-gc-low-threshold) %d must be between 0 and 100, inclusive", low))
	}
	if low >= high {
		errs = append(errs, fmt.Errorf("imageGCLowThresholdPercent (--image-gc-low-threshold) %d must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) %d", low, high))
	}
	if kc.ImageMinimumGCAge.Duration < 0 {
		errs = append(errs, fmt.Errorf("imageMinimumGCAge %v must not be negative", kc.ImageMinimumGCAge.Duration))
	}
	if kc.ImageMaximumGCAge.Duration < 0 {
		errs = append(errs, fmt.Errorf("imageMaximumGCAge %v must not be negative", kc.ImageMaximumGCAge.Duration))
	}
	if kc.ImageMaximumGCAge.Duration > 0 && kc.ImageMaximumGCAge.Duration <= kc.ImageMinimumGCAge.Duration {
		errs = append(errs, fmt.Errorf("imageMaximumGCAge %v must be greater than imageMinimumGCAge %v", kc.ImageMaximumGCAge.Duration, kc.ImageMinimumGCAge.Duration))
	}
	if _, err := c.ContainerLogMaxSize(); err != nil {
		errs = append(errs, err)
	}
	if *kc.ContainerLogMaxFiles <= 1 {
		errs = append(errs, errors.New("containerLogMaxFiles must be greater than 1"))
	}
	if *kc.ContainerLogMaxWorkers < 1 {
		errs = append(errs, errors.New("containerLogMaxWorkers must be greater than or equal to 1"))
	}
	if kc.ContainerLogMonitorInterval.Duration < 3*time.Second {
		errs = append(errs, errors.New("containerLogMonitorInterval must be a positive time duration greater than or equal to 3s"))
	}
	if c.MinimumContainerTTLDuration < 0 {
		errs = append(errs, fmt.Errorf("--minimum-container-ttl-duration %v must not be negative", c.MinimumContainerTTLDuration))
	}
	return errs
}

// ContainerLogMaxSize returns containerLogMaxSize in bytes (a negative
// size disables log rotation).
func (c *Config) ContainerLogMaxSize() (int64, error) {
	q, err := resource.ParseQuantity(c.Kubelet.ContainerLogMaxSize)
	if err != nil {
		return 0, fmt.Errorf("containerLogMaxSize %q: %w", c.Kubelet.ContainerLogMaxSize, err)
	}
	n, ok := q.AsInt64()
	if !ok {
		return 0, fmt.Errorf("containerLogMaxSize %q: invalid max log size", c.Kubelet.ContainerLogMaxSize)
	}
	return n, nil
}

// joinInline joins errs like errors.Join, but in one line ("; ").
func joinInline(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return inlineErrors(errs)
}

type inlineErrors []error

func (e inlineErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e inlineErrors) Unwrap() []error { return e }

func validateTaint(t v1.Taint) error {
	var msgs []string
	msgs = append(msgs, validation.IsQualifiedName(t.Key)...)
	if t.Value != "" {
		msgs = append(msgs, validation.IsValidLabelValue(t.Value)...)
	}
	switch t.Effect {
	case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
	default:
		msgs = append(msgs, fmt.Sprintf("effect %q is not one of NoSchedule, PreferNoSchedule, NoExecute", t.Effect))
	}
	if len(msgs) > 0 {
		return fmt.Errorf("taint %q: %s", t.ToString(), strings.Join(msgs, "; "))
	}
	return nil
}
