package podstate

import (
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodStatus is a runtime's view of one pod at one moment: its sandboxes and
// containers. It is the input from which the pod's API status is generated
// (status/podstatus) and the pod's next actions are computed. A PodStatus
// is a snapshot owned by its receiver; nothing mutates it after it is
// handed over.
type PodStatus struct {
	// ID, Name and Namespace identify the pod.
	ID        types.UID
	Name      string
	Namespace string
	// IPs are the pod's IPs from its newest ready sandbox, primary first;
	// for a sandbox in the node's network namespace (hostNetwork), the
	// node's IPs.
	IPs []string
	// Sandboxes are the pod's sandboxes, newest first.
	Sandboxes []*SandboxStatus
	// Containers are the pod's containers in every sandbox, newest first
	// (so the first status of a name is the container's current instance).
	Containers []*ContainerStatus
	// TimeStamp is when the runtime was asked.
	TimeStamp time.Time
}

// SandboxStatus is one pod sandbox (the pod's network namespace and shared
// resources) as the runtime reports it.
type SandboxStatus struct {
	// ID is the runtime's sandbox ID.
	ID string
	// Attempt counts the pod's sandboxes: 0 for the first, then one more
	// for each replacement.
	Attempt uint32
	// Ready is true while the sandbox runs and can host containers.
	Ready bool
	// HostNetwork is true for a sandbox in the node's network namespace.
	HostNetwork bool
	// IP is the sandbox's primary IP; empty in the node's network
	// namespace or when the network plugin gave none.
	IP string
	// NetworkReported is true when the runtime reported the sandbox's
	// network status at all; only then does an empty IP mean the sandbox
	// has none.
	NetworkReported bool
	CreatedAt       time.Time
}

// Container returns the newest status of the container name, or nil.
func (s *PodStatus) Container(name string) *ContainerStatus {
	for _, c := range s.Containers {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// SandboxChange says why a pod needs a new sandbox; the zero value means it
// does not.
type SandboxChange string

// Reasons for a new sandbox, with the kubelet's wording (its pod
// condition messages and log lines).
const (
	NoSandbox             SandboxChange = "no pod sandbox exists"
	MultipleSandboxes     SandboxChange = "multiple pod sandboxes are ready and need to be reconciled"
	SandboxNotReady       SandboxChange = "pod sandbox is not ready"
	SandboxNetworkChanged SandboxChange = "network namespace mode changed and sandbox needs to be recreated"
	SandboxWithoutIP      SandboxChange = "pod sandbox has no IP address"
)

// SandboxChange reports whether a pod with hostNetwork as given needs a new
// sandbox, as the kubelet's podSandboxChanged: it has none, several ready
// ones, or its newest is not ready, in the wrong network namespace or
// without an IP.
func (s *PodStatus) SandboxChange(hostNetwork bool) SandboxChange {
	if len(s.Sandboxes) == 0 || s.Sandboxes[0] == nil {
		return NoSandbox
	}
	ready := 0
	for _, sb := range s.Sandboxes {
		if sb.Ready {
			ready++
		}
	}
	newest := s.Sandboxes[0]
	switch {
	case ready > 1:
		return MultipleSandboxes
	case !newest.Ready:
		return SandboxNotReady
	case newest.HostNetwork != hostNetwork:
		return SandboxNetworkChanged
	case !hostNetwork && newest.NetworkReported && newest.IP == "":
		return SandboxWithoutIP
	}
	return ""
}

// ActiveSandboxID is the newest sandbox's ID when it is ready, else "".
func (s *PodStatus) ActiveSandboxID() string {
	if len(s.Sandboxes) > 0 && s.Sandboxes[0].Ready {
		return s.Sandboxes[0].ID
	}
	return ""
}

// ContainerState is a container's state as the agent sees it.
type ContainerState string

// Container states, as the kubelet's kubecontainer.State.
const (
	ContainerStateCreated ContainerState = "created"
	ContainerStateRunning ContainerState = "running"
	ContainerStateExited  ContainerState = "exited"
	ContainerStateUnknown ContainerState = "unknown"
)

// ContainerStatus is one container instance as the runtime reports it,
// with what the agent recorded in its labels and annotations.
type ContainerStatus struct {
	// ID is the runtime's container ID; Type is the runtime's name
	// ("containerd"), so "<Type>://<ID>" is the API's containerID.
	ID, Type string
	// Name is the container's name in the pod spec.
	Name  string
	State ContainerState
	// CreatedAt, StartedAt and FinishedAt are zero when not reached.
	CreatedAt, StartedAt, FinishedAt time.Time
	ExitCode                         int
	// Image is the image as the runtime reports it (containerd: the
	// normalized tag, docker.io/library/busybox:latest); ImageRef the
	// runtime's reference (repository digest) and ImageID the image's ID.
	Image, ImageRef, ImageID string
	// Hash is the container spec's hash when the container was created; a
	// different hash of the current spec means the container must restart.
	Hash uint64
	// RestartCount is the instance's restart count (from its annotations).
	RestartCount int
	// Reason and Message explain the state ("OOMKilled", "Error", ...).
	Reason, Message string
	// SandboxID is the sandbox the container runs in.
	SandboxID string
	// LogPath is the file the runtime writes the instance's output to, as
	// its ContainerStatus gives it ("" when it gives none).
	LogPath string
	// Resources are the requests and limits the agent last actuated for
	// the container: those it was created with, or those an in-place
	// resize applied since; nil when unknown (a container the agent did
	// not create). A resize is in progress while they differ from the
	// pod's allocation (ResizeNeeded).
	Resources *v1.ResourceRequirements
	// Reported are the CPU request (from cpu shares), CPU limit (from the
	// CFS quota) and memory limit the runtime reports the container runs
	// with; nil when it reports none. They become the container's
	// status.resources, which are what runs, not what was asked.
	Reported *v1.ResourceRequirements
}

// ComputeResources are the values of a container's requests and limits an
// in-place resize actuates: CPU in millicores, memory in bytes.
type ComputeResources struct {
	CPURequest, CPULimit       int64
	MemoryRequest, MemoryLimit int64
}

// ComputeResourcesOf returns r's CPU and memory requests and limits; a nil
// r has none.
func ComputeResourcesOf(r *v1.ResourceRequirements) ComputeResources {
	if r == nil {
		return ComputeResources{}
	}
	return ComputeResources{
		CPURequest:    r.Requests.Cpu().MilliValue(),
		CPULimit:      r.Limits.Cpu().MilliValue(),
		MemoryRequest: r.Requests.Memory().Value(),
		MemoryLimit:   r.Limits.Memory().Value(),
	}
}

// EffectiveResources returns c's resources as the container runs with them
// in a pod whose pod-level resources are podResources (the kubelet's
// GetLimits): its requests, and its limits with a CPU or memory limit it
// does not set taken from the pod-level limit. c itself when the pod sets
// no pod-level limits; otherwise a copy.
func EffectiveResources(podResources, c *v1.ResourceRequirements) *v1.ResourceRequirements {
	if podResources == nil || len(podResources.Limits) == 0 {
		return c
	}
	r := c.DeepCopy()
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		have := r.Limits[name]
		if q, ok := podResources.Limits[name]; ok && !q.IsZero() && have.IsZero() {
			if r.Limits == nil {
				r.Limits = v1.ResourceList{}
			}
			r.Limits[name] = q.DeepCopy()
		}
	}
	return r
}

// ResizeNeeded reports whether a running container whose actuated
// resources are actuated must be resized in place to allocated: the
// kubelet's comparison of CPU and memory requests and limits by value. An
// unknown (nil) actuated never needs it.
func ResizeNeeded(actuated, allocated *v1.ResourceRequirements) bool {
	return actuated != nil && ComputeResourcesOf(actuated) != ComputeResourcesOf(allocated)
}

// Errors that explain why a container is waiting. The pod status generator
// turns them into the container's Waiting reason; they are the kubelet's
// reasons, so `kubectl get pods` reads the same.
var (
	ErrCrashLoopBackOff         = errors.New("CrashLoopBackOff")
	ErrImagePull                = errors.New("ErrImagePull")
	ErrImagePullBackOff         = errors.New("ImagePullBackOff")
	ErrImageNeverPull           = errors.New("ErrImageNeverPull")
	ErrImageInspect             = errors.New("ImageInspectError")
	ErrInvalidImageName         = errors.New("InvalidImageName")
	ErrCreateContainerConfig    = errors.New("CreateContainerConfigError")
	ErrCreateContainer          = errors.New("CreateContainerError")
	ErrRunContainer             = errors.New("RunContainerError")
	ErrPreStartHook             = errors.New("PreStartHookError")
	ErrPostStartHook            = errors.New("PostStartHookError")
	ErrCreatePodSandbox         = errors.New("CreatePodSandboxError")
	ErrKillContainer            = errors.New("KillContainerError")
	ErrRemoveContainer          = errors.New("RemoveContainerError")
	ErrConfigPodSandbox         = errors.New("ConfigPodSandboxError")
	ErrKillPodSandbox           = errors.New("KillPodSandboxError")
	ErrVerifyNonRoot            = errors.New("VerifyNonRootError")
	ErrRunInitContainer         = errors.New("RunInitContainerError")
	ErrContainerNotInitialized  = errors.New("ContainerNotInitialized")
	ErrPodSandboxNotInitialized = errors.New("PodSandboxNotInitialized")
)

// ContainerWaiting says why one container of a pod is not running: Reason is
// one of the Err* values above and Message the detail, e.g. "back-off 20s
// restarting failed container=app pod=web-0_default(uid)".
type ContainerWaiting struct {
	Reason  error
	Message string
}

// RunningPod is a pod as the runtime knows it: its sandboxes and
// containers, found by the labels the agent put on them.
type RunningPod struct {
	ID              types.UID
	Name, Namespace string
	// Sandboxes and Containers are sorted newest first.
	Sandboxes  []RunningContainer
	Containers []RunningContainer
}

// RunningContainer is one container or sandbox of a RunningPod. A sandbox's
// State is running while it is ready and exited otherwise.
type RunningContainer struct {
	ID        string
	Name      string
	State     ContainerState
	SandboxID string
	CreatedAt time.Time
}

// IsRunning reports whether anything of the pod still runs: a container,
// or a ready sandbox.
func (p RunningPod) IsRunning() bool {
	if len(p.Containers) > 0 {
		return true
	}
	for _, sb := range p.Sandboxes {
		if sb.State == ContainerStateRunning {
			return true
		}
	}
	return false
}

// RunningPod returns the parts of s that must be stopped to stop the pod:
// its running containers and all its sandboxes.
func (s *PodStatus) RunningPod() RunningPod {
	rp := RunningPod{ID: s.ID, Name: s.Name, Namespace: s.Namespace}
	for _, c := range s.Containers {
		if c.State == ContainerStateRunning {
			rp.Containers = append(rp.Containers, RunningContainer{ID: c.ID, Name: c.Name, State: c.State, SandboxID: c.SandboxID, CreatedAt: c.CreatedAt})
		}
	}
	for _, sb := range s.Sandboxes {
		state := ContainerStateExited
		if sb.Ready {
			state = ContainerStateRunning
		}
		rp.Sandboxes = append(rp.Sandboxes, RunningContainer{ID: sb.ID, State: state, CreatedAt: sb.CreatedAt})
	}
	return rp
}
