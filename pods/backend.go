package pods

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/status/podstatus"
)

// ErrPodNotFound is what a PodBackend's GetPodStatus returns (wrapped or
// not, errors.Is finds it) for a pod it does not run.
var ErrPodNotFound = errors.New("pod not found in the backend")

// PodBackend runs whole pods somewhere other than a local CRI runtime: a
// cloud container service, virtual machines, a simulator. It is
// virtual-kubelet's PodLifecycleHandler shape; NewBackendRuntime adapts it to
// the loop, which keeps the kubelet's semantics around it: admission,
// graceful deletion, the final status, the kubelet's conditions and
// terminal-phase rules applied to the statuses the backend reports, status
// patches, housekeeping of pods nobody knows.
//
// Calls for one pod never overlap; calls for different pods do, so
// implementations must be safe for concurrent use. Pods passed in are shared
// and must not be modified; returned objects become the caller's (return a
// copy of what you keep).
//
// A backend that implements node features (in-place resize, say) says so
// by being a NodeFeatureSupporter; one that is not declares none.
type PodBackend interface {
	// CreatePod starts pod. It is called when the pod is first synced and
	// the backend does not know it (GetPodStatus says ErrPodNotFound).
	CreatePod(ctx context.Context, pod *v1.Pod) error
	// UpdatePod applies a changed spec of a pod it runs (the API allows
	// changing container images, activeDeadlineSeconds, tolerations).
	UpdatePod(ctx context.Context, pod *v1.Pod) error
	// DeletePod stops pod's containers, within pod.DeletionGracePeriodSeconds
	// when set and its terminationGracePeriodSeconds otherwise, and returns
	// once they are stopped: the next GetPodStatus shows them terminated.
	// It may be called more than once and returns nil for a pod it does not
	// run.
	DeletePod(ctx context.Context, pod *v1.Pod) error
	// GetPodStatus returns the status of the pod it runs as namespace/name,
	// or an error wrapping ErrPodNotFound. The loop computes the
	// kubelet-owned conditions and keeps terminal phases; the backend
	// reports container statuses, IPs and, if it knows, the phase.
	GetPodStatus(ctx context.Context, namespace, name string) (*v1.PodStatus, error)
	// GetPods returns the pods it runs, with at least their UID, name and
	// namespace, for the housekeeping that stops pods no source knows.
	GetPods(ctx context.Context) ([]*v1.Pod, error)
}

// PodNotifier is a PodBackend that tells when a pod's status changes, so the
// loop need not poll it: NotifyPods is called once, before any pod is
// created, and notify is then called with a pod (UID, name, namespace at
// least) whenever its status changes. notify does not block.
type PodNotifier interface {
	NotifyPods(ctx context.Context, notify func(*v1.Pod))
}

// DefaultBackendPollInterval is how often the status of each pod a
// non-notifying PodBackend runs is asked (virtual-kubelet's 5s).
const DefaultBackendPollInterval = 5 * time.Second

// BackendRuntimeOptions configures NewBackendRuntime.
type BackendRuntimeOptions struct {
	// PollInterval paces status polling of a backend that is not a
	// PodNotifier (default DefaultBackendPollInterval).
	PollInterval time.Duration
	// Clock paces polling (default clock.RealClock{}).
	Clock clock.Clock
	// Recorder, when set, receives a ProviderCreateFailed or
	// ProviderUpdateFailed warning event for each failed CreatePod or
	// UpdatePod, as virtual-kubelet records.
	Recorder record.EventRecorder
}

// Provider failure reasons, virtual-kubelet's.
const (
	// ReasonProviderFailed is the pod status reason of a pod the backend
	// failed to create or update.
	ReasonProviderFailed      = "ProviderFailed"
	eventProviderCreateFailed = "ProviderCreateFailed"
	eventProviderUpdateFailed = "ProviderUpdateFailed"
)

// BackendRuntime is the Runtime of a node whose pods a PodBackend runs. Run
// must run for its events (notifications or polling) to flow.
type BackendRuntime struct {
	b      PodBackend
	opts   BackendRuntimeOptions
	events chan *podstate.PodLifecycleEvent

	mu sync.Mutex
	// pods are the pods the backend was asked to run, with the status last
	// seen (for polling) and the spec last applied.
	pods map[types.UID]*backendPod
	// failed are the pods whose last CreatePod or UpdatePod failed, with
	// the error.
	failed map[types.UID]error
}

type backendPod struct {
	pod    *v1.Pod
	status *v1.PodStatus
}

var _ Runtime = (*BackendRuntime)(nil)

// NewBackendRuntime adapts b. It does no I/O.
func NewBackendRuntime(b PodBackend, opts BackendRuntimeOptions) (*BackendRuntime, error) {
	if b == nil {
		return nil, errors.New("backend runtime: a PodBackend is required")
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultBackendPollInterval
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &BackendRuntime{b: b, opts: opts, events: make(chan *podstate.PodLifecycleEvent, 1000), pods: map[types.UID]*backendPod{}, failed: map[types.UID]error{}}, nil
}

// SupportedNodeFeatures is the backend's, when it is a
// NodeFeatureSupporter; none otherwise (nothing of the CRI path, such as
// in-place resize or the node API's WebSockets, applies to it).
func (r *BackendRuntime) SupportedNodeFeatures() []string { return supportedNodeFeatures(r.b) }

// Run registers for the backend's notifications, or polls the status of
// every pod it runs every PollInterval, until ctx is done. It blocks.
func (r *BackendRuntime) Run(ctx context.Context) error {
	if n, ok := r.b.(PodNotifier); ok {
		n.NotifyPods(ctx, func(p *v1.Pod) { r.emit(p.UID) })
		<-ctx.Done()
		return nil
	}
	t := r.opts.Clock.NewTimer(r.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			r.poll(ctx)
			t.Reset(r.opts.PollInterval)
		}
	}
}

// emit sends a PodSync event for uid, dropping it when the loop is far
// behind (it resyncs every pod periodically anyway).
func (r *BackendRuntime) emit(uid types.UID) {
	select {
	case r.events <- &podstate.PodLifecycleEvent{ID: uid, Type: podstate.PodSync}:
	default:
	}
}

// poll asks the status of every pod and emits an event for each that
// changed since it was last seen.
func (r *BackendRuntime) poll(ctx context.Context) {
	r.mu.Lock()
	pods := make([]*v1.Pod, 0, len(r.pods))
	for _, p := range r.pods {
		pods = append(pods, p.pod)
	}
	r.mu.Unlock()
	for _, pod := range pods {
		st, err := r.b.GetPodStatus(ctx, pod.Namespace, pod.Name)
		if err != nil && !errors.Is(err, ErrPodNotFound) {
			klog.FromContext(ctx).V(2).Info("Cannot poll a pod's status from the backend", "pod", klog.KObj(pod), "err", err)
			continue
		}
		if r.remember(pod.UID, st) {
			r.emit(pod.UID)
		}
	}
}

// remember records st as the pod's last seen status and reports whether it
// changed.
func (r *BackendRuntime) remember(uid types.UID, st *v1.PodStatus) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return false
	}
	changed := !equality.Semantic.DeepEqual(p.status, st)
	p.status = st
	return changed
}

// PodStatus returns the backend's status of pod normalized with the
// kubelet's rules (podstatus.Normalize).
func (r *BackendRuntime) PodStatus(ctx context.Context, pod *v1.Pod, opts podstatus.GenerateOptions) (v1.PodStatus, error) {
	st, err := r.b.GetPodStatus(ctx, pod.Namespace, pod.Name)
	switch {
	case errors.Is(err, ErrPodNotFound):
		st = nil
	case err != nil:
		return v1.PodStatus{}, fmt.Errorf("status of pod %s/%s from the backend: %w", pod.Namespace, pod.Name, err)
	}
	r.remember(pod.UID, st)
	out := podstatus.Normalize(pod, st, opts)
	r.mu.Lock()
	failure := r.failed[pod.UID]
	r.mu.Unlock()
	if failure != nil && !isTerminal(out.Phase) {
		// As virtual-kubelet: the provider's error in the status; a pod
		// that must not restart has failed for good.
		out.Reason, out.Message = ReasonProviderFailed, failure.Error()
		if pod.Spec.RestartPolicy == v1.RestartPolicyNever {
			out.Phase = v1.PodFailed
		}
	}
	return out, nil
}

// providerResult records the outcome of a CreatePod or UpdatePod: an error
// is kept for the pod's status, logged at error level and recorded as the
// event reason; success clears it.
func (r *BackendRuntime) providerResult(ctx context.Context, pod *v1.Pod, reason string, err error) {
	r.mu.Lock()
	if err == nil {
		delete(r.failed, pod.UID)
	} else {
		r.failed[pod.UID] = err
	}
	r.mu.Unlock()
	if err == nil {
		return
	}
	klog.FromContext(ctx).Error(err, "The pod backend failed", "pod", klog.KObj(pod), "reason", reason)
	if r.opts.Recorder != nil {
		r.opts.Recorder.Event(pod, v1.EventTypeWarning, reason, err.Error())
	}
}

// SyncPod creates the pod in the backend the first time (unless the backend
// already runs it, as after an agent restart) and updates it when its spec
// changed since.
func (r *BackendRuntime) SyncPod(ctx context.Context, pod *v1.Pod) SyncResult {
	r.mu.Lock()
	known, ok := r.pods[pod.UID]
	r.mu.Unlock()
	if !ok {
		_, err := r.b.GetPodStatus(ctx, pod.Namespace, pod.Name)
		switch {
		case errors.Is(err, ErrPodNotFound):
			err := r.b.CreatePod(ctx, pod)
			r.providerResult(ctx, pod, eventProviderCreateFailed, err)
			if err != nil {
				return SyncResult{Err: fmt.Errorf("create pod %s/%s in the backend: %w", pod.Namespace, pod.Name, err)}
			}
		case err != nil:
			return SyncResult{Err: fmt.Errorf("status of pod %s/%s from the backend: %w", pod.Namespace, pod.Name, err)}
		}
		r.mu.Lock()
		r.pods[pod.UID] = &backendPod{pod: pod}
		r.mu.Unlock()
		return SyncResult{}
	}
	if equality.Semantic.DeepEqual(known.pod.Spec, pod.Spec) {
		return SyncResult{}
	}
	err := r.b.UpdatePod(ctx, pod)
	r.providerResult(ctx, pod, eventProviderUpdateFailed, err)
	if err != nil {
		return SyncResult{Err: fmt.Errorf("update pod %s/%s in the backend: %w", pod.Namespace, pod.Name, err)}
	}
	r.mu.Lock()
	known.pod = pod
	r.mu.Unlock()
	return SyncResult{}
}

// KillPod asks the backend to delete the pod with the grace period given.
func (r *BackendRuntime) KillPod(ctx context.Context, pod *v1.Pod, gracePeriodOverride *int64) error {
	if gracePeriodOverride != nil {
		pod = pod.DeepCopy()
		pod.DeletionGracePeriodSeconds = gracePeriodOverride
	}
	if err := r.b.DeletePod(ctx, pod); err != nil {
		return fmt.Errorf("delete pod %s/%s in the backend: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// RemovePod forgets the pod; the backend deleted it in KillPod.
func (r *BackendRuntime) RemovePod(_ context.Context, uid types.UID) error {
	r.mu.Lock()
	delete(r.pods, uid)
	delete(r.failed, uid)
	r.mu.Unlock()
	return nil
}

// RuntimePods returns the backend's pods.
func (r *BackendRuntime) RuntimePods(ctx context.Context) ([]*v1.Pod, error) {
	return r.b.GetPods(ctx)
}

// Events delivers a PodSync event for every status change the backend
// notified or polling found.
func (r *BackendRuntime) Events() <-chan *podstate.PodLifecycleEvent { return r.events }
