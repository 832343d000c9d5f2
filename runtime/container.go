package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/podstate"
)

// CPU share and quota bounds of the Linux CFS, as the kubelet's.
const (
	minShares      = 2
	maxShares      = 262144
	sharesPerCPU   = 1024
	milliCPUToCPU  = 1000
	minQuotaPeriod = 1000 // µs
)

// OOM score adjustments by QoS class, as the kubelet's.
const (
	guaranteedOOMScoreAdj = -997
	besteffortOOMScoreAdj = 1000
)

// imageUser is the user an image runs as, for runAsNonRoot checks.
type imageUser struct {
	uid      *int64
	username string
}

// containerConfig returns the CRI config of one instance of container c.
// podIPs are the sandbox's IPs (for the downward API and /etc/hosts), vols
// the pod's mounted volumes; nsTarget, when set, is the container whose
// process namespace an ephemeral container joins; userns is the sandbox's
// user namespace, whose mappings (mode POD) idmap every mount, as the
// kubelet's.
func (m *PodManager) containerConfig(ctx context.Context, pod *v1.Pod, c *v1.Container, restartCount int, imageRef string, user imageUser, podIPs []string, vols PodVolumes, nsTarget string, userns *runtimeapi.UserNamespace) (*runtimeapi.ContainerConfig, error) {
	env, err := m.makeEnv(ctx, pod, c, envContext{podIPs: podIPs, hostIPs: m.opts.NodeIPs})
	if err != nil {
		return nil, err
	}
	sc, err := m.securityContext(pod, c)
	if err != nil {
		return nil, err
	}
	if err := verifyRunAsNonRoot(pod, c, sc, user); err != nil {
		return nil, err
	}
	if sc.RunAsUser == nil {
		if user.uid != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *user.uid}
		}
		sc.RunAsUsername = user.username
	}
	if nsTarget != "" && sc.NamespaceOptions.GetPid() == runtimeapi.NamespaceMode_CONTAINER {
		sc.NamespaceOptions.Pid = runtimeapi.NamespaceMode_TARGET
		sc.NamespaceOptions.TargetId = nsTarget
	}
	sc.NamespaceOptions.UsernsOptions = userns
	mounts, err := m.mounts(ctx, pod, c, vols, env, podIPs)
	if err != nil {
		return nil, err
	}
	facts, err := m.machineFacts()
	if err != nil {
		return nil, err
	}
	logDir := filepath.Dir(ContainerLogPath(m.opts.PodLogsDir, pod.Namespace, pod.Name, pod.UID, c.Name, 0))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("create container log directory for container %s failed: %w", c.Name, err)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restartCount)},
		Image:       &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: c.Image},
		Command:     expandAll(c.Command, env),
		Args:        expandAll(c.Args, env),
		WorkingDir:  c.WorkingDir,
		Labels:      containerLabels(pod, c),
		Annotations: containerAnnotations(ctx, pod, c, restartCount),
		Mounts:      mounts,
		LogPath:     filepath.Join(c.Name, fmt.Sprintf("%d.log", restartCount)),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       m.containerResources(pod, c, facts),
			SecurityContext: sc,
		},
	}
	for _, e := range env {
		cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: e.name, Value: []byte(e.value)})
	}
	if dr := m.opts.DynamicResources; dr != nil {
		if err := dr.ApplyContainerConfig(ctx, pod, c, cfg); err != nil {
			return nil, err
		}
	}
	if m.opts.ContainerConfigHook != nil {
		if err := m.opts.ContainerConfigHook(ctx, pod, c, cfg); err != nil {
			return nil, err
		}
	}
	if userns.GetMode() == runtimeapi.NamespaceMode_POD {
		// Every mount, the devices' too, is idmapped with the pod's
		// mappings: a file keeps its owner inside the pod.
		for _, mnt := range cfg.Mounts {
			mnt.UidMappings, mnt.GidMappings = userns.GetUids(), userns.GetGids()
		}
	}
	return cfg, nil
}

// milliCPUToShares converts a CPU request to cgroup v1 cpu.shares.
func milliCPUToShares(milli int64) int64 {
	if milli == 0 {
		return minShares
	}
	return min(max(milli*sharesPerCPU/milliCPUToCPU, minShares), maxShares)
}

// milliCPUToQuota converts a CPU limit to a CFS quota for period (µs).
func milliCPUToQuota(milli, period int64) int64 {
	if milli == 0 {
		return 0
	}
	return max(milli*period/milliCPUToCPU, minQuotaPeriod)
}

// containerResources returns c's CRI Linux resources: CPU shares from the
// request (the limit when no request is set), CFS quota and period from the
// limit, the memory limit, and the OOM score adjustment of the pod's QoS.
func (m *PodManager) containerResources(pod *v1.Pod, c *v1.Container, facts machineFacts) *runtimeapi.LinuxContainerResources {
	// A limit the container does not set is the pod-level one, as the
	// kubelet's getCPULimit and getMemoryLimit.
	limits := podstate.EffectiveResources(pod.Spec.Resources, &c.Resources).Limits
	cpuLimit := limits.Cpu().MilliValue()
	cpuRequest := cpuLimit
	if q, ok := c.Resources.Requests[v1.ResourceCPU]; ok {
		cpuRequest = q.MilliValue()
	}
	r := &runtimeapi.LinuxContainerResources{
		CpuShares:          milliCPUToShares(cpuRequest),
		MemoryLimitInBytes: limits.Memory().Value(),
		OomScoreAdj:        m.oomScoreAdj(pod, c, facts.memoryCapacity),
	}
	if m.cfsQuota {
		period := m.opts.CPUCFSQuotaPeriod.Microseconds()
		r.CpuPeriod = period
		r.CpuQuota = milliCPUToQuota(cpuLimit, period)
	}
	if facts.cgroupV2 {
		r.Unified = map[string]string{"memory.oom.group": "1", "memory.high": "max"}
	}
	m.configureSwap(r, pod, c, facts)
	return r
}

// podQOS is pod's QoS class by QOSClass, else its status, Burstable when
// that is empty.
func (m *PodManager) podQOS(pod *v1.Pod) v1.PodQOSClass {
	qos := pod.Status.QOSClass
	if m.opts.QOSClass != nil {
		qos = m.opts.QOSClass(pod)
	}
	if qos == "" {
		return v1.PodQOSBurstable
	}
	return qos
}

// oomScoreAdj returns the kubelet's OOM score adjustment for c: -997 for
// Guaranteed pods, 1000 for BestEffort, and for Burstable pods 1000 minus
// the container's share of the node's memory in thousandths, kept within
// [3, 999] (a sidecar gets no more than the pod's smallest regular
// container).
func (m *PodManager) oomScoreAdj(pod *v1.Pod, c *v1.Container, capacity int64) int64 {
	switch m.podQOS(pod) {
	case v1.PodQOSGuaranteed:
		return guaranteedOOMScoreAdj
	case v1.PodQOSBestEffort:
		return besteffortOOMScoreAdj
	}
	adj := 1000 - 1000*c.Resources.Requests.Memory().Value()/capacity
	if isSidecar(c) && findInit(pod, c.Name) {
		minRequest := int64(-1)
		for i := range pod.Spec.Containers {
			req := pod.Spec.Containers[i].Resources.Requests.Memory().Value()
			if minRequest < 0 || req < minRequest {
				minRequest = req
			}
		}
		if minRequest >= 0 {
			adj = min(adj, 1000-1000*minRequest/capacity)
		}
	}
	if adj < 1000+guaranteedOOMScoreAdj {
		return 1000 + guaranteedOOMScoreAdj
	}
	if adj == besteffortOOMScoreAdj {
		return adj - 1
	}
	return adj
}

func findInit(pod *v1.Pod, name string) bool {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return true
		}
	}
	return false
}

// defaultMaskedPaths and defaultReadonlyPaths are the /proc and /sys paths
// the kubelet masks or makes read-only in unprivileged containers.
var (
	defaultMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// securityContext returns c's CRI security context: the container's
// security context with the pod's as defaults (user, group, SELinux,
// seccomp), capabilities, privileged, read-only root, no-new-privileges
// (allowPrivilegeEscalation: false), the pod's namespaces and supplemental
// groups, and the default masked and read-only paths.
func (m *PodManager) securityContext(pod *v1.Pod, c *v1.Container) (*runtimeapi.LinuxContainerSecurityContext, error) {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &v1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &v1.SecurityContext{}
	}
	sc := &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions:         namespaceOptions(pod),
		SupplementalGroups:       supplementalGroups(psc),
		SupplementalGroupsPolicy: supplementalGroupsPolicy(psc),
		SelinuxOptions:           selinuxOptions(firstNonNil(csc.SELinuxOptions, psc.SELinuxOptions)),
		MaskedPaths:              defaultMaskedPaths,
		ReadonlyPaths:            defaultReadonlyPaths,
	}
	if u := firstNonNil(csc.RunAsUser, psc.RunAsUser); u != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *u}
	}
	if g := firstNonNil(csc.RunAsGroup, psc.RunAsGroup); g != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *g}
	}
	if csc.Privileged != nil {
		sc.Privileged = *csc.Privileged
	}
	if csc.ReadOnlyRootFilesystem != nil {
		sc.ReadonlyRootfs = *csc.ReadOnlyRootFilesystem
	}
	if csc.AllowPrivilegeEscalation != nil {
		sc.NoNewPrivs = !*csc.AllowPrivilegeEscalation
	}
	if caps := csc.Capabilities; caps != nil {
		sc.Capabilities = &runtimeapi.Capability{}
		for _, a := range caps.Add {
			sc.Capabilities.AddCapabilities = append(sc.Capabilities.AddCapabilities, string(a))
		}
		for _, d := range caps.Drop {
			sc.Capabilities.DropCapabilities = append(sc.Capabilities.DropCapabilities, string(d))
		}
	}
	if csc.ProcMount != nil && *csc.ProcMount == v1.UnmaskedProcMount {
		sc.MaskedPaths, sc.ReadonlyPaths = []string{}, []string{}
	}
	profile, err := m.seccompProfile(firstNonNil(csc.SeccompProfile, psc.SeccompProfile))
	if err != nil {
		return nil, err
	}
	sc.Seccomp = profile
	if sc.Apparmor, sc.ApparmorProfile, err = appArmorProfile(pod, c); err != nil {
		return nil, err
	}
	return sc, nil
}

// appArmorProfile returns c's AppArmor profile for the runtime, in the CRI
// field and in the deprecated string form older runtimes (containerd 1.6)
// read; nil and "" leave the runtime's default. Pod admission refused the
// pods that ask for one on a host without AppArmor.
func appArmorProfile(pod *v1.Pod, c *v1.Container) (*runtimeapi.SecurityProfile, string, error) {
	p := podstate.AppArmorProfile(pod, c)
	if p == nil {
		return nil, "", nil
	}
	switch p.Type {
	case v1.AppArmorProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, v1.DeprecatedAppArmorBetaProfileRuntimeDefault, nil
	case v1.AppArmorProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, v1.DeprecatedAppArmorBetaProfileNameUnconfined, nil
	case v1.AppArmorProfileTypeLocalhost:
		if p.LocalhostProfile == nil {
			return nil, "", errors.New("missing localhost apparmor profile name")
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: *p.LocalhostProfile},
			v1.DeprecatedAppArmorBetaProfileNamePrefix + *p.LocalhostProfile, nil
	}
	return nil, "", fmt.Errorf("unknown apparmor profile type: %q", p.Type)
}

func firstNonNil[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

func (m *PodManager) seccompProfile(p *v1.SeccompProfile) (*runtimeapi.SecurityProfile, error) {
	if p == nil {
		if m.opts.SeccompDefault {
			return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	}
	switch p.Type {
	case v1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case v1.SeccompProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	case v1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return nil, errors.New("localhost seccomp profile without a localhostProfile")
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost,
			LocalhostRef: filepath.Join(m.opts.SeccompProfileRoot, *p.LocalhostProfile)}, nil
	}
	return nil, fmt.Errorf("unknown seccomp profile type %q", p.Type)
}

// verifyRunAsNonRoot enforces runAsNonRoot against the effective user.
func verifyRunAsNonRoot(pod *v1.Pod, c *v1.Container, sc *runtimeapi.LinuxContainerSecurityContext, user imageUser) error {
	var nonRoot *bool
	if c.SecurityContext != nil {
		nonRoot = c.SecurityContext.RunAsNonRoot
	}
	if nonRoot == nil && pod.Spec.SecurityContext != nil {
		nonRoot = pod.Spec.SecurityContext.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		return nil
	}
	switch {
	case sc.RunAsUser != nil:
		if sc.RunAsUser.Value == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podDesc(pod), c.Name)
		}
	case user.uid != nil:
		if *user.uid == 0 {
			return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podDesc(pod), c.Name)
		}
	case user.username != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", user.username, podDesc(pod), c.Name)
	default:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podDesc(pod), c.Name)
	}
	return nil
}

// mounts returns c's mounts: its volume mounts (of the pod's mounted
// volumes, see volumeMounts), the pod's /etc/hosts unless a volume is
// mounted there, and the container's termination message file.
func (m *PodManager) mounts(ctx context.Context, pod *v1.Pod, c *v1.Container, vols PodVolumes, env []envVar, podIPs []string) ([]*runtimeapi.Mount, error) {
	out, etcHosts, err := volumeMounts(ctx, pod, c, vols, env)
	if err != nil {
		return nil, err
	}
	mounted := map[string]bool{}
	for _, mnt := range out {
		mounted[mnt.ContainerPath] = true
	}
	if !etcHosts {
		hosts, err := m.writeEtcHosts(pod, podIPs)
		if err != nil {
			return nil, err
		}
		out = append(out, &runtimeapi.Mount{ContainerPath: etcHostsPath, HostPath: hosts})
	}
	if c.TerminationMessagePath != "" && !mounted[c.TerminationMessagePath] {
		dir := filepath.Join(m.podDir(pod.UID), "containers", c.Name)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create termination message directory of container %s: %w", c.Name, err)
		}
		path := filepath.Join(dir, strconv.FormatUint(uint64(rand.Uint32()), 16))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o666)
		if err != nil {
			return nil, fmt.Errorf("create termination message file of container %s: %w", c.Name, err)
		}
		f.Close()
		// The container may run as any user.
		if err := os.Chmod(path, 0o666); err != nil {
			return nil, fmt.Errorf("create termination message file of container %s: %w", c.Name, err)
		}
		out = append(out, &runtimeapi.Mount{ContainerPath: c.TerminationMessagePath, HostPath: path})
	}
	return out, nil
}

// podDir is the directory of the agent's files for a pod.
func (m *PodManager) podDir(uid types.UID) string {
	return filepath.Join(m.opts.PodsDir, string(uid))
}
