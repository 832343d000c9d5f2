package podstate

import "k8s.io/apimachinery/pkg/types"

// PodLifecycleEventType is what happened to a pod in its runtime.
type PodLifecycleEventType string

// Pod lifecycle event types, as the kubelet's PLEG's.
const (
	// ContainerStarted: a container (or sandbox) is running now.
	ContainerStarted PodLifecycleEventType = "ContainerStarted"
	// ContainerDied: a container (or sandbox) exited.
	ContainerDied PodLifecycleEventType = "ContainerDied"
	// ContainerRemoved: a container (or sandbox) is gone from the runtime.
	ContainerRemoved PodLifecycleEventType = "ContainerRemoved"
	// PodSync: the pod's status changed in a way no event above tells.
	PodSync PodLifecycleEventType = "PodSync"
	// ContainerChanged: a container entered the created or unknown state.
	// It updates a runtime's cache but is not sent to the pod workers, as
	// with the kubelet.
	ContainerChanged PodLifecycleEventType = "ContainerChanged"
)

// PodLifecycleEvent tells a pod worker that its pod changed in the
// runtime.
type PodLifecycleEvent struct {
	// ID is the pod's UID.
	ID   types.UID
	Type PodLifecycleEventType
	// Data is the container (or sandbox) ID the event is about; empty for
	// PodSync.
	Data string
}
