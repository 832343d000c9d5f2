package agent

import (
	goflag "flag"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// ignoredKubeletFlags are kubelet flags an operator's unit file may pass
// that nodekit accepts so the command line stays unchanged, but does not act
// on. Each use is logged once at startup.
var ignoredKubeletFlags = []string{
	"bootstrap-kubeconfig", "cloud-provider", "pod-infra-container-image", "seccomp-default",
	"lock-file", "exit-on-lock-contention", "image-credential-provider-config",
	"image-credential-provider-bin-dir", "rotate-certificates", "rotate-server-certificates",
	"volume-plugin-dir", "kubelet-cgroups", "system-cgroups", "runtime-cgroups",
	"protect-kernel-defaults", "make-iptables-util-chains", "cpu-manager-policy",
	"topology-manager-policy", "memory-manager-policy", "read-only-port", "container-log-max-size",
	"container-log-max-files", "image-gc-high-threshold", "image-gc-low-threshold",
	"minimum-image-ttl-duration", "config-dir", "streaming-connection-idle-timeout",
	"enable-controller-attach-detach", "hairpin-mode", "pod-cidr", "oom-score-adj",
}

// flagBinder binds the kubelet's command-line flags to one Config.
type flagBinder struct {
	cfg        *Config
	configFile string
	nodeIPs    string
	ignored    map[string]*string
}

func (b *flagBinder) flagSet(name string) *pflag.FlagSet {
	c := b.cfg
	kc := &c.Kubelet
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
	})

	fs.StringVar(&b.configFile, "config", b.configFile, "The KubeletConfiguration file to load; flags override its values.")
	fs.StringVar(&c.KubeconfigPath, "kubeconfig", c.KubeconfigPath, "Path to a kubeconfig for the apiserver. Empty runs the agent standalone.")
	fs.StringVar(&c.HostnameOverride, "hostname-override", c.HostnameOverride, "Use this name as the node name instead of the hostname.")
	fs.StringVar(&b.nodeIPs, "node-ip", b.nodeIPs, "IP address(es) of the node, comma separated, at most one per family. Loopback addresses are accepted with a warning.")
	fs.Var(mapValue("=", &c.NodeLabels), "node-labels", "Labels to add when registering the node (key=value pairs, comma separated).")
	fs.StringVar(&c.RootDir, "root-dir", c.RootDir, "Directory for the agent's files.")
	fs.StringVar(&c.CertDir, "cert-dir", c.CertDir, "Directory for the serving certificate (default <root-dir>/pki).")

	fs.BoolVar(kc.RegisterNode, "register-node", *kc.RegisterNode, "Register the node with the apiserver.")
	fs.Var(taintsValue{&kc.RegisterWithTaints}, "register-with-taints", "Register the node with these taints (comma separated \"<key>=<value>:<effect>\").")
	fs.StringVar(&kc.ContainerRuntimeEndpoint, "container-runtime-endpoint", kc.ContainerRuntimeEndpoint, "The CRI runtime endpoint, e.g. unix:///run/containerd/containerd.sock.")
	fs.StringVar(&kc.ImageServiceEndpoint, "image-service-endpoint", kc.ImageServiceEndpoint, "The CRI image service endpoint; defaults to the runtime endpoint.")
	fs.DurationVar(&kc.RuntimeRequestTimeout.Duration, "runtime-request-timeout", kc.RuntimeRequestTimeout.Duration, "Timeout of CRI requests, except long-running ones.")
	fs.DurationVar(&kc.NodeStatusUpdateFrequency.Duration, "node-status-update-frequency", kc.NodeStatusUpdateFrequency.Duration, "How often the node status is computed.")
	fs.Int32Var(kc.NodeStatusMaxImages, "node-status-max-images", *kc.NodeStatusMaxImages, "The most images reported in the node status; -1 for no limit.")
	fs.StringVar(&kc.CgroupDriver, "cgroup-driver", kc.CgroupDriver, "cgroupfs or systemd; must match the runtime's.")
	fs.StringVar(&kc.CgroupRoot, "cgroup-root", kc.CgroupRoot, "Root cgroup for pods.")
	fs.BoolVar(kc.CgroupsPerQOS, "cgroups-per-qos", *kc.CgroupsPerQOS, "Create the QoS cgroup hierarchy.")
	fs.Int32Var(&kc.MaxPods, "max-pods", kc.MaxPods, "Number of pods that can run on this node.")
	fs.Int32Var(&kc.PodsPerCore, "pods-per-core", kc.PodsPerCore, "Pods per core; 0 disables the limit.")
	fs.Int64Var(kc.PodPidsLimit, "pod-max-pids", *kc.PodPidsLimit, "Maximum processes per pod; -1 for the node's limit.")
	fs.StringVar(&kc.HealthzBindAddress, "healthz-bind-address", kc.HealthzBindAddress, "Address of the healthz and metrics endpoint.")
	fs.Int32Var(kc.HealthzPort, "healthz-port", *kc.HealthzPort, "Port of the healthz and metrics endpoint; 0 disables it.")
	fs.StringVar(&kc.Address, "address", kc.Address, "Address the kubelet API serves on.")
	fs.Int32Var(&kc.Port, "port", kc.Port, "Port the kubelet API serves on.")
	fs.BoolVar(kc.Authentication.Anonymous.Enabled, "anonymous-auth", *kc.Authentication.Anonymous.Enabled, "Allow anonymous requests to the kubelet API.")
	fs.StringVar(&kc.Authentication.X509.ClientCAFile, "client-ca-file", kc.Authentication.X509.ClientCAFile, "CA bundle that signs client certificates for the kubelet API.")
	fs.StringVar((*string)(&kc.Authorization.Mode), "authorization-mode", string(kc.Authorization.Mode), "AlwaysAllow or Webhook.")
	fs.StringVar(&kc.TLSCertFile, "tls-cert-file", kc.TLSCertFile, "Serving certificate of the kubelet API.")
	fs.StringVar(&kc.TLSPrivateKeyFile, "tls-private-key-file", kc.TLSPrivateKeyFile, "Serving key of the kubelet API.")
	fs.StringSliceVar(&kc.ClusterDNS, "cluster-dns", kc.ClusterDNS, "DNS server IPs for pods.")
	fs.StringVar(&kc.ClusterDomain, "cluster-domain", kc.ClusterDomain, "Cluster domain for pod DNS search paths.")
	fs.StringVar(kc.ResolverConfig, "resolv-conf", *kc.ResolverConfig, "Resolver configuration used as the basis for pods' DNS.")
	fs.StringVar(&kc.StaticPodPath, "pod-manifest-path", kc.StaticPodPath, "Directory of static pod manifests.")
	fs.StringVar(&kc.StaticPodURL, "manifest-url", kc.StaticPodURL, "URL of static pod manifests.")
	fs.Var(&headerValue{m: &kc.StaticPodURLHeader}, "manifest-url-header", "HTTP headers of the --manifest-url requests, comma-separated name:value pairs; repeat the flag or a name to send several values ('a:hello,b:again' --manifest-url-header 'b:beautiful').")
	fs.DurationVar(&kc.SyncFrequency.Duration, "sync-frequency", kc.SyncFrequency.Duration, "Maximum period between pod syncs.")
	fs.DurationVar(&kc.FileCheckFrequency.Duration, "file-check-frequency", kc.FileCheckFrequency.Duration, "How often the manifest directory is read.")
	fs.DurationVar(&kc.HTTPCheckFrequency.Duration, "http-check-frequency", kc.HTTPCheckFrequency.Duration, "How often the manifest URL is read.")
	fs.Var(mapValue("=", &kc.KubeReserved), "kube-reserved", "Resources reserved for Kubernetes components (cpu=200m,memory=500Mi,…).")
	fs.Var(mapValue("=", &kc.SystemReserved), "system-reserved", "Resources reserved for the system.")
	fs.Var(mapValue("<", &kc.EvictionHard), "eviction-hard", "Hard eviction thresholds (memory.available<1Gi,…).")
	fs.Var(mapValue("<", &kc.EvictionSoft), "eviction-soft", "Soft eviction thresholds.")
	fs.StringSliceVar(&kc.EnforceNodeAllocatable, "enforce-node-allocatable", kc.EnforceNodeAllocatable, "Levels of node allocatable enforcement.")
	fs.Int32Var(kc.KubeAPIQPS, "kube-api-qps", *kc.KubeAPIQPS, "QPS to the apiserver.")
	fs.Int32Var(&kc.KubeAPIBurst, "kube-api-burst", kc.KubeAPIBurst, "Burst to the apiserver.")
	fs.StringVar(&kc.ContentType, "kube-api-content-type", kc.ContentType, "Content type of requests to the apiserver.")
	fs.Int32Var(kc.EventRecordQPS, "event-qps", *kc.EventRecordQPS, "QPS of event creation.")
	fs.Int32Var(&kc.EventBurst, "event-burst", kc.EventBurst, "Burst of event creation.")
	fs.BoolVar(kc.SerializeImagePulls, "serialize-image-pulls", *kc.SerializeImagePulls, "Pull one image at a time.")
	fs.BoolVar(kc.FailSwapOn, "fail-swap-on", *kc.FailSwapOn, "Fail to start when swap is on.")
	fs.StringVar(&kc.ProviderID, "provider-id", kc.ProviderID, "Unique identifier of the node in the machine database.")
	fs.Var(featureGatesValue{&kc.FeatureGates}, "feature-gates", "Feature gates (key=true|false).")

	b.ignored = make(map[string]*string, len(ignoredKubeletFlags))
	for _, name := range ignoredKubeletFlags {
		b.ignored[name] = fs.String(name, "", "Accepted for kubelet compatibility; nodekit ignores it.")
	}

	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	return fs
}

// ParseFlags builds a Config from kubelet command-line arguments (without the
// program name). As in the kubelet, the KubeletConfiguration file named by
// --config is loaded first and defaulted, then every flag given on the
// command line overrides its field. It returns pflag.ErrHelp for --help, with
// the usage written to the flag set's output. The result is Complete.
func ParseFlags(logger klog.Logger, args []string) (*Config, error) {
	// First pass: find --config (and fail early on malformed flags).
	probe := &flagBinder{cfg: &Config{}}
	SetDefaults(&probe.cfg.Kubelet)
	fs := probe.flagSet("nodeagent")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}

	cfg := &Config{}
	if probe.configFile != "" {
		kc, err := LoadKubeletConfiguration(logger, probe.configFile)
		if err != nil {
			return nil, err
		}
		cfg.Kubelet = *kc
	}
	SetDefaults(&cfg.Kubelet)

	// Second pass: flags given on the command line win over the file.
	b := &flagBinder{cfg: cfg, configFile: probe.configFile}
	if err := b.flagSet("nodeagent").Parse(args); err != nil {
		return nil, err
	}
	for name, v := range b.ignored {
		if *v != "" {
			logger.Info("Kubelet flag accepted but not implemented by nodekit; ignoring it", "flag", "--"+name, "value", *v)
		}
	}
	if b.nodeIPs != "" {
		for _, s := range strings.Split(b.nodeIPs, ",") {
			ip := net.ParseIP(strings.TrimSpace(s))
			if ip == nil {
				return nil, fmt.Errorf("--node-ip: %q is not an IP address", s)
			}
			cfg.NodeIPs = append(cfg.NodeIPs, ip)
		}
	}
	if err := cfg.Complete(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
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
