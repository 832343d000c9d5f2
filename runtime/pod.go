package runtime

import (
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodStatus is the container runtime's view of one pod at one moment: its
// sandboxes and containers as the CRI reports them. It is the input from
// which the pod's API status is generated (status/podstatus) and the pod's
// next actions are computed. A PodStatus is a snapshot owned by its caller;
// nothing mutates it after it is returned.
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
	Sandboxes []*runtimeapi.PodSandboxStatus
	// Containers are the pod's containers in every sandbox, newest first
	// (so the first status of a name is the container's current instance).
	Containers []*ContainerStatus
	// TimeStamp is when the runtime was asked.
	TimeStamp time.Time
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
