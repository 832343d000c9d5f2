package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nodekit/nodekit/podstate"

	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
	"k8s.io/klog/v2"
)

// SyncPod brings the runtime in line with pod, given status, its runtime
// status from GetPodStatus (nil means the runtime has nothing of it). With
// the kubelet's computePodActions semantics it: creates the sandbox, or
// kills everything and recreates it when it died or changed; starts init
// containers one at a time in order and sidecars (restartable init
// containers) that keep running; starts regular containers once the pod is
// initialized; restarts exited containers by the pod's restartPolicy,
// holding crashing ones back with CrashLoopBackOff; kills and restarts a
// running container whose image changed or whose liveness or startup probe
// failed (in.Probes); starts ephemeral containers once, never restarting
// them; and stops the pod when nothing is left to run. When
// in.RestartAllContainers is set it does only the first half of restarting
// all the pod's containers in place (see SyncInput) and asks for the next
// sync at once (SyncResult.RetryAt), which starts them again.
//
// It blocks for the CRI calls it makes, image pulls included. One call per
// pod at a time.
func (m *PodManager) SyncPod(ctx context.Context, pod *v1.Pod, status *podstate.PodStatus, in SyncInput) SyncResult {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	ctx = klog.NewContext(ctx, logger)
	if status == nil {
		status = &podstate.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}
	}
	s := &podSync{m: m, pod: pod, status: status, pullSecrets: in.PullSecrets, volumes: in.Volumes}
	if in.RestartAllContainers {
		s.resetAll(ctx)
	} else {
		s.run(ctx, in.Probes)
	}
	if s.usernsStarted && len(s.errs) > 0 {
		m.metrics.startedUserNamespacedPodError()
	}
	return SyncResult{Waiting: m.waiting(pod.UID), RetryAt: s.retryAt, Err: errors.Join(s.errs...), Idle: s.idle, Status: s.after(ctx)}
}

// SyncInput is what SyncPod works with besides the pod and its runtime
// status, gathered by the caller.
type SyncInput struct {
	// PullSecrets are the pod's image pull secrets.
	PullSecrets []v1.Secret
	// Probes are the liveness and startup verdicts; nil means the node
	// runs no probes.
	Probes ProbeResults
	// Volumes are the pod's mounted volumes (VolumeManager.MountPod); a
	// container mounting a volume not in them does not start.
	Volumes PodVolumes
	// RestartAllContainers says the pod restarts all its containers in
	// place: its API status, generated from the same runtime status
	// (podstatus.Generate), has the AllContainersRestarting condition True
	// because a container's exit matched a RestartAllContainers rule.
	// SyncPod then, as the kubelet, stops (with no grace beyond the
	// minimum) and removes every instance of the pod's init and regular
	// containers, keeping the sandbox, the ephemeral containers and the
	// logs, and does nothing else; the next sync, whose status no longer
	// has the condition True, starts them again from the first init
	// container. Without it, a container whose exit matched such a rule is
	// restarted alone, as with a Restart rule.
	RestartAllContainers bool
}

// podSync is the state of one SyncPod.
type podSync struct {
	m           *PodManager
	pod         *v1.Pod
	status      *podstate.PodStatus
	pullSecrets []v1.Secret
	volumes     PodVolumes
	sandboxID   string
	sandboxCfg  *runtimeapi.PodSandboxConfig
	podIPs      []string
	// turn is the sync's turn to create and start (PodManager.starts),
	// taken before the sandbox or the first container.
	turn    *startTurn
	errs    []error
	retryAt time.Time
	// idle: the computed actions were empty.
	idle bool
	// imageVolumes are the pulls of the pod's image volumes by volume
	// name, made once per sync before the first container starts (nil
	// until then).
	imageVolumes map[string]imageVolumePull
	// usernsStarted: a sandbox of a pod with hostUsers: false was to be
	// created (kubelet_started_user_namespaced_pods_total); an error of
	// the sync counts in its errors_total, as the kubelet's.
	usernsStarted bool
	// newSandbox is the status of the sandbox this sync created, as the
	// runtime answered right after creating it; nil when the sync created
	// none. created are the containers it created (ID, sandbox ID). See
	// after.
	newSandbox *runtimeapi.PodSandboxStatus
	created    [][2]string
	// images are the containers' image statuses looked up while the sync
	// creates the sandbox (imageManager.lookAhead); nil otherwise.
	images imageLookups
}

// after returns the pod's runtime status after a sync that found nothing
// of the pod in the runtime and did all it had to without an error: the
// sandbox and the containers it created are all there is of the pod, so it
// is the sandbox's status read when the sync created it and one
// ContainerStatus call per container, without GetPodStatus's two lists
// and a second PodSandboxStatus: nothing the sync did since changes the
// sandbox's status, and the containers it created and started in it
// without an error show it was still there. A sandbox that dies later is
// a change the PLEG's next relist sees. nil when the sync was any other,
// or a read failed: the caller reads the pod.
func (s *podSync) after(ctx context.Context) *podstate.PodStatus {
	if s.newSandbox == nil || len(s.errs) > 0 || len(s.status.Sandboxes) > 0 || len(s.status.Containers) > 0 {
		return nil
	}
	m, pod := s.m, s.pod
	st := &podstate.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace, TimeStamp: m.clock.Now(),
		Sandboxes: []*podstate.SandboxStatus{sandboxStatus(s.newSandbox)}}
	if s.newSandbox.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
		st.IPs = s.podIPs
	}
	if err := m.readContainers(ctx, st, s.created); err != nil {
		klog.FromContext(ctx).V(4).Info("Cannot read what the sync created; reading the pod", "err", err)
		return nil
	}
	return st
}

func (s *podSync) fail(err error) { s.errs = append(s.errs, err) }

func (s *podSync) retry(at time.Time) {
	if !at.IsZero() && (s.retryAt.IsZero() || at.Before(s.retryAt)) {
		s.retryAt = at
	}
}

func (s *podSync) run(ctx context.Context, probes ProbeResults) {
	m, pod := s.m, s.pod
	logger := klog.FromContext(ctx)
	actions := computePodActions(ctx, pod, s.status, probes)
	if !actions.killPod && !actions.createSandbox && m.podLevelResizeNeeded(pod) {
		actions.resizePod = true
	}
	logger.V(3).Info("Computed pod actions", "killPod", actions.killPod, "createSandbox", actions.createSandbox,
		"attempt", actions.attempt, "initToStart", actions.initToStart, "containersToStart", actions.containersToStart,
		"ephemeralToStart", actions.ephemeralToStart, "containersToKill", len(actions.containersToKill))
	s.idle = !actions.killPod && !actions.createSandbox && len(actions.initToStart) == 0 &&
		len(actions.containersToStart) == 0 && len(actions.ephemeralToStart) == 0 && len(actions.containersToKill) == 0 &&
		!actions.resizePod
	if actions.createSandbox && actions.sandboxID != "" {
		m.recorder.Eventf(pod, v1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
	}

	if actions.killPod {
		if err := m.killPod(ctx, pod, s.status.RunningPod(), nil); err != nil {
			s.fail(err)
			return
		}
		if actions.createSandbox {
			// A new sandbox starts initialization from scratch.
			s.removeInitContainers(ctx, 0)
		}
	} else {
		for id, k := range actions.containersToKill {
			if err := m.killContainer(ctx, pod, id, k.name, k.message, k.reason, nil, nil); err != nil {
				s.fail(fmt.Errorf("%w: kill container %s of pod %s: %v", podstate.ErrKillContainer, k.name, podDesc(pod), err))
				return
			}
		}
	}
	if actions.resizePod && !actions.killPod {
		// Resized in place before anything starts, as the kubelet: a
		// container restarted for its resize policy comes back in a pod
		// cgroup already grown for it.
		err := s.resize(ctx, actions)
		m.setResizeError(pod.UID, err)
		if err != nil {
			logger.Error(err, "Pod resize failed; the next sync retries it")
			s.fail(err)
			return
		}
	} else if !actions.killPod {
		m.setResizeError(pod.UID, nil)
	}
	if !actions.createSandbox {
		// Keep only the newest exited instance of each init container.
		s.removeInitContainers(ctx, 1)
	}

	s.sandboxID, s.podIPs = actions.sandboxID, s.status.IPs
	if !actions.createSandbox && len(actions.initToStart) == 0 && len(actions.containersToStart) == 0 && len(actions.ephemeralToStart) == 0 {
		return
	}
	if m.starts != nil {
		s.turn = &startTurn{q: m.starts, bound: boundTime(pod), clock: m.clock}
		if m.metrics != nil {
			s.turn.waited = m.metrics.startTurnWait
		}
		if err := s.turn.resume(ctx); err != nil {
			s.fail(fmt.Errorf("wait for a turn to start pod %s: %w", podDesc(pod), err))
			return
		}
		defer s.turn.pause()
	}
	if actions.createSandbox {
		if dr := m.opts.DynamicResources; dr != nil {
			// The pod's claims are prepared before anything of it exists,
			// as the kubelet: a pod whose claims cannot be prepared gets no
			// sandbox.
			if err := dr.PrepareResources(ctx, pod); err != nil {
				m.recorder.Eventf(pod, v1.EventTypeWarning, "FailedPrepareDynamicResources", "Failed to prepare dynamic resources: %v", err)
				logger.Error(err, "Failed to prepare dynamic resources")
				s.fail(fmt.Errorf("pod %s: %w", podDesc(pod), err))
				return
			}
		}
		// The images' statuses are asked for while the sandbox is made:
		// ensure needs them right after, and the runtime answers both at
		// once instead of one round trip after the other.
		s.images = m.images.lookAhead(ctx, pod, toStart(pod, actions))
		if !s.createSandbox(ctx, actions.attempt) {
			return
		}
	}
	// A sandbox just created comes with its config; the kubelet generates
	// it again here (and records DNS warnings twice).
	if s.sandboxCfg == nil {
		var err error
		if s.sandboxCfg, err = m.sandboxConfig(ctx, pod, actions.attempt); err != nil {
			s.fail(fmt.Errorf("%w: generate sandbox config of pod %s: %v", podstate.ErrConfigPodSandbox, podDesc(pod), err))
			return
		}
	}

	// Ephemeral containers first, as the kubelet: a debugging container
	// starts even while an init container fails.
	for _, i := range actions.ephemeralToStart {
		ec := &pod.Spec.EphemeralContainers[i]
		s.start(ctx, (*v1.Container)(&ec.EphemeralContainerCommon), "ephemeral container") //nolint:errcheck // recorded in s
	}
	for _, i := range actions.initToStart {
		c := &pod.Spec.InitContainers[i]
		if err := s.start(ctx, c, "init container"); err != nil && !isSidecar(c) {
			logger.V(4).Info("Init container failed to start, not starting later ones", "container", c.Name)
			return
		}
	}
	for _, i := range actions.containersToStart {
		s.start(ctx, &pod.Spec.Containers[i], "container") //nolint:errcheck // recorded in s
	}
}

// toStart are the containers actions start, in any order.
func toStart(pod *v1.Pod, actions podActions) []*v1.Container {
	var cs []*v1.Container
	for _, i := range actions.ephemeralToStart {
		cs = append(cs, (*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	for _, i := range actions.initToStart {
		cs = append(cs, &pod.Spec.InitContainers[i])
	}
	for _, i := range actions.containersToStart {
		cs = append(cs, &pod.Spec.Containers[i])
	}
	return cs
}

// resetAll stops and removes every instance of the pod's init and regular
// containers in the kubelet's order (resetActions), keeping their logs,
// and asks for the next sync at once when it removed any: the kubelet's
// SyncPod for a pod marked for RestartAllContainers, which requeues the
// pod as soon as the reset is done. It stops at the first failure; the
// next sync goes on with what is left.
func (s *podSync) resetAll(ctx context.Context) {
	m, pod := s.m, s.pod
	logger := klog.FromContext(ctx)
	logger.V(3).Info("Pod marked for RestartAllContainers")
	for _, r := range resetActions(pod, s.status) {
		logger.V(3).Info("Removing container before pod restarts", "container", r.name, "containerID", r.id)
		if r.kill {
			var grace int64
			if err := m.killContainer(ctx, pod, r.id, r.name, "killing", killReasonOther, &grace, nil); err != nil {
				s.fail(fmt.Errorf("%w: kill container %s of pod %s: %v", podstate.ErrKillContainer, r.name, podDesc(pod), err))
				return
			}
		}
		if err := m.removeContainer(ctx, r.id, true); err != nil {
			s.fail(fmt.Errorf("%w: container %s of pod %s: %v", podstate.ErrRemoveContainer, r.name, podDesc(pod), err))
			return
		}
		s.retry(m.clock.Now())
	}
}

// createSandbox creates the sandbox and reads its IPs; false means the sync
// cannot go on.
func (s *podSync) createSandbox(ctx context.Context, attempt uint32) bool {
	m, pod := s.m, s.pod
	m.metrics.startedPod()
	if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
		m.metrics.startedUserNamespacedPod()
		s.usernsStarted = true
	}
	id, cfg, err := m.createSandbox(ctx, pod, attempt)
	if err != nil {
		m.metrics.startedPodError()
		cause := err
		if se := (*sandboxError)(nil); errors.As(err, &se) {
			cause = se.cause
		}
		m.recorder.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", cause)
		s.fail(fmt.Errorf("%w: %v", podstate.ErrCreatePodSandbox, err))
		return false
	}
	resp, err := m.rs.PodSandboxStatus(ctx, id, false)
	if err == nil && resp.GetStatus() == nil {
		err = errors.New("the runtime returned no status")
	}
	if err != nil {
		m.recorder.Eventf(pod, v1.EventTypeWarning, "FailedPodSandBoxStatus", "Unable to get pod sandbox status: %v", err)
		s.fail(fmt.Errorf("get status of the new sandbox of pod %s: %w", podDesc(pod), err))
		return false
	}
	s.sandboxID, s.sandboxCfg = id, cfg
	s.podIPs = m.sandboxIPs(ctx, pod.Namespace, pod.Name, resp.GetStatus())
	s.newSandbox = resp.GetStatus()
	// The pod's cgroup was made for the pod's allocation.
	m.setPodLevelActuated(pod.UID, pod.Spec.Resources)
	return true
}

// start starts one container unless it backs off, recording the outcome in
// the pod's waiting reasons.
func (s *podSync) start(ctx context.Context, c *v1.Container, kind string) error {
	m, pod := s.m, s.pod
	if w := s.backOff(ctx, c); w != nil {
		m.setReason(pod.UID, c.Name, w)
		err := fmt.Errorf("%w: %s", w.Reason, w.Message)
		s.fail(err)
		return err
	}
	m.metrics.startedContainer(kind)
	w := s.startContainer(ctx, c)
	m.setReason(pod.UID, c.Name, w)
	if w == nil {
		return nil
	}
	m.metrics.startedContainerError(kind, w.Reason.Error())
	err := fmt.Errorf("%w: start %s %s of pod %s: %s", w.Reason, kind, c.Name, podDesc(pod), w.Message)
	s.fail(err)
	return err
}

// backOff returns the CrashLoopBackOff reason if c's last instance exited
// too recently to restart it, and advances the back-off otherwise.
func (s *podSync) backOff(ctx context.Context, c *v1.Container) *podstate.ContainerWaiting {
	m, pod := s.m, s.pod
	var last *podstate.ContainerStatus
	for _, cs := range s.status.Containers {
		if cs.Name == c.Name && cs.State == podstate.ContainerStateExited {
			last = cs
			break
		}
	}
	if last == nil {
		return nil
	}
	key := fmt.Sprintf("%s_%s_%s_%s_%d", pod.Name, pod.Namespace, pod.UID, c.Name, HashContainer(c))
	if m.backOff.IsInBackOffSince(key, last.FinishedAt) {
		delay := m.backOff.Get(key)
		m.recorder.Eventf(containerRef(pod, c), v1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s", c.Name, podDesc(pod))
		s.retry(last.FinishedAt.Add(delay))
		klog.FromContext(ctx).V(3).Info("Back-off restarting failed container", "container", c.Name, "backOff", delay)
		return &podstate.ContainerWaiting{Reason: podstate.ErrCrashLoopBackOff,
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", delay, c.Name, podDesc(pod))}
	}
	m.backOff.Next(key, last.FinishedAt)
	return nil
}

// containerRef is the event object of a container: its pod, with the
// container's field path.
func containerRef(pod *v1.Pod, c *v1.Container) *v1.ObjectReference {
	path := fmt.Sprintf("spec.containers{%s}", c.Name)
	switch {
	case findInit(pod, c.Name):
		path = fmt.Sprintf("spec.initContainers{%s}", c.Name)
	case findEphemeral(pod, c.Name) != nil:
		path = fmt.Sprintf("spec.ephemeralContainers{%s}", c.Name)
	}
	return &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		ResourceVersion: pod.ResourceVersion, FieldPath: path}
}

// startContainer pulls c's image, creates and starts the container and runs
// its postStart hook. It returns nil on success and the waiting reason
// otherwise, having recorded the kubelet's events.
func (s *podSync) startContainer(ctx context.Context, c *v1.Container) *podstate.ContainerWaiting {
	m, pod := s.m, s.pod
	ref := containerRef(pod, c)
	failed := func(reason error, msg string) *podstate.ContainerWaiting {
		m.recorder.Eventf(ref, v1.EventTypeWarning, "Failed", "Error: %s", msg)
		return &podstate.ContainerWaiting{Reason: reason, Message: msg}
	}
	vols, w := s.containerImageVolumes(ctx, c, ref)
	if w != nil {
		return w
	}
	img := m.images.ensure(ctx, pod, c.Image, c.ImagePullPolicy, ref, s.pullSecrets, s.sandboxCfg, needsImageUser(pod, c), s.turn, s.images)
	if img.err != nil {
		s.retry(img.retryAt)
		m.recorder.Eventf(ref, v1.EventTypeWarning, "Failed", "Error: %v", img.err)
		return &podstate.ContainerWaiting{Reason: img.err, Message: img.msg}
	}
	restartCount := 0
	if cs := s.status.Container(c.Name); cs != nil {
		restartCount = cs.RestartCount + 1
	} else {
		// The container's instances may all have been removed; its logs
		// remember how often it ran.
		restartCount = restartCountFromLogs(filepath.Dir(ContainerLogPath(m.opts.PodLogsDir, pod.Namespace, pod.Name, pod.UID, c.Name, 0)))
	}
	nsTarget, err := s.ephemeralTarget(c)
	if err != nil {
		return failed(podstate.ErrCreateContainerConfig, err.Error())
	}
	userns := s.sandboxCfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	cfg, err := m.containerConfig(ctx, pod, c, restartCount, img.ref, img.user, s.podIPs, vols, nsTarget, userns)
	if err != nil {
		return failed(podstate.ErrCreateContainerConfig, err.Error())
	}
	id, err := m.rs.CreateContainer(ctx, s.sandboxID, cfg, s.sandboxCfg)
	imageMounts := countImageMounts(c, vols.images)
	if err != nil {
		msg := grpcMessage(err)
		m.metrics.imageVolumeMounts(len(vols.images), imageMounts, strings.HasPrefix(msg, crierrors.ErrImageVolumeMountFailed.Error()))
		return failed(podstate.ErrCreateContainer, msg)
	}
	m.metrics.imageVolumeMounts(len(vols.images), imageMounts, false)
	s.created = append(s.created, [2]string{id, s.sandboxID})
	m.opts.ImageMounts.record(id, cfg.Mounts)
	m.recorder.Eventf(ref, v1.EventTypeNormal, "Created", "Container created")
	if err := m.rs.StartContainer(ctx, id); err != nil {
		return failed(podstate.ErrRunContainer, grpcMessage(err))
	}
	m.recorder.Eventf(ref, v1.EventTypeNormal, "Started", "Container started")
	m.linkContainerLog(ctx, pod.Name, pod.Namespace, c.Name, id, filepath.Join(s.sandboxCfg.GetLogDirectory(), cfg.GetLogPath()))
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		podIP := ""
		if len(s.podIPs) > 0 {
			podIP = s.podIPs[0]
		}
		// The hook is the pod's own code and may take long: it runs
		// without a turn.
		s.turn.pause()
		msg, err := m.runHook(ctx, pod, c, id, c.Lifecycle.PostStart, func(context.Context) (string, error) { return podIP, nil })
		if rerr := s.turn.resume(ctx); rerr != nil {
			klog.FromContext(ctx).V(4).Info("Interrupted waiting for a turn to start after a postStart hook", "err", rerr)
		}
		if err != nil {
			klog.FromContext(ctx).Error(err, "PostStart hook failed", "container", c.Name)
			m.recorder.Eventf(ref, v1.EventTypeWarning, "FailedPostStartHook", "PostStartHook failed")
			if kerr := m.killContainer(ctx, pod, id, c.Name, "FailedPostStartHook", killReasonOther, nil, nil); kerr != nil {
				klog.FromContext(ctx).Error(kerr, "Cannot kill a container whose postStart hook failed", "container", c.Name)
			}
			return &podstate.ContainerWaiting{Reason: podstate.ErrPostStartHook, Message: msg}
		}
	}
	return nil
}

// imageVolumePull is the pull of one image volume's image: the image
// spec the runtime mounts, or the pull's error and message.
type imageVolumePull struct {
	spec *runtimeapi.ImageSpec
	err  error
	msg  string
}

// pullImageVolumes pulls the images of all the pod's image volumes, once
// per sync, as the kubelet's getImageVolumes before it starts a container:
// with each volume's pullPolicy and the pod's pull secrets, through the
// image manager (its back-off and events, on the pod).
func (s *podSync) pullImageVolumes(ctx context.Context) map[string]imageVolumePull {
	if s.imageVolumes != nil {
		return s.imageVolumes
	}
	m, pod := s.m, s.pod
	s.imageVolumes = map[string]imageVolumePull{}
	podRef := &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		ResourceVersion: pod.ResourceVersion}
	for _, vol := range pod.Spec.Volumes {
		if vol.Image == nil {
			continue
		}
		img := m.images.ensure(ctx, pod, vol.Image.Reference, vol.Image.PullPolicy, podRef, s.pullSecrets, s.sandboxCfg, false, s.turn, nil)
		if img.err != nil {
			klog.FromContext(ctx).Error(img.err, "Failed to ensure image", "volume", vol.Name, "image", vol.Image.Reference, "message", img.msg)
			s.retry(img.retryAt)
			s.imageVolumes[vol.Name] = imageVolumePull{err: img.err, msg: img.msg}
			continue
		}
		klog.FromContext(ctx).V(4).Info("Pulled image", "ref", img.ref, "volume", vol.Name)
		s.imageVolumes[vol.Name] = imageVolumePull{spec: &runtimeapi.ImageSpec{Image: img.ref,
			UserSpecifiedImage: vol.Image.Reference, Annotations: pod.Annotations}}
	}
	return s.imageVolumes
}

// containerImageVolumes returns the pod's volumes with the image specs of
// the image volumes c mounts. When one of their pulls failed, c does not
// start: as the kubelet's toKubeContainerImageVolumes, a Failed event per
// such mount and the waiting reason of the (last) failed pull
// (ErrImagePull, ImagePullBackOff...).
func (s *podSync) containerImageVolumes(ctx context.Context, c *v1.Container, ref *v1.ObjectReference) (PodVolumes, *podstate.ContainerWaiting) {
	vols := s.volumes
	if !hasImageVolume(s.pod) {
		return vols, nil
	}
	pulls := s.pullImageVolumes(ctx)
	vols.images = map[string]*runtimeapi.ImageSpec{}
	var w *podstate.ContainerWaiting
	for _, vm := range c.VolumeMounts {
		p, ok := pulls[vm.Name]
		if !ok {
			continue
		}
		if p.err != nil {
			s.m.recorder.Eventf(ref, v1.EventTypeWarning, "Failed", "Error: %v", p.err)
			w = &podstate.ContainerWaiting{Reason: p.err, Message: p.msg}
			continue
		}
		vols.images[vm.Name] = p.spec
	}
	if w != nil {
		return vols, w
	}
	return vols, nil
}

// hasImageVolume reports whether pod has an image volume.
func hasImageVolume(pod *v1.Pod) bool {
	for _, vol := range pod.Spec.Volumes {
		if vol.Image != nil {
			return true
		}
	}
	return false
}

// countImageMounts returns how many of c's volumeMounts mount one of
// images.
func countImageMounts(c *v1.Container, images map[string]*runtimeapi.ImageSpec) int {
	n := 0
	for _, vm := range c.VolumeMounts {
		if images[vm.Name] != nil {
			n++
		}
	}
	return n
}

// ephemeralTarget returns the ID of the container whose process namespace
// ephemeral container c joins (its targetContainerName), "" when c is not
// an ephemeral container or targets none.
func (s *podSync) ephemeralTarget(c *v1.Container) (string, error) {
	ec := findEphemeral(s.pod, c.Name)
	if ec == nil || ec.TargetContainerName == "" {
		return "", nil
	}
	target := s.status.Container(ec.TargetContainerName)
	if target == nil {
		return "", fmt.Errorf("unable to find target container %v", ec.TargetContainerName)
	}
	return target.ID, nil
}

// needsImageUser reports whether starting c needs the image's user: to
// enforce runAsNonRoot without an explicit runAsUser.
func needsImageUser(pod *v1.Pod, c *v1.Container) bool {
	nonRoot := pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.RunAsNonRoot != nil && *pod.Spec.SecurityContext.RunAsNonRoot
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		nonRoot = *c.SecurityContext.RunAsNonRoot
	}
	return nonRoot
}

// grpcMessage returns the message of a gRPC status error, or the error's
// text.
func grpcMessage(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

var logFileRestart = regexp.MustCompile(`^(\d+)\.log(\..*)?$`)

// restartCountFromLogs returns one more than the highest <n>.log in dir, or
// 0 when there is none.
func restartCountFromLogs(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	count := 0
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if m := logFileRestart.FindStringSubmatch(e.Name()); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n+1 > count {
				count = n + 1
			}
		}
	}
	return count
}

// removeInitContainers removes exited (or unknown) instances of the pod's
// init containers, keeping the newest keep of each name; keep 0 removes
// every instance (a new sandbox starts initialization from scratch).
func (s *podSync) removeInitContainers(ctx context.Context, keep int) {
	for i := range s.pod.Spec.InitContainers {
		name := s.pod.Spec.InitContainers[i].Name
		seen := 0
		for _, cs := range s.status.Containers {
			if cs.Name != name || (keep > 0 && cs.State != podstate.ContainerStateExited && cs.State != podstate.ContainerStateUnknown) {
				continue
			}
			seen++
			if seen <= keep {
				continue
			}
			if err := s.m.removeContainer(ctx, cs.ID, false); err != nil {
				klog.FromContext(ctx).Error(err, "Cannot remove an init container", "container", name, "containerID", cs.ID)
			}
		}
	}
}

// removeContainer removes a container, and its log files (the current
// one and those a log rotation moved aside) unless keepLogs: the logs of
// the containers removed to restart all of a pod's containers in place
// stay until the pod is removed, as the kubelet keeps them, and the next
// instance's restart count follows them.
func (m *PodManager) removeContainer(ctx context.Context, id string, keepLogs bool) error {
	m.removeContainerLogs(ctx, id, keepLogs)
	if err := m.rs.RemoveContainer(ctx, id); err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	m.forgetActuated(id)
	return nil
}

// removeContainerLogs removes the log link of container id, which is going,
// and unless keepLogs its log files.
func (m *PodManager) removeContainerLogs(ctx context.Context, id string, keepLogs bool) {
	resp, err := m.rs.ContainerStatus(ctx, id, false)
	if err != nil || resp.GetStatus() == nil {
		return
	}
	m.unlinkContainerLog(ctx, resp.GetStatus())
	log := resp.GetStatus().GetLogPath()
	if keepLogs || log == "" {
		return
	}
	rotated, _ := filepath.Glob(log + ".*")
	for _, l := range append(rotated, log) {
		if err := os.Remove(l); err != nil && !os.IsNotExist(err) {
			klog.FromContext(ctx).Error(err, "Cannot remove a container's log", "containerID", id, "path", l)
		}
	}
}
