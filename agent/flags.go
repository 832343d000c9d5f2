package agent

import (
	"errors"
	goflag "flag"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
)

// flagBinder binds the kubelet's command-line flags to one Config.
type flagBinder struct {
	cfg        *Config
	configFile string
	nodeIPs    string
	// fields maps the name of each flag bound to a KubeletConfiguration
	// field to the field's path (see settingPaths).
	fields map[string]string
	// discarded holds the values of the command-line-only kubelet flags
	// nodekit accepts and has no use for.
	discarded map[string]any
	// klog names klog's flags.
	klog map[string]bool
	// version is --version.
	version versionValue
}

// configFlags binds flags to KubeletConfiguration fields and records each
// flag's field path, so that a setting nodekit does not implement is
// reported by both names. A pointer field is bound through its value: it
// must be set (SetDefaults sets every pointer a flag binds).
type configFlags struct {
	fs     *pflag.FlagSet
	fields map[string]string
}

func (f configFlags) str(p *string, name, path, usage string) {
	f.fs.StringVar(p, name, *p, usage)
	f.fields[name] = path
}

func (f configFlags) boolean(p *bool, name, path, usage string) {
	f.fs.BoolVar(p, name, *p, usage)
	f.fields[name] = path
}

func (f configFlags) int32(p *int32, name, path, usage string) {
	f.fs.Int32Var(p, name, *p, usage)
	f.fields[name] = path
}

func (f configFlags) int64(p *int64, name, path, usage string) {
	f.fs.Int64Var(p, name, *p, usage)
	f.fields[name] = path
}

func (f configFlags) duration(p *metav1.Duration, name, path, usage string) {
	f.fs.DurationVar(&p.Duration, name, p.Duration, usage)
	f.fields[name] = path
}

func (f configFlags) strings(p *[]string, name, path, usage string) {
	f.fs.StringSliceVar(p, name, *p, usage)
	f.fields[name] = path
}

func (f configFlags) value(v pflag.Value, name, path, usage string) {
	f.fs.Var(v, name, usage)
	f.fields[name] = path
}

// discardedFlags are the kubelet's command-line-only flags (not
// KubeletConfiguration fields) that nodekit accepts, so an operator's unit
// file keeps working, and does not act on; ParseFlags logs each one given.
// The bool ones take no value.
var discardedFlags = map[string]bool{
	"lock-file": false, "exit-on-lock-contention": true, "image-credential-provider-config": false,
	"image-credential-provider-bin-dir": false, "config-dir": false, "runtime-cgroups": false,
	"experimental-mounter-path": false, "experimental-allocatable-ignore-eviction": true,
}

func (b *flagBinder) flagSet(name string) *pflag.FlagSet {
	c := b.cfg
	kc := &c.Kubelet
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
	})

	// The settings the kubelet takes only on its command line.
	fs.StringVar(&b.configFile, "config", b.configFile, "The KubeletConfiguration file to load; flags override its values.")
	fs.StringVar(&c.KubeconfigPath, "kubeconfig", c.KubeconfigPath, "Path to a kubeconfig for the apiserver. Empty runs the agent standalone.")
	fs.StringVar(&c.HostnameOverride, "hostname-override", c.HostnameOverride, "Use this name as the node name instead of the hostname.")
	fs.StringVar(&b.nodeIPs, "node-ip", b.nodeIPs, "IP address(es) of the node, comma separated, at most one per family. Loopback addresses are accepted with a warning.")
	fs.Var(mapValue("=", &c.NodeLabels), "node-labels", "Labels to add when registering the node (key=value pairs, comma separated).")
	fs.StringVar(&c.RootDir, "root-dir", c.RootDir, "Directory for the agent's files.")
	fs.StringVar(&c.CertDir, "cert-dir", c.CertDir, "Directory for the serving certificate (default <root-dir>/pki).")
	fs.StringVar(&c.BootstrapKubeconfigPath, "bootstrap-kubeconfig", c.BootstrapKubeconfigPath, "Path to a kubeconfig (typically with a bootstrap token) used to request the node's client certificate when --kubeconfig does not hold a valid one; the kubeconfig is then written at --kubeconfig and the pair in --cert-dir.")
	fs.StringVar(&c.CloudProvider, "cloud-provider", c.CloudProvider, "The provider for cloud services: empty for none, 'external' for an external cloud controller manager (the node registers with the node.cloudprovider.kubernetes.io/uninitialized taint).")
	fs.Var(&b.version, "version", "Print the Kubernetes version this agent is compatible with, as the kubelet prints its own ("+versionLine()+"), and quit. nodekit's own release is in the node's kubeletVersion and the startup log.")
	fs.Lookup("version").NoOptDefVal = "true"
	// The container garbage collection policy and the image the image
	// garbage collector keeps: command-line-only kubelet flags.
	if c.MaxPerPodContainerCount == nil {
		c.MaxPerPodContainerCount = ptr.To[int32](1)
	}
	if c.MaxContainerCount == nil {
		c.MaxContainerCount = ptr.To[int32](-1)
	}
	fs.DurationVar(&c.MinimumContainerTTLDuration, "minimum-container-ttl-duration", c.MinimumContainerTTLDuration, "Minimum age of a finished container before it is garbage collected.")
	fs.Int32Var(c.MaxPerPodContainerCount, "maximum-dead-containers-per-container", *c.MaxPerPodContainerCount, "Dead instances kept per container; negative for no limit.")
	fs.Int32Var(c.MaxContainerCount, "maximum-dead-containers", *c.MaxContainerCount, "Dead containers kept on the node; negative for no limit.")
	fs.StringVar(&c.PodInfraContainerImage, "pod-infra-container-image", c.PodInfraContainerImage, "Image the image garbage collector never removes (the runtime's sandbox image).")
	// nodekit's own: the kubelet has no such flag.
	fs.BoolVar(&c.NodeShutdownSignal, "node-shutdown-signal", c.NodeShutdownSignal, "With shutdownGracePeriod set, take SIGPWR sent to the agent as a node shutdown (for machines without systemd-logind). Off by default.")
	fs.StringVar(&c.ContainerLogsDir, "container-logs-dir", c.ContainerLogsDir, "Directory of the links to the containers' log files that log shippers read (default /var/log/containers, where the kubelet always makes them).")
	fs.IntVar(&c.MaxParallelPodStarts, "max-parallel-pod-starts", c.MaxParallelPodStarts, "Pods that create their sandbox and start their containers at once, the earliest bound first; 0 for four per CPU, negative for no bound (every pod at once, as the kubelet).")
	b.discarded = make(map[string]any, len(discardedFlags))
	for name, isBool := range discardedFlags {
		usage := "Accepted for kubelet compatibility; nodekit does not implement it."
		if isBool {
			b.discarded[name] = fs.Bool(name, false, usage)
		} else {
			b.discarded[name] = fs.String(name, "", usage)
		}
	}

	// The flags that set KubeletConfiguration fields.
	b.fields = map[string]string{}
	f := configFlags{fs: fs, fields: b.fields}
	f.boolean(kc.EnableServer, "enable-server", "enableServer", "Serve the kubelet API.")
	f.boolean(kc.RegisterNode, "register-node", "registerNode", "Register the node with the apiserver.")
	f.value(taintsValue{&kc.RegisterWithTaints}, "register-with-taints", "registerWithTaints", "Register the node with these taints (comma separated \"<key>=<value>:<effect>\").")
	f.str(&kc.ContainerRuntimeEndpoint, "container-runtime-endpoint", "containerRuntimeEndpoint", "The CRI runtime endpoint, e.g. unix:///run/containerd/containerd.sock.")
	f.str(&kc.ImageServiceEndpoint, "image-service-endpoint", "imageServiceEndpoint", "The CRI image service endpoint; defaults to the runtime endpoint.")
	f.duration(&kc.RuntimeRequestTimeout, "runtime-request-timeout", "runtimeRequestTimeout", "Timeout of CRI requests, except long-running ones.")
	f.duration(&kc.NodeStatusUpdateFrequency, "node-status-update-frequency", "nodeStatusUpdateFrequency", "How often the node status is computed.")
	f.int32(kc.NodeStatusMaxImages, "node-status-max-images", "nodeStatusMaxImages", "The most images reported in the node status; -1 for no limit.")
	f.str(&kc.CgroupDriver, "cgroup-driver", "cgroupDriver", "cgroupfs or systemd; must match the runtime's.")
	f.str(&kc.CgroupRoot, "cgroup-root", "cgroupRoot", "Root cgroup for pods.")
	f.boolean(kc.CgroupsPerQOS, "cgroups-per-qos", "cgroupsPerQOS", "Create the QoS cgroup hierarchy.")
	f.int32(&kc.MaxPods, "max-pods", "maxPods", "Number of pods that can run on this node.")
	f.int32(&kc.PodsPerCore, "pods-per-core", "podsPerCore", "Pods per core; 0 disables the limit.")
	f.int64(kc.PodPidsLimit, "pod-max-pids", "podPidsLimit", "Maximum processes per pod; -1 for the node's limit.")
	f.boolean(kc.CPUCFSQuota, "cpu-cfs-quota", "cpuCFSQuota", "Enforce CPU limits with CFS quota.")
	f.duration(kc.CPUCFSQuotaPeriod, "cpu-cfs-quota-period", "cpuCFSQuotaPeriod", "CFS quota period of CPU limits.")
	f.str(&kc.HealthzBindAddress, "healthz-bind-address", "healthzBindAddress", "Address of the healthz and metrics endpoint.")
	f.int32(kc.HealthzPort, "healthz-port", "healthzPort", "Port of the healthz and metrics endpoint; 0 disables it.")
	f.str(&kc.Address, "address", "address", "Address the kubelet API serves on.")
	f.int32(&kc.Port, "port", "port", "Port the kubelet API serves on.")
	f.int32(&kc.ReadOnlyPort, "read-only-port", "readOnlyPort", "Port of the unauthenticated read-only kubelet API; 0 disables it.")
	f.boolean(kc.Authentication.Anonymous.Enabled, "anonymous-auth", "authentication.anonymous.enabled", "Allow anonymous requests to the kubelet API.")
	f.boolean(kc.Authentication.Webhook.Enabled, "authentication-token-webhook", "authentication.webhook.enabled", "Authenticate bearer tokens with the TokenReview API.")
	f.str(&kc.Authentication.X509.ClientCAFile, "client-ca-file", "authentication.x509.clientCAFile", "CA bundle that signs client certificates for the kubelet API.")
	f.str((*string)(&kc.Authorization.Mode), "authorization-mode", "authorization.mode", "AlwaysAllow or Webhook.")
	f.str(&kc.TLSCertFile, "tls-cert-file", "tlsCertFile", "Serving certificate of the kubelet API.")
	f.str(&kc.TLSPrivateKeyFile, "tls-private-key-file", "tlsPrivateKeyFile", "Serving key of the kubelet API.")
	f.strings(&kc.TLSCipherSuites, "tls-cipher-suites", "tlsCipherSuites", "Cipher suites of the kubelet API.")
	f.str(&kc.TLSMinVersion, "tls-min-version", "tlsMinVersion", "Minimum TLS version of the kubelet API.")
	f.boolean(&kc.RotateCertificates, "rotate-certificates", "rotateCertificates", "Rotate the client certificate.")
	f.boolean(&kc.ServerTLSBootstrap, "rotate-server-certificates", "serverTLSBootstrap", "Request and rotate the serving certificate.")
	f.strings(&kc.ClusterDNS, "cluster-dns", "clusterDNS", "DNS server IPs for pods.")
	f.str(&kc.ClusterDomain, "cluster-domain", "clusterDomain", "Cluster domain for pod DNS search paths.")
	f.str(kc.ResolverConfig, "resolv-conf", "resolvConf", "Resolver configuration used as the basis for pods' DNS.")
	f.str(&kc.StaticPodPath, "pod-manifest-path", "staticPodPath", "Directory of static pod manifests.")
	f.str(&kc.StaticPodURL, "manifest-url", "staticPodURL", "URL of static pod manifests.")
	f.value(&headerValue{m: &kc.StaticPodURLHeader}, "manifest-url-header", "staticPodURLHeader", "HTTP headers of the --manifest-url requests, comma-separated name:value pairs; repeat the flag or a name to send several values ('a:hello,b:again' --manifest-url-header 'b:beautiful').")
	f.duration(&kc.SyncFrequency, "sync-frequency", "syncFrequency", "Maximum period between pod syncs.")
	f.duration(&kc.FileCheckFrequency, "file-check-frequency", "fileCheckFrequency", "How often the manifest directory is read.")
	f.duration(&kc.HTTPCheckFrequency, "http-check-frequency", "httpCheckFrequency", "How often the manifest URL is read.")
	f.value(mapValue("=", &kc.KubeReserved), "kube-reserved", "kubeReserved", "Resources reserved for Kubernetes components (cpu=200m,memory=500Mi,…).")
	f.value(mapValue("=", &kc.SystemReserved), "system-reserved", "systemReserved", "Resources reserved for the system.")
	f.str(&kc.KubeReservedCgroup, "kube-reserved-cgroup", "kubeReservedCgroup", "Cgroup of the Kubernetes components.")
	f.str(&kc.SystemReservedCgroup, "system-reserved-cgroup", "systemReservedCgroup", "Cgroup of the system daemons.")
	f.strings(&kc.EnforceNodeAllocatable, "enforce-node-allocatable", "enforceNodeAllocatable", "Levels of node allocatable enforcement.")
	f.value(mapValue("<", &kc.EvictionHard), "eviction-hard", "evictionHard", "Hard eviction thresholds (memory.available<1Gi,…).")
	f.value(mapValue("<", &kc.EvictionSoft), "eviction-soft", "evictionSoft", "Soft eviction thresholds.")
	f.value(mapValue("=", &kc.EvictionSoftGracePeriod), "eviction-soft-grace-period", "evictionSoftGracePeriod", "Grace periods of the soft eviction thresholds.")
	f.value(mapValue("=", &kc.EvictionMinimumReclaim), "eviction-minimum-reclaim", "evictionMinimumReclaim", "Minimum reclaim of each eviction signal.")
	f.duration(&kc.EvictionPressureTransitionPeriod, "eviction-pressure-transition-period", "evictionPressureTransitionPeriod", "How long a pressure condition stays after its threshold is no longer met.")
	f.int32(&kc.EvictionMaxPodGracePeriod, "eviction-max-pod-grace-period", "evictionMaxPodGracePeriod", "Maximum grace period of pods evicted on a soft threshold.")
	f.int32(kc.KubeAPIQPS, "kube-api-qps", "kubeAPIQPS", "QPS to the apiserver.")
	f.int32(&kc.KubeAPIBurst, "kube-api-burst", "kubeAPIBurst", "Burst to the apiserver.")
	f.str(&kc.ContentType, "kube-api-content-type", "contentType", "Content type of requests to the apiserver.")
	f.int32(kc.EventRecordQPS, "event-qps", "eventRecordQPS", "QPS of event creation.")
	f.int32(&kc.EventBurst, "event-burst", "eventBurst", "Burst of event creation.")
	f.int32(kc.RegistryPullQPS, "registry-qps", "registryPullQPS", "QPS of image pulls; 0 for no limit.")
	f.int32(&kc.RegistryBurst, "registry-burst", "registryBurst", "Burst of image pulls.")
	f.boolean(kc.SerializeImagePulls, "serialize-image-pulls", "serializeImagePulls", "Pull one image at a time.")
	f.boolean(kc.FailSwapOn, "fail-swap-on", "failSwapOn", "Fail to start when swap is on.")
	f.boolean(kc.FailCgroupV1, "fail-cgroupv1", "failCgroupV1", "Fail to start on cgroup v1.")
	f.boolean(kc.LocalStorageCapacityIsolation, "local-storage-capacity-isolation", "localStorageCapacityIsolation", "Report and isolate ephemeral storage.")
	f.str(&kc.ProviderID, "provider-id", "providerID", "Unique identifier of the node in the machine database.")
	f.value(featureGatesValue{&kc.FeatureGates}, "feature-gates", "featureGates", "Feature gates (key=true|false).")
	f.boolean(kc.SeccompDefault, "seccomp-default", "seccompDefault", "Use RuntimeDefault as the default seccomp profile.")
	f.str(&kc.VolumePluginDir, "volume-plugin-dir", "volumePluginDir", "Directory of FlexVolume plugins.")
	f.str(&kc.KubeletCgroups, "kubelet-cgroups", "kubeletCgroups", "Cgroup of the agent.")
	f.str(&kc.SystemCgroups, "system-cgroups", "systemCgroups", "Cgroup of the system processes.")
	f.boolean(&kc.ProtectKernelDefaults, "protect-kernel-defaults", "protectKernelDefaults", "Fail instead of changing kernel tunables.")
	f.boolean(kc.MakeIPTablesUtilChains, "make-iptables-util-chains", "makeIPTablesUtilChains", "Maintain the kubelet's iptables chains.")
	f.str(&kc.CPUManagerPolicy, "cpu-manager-policy", "cpuManagerPolicy", "CPU manager policy.")
	f.duration(&kc.CPUManagerReconcilePeriod, "cpu-manager-reconcile-period", "cpuManagerReconcilePeriod", "CPU manager reconcile period.")
	f.str(&kc.TopologyManagerPolicy, "topology-manager-policy", "topologyManagerPolicy", "Topology manager policy.")
	f.str(&kc.TopologyManagerScope, "topology-manager-scope", "topologyManagerScope", "Topology manager scope.")
	f.str(&kc.MemoryManagerPolicy, "memory-manager-policy", "memoryManagerPolicy", "Memory manager policy.")
	f.str(&kc.ReservedSystemCPUs, "reserved-cpus", "reservedSystemCPUs", "CPUs reserved for the system.")
	f.value(mapValue("=", &kc.CPUManagerPolicyOptions), "cpu-manager-policy-options", "cpuManagerPolicyOptions", "Options of the static CPU manager policy (key=value,…).")
	f.value(mapValue("=", &kc.TopologyManagerPolicyOptions), "topology-manager-policy-options", "topologyManagerPolicyOptions", "Options of the topology manager policy (key=value,…).")
	f.str(&kc.ContainerLogMaxSize, "container-log-max-size", "containerLogMaxSize", "Size at which a container log is rotated.")
	f.int32(kc.ContainerLogMaxFiles, "container-log-max-files", "containerLogMaxFiles", "Container log files kept per container.")
	f.int32(kc.ImageGCHighThresholdPercent, "image-gc-high-threshold", "imageGCHighThresholdPercent", "Disk usage percent at which image GC runs.")
	f.int32(kc.ImageGCLowThresholdPercent, "image-gc-low-threshold", "imageGCLowThresholdPercent", "Disk usage percent image GC frees down to.")
	f.duration(&kc.ImageMinimumGCAge, "minimum-image-ttl-duration", "imageMinimumGCAge", "Minimum age of an unused image before GC.")
	f.duration(&kc.VolumeStatsAggPeriod, "volume-stats-agg-period", "volumeStatsAggPeriod", "How often volume disk usage is computed.")
	f.duration(&kc.StreamingConnectionIdleTimeout, "streaming-connection-idle-timeout", "streamingConnectionIdleTimeout", "Idle timeout of exec, attach and port-forward streams.")
	f.boolean(kc.EnableControllerAttachDetach, "enable-controller-attach-detach", "enableControllerAttachDetach", "Let the attach/detach controller manage volumes.")
	f.boolean(kc.EnableDebuggingHandlers, "enable-debugging-handlers", "enableDebuggingHandlers", "Serve logs, exec, attach and port-forward.")
	f.str(&kc.HairpinMode, "hairpin-mode", "hairpinMode", "How the kubelet sets up hairpin NAT.")
	f.str(&kc.PodCIDR, "pod-cidr", "podCIDR", "Pod CIDR in standalone mode.")
	f.int32(kc.OOMScoreAdj, "oom-score-adj", "oomScoreAdj", "OOM score adjustment of the agent's process.")
	f.int64(&kc.MaxOpenFiles, "max-open-files", "maxOpenFiles", "Maximum open files of the agent's process.")
	f.strings(&kc.AllowedUnsafeSysctls, "allowed-unsafe-sysctls", "allowedUnsafeSysctls", "Unsafe sysctls pods may set.")

	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	b.klog = map[string]bool{}
	klogFlags.VisitAll(func(f *goflag.Flag) { b.klog[strings.ReplaceAll(f.Name, "_", "-")] = true })
	fs.AddGoFlagSet(klogFlags)
	return fs
}

// UsageError is a command line ParseFlags cannot parse: an unknown flag, a
// flag without its value, or an argument that is no flag. The caller shows
// the usage with it (see FlagUsage). A malformed value of a known flag is
// an ordinary error: its message says all there is to fix.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ParseFlags builds a Config from kubelet command-line arguments (without the
// program name), as the kubelet does: with --config, the
// KubeletConfiguration file is loaded, defaulted (SetDefaults, then
// ApplyConfigFileDefaults) and every flag given on the command line
// overrides its field; without it, the flags apply to the kubelet's
// defaults (SetDefaults). Unlike the kubelet, which falls back to the
// insecure defaults of its older command-line API without a file (anonymous
// requests allowed, webhook authentication off, AlwaysAllow, the read-only
// port 10255), an agent started with flags alone keeps the secure v1beta1
// defaults; flags that set those fields still work. It
// returns pflag.ErrHelp for --help, with the usage written to the flag
// set's output, and a *UsageError for a command line it cannot parse. Then
// it logs, one line each, every setting given a value other than its
// default that nodekit accepts but does not implement (see
// implementedSettings). The result is Complete.
func ParseFlags(logger klog.Logger, args []string) (*Config, error) {
	// Over the kubelet's defaults first: without --config that is the
	// answer, and with it, the pass found the file (and failed early on
	// malformed flags).
	b := &flagBinder{cfg: &Config{}}
	SetDefaults(&b.cfg.Kubelet)
	fs := b.flagSet("nodeagent")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if b.version {
		return nil, ErrVersion
	}
	if b.configFile != "" {
		kc, err := LoadKubeletConfiguration(logger, b.configFile)
		if err != nil {
			return nil, err
		}
		cfg := &Config{Kubelet: *kc}
		SetDefaults(&cfg.Kubelet)
		ApplyConfigFileDefaults(&cfg.Kubelet)
		// Second pass: flags given on the command line win over the file.
		b = &flagBinder{cfg: cfg, configFile: b.configFile}
		fs = b.flagSet("nodeagent")
		if err := parse(fs, args); err != nil {
			return nil, err
		}
	}
	cfg := b.cfg
	if b.nodeIPs != "" {
		for _, s := range strings.Split(b.nodeIPs, ",") {
			ip := net.ParseIP(strings.TrimSpace(s))
			if ip == nil {
				return nil, fmt.Errorf("--node-ip: %q is not an IP address", s)
			}
			cfg.NodeIPs = append(cfg.NodeIPs, ip)
		}
	}
	if err := cfg.complete(logger); err != nil {
		return nil, fmt.Errorf("failed to validate kubelet configuration: %w", err)
	}
	var given []string
	fs.Visit(func(f *pflag.Flag) { given = append(given, f.Name) })
	logUnimplemented(logger.WithValues("node", cfg.NodeName), unimplemented(&cfg.Kubelet, cfg.Features, b.configFile != "", given, b.fields, b.klog))
	return cfg, nil
}

// ErrVersion is ParseFlags' answer to --version: the caller prints
// VersionLine and exits 0, as the kubelet does.
var ErrVersion = errors.New("version requested")

// VersionLine is what --version prints: the Kubernetes release whose kubelet
// the agent stands in for, as the kubelet prints it ("Kubernetes v1.37.2"),
// so tools that check the kubelet's version (kubeadm's preflight) accept
// the agent.
func VersionLine() string { return versionLine() }

func versionLine() string { return "Kubernetes " + nodekit.KubernetesVersion }

// versionValue is --version: a boolean flag that also takes "raw", which
// the kubelet answers with its full version information and nodekit with
// the same line.
type versionValue bool

func (v *versionValue) String() string { return strconv.FormatBool(bool(*v)) }
func (v *versionValue) Type() string   { return "version" }
func (v *versionValue) Set(s string) error {
	if s == "raw" {
		*v = true
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true, false or raw")
	}
	*v = versionValue(b)
	return nil
}

// parse parses args into fs, a parse failure other than a malformed value
// as a *UsageError.
func parse(fs *pflag.FlagSet, args []string) error {
	err := fs.Parse(args)
	var invalid *pflag.InvalidValueError
	switch {
	case errors.Is(err, pflag.ErrHelp), errors.As(err, &invalid):
		return err
	case err != nil:
		return &UsageError{Err: err}
	case fs.NArg() > 0:
		return &UsageError{Err: fmt.Errorf("unexpected argument %q: the agent takes flags only", fs.Arg(0))}
	}
	return nil
}

// FlagUsage returns the usage text of the agent's flags.
func FlagUsage() string {
	b := &flagBinder{cfg: &Config{}}
	SetDefaults(&b.cfg.Kubelet)
	return b.flagSet("nodeagent").FlagUsages()
}

// taintsValue is a pflag.Value for --register-with-taints.
type taintsValue struct{ taints *[]v1.Taint }

func (t taintsValue) String() string {
	if t.taints == nil {
		return ""
	}
	parts := make([]string, 0, len(*t.taints))
	for _, taint := range *t.taints {
		parts = append(parts, taint.ToString())
	}
	return strings.Join(parts, ",")
}

func (t taintsValue) Set(s string) error {
	var out []v1.Taint
	for _, spec := range strings.Split(s, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok {
			return fmt.Errorf("taint %q: want <key>=<value>:<effect>", spec)
		}
		key, value, _ := strings.Cut(kv, "=")
		taint := v1.Taint{Key: key, Value: value, Effect: v1.TaintEffect(effect)}
		if err := validateTaint(taint); err != nil {
			return err
		}
		out = append(out, taint)
	}
	*t.taints = out
	return nil
}

func (t taintsValue) Type() string { return "taints" }

// mapStringValue is a pflag.Value for "k<sep>v,k<sep>v" maps such as
// --node-labels (sep "=") and --eviction-hard (sep "<"). Setting it replaces
// the map, so a flag given on the command line overrides the config file.
type mapStringValue struct {
	m   *map[string]string
	sep string
}

func mapValue(sep string, m *map[string]string) mapStringValue { return mapStringValue{m: m, sep: sep} }

func (v mapStringValue) String() string {
	if v.m == nil || *v.m == nil {
		return ""
	}
	parts := make([]string, 0, len(*v.m))
	for k, val := range *v.m {
		parts = append(parts, k+v.sep+val)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (v mapStringValue) Set(s string) error {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, v.sep)
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%q: want key%svalue", kv, v.sep)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	*v.m = out
	return nil
}

func (v mapStringValue) Type() string { return "mapStringString" }

// featureGatesValue is a pflag.Value for --feature-gates.
type featureGatesValue struct{ m *map[string]bool }

func (v featureGatesValue) String() string {
	if v.m == nil || *v.m == nil {
		return ""
	}
	parts := make([]string, 0, len(*v.m))
	for k, b := range *v.m {
		parts = append(parts, k+"="+strconv.FormatBool(b))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (v featureGatesValue) Set(s string) error {
	strs := map[string]string{}
	if err := mapValue("=", &strs).Set(s); err != nil {
		return fmt.Errorf("--feature-gates: %w", err)
	}
	out := make(map[string]bool, len(strs))
	for k, raw := range strs {
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("--feature-gates: %s=%q is not a boolean", k, raw)
		}
		out[k] = b
	}
	*v.m = out
	return nil
}

func (v featureGatesValue) Type() string { return "mapStringBool" }
