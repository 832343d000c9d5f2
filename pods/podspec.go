package pods

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/dranodeallocatableresources"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/draoptionalnodeoperations"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/extendwebsocketstokubelet"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/inplacepodresize"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/restartallcontainers"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/usernamespaceshostnetwork"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/volumebindmountoptions"
	ndftypes "k8s.io/component-helpers/nodedeclaredfeatures/types"

	"github.com/nodekit/nodekit/features"
	"github.com/nodekit/nodekit/podstate"
)

// Names and orders of the admit handlers that refuse pods whose spec asks
// for what the node cannot do, in the kubelet's order around
// GeneralPredicates: sysctls before it; AppArmor, pod features and declared
// features after it.
const (
	AdmitSysctls          = "Sysctls"
	AdmitAppArmor         = "AppArmor"
	AdmitPodFeatures      = "PodFeatures"
	AdmitDeclaredFeatures = "DeclaredFeatures"

	OrderSysctls          = 150
	OrderAppArmor         = 300
	OrderPodFeatures      = 400
	OrderDeclaredFeatures = 500
)

// Admission failure reasons of the pod-spec handlers, as the kubelet
// writes them.
const (
	ReasonSysctlForbidden       = "SysctlForbidden"
	ReasonAppArmor              = "AppArmor"
	ReasonPodFeatureUnsupported = "PodFeatureUnsupported"
)

// safeSysctl is a sysctl the kubelet allows every pod, on kernels from
// kernel on ("" any) where it is namespaced.
type safeSysctl struct {
	name, kernel string
}

// safeSysctls is the kubelet's safe sysctl list (pkg/kubelet/sysctl).
var safeSysctls = []safeSysctl{
	{name: "kernel.shm_rmid_forced"},
	{name: "net.ipv4.ip_local_port_range"},
	{name: "net.ipv4.tcp_syncookies"},
	{name: "net.ipv4.ping_group_range"},
	{name: "net.ipv4.ip_unprivileged_port_start"},
	{name: "net.ipv4.ip_local_reserved_ports", kernel: "3.16"},
	{name: "net.ipv4.tcp_keepalive_time", kernel: "4.5"},
	{name: "net.ipv4.tcp_fin_timeout", kernel: "4.6"},
	{name: "net.ipv4.tcp_keepalive_intvl", kernel: "4.5"},
	{name: "net.ipv4.tcp_keepalive_probes", kernel: "4.5"},
	{name: "net.ipv4.tcp_rmem", kernel: "4.15"},
	{name: "net.ipv4.tcp_wmem", kernel: "4.15"},
	{name: "net.ipv4.tcp_slow_start_after_idle", kernel: "4.15"},
	{name: "net.ipv4.tcp_notsent_lowat", kernel: "4.6"},
}

// SafeSysctls returns the kubelet's safe sysctls on a kernel of release
// kernel (uname -r; "" or unparsable: only those safe on every kernel).
func SafeSysctls(kernel string) []string {
	kv, _ := version.ParseGeneric(kernel)
	var out []string
	for _, s := range safeSysctls {
		if s.kernel == "" || (kv != nil && kv.AtLeast(version.MustParseGeneric(s.kernel))) {
			out = append(out, s.name)
		}
	}
	return out
}

// sysctlPattern is the API's sysctl pattern syntax (a trailing * allowed).
var sysctlPattern = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]$`)

// Sysctls is the kubelet's sysctl admit handler: a pod may set the safe
// sysctls of kernel (see SafeSysctls) and those allowedUnsafe lists
// (allowedUnsafeSysctls: names, or prefixes ending in *); any other is
// refused with SysctlForbidden, as is a net.* sysctl with hostNetwork, an
// IPC one with hostIPC and a user one without a user namespace. It fails
// for a pattern that is invalid or not known to be namespaced, as the
// kubelet fails to start.
func Sysctls(kernel string, allowedUnsafe []string) (AdmitHandler, error) {
	names := map[string]utilsysctl.Namespace{}
	prefixes := map[string]utilsysctl.Namespace{}
	for _, s := range append(SafeSysctls(kernel), allowedUnsafe...) {
		if len(s) > 253 || !sysctlPattern.MatchString(s) {
			return nil, fmt.Errorf("sysctl %q must have at most 253 characters and match regex %s", s, sysctlPattern)
		}
		ns, nameOrPrefix, prefixed := utilsysctl.GetNamespace(s)
		if ns == utilsysctl.UnknownNamespace {
			return nil, fmt.Errorf("the sysctls %q are not known to be namespaced", nameOrPrefix)
		}
		if prefixed {
			prefixes[nameOrPrefix] = ns
		} else {
			names[nameOrPrefix] = ns
		}
	}
	check := func(name string, hostNet, hostIPC, hostUsers bool) error {
		name = utilsysctl.NormalizeName(name)
		ns, ok := names[name]
		if !ok {
			for p, pns := range prefixes {
				if strings.HasPrefix(name, p) {
					ns, ok = pns, true
					break
				}
			}
		}
		if !ok {
			return fmt.Errorf("%q not allowlisted", name)
		}
		if (ns == utilsysctl.IPCNamespace && hostIPC) || (ns == utilsysctl.NetNamespace && hostNet) ||
			(ns == utilsysctl.UserNamespace && hostUsers) {
			return fmt.Errorf("%q not allowed with host %s enabled", name, ns)
		}
		return nil
	}
	return AdmitFunc(func(a AdmitAttributes) AdmitResult {
		sc := a.Pod.Spec.SecurityContext
		if sc == nil || len(sc.Sysctls) == 0 {
			return AdmitResult{Admit: true}
		}
		hostUsers := a.Pod.Spec.HostUsers == nil || *a.Pod.Spec.HostUsers
		for _, s := range sc.Sysctls {
			if err := check(s.Name, a.Pod.Spec.HostNetwork, a.Pod.Spec.HostIPC, hostUsers); err != nil {
				return AdmitResult{Reason: ReasonSysctlForbidden, Message: fmt.Sprintf("forbidden sysctl: %v", err)}
			}
		}
		return AdmitResult{Admit: true}
	}), nil
}

// appArmorRequired reports whether pod asks for an AppArmor profile other
// than unconfined, in a field or an annotation (apparmor.isRequired).
func appArmorRequired(pod *v1.Pod) bool {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.AppArmorProfile != nil && sc.AppArmorProfile.Type != v1.AppArmorProfileTypeUnconfined {
		return true
	}
	required := false
	visitContainers(&pod.Spec, func(c *v1.Container) {
		if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil &&
			c.SecurityContext.AppArmorProfile.Type != v1.AppArmorProfileTypeUnconfined {
			required = true
		}
	})
	if required {
		return true
	}
	for key, value := range pod.Annotations {
		if strings.HasPrefix(key, v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) && value != v1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return true
		}
	}
	return false
}

// visitContainers calls f on every init, regular and ephemeral container of
// spec (ephemeral ones as their common fields).
func visitContainers(spec *v1.PodSpec, f func(*v1.Container)) {
	for i := range spec.InitContainers {
		f(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		f(&spec.Containers[i])
	}
	for i := range spec.EphemeralContainers {
		c := v1.Container(spec.EphemeralContainers[i].EphemeralContainerCommon)
		f(&c)
	}
}

// HostAppArmorEnabled reports whether the kernel enforces AppArmor
// (/sys/module/apparmor/parameters/enabled is Y), what the kubelet checks
// at start.
func HostAppArmorEnabled() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && len(b) > 0 && b[0] == 'Y'
}

// AppArmor is the kubelet's AppArmor admit handler: a pending pod that
// asks for an AppArmor profile (field or annotation, anything but
// unconfined) is refused with reason AppArmor when the host does not
// enforce AppArmor (hostEnabled false), or when a localhost profile has no
// name. The runtime applies the profiles of the pods admitted.
func AppArmor(hostEnabled bool) AdmitHandler {
	return AdmitFunc(func(a AdmitAttributes) AdmitResult {
		pod := a.Pod
		// A static pod has no phase yet (the kubelet's sources set
		// Pending): it is checked too.
		if (pod.Status.Phase != v1.PodPending && pod.Status.Phase != "") || !appArmorRequired(pod) {
			return AdmitResult{Admit: true}
		}
		if !hostEnabled {
			return AdmitResult{Reason: ReasonAppArmor, Message: "Cannot enforce AppArmor: AppArmor is not enabled on the host"}
		}
		var err error
		visitContainers(&pod.Spec, func(c *v1.Container) {
			p := podstate.AppArmorProfile(pod, c)
			if err == nil && p != nil && p.Type == v1.AppArmorProfileTypeLocalhost &&
				(p.LocalhostProfile == nil || strings.TrimSpace(*p.LocalhostProfile) == "") {
				err = fmt.Errorf("invalid empty AppArmor profile name: %q", p)
			}
		})
		if err != nil {
			return AdmitResult{Reason: ReasonAppArmor, Message: fmt.Sprintf("Cannot enforce AppArmor: %v", err)}
		}
		return AdmitResult{Admit: true}
	})
}

// PodFeature names a pod feature PodFeatures refuses unless told the node
// supports it.
type PodFeature string

// Pod features a node's modules support, which PodFeatures then admits.
const (
	// FeatureResourceClaims is the pods' resourceClaims (Dynamic Resource
	// Allocation): the agent's DRA module supports it.
	FeatureResourceClaims PodFeature = "resourceClaims"
	// FeatureUserNamespaces is the pods' hostUsers: false: the agent's
	// user namespace manager supports it (the runtime then fails the
	// sandbox of a pod whose runtime handler has no user namespaces, as
	// the kubelet).
	FeatureUserNamespaces PodFeature = "userNamespaces"
)

// SupportedPodFeatureGroup is the fx value group of the PodFeature values
// the node supports, which the default PodFeatures admit handler admits.
const SupportedPodFeatureGroup = "pod_supported_features"

// AsSupportedPodFeature returns an fx option telling the default
// PodFeatures admit handler that the node supports f (a module that
// implements it adds it).
func AsSupportedPodFeature(f PodFeature) fx.Option {
	return fx.Supply(fx.Annotated{Group: SupportedPodFeatureGroup, Target: f})
}

// PodFeatures refuses, with reason PodFeatureUnsupported, a pod that asks
// for what nodekit does not implement, so it never runs without it: user
// namespaces (hostUsers: false) unless supported lists
// FeatureUserNamespaces, resource claims (DRA) unless it lists
// FeatureResourceClaims, and raw block volumes (volumeDevices). Image
// volumes are admitted, as by the kubelet: the runtime package pulls them
// and the runtime mounts them; a runtime without image volumes fails the
// container with its CreateContainer error.
func PodFeatures(supported ...PodFeature) AdmitHandler {
	claims := slices.Contains(supported, FeatureResourceClaims)
	userns := slices.Contains(supported, FeatureUserNamespaces)
	return AdmitFunc(func(a AdmitAttributes) AdmitResult {
		spec := &a.Pod.Spec
		if spec.HostUsers != nil && !*spec.HostUsers && !userns {
			return AdmitResult{Reason: ReasonPodFeatureUnsupported,
				Message: "can't set `spec.hostUsers: false`, this node does not support user namespaces"}
		}
		if len(spec.ResourceClaims) > 0 && !claims {
			return AdmitResult{Reason: ReasonPodFeatureUnsupported,
				Message: "resource claims (dynamic resource allocation) are not supported by this node"}
		}
		var device string
		visitContainers(spec, func(c *v1.Container) {
			if len(c.VolumeDevices) > 0 && device == "" {
				device = c.VolumeDevices[0].Name
			}
		})
		if device != "" {
			return AdmitResult{Reason: ReasonPodFeatureUnsupported,
				Message: fmt.Sprintf("volume device %q: raw block volumes are not supported by this node", device)}
		}
		return AdmitResult{Admit: true}
	})
}

// criFeatures are the node features of
// k8s.io/component-helpers/nodedeclaredfeatures the CRI path implements, by
// the feature gate each one's discovery asks for: a running non-sidecar
// init container is resized in place (runtime's computePodActions), and so
// are pod-level resources (the pod's cgroup, runtime/resize.go); a
// container's exit matching a RestartAllContainers rule restarts all the
// pod's containers in place (runtime's SyncInput.RestartAllContainers,
// podstatus's AllContainersRestarting condition); the node API serves exec,
// attach and port-forward over WebSockets itself (server/websocket.go), so
// the API server proxies them unchanged.
var criFeatures = []string{
	inplacepodresize.IPPRInitContainersFeatureGate,
	inplacepodresize.IPPRPodLevelResourcesFeatureGate,
	extendwebsocketstokubelet.ExtendWebSocketsToKubeletFeatureGate,
	restartallcontainers.RestartAllContainersOnContainerExits,
}

// CRIFeatures returns the feature gates of the node features
// (k8s.io/component-helpers/nodedeclaredfeatures) that a node running its
// pods on a CRI runtime with nodekit's runtime and server packages
// implements: runtime.Backend's SupportedNodeFeatures.
func CRIFeatures() []string { return slices.Clone(criFeatures) }

// NodeFeatureSupporter is an optional capability of a Runtime, and of a
// PodBackend (BackendRuntime passes it on): the feature gates of the node
// features (k8s.io/component-helpers/nodedeclaredfeatures) whose behaviour
// it implements, so the node declares them (NodeDeclaredFeatures) when
// the gates are on. A Runtime or PodBackend without it implements none: its
// node declares no feature, and the scheduler places no pod that needs one
// on it.
type NodeFeatureSupporter interface {
	// SupportedNodeFeatures returns the gates' names. It must not block.
	SupportedNodeFeatures() []string
}

// SupportedNodeFeatures returns rt's SupportedNodeFeatures, none when it
// is not a NodeFeatureSupporter.
func SupportedNodeFeatures(rt Runtime) []string { return supportedNodeFeatures(rt) }

// supportedNodeFeatures returns v's SupportedNodeFeatures, none when v
// (a Runtime or a PodBackend) is not a NodeFeatureSupporter.
func supportedNodeFeatures(v any) []string {
	if s, ok := v.(NodeFeatureSupporter); ok {
		return s.SupportedNodeFeatures()
	}
	return nil
}

// undeclaredFeatures are the node features of the registry this node does
// not implement, with why: a pod needing one is not scheduled here (the
// scheduler matches status.declaredFeatures) and is refused if bound
// anyway. A feature upstream adds to the registry is in neither table, and
// a test fails.
var undeclaredFeatures = map[string]string{
	inplacepodresize.IPPRMemoryBackedVolumesFeatureGate:            "memory-backed emptyDir size limits are not resized (alpha, off on the kubelet too)",
	usernamespaceshostnetwork.UserNamespacesHostNetworkSupport:     "user namespaces with hostNetwork are not implemented (alpha, off on the kubelet too: the API server refuses such pods)",
	dranodeallocatableresources.DRANodeAllocatableResourcesFeature: "DRA node allocatable resources are not implemented (alpha, off on the kubelet too)",
	draoptionalnodeoperations.DRAOptionalNodeOperationsFeatureGate: "DRA optional node operations are not implemented (alpha, off on the kubelet too)",
	volumebindmountoptions.VolumeBindMountOptionsFeatureName:       "volumeMounts' bindMountOptions are not passed to the runtime",
}

// NodeDeclaredFeatures returns the node's status.declaredFeatures: the
// features of k8s.io/component-helpers/nodedeclaredfeatures whose gates
// the node's runtime supports (supported, see NodeFeatureSupporter) and
// gates enables (nil: the defaults), discovered as the kubelet discovers
// its own for kubeletVersion (a feature past its registry MaxVersion is not
// declared), sorted as the API requires. It is never nil, so that a node
// taken over from a kubelet drops the kubelet's declaration.
func NodeDeclaredFeatures(kubeletVersion string, supported []string, gates *features.Gates) ([]string, error) {
	v, err := version.ParseSemantic(kubeletVersion)
	if err != nil {
		return nil, fmt.Errorf("kubelet version %q: %w", kubeletVersion, err)
	}
	on := make(ndftypes.FeatureGateMap, len(supported))
	for _, gate := range supported {
		on[gate] = gates.EnabledName(gate)
	}
	names := ndf.DefaultFramework.DiscoverNodeFeatures(&ndf.NodeConfiguration{FeatureGates: on, Version: v})
	if names == nil {
		names = []string{}
	}
	slices.Sort(names)
	return names, nil
}

// DeclaredFeatures is the kubelet's declared-features admit handler: a pod
// that needs a node feature (k8s.io/component-helpers/nodedeclaredfeatures,
// e.g. VolumeBindMountOptions for a volume mount's bindMountOptions) that
// is not among declared, the node's own features (NodeDeclaredFeatures), is
// refused with PodFeatureUnsupported, as on a kubelet without that
// feature. As the kubelet's, it matches the node's own features, not the
// Node object's, which may still carry what a previous agent declared.
// kubeletVersion is the version the node reports.
func DeclaredFeatures(kubeletVersion string, declared []string) (AdmitHandler, error) {
	v, err := version.ParseSemantic(kubeletVersion)
	if err != nil {
		return nil, fmt.Errorf("kubelet version %q: %w", kubeletVersion, err)
	}
	fw := ndf.DefaultFramework
	own, err := fw.MapSorted(declared)
	if err != nil {
		return nil, fmt.Errorf("declared features %v: %w", declared, err)
	}
	return AdmitFunc(func(a AdmitAttributes) AdmitResult {
		reqs, err := fw.InferForPodScheduling(&ndf.PodInfo{Spec: &a.Pod.Spec, Status: &a.Pod.Status}, v)
		if err != nil {
			return AdmitResult{Reason: ReasonPodFeatureUnsupported, Message: fmt.Sprintf("Failed to infer pod's feature requirements: %v", err)}
		}
		if reqs.IsEmpty() {
			return AdmitResult{Admit: true}
		}
		match, err := fw.MatchNodeFeatureSet(reqs, own)
		if err != nil {
			return AdmitResult{Reason: ReasonPodFeatureUnsupported, Message: fmt.Sprintf("Failed to match pod's feature requirements against the node: %v", err)}
		}
		if !match.IsMatch {
			return AdmitResult{Reason: ReasonPodFeatureUnsupported,
				Message: fmt.Sprintf("Pod requires node features that are not available: %s", strings.Join(match.UnsatisfiedRequirements, ", "))}
		}
		return AdmitResult{Admit: true}
	}), nil
}
