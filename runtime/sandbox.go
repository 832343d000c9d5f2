package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodLogsDirectory returns the directory of a pod's container logs:
// <podLogsDir>/<namespace>_<name>_<uid>.
func PodLogsDirectory(podLogsDir, namespace, name string, uid types.UID) string {
	return filepath.Join(podLogsDir, namespace+"_"+name+"_"+string(uid))
}

// ContainerLogPath returns a container instance's log file:
// <podLogsDir>/<namespace>_<name>_<uid>/<container>/<restartCount>.log.
func ContainerLogPath(podLogsDir, namespace, name string, uid types.UID, container string, restartCount int) string {
	return filepath.Join(PodLogsDirectory(podLogsDir, namespace, name, uid), container, fmt.Sprintf("%d.log", restartCount))
}

// sandboxConfig returns the CRI sandbox config of pod: metadata and the
// identity labels, the pod's annotations, hostname, DNS, log directory, port
// mappings and the Linux settings (cgroup parent, namespaces, sysctls,
// security context).
func (m *PodManager) sandboxConfig(ctx context.Context, pod *v1.Pod, attempt uint32) (*runtimeapi.PodSandboxConfig, error) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name:      pod.Name,
			Namespace: pod.Namespace,
			Uid:       string(pod.UID),
			Attempt:   attempt,
		},
		Labels:       sandboxLabels(pod),
		Annotations:  pod.Annotations,
		LogDirectory: PodLogsDirectory(m.opts.PodLogsDir, pod.Namespace, pod.Name, pod.UID),
	}
	dns, err := m.podDNS(ctx, pod)
	if err != nil {
		return nil, err
	}
	cfg.DnsConfig = dns
	if !pod.Spec.HostNetwork {
		if cfg.Hostname, err = m.podHostname(pod); err != nil {
			return nil, err
		}
	}
	for i := range pod.Spec.Containers {
		for _, p := range pod.Spec.Containers[i].Ports {
			if p.HostPort <= 0 {
				continue
			}
			cfg.PortMappings = append(cfg.PortMappings, &runtimeapi.PortMapping{
				Protocol:      runtimeProtocol(p.Protocol),
				ContainerPort: p.ContainerPort,
				HostPort:      p.HostPort,
				HostIp:        p.HostIP,
			})
		}
	}
	userns, err := m.podUserNamespace(ctx, pod)
	if err != nil {
		return nil, err
	}
	ns := namespaceOptions(pod)
	ns.UsernsOptions = userns
	linux := &runtimeapi.LinuxPodSandboxConfig{
		SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			Privileged:       anyPrivileged(pod),
			Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			NamespaceOptions: ns,
		},
		Sysctls: map[string]string{},
	}
	if m.opts.CgroupParent != nil {
		if linux.CgroupParent, err = m.opts.CgroupParent(ctx, pod); err != nil {
			return nil, fmt.Errorf("cgroup parent of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		for _, s := range sc.Sysctls {
			linux.Sysctls[sysctlDots(s.Name)] = s.Value
		}
		if sc.RunAsUser != nil {
			linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
		}
		if sc.RunAsGroup != nil {
			linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
		}
		linux.SecurityContext.SupplementalGroups = supplementalGroups(sc)
		linux.SecurityContext.SupplementalGroupsPolicy = supplementalGroupsPolicy(sc)
		linux.SecurityContext.SelinuxOptions = selinuxOptions(sc.SELinuxOptions)
	}
	cfg.Linux = linux
	return cfg, nil
}

// sysctlDots converts a sysctl name written with slashes as separators
// ("net/ipv4/conf/eth0.1/forwarding", where a dot belongs to a component) to
// the dotted form the runtime expects, swapping dots and slashes. A name
// whose first separator is a dot is already dotted.
func sysctlDots(name string) string {
	first := strings.IndexAny(name, "./")
	if first < 0 || name[first] == '.' {
		return name
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, name)
}

func runtimeProtocol(p v1.Protocol) runtimeapi.Protocol {
	switch p {
	case v1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case v1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	}
	return runtimeapi.Protocol_TCP
}

func anyPrivileged(pod *v1.Pod) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if sc := list[i].SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
				return true
			}
		}
	}
	return false
}

func namespaceOptions(pod *v1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: networkMode(pod),
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

// supplementalGroupsPolicy is sc's supplementalGroupsPolicy for the
// runtime (Merge when unset). Admission refused Strict on a runtime that
// does not support it.
func supplementalGroupsPolicy(sc *v1.PodSecurityContext) runtimeapi.SupplementalGroupsPolicy {
	if sc.SupplementalGroupsPolicy != nil && *sc.SupplementalGroupsPolicy == v1.SupplementalGroupsPolicyStrict {
		return runtimeapi.SupplementalGroupsPolicy_Strict
	}
	return runtimeapi.SupplementalGroupsPolicy_Merge
}

func supplementalGroups(sc *v1.PodSecurityContext) []int64 {
	var groups []int64
	if sc.FSGroup != nil {
		groups = append(groups, *sc.FSGroup)
	}
	return append(groups, sc.SupplementalGroups...)
}

func selinuxOptions(o *v1.SELinuxOptions) *runtimeapi.SELinuxOption {
	if o == nil {
		return nil
	}
	return &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
}

// createSandbox creates pod's sandbox (making its log directory first) and
// returns its ID and the config it was created with. A failure is a
// *sandboxError: the kubelet's message, and the cause its event shows.
func (m *PodManager) createSandbox(ctx context.Context, pod *v1.Pod, attempt uint32) (string, *runtimeapi.PodSandboxConfig, error) {
	cfg, err := m.sandboxConfig(ctx, pod, attempt)
	if err != nil {
		return "", nil, &sandboxError{fmt.Sprintf("failed to generate sandbox config for pod %q", podDesc(pod)), err}
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", nil, &sandboxError{fmt.Sprintf("failed to create log directory for pod %q", podDesc(pod)), err}
	}
	handler, err := m.runtimeHandler(ctx, pod)
	if err != nil {
		return "", nil, &sandboxError{fmt.Sprintf("failed to create sandbox for pod %q", podDesc(pod)), err}
	}
	id, err := m.rs.RunPodSandbox(ctx, cfg, handler)
	if err != nil {
		return "", nil, &sandboxError{fmt.Sprintf("failed to create sandbox for pod %q", podDesc(pod)), err}
	}
	return id, cfg, nil
}

// sandboxError is why a sandbox was not created: what failed (msg) and
// the error that made it fail (cause), which the kubelet's
// FailedCreatePodSandBox event shows alone.
type sandboxError struct {
	msg   string
	cause error
}

func (e *sandboxError) Error() string { return e.msg + ": " + e.cause.Error() }
func (e *sandboxError) Unwrap() error { return e.cause }

// runtimeHandler resolves pod's runtimeClassName to its CRI runtime
// handler ("" without one: the runtime's default).
func (m *PodManager) runtimeHandler(ctx context.Context, pod *v1.Pod) (string, error) {
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName == "" {
		return "", nil
	}
	if m.opts.RuntimeHandler == nil {
		return "", fmt.Errorf("runtime class %q: this agent resolves no runtime classes", *pod.Spec.RuntimeClassName)
	}
	handler, err := m.opts.RuntimeHandler(ctx, *pod.Spec.RuntimeClassName)
	if err != nil {
		return "", fmt.Errorf("runtime class %q: %w", *pod.Spec.RuntimeClassName, err)
	}
	return handler, nil
}

// errNoUserNamespaces refuses a pod with hostUsers: false on a pod manager
// without PodManagerOptions.UserNamespaces.
var errNoUserNamespaces = errors.New("can't set `spec.hostUsers: false`, this node does not support user namespaces")

// podUserNamespace returns the user namespace of pod's sandbox and
// containers (PodManagerOptions.UserNamespaces): nil without a manager,
// for a pod in the node's.
func (m *PodManager) podUserNamespace(ctx context.Context, pod *v1.Pod) (*runtimeapi.UserNamespace, error) {
	if m.opts.UserNamespaces == nil {
		if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
			return nil, errNoUserNamespaces
		}
		return nil, nil
	}
	handler, err := m.runtimeHandler(ctx, pod)
	if err != nil {
		return nil, err
	}
	return m.opts.UserNamespaces.PodUserNamespace(ctx, pod, handler)
}

func networkMode(pod *v1.Pod) runtimeapi.NamespaceMode {
	if pod.Spec.HostNetwork {
		return runtimeapi.NamespaceMode_NODE
	}
	return runtimeapi.NamespaceMode_POD
}
