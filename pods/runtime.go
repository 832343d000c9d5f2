package pods

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/status/podstatus"
)

// Runtime is what runs the node's pods for the Controller: the CRI backend
// (runtime.Backend: sandboxes and containers on containerd or CRI-O) or a
// pod-level backend adapted by NewBackendRuntime.
//
// The Controller never calls a Runtime concurrently for the same pod; calls
// for different pods overlap, so implementations must be safe for
// concurrent use. Pods passed in are shared and read-only. Every method may
// block on the runtime (bounded by ctx) but must return once ctx is done.
type Runtime interface {
	// PodStatus returns the pod's API status as the runtime sees it now,
	// generated with opts (the status last reported, whether the pod is
	// terminal, the prober's results, the node's IPs): the CRI backend with
	// podstatus.Generate, a pod-level backend with podstatus.Normalize.
	PodStatus(ctx context.Context, pod *v1.Pod, opts podstatus.GenerateOptions) (v1.PodStatus, error)
	// SyncPod makes the runtime run pod as its spec says: start what
	// should run, restart what failed by the restart policy, replace what
	// changed. A PodStatus call after it reflects what it did.
	SyncPod(ctx context.Context, pod *v1.Pod) SyncResult
	// KillPod stops everything the runtime runs of pod, giving each
	// container gracePeriodOverride seconds when set, else what the pod's
	// spec says. For a pod returned by RuntimePods that no source knows (an
	// orphan, whose spec is empty) the runtime uses what it recorded when
	// it started the pod. A context cancelled mid-way (a shorter grace
	// period arrived) leaves the pod partly stopped; KillPod is called
	// again.
	KillPod(ctx context.Context, pod *v1.Pod, gracePeriodOverride *int64) error
	// RemovePod removes what the runtime keeps of a pod that was stopped
	// and is gone from every source (stopped containers, sandboxes,
	// directories, cgroups). It may be called more than once.
	RemovePod(ctx context.Context, uid types.UID) error
	// RuntimePods lists every pod the runtime holds anything of (a
	// container or a sandbox, running or not), found by the runtime itself
	// (not from the Controller's state), for the housekeeping that stops
	// and removes pods no source knows: an orphan whose containers all
	// exited is removed with its directories and cgroup at once, as one
	// that still runs is. A pod the runtime cannot describe has only its
	// UID, name and namespace.
	RuntimePods(ctx context.Context) ([]*v1.Pod, error)
	// Events delivers the runtime's pod lifecycle events; each makes the
	// Controller sync that pod. The channel is never closed; an event
	// received is the receiver's and is not changed by the sender. Pointers,
	// as the kubelet's PLEG sends them, keep a channel buffer of the
	// kubelet's 1,000 events at 8 KiB instead of 48 KiB per agent.
	Events() <-chan *podstate.PodLifecycleEvent
}

// SyncResult is the outcome of one Runtime.SyncPod.
type SyncResult struct {
	// RetryAt, when not zero, is when a back-off that held a container
	// back (CrashLoopBackOff, ImagePullBackOff) ends: the pod is synced
	// again then.
	RetryAt time.Time
	// Err says what did not happen that should have; the pod is synced
	// again after a jittered back-off. nil when everything was done.
	Err error
}

// GarbageCollector is a Runtime that also removes the dead containers of
// live pods, the kubelet's container garbage collection. The Controller
// calls it once a minute, off its sync loop, only after every pod source
// has reported, with keep reporting the pods it still knows.
type GarbageCollector interface {
	GarbageCollect(ctx context.Context, keep func(types.UID) bool) error
}

// UnusedContainerDeleter is a GarbageCollector that can also remove
// everything the node no longer needs, whatever its limits: the dead
// containers and sandboxes of the pods active does not report (terminated
// but not deleted yet) and of those keep does not report, the kubelet's
// DeleteAllUnusedContainers. The Controller calls it for
// DeleteAllUnusedContainers, the eviction manager's disk reclaim.
type UnusedContainerDeleter interface {
	DeleteAllUnusedContainers(ctx context.Context, keep, active func(types.UID) bool) error
}

// ImagePullTimer is an optional interface of a Runtime that pulls images:
// ImagePullTime returns how long the pod's image pulls took so far (0 if
// none). The Controller subtracts it from a pod's start in
// kubelet_pod_start_sli_duration_seconds, as the kubelet does; without it
// nothing is subtracted. It must be cheap and safe for concurrent use.
type ImagePullTimer interface {
	ImagePullTime(uid types.UID) time.Duration
}

// ResourceHealthGroup is the fx value group of the Module's
// ResourceHealthProviders.
const ResourceHealthGroup = "resource_health_providers"

// ResourceHealthProvider reports the health of the resources allocated to
// the pods' containers (*devices.Manager and *dra.Manager are): the
// kubelet's ResourceHealthStatus. Its methods must be safe for concurrent
// use. Module takes them from the ResourceHealthGroup value group.
type ResourceHealthProvider interface {
	// UpdateAllocatedResourcesStatus sets the allocatedResourcesStatus of
	// status's container statuses from the health of the resources
	// allocated to pod's containers. It must not block.
	UpdateAllocatedResourcesStatus(pod *v1.Pod, status *v1.PodStatus)
	// HealthUpdates delivers the UID of a pod whose allocated resources
	// changed health; the Controller syncs it, so its status follows.
	HealthUpdates() <-chan types.UID
}

// Prober is what the Controller needs of the probe engine (*prober.Manager
// is one): it adds each pod it syncs, stops the probes of each pod it
// terminates, reads readiness and startup results for the pod's status and
// syncs a pod whose results changed. Its methods must be safe for
// concurrent use and must not block on a probe.
type Prober interface {
	// AddPod starts probing pod's containers. The Controller calls it on
	// every sync of a pod that should run, after the pod's status was set
	// (a prober runs a readiness probe at once for a running container
	// that is not ready yet), so it must be cheap when nothing changed.
	AddPod(pod *v1.Pod)
	// StopLivenessAndStartup stops the liveness and startup probes of
	// pod's regular containers and forgets their results; the Controller
	// calls it before it stops a pod's containers, so no probe restarts one
	// during the pod's grace period. Readiness keeps being probed.
	StopLivenessAndStartup(pod *v1.Pod)
	// RemovePod stops probing pod and forgets its results; called once the
	// pod's containers are stopped.
	RemovePod(pod *v1.Pod)
	// CleanupPods stops probing, and forgets the results of, every pod
	// whose UID is not in desired: the Controller's housekeeping passes
	// the pods that may still run.
	CleanupPods(desired map[types.UID]struct{})
	// Ready and Started return a container's readiness and startup
	// verdicts by its runtime container ID (the part after "://"):
	// success, and known false when there is no verdict (the probe has
	// not decided, or the container has no such probe). A known failure
	// and no verdict differ: the status generator keeps a container that
	// was ready before the agent restarted ready until its probe decides.
	Ready(containerID string) (success, known bool)
	Started(containerID string) (success, known bool)
	// Updates delivers the UID of a pod whose results changed. It is never
	// closed.
	Updates() <-chan types.UID
}

// Sources is the stream of pod updates the Controller follows;
// *podsource.Config is one.
type Sources interface {
	// Updates delivers the merged pod updates of every source.
	Updates() <-chan podsource.Update
	// Names returns the names of every source whose updates arrive on
	// Updates. The Controller is ready (SourcesReady) once it has handled
	// the first update of each; until then no pod is treated as gone. A
	// source must send an update (an empty OpAdd will do) once it knows its
	// pods, as *podsource.Config does for each source's first snapshot.
	Names() []string
}
