package agent

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/certificate"
	"github.com/nodekit/nodekit/cgroupdriver"
	"github.com/nodekit/nodekit/eviction"
	"github.com/nodekit/nodekit/lease"
	"github.com/nodekit/nodekit/machine"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/podsource/apiserver"
	"github.com/nodekit/nodekit/resources/allocation"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/stats"
	"github.com/nodekit/nodekit/status"
	"github.com/nodekit/nodekit/volume"
)

// This file translates the Config into each module's Options, the way
// Module does; an embedder wiring pieces without Module (or without fx)
// calls these. None of them does I/O.

// LeaseOptions returns the node Lease's options. onRepeatedFailure runs
// after every failed retry (the agent closes its apiserver connections).
func (cfg *Config) LeaseOptions(onRepeatedFailure func()) lease.Options {
	return lease.Options{
		NodeName:             cfg.NodeName,
		LeaseDurationSeconds: cfg.Kubelet.NodeLeaseDurationSeconds,
		OnRepeatedFailure:    onRepeatedFailure,
	}
}

// BootstrapOptions returns the options of the client certificate's TLS
// bootstrap (certificate.Bootstrap).
func (cfg *Config) BootstrapOptions() certificate.Options {
	return certificate.Options{
		KubeconfigPath:          cfg.KubeconfigPath,
		BootstrapKubeconfigPath: cfg.BootstrapKubeconfigPath,
		CertDir:                 cfg.CertDir,
		NodeName:                cfg.NodeName,
	}
}

// ExternalCloudProvider is the --cloud-provider value of an external cloud
// controller manager.
const ExternalCloudProvider = "external"

// StatusOptions returns the node status Reporter's options (registration
// labels, taints, providerID and the external cloud provider's taint, or no
// registration with registerNode false; frequencies). onRepeatedFailure runs after every
// failed retry of a status update.
func (cfg *Config) StatusOptions(onRepeatedFailure func()) status.Options {
	kc := &cfg.Kubelet
	var taints []v1.Taint
	register := kc.RegisterNode == nil || *kc.RegisterNode
	if register {
		taints = kc.RegisterWithTaints
	}
	return status.Options{
		NodeName:              cfg.NodeName,
		Hostname:              cfg.Hostname,
		Labels:                cfg.NodeLabels,
		Taints:                taints,
		NoRegister:            !register,
		ProviderID:            kc.ProviderID,
		ExternalCloudProvider: cfg.CloudProvider == ExternalCloudProvider,
		UpdateFrequency:       kc.NodeStatusUpdateFrequency.Duration,
		ReportFrequency:       kc.NodeStatusReportFrequency.Duration,
		OnRepeatedFailure:     onRepeatedFailure,
	}
}

// SetterOptions returns the options of the default node status setters:
// addresses, capacity and allocatable (maxPods, podsPerCore, kubeReserved,
// systemReserved, hard eviction thresholds), images, the kubelet port, and
// the node features this agent implements: those its runtime rt supports
// (pods.NodeFeatureSupporter) whose gates are on (pods.NodeDeclaredFeatures,
// which replace what a kubelet that ran the node before declared).
func (cfg *Config) SetterOptions(rt pods.Runtime) (status.SetterOptions, error) {
	kc := &cfg.Kubelet
	declared, err := pods.NodeDeclaredFeatures(nodekit.KubeletVersion(), pods.SupportedNodeFeatures(rt), cfg.Features)
	if err != nil {
		return status.SetterOptions{}, err
	}
	kubeReserved, err := parseResourceList(kc.KubeReserved)
	if err != nil {
		return status.SetterOptions{}, fmt.Errorf("kubeReserved: %w", err)
	}
	systemReserved, err := parseResourceList(kc.SystemReserved)
	if err != nil {
		return status.SetterOptions{}, fmt.Errorf("systemReserved: %w", err)
	}
	return status.SetterOptions{
		Hostname:                        cfg.Hostname,
		NodeIPs:                         cfg.NodeIPs,
		MaxPods:                         kc.MaxPods,
		PodsPerCore:                     kc.PodsPerCore,
		KubeReserved:                    kubeReserved,
		SystemReserved:                  systemReserved,
		EvictionHard:                    kc.EvictionHard,
		NoLocalStorageCapacityIsolation: kc.LocalStorageCapacityIsolation != nil && !*kc.LocalStorageCapacityIsolation,
		NodeStatusMaxImages:             kc.NodeStatusMaxImages,
		KubeletPort:                     kc.Port,
		Roots:                           machine.Roots{RootDir: cfg.RootDir},
		DeclaredFeatures:                declared,
	}, nil
}

func parseResourceList(m map[string]string) (v1.ResourceList, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(v1.ResourceList, len(m))
	for name, value := range m {
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", name, value, err)
		}
		out[v1.ResourceName(name)] = q
	}
	return out, nil
}

// APIServerSourceOptions returns the API server pod source's options;
// nodeSynced gates it on the node watch having listed the node, as the
// kubelet's.
func (cfg *Config) APIServerSourceOptions(nodeSynced func() bool) apiserver.Options {
	return apiserver.Options{NodeName: cfg.NodeName, NodeHasSynced: nodeSynced}
}

// PodsOptions returns the pod lifecycle loop's options: the sync
// frequency, the pods' QoS classification and host IPs read from node
// (the first InternalIP of each family, or --node-ip before the node is
// known). The loop's Sources, Runtime, Statuses and Node come from the
// graph (pods.Module) or the caller.
func (cfg *Config) PodsOptions(node pods.NodeGetter) pods.Options {
	return pods.Options{
		SyncFrequency:        cfg.Kubelet.SyncFrequency.Duration,
		QOSClass:             cgroupdriver.PodQOS,
		HostIPs:              func() []net.IP { return cfg.hostIPs(node) },
		AllowedUnsafeSysctls: cfg.Kubelet.AllowedUnsafeSysctls,
		Features:             cfg.Features,
		CPUManagerPolicy:     cfg.Kubelet.CPUManagerPolicy,
		MemoryManagerPolicy:  cfg.Kubelet.MemoryManagerPolicy,
		Allocations:          allocation.New(allocation.Options{RootDir: cfg.RootDir}),
	}
}

// hostIPs returns the node's IPs as its status reports them (the first
// InternalIP of each family), or the configured --node-ip before the node
// is known.
func (cfg *Config) hostIPs(node pods.NodeGetter) []net.IP {
	n, ok := node.Node()
	if !ok {
		return cfg.NodeIPs
	}
	var v4, v6 net.IP
	for _, a := range n.Status.Addresses {
		ip := net.ParseIP(a.Address)
		if a.Type != v1.NodeInternalIP || ip == nil {
			continue
		}
		if ip.To4() != nil && v4 == nil {
			v4 = ip
		} else if ip.To4() == nil && v6 == nil {
			v6 = ip
		}
	}
	var out []net.IP
	for _, ip := range []net.IP{v4, v6} {
		if ip != nil {
			out = append(out, ip)
		}
	}
	if len(out) == 0 {
		return cfg.NodeIPs
	}
	return out
}

// RuntimeOptions returns the CRI connection's options.
func (cfg *Config) RuntimeOptions() runtime.Options {
	return runtime.Options{
		Endpoint:          cfg.Kubelet.ContainerRuntimeEndpoint,
		ImageEndpoint:     cfg.Kubelet.ImageServiceEndpoint,
		ConnectionTimeout: cfg.Kubelet.RuntimeRequestTimeout.Duration,
	}
}

// CgroupsPerQOS reports whether the agent keeps the kubelet's QoS and pod
// cgroup hierarchy (cgroupsPerQOS, default true).
func (cfg *Config) CgroupsPerQOS() bool {
	return cfg.Kubelet.CgroupsPerQOS == nil || *cfg.Kubelet.CgroupsPerQOS
}

// CgroupOptions returns the cgroup hierarchy's options. allocatable
// returns the kubepods limits (CRI passes the machine's capacity less
// kubeReserved and systemReserved, as the kubelet), activePods the
// admitted pods (the Burstable cgroup's shares), runtimeDriver the
// runtime's cgroup driver for the start-up check (nil skips it).
func (cfg *Config) CgroupOptions(allocatable func() v1.ResourceList, activePods func() []*v1.Pod,
	runtimeDriver func(context.Context) (runtimeapi.CgroupDriver, bool, error)) cgroupdriver.Options {
	kc := &cfg.Kubelet
	return cgroupdriver.Options{
		CgroupDriver:        kc.CgroupDriver,
		CgroupsPerQOS:       kc.CgroupsPerQOS,
		CgroupRoot:          kc.CgroupRoot,
		CPUCFSQuota:         kc.CPUCFSQuota,
		CPUCFSQuotaPeriod:   kc.CPUCFSQuotaPeriod.Duration,
		PodPidsLimit:        *kc.PodPidsLimit,
		NodeAllocatable:     allocatable,
		ActivePods:          activePods,
		RuntimeCgroupDriver: runtimeDriver,
	}
}

// maxParallelImagePulls maps the kubelet's serializeImagePulls and
// maxParallelImagePulls to the pod manager's bound: 1 when serialized, the
// configured bound, or -1 (no bound) when neither says otherwise.
func maxParallelImagePulls(serialize *bool, max *int32) int {
	switch {
	case serialize != nil && *serialize:
		return 1
	case max != nil:
		return int(*max)
	default:
		return -1
	}
}

// PodManagerOptions returns the CRI pod manager's options from the
// KubeletConfiguration; the CRI services, recorder, clock and registerer
// are runtime.PodsModule's to fill. cgroupParent returns a pod's cgroup
// parent (nil: the runtime's default), cgroupVersion the node's cgroup
// version, asked when the first container is configured.
func (cfg *Config) PodManagerOptions(cgroupParent func(context.Context, *v1.Pod) (string, error), cgroupVersion func() (int, error)) (runtime.PodManagerOptions, error) {
	kc := &cfg.Kubelet
	var dns []net.IP
	for _, s := range kc.ClusterDNS {
		ip := net.ParseIP(s)
		if ip == nil {
			return runtime.PodManagerOptions{}, fmt.Errorf("clusterDNS: %q is not an IP address", s)
		}
		dns = append(dns, ip)
	}
	return runtime.PodManagerOptions{
		NodeName:              cfg.NodeName,
		NodeIPs:               cfg.NodeIPs,
		PodLogsDir:            kc.PodLogsDir,
		ContainerLogsDir:      cfg.ContainerLogsDir,
		PodsDir:               filepath.Join(cfg.RootDir, "pods"),
		ClusterDNS:            dns,
		ClusterDomain:         kc.ClusterDomain,
		ResolverConfig:        *kc.ResolverConfig,
		CgroupParent:          cgroupParent,
		QOSClass:              cgroupdriver.PodQOS,
		CPUCFSQuota:           kc.CPUCFSQuota,
		CPUCFSQuotaPeriod:     kc.CPUCFSQuotaPeriod.Duration,
		MaxParallelImagePulls: maxParallelImagePulls(kc.SerializeImagePulls, kc.MaxParallelImagePulls),
		CgroupVersion:         cgroupVersion,
		RegistryPullQPS:       float32(*kc.RegistryPullQPS),
		RegistryBurst:         int(kc.RegistryBurst),
		ContainerGC:           cfg.ContainerGCPolicy(),
		SeccompDefault:        kc.SeccompDefault != nil && *kc.SeccompDefault,
		SeccompProfileRoot:    filepath.Join(cfg.RootDir, "seccomp"),
		Swap:                  &runtime.SwapOptions{Behavior: kc.MemorySwap.SwapBehavior, Critical: eviction.IsCriticalPod},
		MaxContainerBackOff:   maxContainerRestartPeriod(kc),
		MaxParallelPodStarts:  cfg.MaxParallelPodStarts,
	}, nil
}

// maxContainerRestartPeriod is crashLoopBackOff.maxContainerRestartPeriod
// (set by the defaults while the KubeletCrashLoopBackOffMax gate is on), 0
// for the runtime's default.
func maxContainerRestartPeriod(kc *kubeletconfig.KubeletConfiguration) time.Duration {
	if p := kc.CrashLoopBackOff.MaxContainerRestartPeriod; p != nil {
		return p.Duration
	}
	return 0
}

// ContainerGCPolicy returns the container garbage collection policy of the
// kubelet's --minimum-container-ttl-duration,
// --maximum-dead-containers-per-container and --maximum-dead-containers.
func (cfg *Config) ContainerGCPolicy() *runtime.ContainerGCPolicy {
	p := runtime.DefaultContainerGCPolicy()
	p.MinAge = cfg.MinimumContainerTTLDuration
	if cfg.MaxPerPodContainerCount != nil {
		p.MaxPerPodContainer = int(*cfg.MaxPerPodContainerCount)
	}
	if cfg.MaxContainerCount != nil {
		p.MaxContainers = int(*cfg.MaxContainerCount)
	}
	return &p
}

// ImageGCOptions returns the image garbage collector's options:
// imageGCHighThresholdPercent, imageGCLowThresholdPercent,
// imageMinimumGCAge, imageMaximumGCAge and --pod-infra-container-image.
// The CRI services, recorder, clock and registerer are the caller's to
// fill.
func (cfg *Config) ImageGCOptions() runtime.ImageGCOptions {
	kc := &cfg.Kubelet
	o := runtime.ImageGCOptions{
		HighThresholdPercent: ptr.To(int(*kc.ImageGCHighThresholdPercent)),
		LowThresholdPercent:  ptr.To(int(*kc.ImageGCLowThresholdPercent)),
		MinAge:               ptr.To(kc.ImageMinimumGCAge.Duration),
		MaxAge:               kc.ImageMaximumGCAge.Duration,
		NodeName:             cfg.NodeName,
	}
	if cfg.PodInfraContainerImage != "" {
		o.PinnedImages = []string{cfg.PodInfraContainerImage}
	}
	return o
}

// LogRotatorOptions returns the container log rotation's options:
// containerLogMaxSize, containerLogMaxFiles, containerLogMaxWorkers and
// containerLogMonitorInterval. The CRI service and clock are the caller's
// to fill.
func (cfg *Config) LogRotatorOptions() (runtime.LogRotatorOptions, error) {
	kc := &cfg.Kubelet
	size, err := cfg.ContainerLogMaxSize()
	if err != nil {
		return runtime.LogRotatorOptions{}, err
	}
	return runtime.LogRotatorOptions{
		MaxSize:         size,
		MaxFiles:        int(*kc.ContainerLogMaxFiles),
		Workers:         int(*kc.ContainerLogMaxWorkers),
		MonitorInterval: kc.ContainerLogMonitorInterval.Duration,
	}, nil
}

// VolumeOptions returns the volume manager's options: the root directory,
// the node's name, the resync period (syncFrequency, how often configMap,
// secret, downwardAPI and projected volumes are rewritten at the latest).
// The pod functions (PodKnown, SourcesReady), the node's allocatable, the
// client, recorder, clock and registerer are the caller's to fill.
func (cfg *Config) VolumeOptions() volume.Options {
	return volume.Options{
		RootDir:      cfg.RootDir,
		NodeName:     cfg.NodeName,
		ResyncPeriod: cfg.Kubelet.SyncFrequency.Duration,
	}
}

// StatsOptions returns the stats provider's options: the node's name, its
// root and pod log directories, the system cgroups (kubeletCgroups,
// systemCgroups). The CRI services, the cgroup hierarchy and volume usage
// come from the graph (stats.Module) or the caller.
func (cfg *Config) StatsOptions() stats.Options {
	kc := &cfg.Kubelet
	return stats.Options{
		NodeName:      cfg.NodeName,
		RootDir:       cfg.RootDir,
		PodLogsDir:    kc.PodLogsDir,
		SystemCgroups: stats.SystemCgroups{Kubelet: kc.KubeletCgroups, Misc: kc.SystemCgroups},
	}
}
