package fakecri

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// Exit codes and reasons the fake reports, as containerd does.
const (
	exitCodeKilled     = 137 // SIGKILL
	exitCodeTerminated = 143 // SIGTERM
	exitCodeStartError = 128
	reasonCompleted    = "Completed"
	reasonError        = "Error"
	reasonOOMKilled    = "OOMKilled"
	reasonStartError   = "StartError"
)

// sandbox is a pod sandbox: READY from RunPodSandbox until
// StopPodSandbox, then NOTREADY until removed.
type sandbox struct {
	id          string
	config      *runtimeapi.PodSandboxConfig
	handler     string
	state       runtimeapi.PodSandboxState
	createdAt   int64
	ips         []string
	hostNetwork bool
	containers  map[string]*container // by ID
}

// container is a container: CREATED, then RUNNING once started, then
// EXITED when it exits by itself (its behavior), is stopped or killed.
type container struct {
	id, sandboxID                    string
	config                           *runtimeapi.ContainerConfig
	imageName, imageRef, imageID     string
	state                            runtimeapi.ContainerState
	createdAt, startedAt, finishedAt int64
	exitCode                         int32
	reason, message                  string
	behavior                         Behavior
	exitAt                           time.Time // when a running container exits by itself
	logPath                          string
	resources                        *runtimeapi.ContainerResources
	// exited is closed when the container leaves RUNNING; it is made only
	// while a StopContainer waits for the container.
	exited chan struct{}
}

// newID returns a fresh 64-hex-digit ID. The Server's mutex must be held.
func (s *Server) newID(kind string) string {
	s.nextID++
	sum := sha256.Sum256([]byte(fmt.Sprintf("fakecri %s %p %d", kind, s, s.nextID)))
	return hex.EncodeToString(sum[:])
}

// lookupSandbox returns the sandbox whose ID is id or starts with it (as
// containerd accepts truncated IDs), or a NotFound error.
func (s *Server) lookupSandbox(id string) (*sandbox, error) {
	return lookupByID(s.sandboxes, "sandbox", id)
}

// lookupContainer is lookupSandbox for containers.
func (s *Server) lookupContainer(id string) (*container, error) {
	return lookupByID(s.containers, "container", id)
}

// lookupByID finds the kind of object whose ID is id or, unambiguously,
// starts with it.
func lookupByID[T any](byID map[string]T, kind, id string) (T, error) {
	if v, ok := byID[id]; ok {
		return v, nil
	}
	var found T
	if id != "" {
		n := 0
		for full, v := range byID {
			if strings.HasPrefix(full, id) {
				if n++; n > 1 {
					var zero T
					return zero, status.Errorf(codes.InvalidArgument, "%s ID prefix %q is ambiguous", kind, id)
				}
				found = v
			}
		}
		if n == 1 {
			return found, nil
		}
	}
	var zero T
	return zero, status.Errorf(codes.NotFound, "an error occurred when try to find %s %q: not found", kind, id)
}

// runSandbox creates and starts a sandbox.
func (s *Server) runSandbox(cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	md := cfg.GetMetadata()
	if md.GetName() == "" || md.GetNamespace() == "" || md.GetUid() == "" {
		return "", status.Error(codes.InvalidArgument, "sandbox config metadata must have a name, a namespace and a uid")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	if !slices.ContainsFunc(s.handlers, func(h *runtimeapi.RuntimeHandler) bool { return h.GetName() == handler }) {
		return "", status.Errorf(codes.NotFound, "no runtime for %q is configured", handler)
	}
	if other, ok := s.sandboxNames[sandboxName(md)]; ok {
		return "", status.Errorf(codes.AlreadyExists, "failed to reserve sandbox name %q: name is reserved for %q", sandboxName(md), other)
	}
	sb := &sandbox{
		containers:  map[string]*container{},
		config:      clone(cfg),
		handler:     handler,
		state:       runtimeapi.PodSandboxState_SANDBOX_READY,
		createdAt:   s.clock.Now().UnixNano(),
		hostNetwork: cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE,
	}
	if !sb.hostNetwork {
		if !s.networkReady.GetStatus() {
			return "", status.Errorf(codes.Unknown, "failed to setup network for sandbox %q: %s", sandboxName(md), s.networkReady.GetMessage())
		}
		ips, err := s.ipam.allocate()
		if err != nil {
			return "", status.Errorf(codes.Unknown, "failed to setup network for sandbox %q: %v", sandboxName(md), err)
		}
		sb.ips = ips
	}
	sb.id = s.newID("sandbox")
	s.sandboxes[sb.id] = sb
	s.sandboxNames[sandboxName(md)] = sb.id
	s.emitLocked(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, sb.id, sb, sb.createdAt)
	s.emitLocked(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, sb.id, sb, sb.createdAt)
	return sb.id, nil
}

func sandboxName(md *runtimeapi.PodSandboxMetadata) string {
	return fmt.Sprintf("%s_%s_%s_%d", md.GetName(), md.GetNamespace(), md.GetUid(), md.GetAttempt())
}

// stopSandbox kills the sandbox's running containers and stops it. Stopping
// an unknown or stopped sandbox succeeds (the CRI asks for idempotence).
func (s *Server) stopSandbox(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	sb, err := s.lookupSandbox(id)
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	s.stopSandboxLocked(sb)
	return nil
}

func (s *Server) stopSandboxLocked(sb *sandbox) {
	now := s.clock.Now()
	for _, c := range s.sandboxContainers(sb.id) {
		if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			s.exitLocked(c, now, exitCodeKilled, reasonError)
		}
	}
	if sb.state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return
	}
	sb.state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	s.ipam.release(sb.ips)
	s.emitLocked(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, sb.id, sb, now.UnixNano())
	s.armLocked()
}

// removeSandbox removes the sandbox and its containers, stopping them first.
// Removing an unknown sandbox succeeds.
func (s *Server) removeSandbox(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	sb, err := s.lookupSandbox(id)
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	s.stopSandboxLocked(sb)
	for _, c := range s.sandboxContainers(sb.id) {
		s.removeContainerLocked(c)
	}
	delete(s.sandboxes, sb.id)
	delete(s.sandboxNames, sandboxName(sb.config.GetMetadata()))
	s.emitLocked(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, sb.id, sb, s.clock.Now().UnixNano())
	return nil
}

// sandboxContainers returns the containers of a sandbox, oldest first.
func (s *Server) sandboxContainers(sandboxID string) []*container {
	sb := s.sandboxes[sandboxID]
	if sb == nil {
		return nil
	}
	out := make([]*container, 0, len(sb.containers))
	for _, c := range sb.containers {
		out = append(out, c)
	}
	sortContainers(out)
	return out
}

func sortContainers(cs []*container) {
	slices.SortFunc(cs, func(a, b *container) int {
		return cmp.Or(cmp.Compare(a.createdAt, b.createdAt), cmp.Compare(a.id, b.id))
	})
}

func (s *Server) sandboxStatusLocked(sb *sandbox) *runtimeapi.PodSandboxStatus {
	st := &runtimeapi.PodSandboxStatus{
		Id:             sb.id,
		Metadata:       clone(sb.config.GetMetadata()),
		State:          sb.state,
		CreatedAt:      sb.createdAt,
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		Linux:          &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: clone(sb.config.GetLinux().GetSecurityContext().GetNamespaceOptions())}},
		Labels:         copyMap(sb.config.GetLabels()),
		Annotations:    copyMap(sb.config.GetAnnotations()),
		RuntimeHandler: sb.handler,
	}
	if st.Linux.Namespaces.Options == nil {
		st.Linux.Namespaces.Options = &runtimeapi.NamespaceOption{}
	}
	if len(sb.ips) > 0 {
		st.Network.Ip = sb.ips[0]
		for _, ip := range sb.ips[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	return st
}

func (s *Server) listSandboxes(f *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	var out []*runtimeapi.PodSandbox
	for _, sb := range s.sortedSandboxes(f.GetLabelSelector()) {
		if f.GetId() != "" && !strings.HasPrefix(sb.id, f.GetId()) {
			continue
		}
		if f.GetState() != nil && f.GetState().GetState() != sb.state {
			continue
		}
		out = append(out, &runtimeapi.PodSandbox{
			Id:             sb.id,
			Metadata:       clone(sb.config.GetMetadata()),
			State:          sb.state,
			CreatedAt:      sb.createdAt,
			Labels:         copyMap(sb.config.GetLabels()),
			Annotations:    copyMap(sb.config.GetAnnotations()),
			RuntimeHandler: sb.handler,
		})
	}
	return out
}

// sortedSandboxes returns the sandboxes whose labels match selector,
// oldest first.
func (s *Server) sortedSandboxes(selector map[string]string) []*sandbox {
	var sbs []*sandbox
	for _, sb := range s.sandboxes {
		if matchLabels(sb.config.GetLabels(), selector) {
			sbs = append(sbs, sb)
		}
	}
	slices.SortFunc(sbs, func(a, b *sandbox) int {
		return cmp.Or(cmp.Compare(a.createdAt, b.createdAt), cmp.Compare(a.id, b.id))
	})
	return sbs
}

func matchLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// createContainer creates a container in a ready sandbox from a stored
// image.
//
// The sandbox config a client sends along is ignored: the config the
// sandbox was created with is authoritative for the pod's annotations.
func (s *Server) createContainer(sandboxID string, ccfg *runtimeapi.ContainerConfig) (string, error) {
	name := ccfg.GetMetadata().GetName()
	if name == "" {
		return "", status.Error(codes.InvalidArgument, "container config metadata must have a name")
	}
	ref := ccfg.GetImage().GetImage()
	if ref == "" {
		return "", status.Errorf(codes.InvalidArgument, "container %q: image reference is empty", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	sb, err := s.lookupSandbox(sandboxID)
	if err != nil {
		return "", err
	}
	if sb.state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return "", status.Errorf(codes.FailedPrecondition, "failed to create container %q: sandbox %s is not ready", name, sb.id)
	}
	img, err := s.images.lookup(ref)
	if err != nil {
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	if img == nil {
		return "", status.Errorf(codes.NotFound, "failed to create container %q: failed to get image %q: not found", name, ref)
	}
	attempt := ccfg.GetMetadata().GetAttempt()
	for _, other := range sb.containers {
		if other.config.GetMetadata().GetName() == name && other.config.GetMetadata().GetAttempt() == attempt {
			return "", status.Errorf(codes.AlreadyExists, "failed to reserve container name %q: name is reserved for %q",
				fmt.Sprintf("%s_%s_%d", name, sandboxName(sb.config.GetMetadata()), attempt), other.id)
		}
	}
	b, err := behaviorFor(ccfg, sb.config)
	if err != nil {
		return "", status.Errorf(codes.InvalidArgument, "container %q: %v", name, err)
	}
	c := &container{
		sandboxID: sb.id,
		config:    clone(ccfg),
		imageID:   img.Id,
		imageName: ref,
		imageRef:  img.Id,
		state:     runtimeapi.ContainerState_CONTAINER_CREATED,
		createdAt: s.clock.Now().UnixNano(),
		behavior:  b,
	}
	if len(img.RepoTags) > 0 {
		c.imageName = img.RepoTags[0]
	}
	if len(img.RepoDigests) > 0 {
		c.imageRef = img.RepoDigests[0]
	}
	if dir := sb.config.GetLogDirectory(); dir != "" && ccfg.GetLogPath() != "" {
		c.logPath = filepath.Join(dir, ccfg.GetLogPath())
	}
	if r := ccfg.GetLinux().GetResources(); r != nil {
		c.resources = &runtimeapi.ContainerResources{Linux: clone(r)}
	}
	c.id = s.newID("container")
	s.containers[c.id] = c
	sb.containers[c.id] = c
	s.emitLocked(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, c.id, sb, c.createdAt)
	return c.id, nil
}

// startContainer starts a created container: it opens the container's log
// (as containerd does, failing the start if the log directory is missing),
// writes the behavior's log lines and, for a behavior that exits, schedules
// the exit.
func (s *Server) startContainer(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	c, err := s.lookupContainer(id)
	if err != nil {
		return err
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_CREATED {
		return status.Errorf(codes.FailedPrecondition, "container %q is in %s state", c.id, stateName(c.state))
	}
	sb := s.sandboxes[c.sandboxID]
	if sb == nil || sb.state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return status.Errorf(codes.FailedPrecondition, "failed to start container %q: sandbox %s is not ready", c.id, c.sandboxID)
	}
	now := s.clock.Now()
	if c.behavior.FailStart {
		c.state = runtimeapi.ContainerState_CONTAINER_EXITED
		c.finishedAt = now.UnixNano()
		c.exitCode = exitCodeStartError
		c.reason = reasonStartError
		c.message = "failed to create containerd task: failed to create shim task: OCI runtime create failed: fakecri: scripted start failure (crash-on-start)"
		s.emitContainerLocked(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, c, c.finishedAt)
		return status.Errorf(codes.Unknown, "failed to start container %q: %s", c.id, c.message)
	}
	if c.logPath != "" {
		if err := writeLog(c.logPath, now, c.behavior.Logs); err != nil {
			return status.Errorf(codes.Unknown, "failed to start container %q: failed to create container log: %v", c.id, err)
		}
	}
	c.state = runtimeapi.ContainerState_CONTAINER_RUNNING
	c.startedAt = now.UnixNano()
	if c.behavior.Exits {
		c.exitAt = now.Add(c.behavior.ExitAfter)
		s.pending[c] = struct{}{}
	}
	s.emitContainerLocked(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, c, c.startedAt)
	s.advanceLocked()
	s.armLocked()
	return nil
}

// writeLog appends lines to the log at path in the CRI log format, creating
// the file (but not its directory).
func writeLog(path string, at time.Time, lines []string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	var b strings.Builder
	ts := at.UTC().Format(time.RFC3339Nano)
	for _, l := range lines {
		b.WriteString(ts + " stdout F " + l + "\n")
	}
	_, werr := f.WriteString(b.String())
	return errors.Join(werr, f.Close())
}

func stateName(st runtimeapi.ContainerState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "CONTAINER_"))
}

// stopContainer stops a running container the way a runtime does: SIGTERM,
// then SIGKILL once timeout (seconds) has passed on the Server's clock. How
// the container reacts to SIGTERM is its Behavior. It blocks until the
// container has exited or ctx is done; stopping a container that is not
// running succeeds.
func (s *Server) stopContainer(done <-chan struct{}, id string, timeout int64) error {
	s.mu.Lock()
	s.advanceLocked()
	c, err := s.lookupContainer(id)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		s.mu.Unlock()
		return nil
	}
	grace := time.Duration(max(timeout, 0)) * time.Second
	wait, code := grace, int32(exitCodeKilled)
	if !c.behavior.IgnoreSIGTERM && c.behavior.TermDelay <= grace {
		wait, code = c.behavior.TermDelay, exitCodeTerminated
	}
	if wait <= 0 {
		s.exitLocked(c, s.clock.Now(), code, reasonError)
		s.armLocked()
		s.mu.Unlock()
		return nil
	}
	if c.exited == nil {
		c.exited = make(chan struct{})
	}
	exited := c.exited
	timer := s.clock.NewTimer(wait)
	s.mu.Unlock()
	defer timer.Stop()

	select {
	case <-exited:
		return nil
	case <-done:
		return status.Errorf(codes.Canceled, "stop container %q: canceled while waiting for it to exit", id)
	case at := <-timer.C():
		s.mu.Lock()
		defer s.mu.Unlock()
		s.advanceLocked()
		if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			s.exitLocked(c, at, code, reasonError)
			s.armLocked()
		}
		return nil
	}
}

// exitLocked moves a running container to EXITED at the given time.
func (s *Server) exitLocked(c *container, at time.Time, code int32, reason string) {
	c.state = runtimeapi.ContainerState_CONTAINER_EXITED
	c.finishedAt = at.UnixNano()
	c.exitCode = code
	c.reason = reason
	if reason == "" {
		c.reason = reasonError
		if code == 0 {
			c.reason = reasonCompleted
		}
	}
	c.exitAt = time.Time{}
	delete(s.pending, c)
	if c.exited != nil {
		close(c.exited)
		c.exited = nil
	}
	s.emitContainerLocked(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, c, c.finishedAt)
}

// removeContainerLocked kills the container if it runs and forgets it.
func (s *Server) removeContainerLocked(c *container) {
	if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
		s.exitLocked(c, s.clock.Now(), exitCodeKilled, reasonError)
	}
	delete(s.containers, c.id)
	if sb := s.sandboxes[c.sandboxID]; sb != nil {
		delete(sb.containers, c.id)
	}
	delete(s.pending, c)
	s.emitContainerLocked(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, c, s.clock.Now().UnixNano())
	s.armLocked()
}

func (s *Server) removeContainer(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	c, err := s.lookupContainer(id)
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	s.removeContainerLocked(c)
	return nil
}

// containerStatusLocked returns the CRI status of c.
func (s *Server) containerStatusLocked(c *container) *runtimeapi.ContainerStatus {
	st := &runtimeapi.ContainerStatus{
		Id:          c.id,
		Metadata:    clone(c.config.GetMetadata()),
		State:       c.state,
		CreatedAt:   c.createdAt,
		StartedAt:   c.startedAt,
		FinishedAt:  c.finishedAt,
		ExitCode:    c.exitCode,
		Image:       &runtimeapi.ImageSpec{Image: c.imageName, UserSpecifiedImage: c.config.GetImage().GetUserSpecifiedImage()},
		ImageRef:    c.imageRef,
		ImageId:     c.imageID,
		Reason:      c.reason,
		Message:     c.message,
		Labels:      copyMap(c.config.GetLabels()),
		Annotations: copyMap(c.config.GetAnnotations()),
		LogPath:     c.logPath,
		Resources:   clone(c.resources),
	}
	for _, m := range c.config.GetMounts() {
		st.Mounts = append(st.Mounts, clone(m))
	}
	return st
}

func (s *Server) listContainers(f *runtimeapi.ContainerFilter) []*runtimeapi.Container {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	var cs []*container
	for _, c := range s.containers {
		if f.GetId() != "" && !strings.HasPrefix(c.id, f.GetId()) {
			continue
		}
		if f.GetPodSandboxId() != "" && !strings.HasPrefix(c.sandboxID, f.GetPodSandboxId()) {
			continue
		}
		if f.GetState() != nil && f.GetState().GetState() != c.state {
			continue
		}
		if !matchLabels(c.config.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		cs = append(cs, c)
	}
	sortContainers(cs)
	out := make([]*runtimeapi.Container, len(cs))
	for i, c := range cs {
		out[i] = &runtimeapi.Container{
			Id:           c.id,
			PodSandboxId: c.sandboxID,
			Metadata:     clone(c.config.GetMetadata()),
			Image:        clone(c.config.GetImage()),
			ImageRef:     c.imageID,
			ImageId:      c.imageID,
			State:        c.state,
			CreatedAt:    c.createdAt,
			Labels:       copyMap(c.config.GetLabels()),
			Annotations:  copyMap(c.config.GetAnnotations()),
		}
	}
	return out
}

// ExitContainer makes a running container exit now with code (reason
// "OOMKilled" when oomKilled, else "Completed" for 0 and "Error"
// otherwise), as if its process had crashed or the kernel had killed it. It
// returns an error if the container does not exist or is not running.
func (s *Server) ExitContainer(id string, code int32, oomKilled bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	c, err := s.lookupContainer(id)
	if err != nil {
		return fmt.Errorf("fakecri: exit container: %w", err)
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return fmt.Errorf("fakecri: exit container %s: it is %s, not running", c.id, stateName(c.state))
	}
	reason := ""
	if oomKilled {
		reason = reasonOOMKilled
	}
	s.exitLocked(c, s.clock.Now(), code, reason)
	s.armLocked()
	return nil
}

// StopSandbox stops the sandbox with the given ID (killing its containers)
// as if its network namespace or pause process had died. It returns an
// error if there is no such sandbox.
func (s *Server) StopSandbox(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	sb, err := s.lookupSandbox(id)
	if err != nil {
		return fmt.Errorf("fakecri: stop sandbox: %w", err)
	}
	s.stopSandboxLocked(sb)
	return nil
}

// advanceLocked applies the exits that are due at the clock's current time,
// in time order, so every observation of the state is as of now.
func (s *Server) advanceLocked() {
	if s.nextWake.IsZero() {
		return
	}
	now := s.clock.Now()
	if now.Before(s.nextWake) {
		return
	}
	var due []*container
	for c := range s.pending {
		if !c.exitAt.After(now) {
			due = append(due, c)
		}
	}
	slices.SortFunc(due, func(a, b *container) int {
		return cmp.Or(a.exitAt.Compare(b.exitAt), cmp.Compare(a.id, b.id))
	})
	for _, c := range due {
		reason := ""
		if c.behavior.OOMKilled {
			reason = reasonOOMKilled
		}
		s.exitLocked(c, c.exitAt, c.behavior.ExitCode, reason)
	}
	s.armLocked()
}

// armLocked sets the Server's one timer to the earliest pending exit, so
// exits happen (and their events are sent) without anyone polling.
func (s *Server) armLocked() {
	var earliest time.Time
	for c := range s.pending {
		if earliest.IsZero() || c.exitAt.Before(earliest) {
			earliest = c.exitAt
		}
	}
	if earliest.Equal(s.nextWake) && (s.timer != nil || earliest.IsZero()) {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.nextWake = earliest
	if earliest.IsZero() {
		return
	}
	for {
		// The wait is taken from a reading of its own, and again if the
		// clock moved while the timer was armed: the clock may have
		// passed earliest since the exits were applied (a fake clock's
		// step), and a fake clock's timer armed for a passed time fires
		// only at its next step.
		now := s.clock.Now()
		if !now.Before(earliest) {
			s.advanceLocked() // applies the exits and arms again
			return
		}
		// The callback must not call into the clock synchronously: a
		// fake clock runs it while holding its own lock.
		s.timer = afterFunc(s.clock, earliest.Sub(now), func() { go s.wake() })
		if s.clock.Since(now) < time.Millisecond {
			return
		}
		s.timer.Stop()
		s.timer = nil
	}
}

func (s *Server) wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = nil
	s.advanceLocked()
	s.armLocked()
}

// afterFunc runs f after d on clk, in a goroutine of the clock's if it has
// AfterFunc and in one of its own otherwise.
func afterFunc(clk clock.Clock, d time.Duration, f func()) clock.Timer {
	if dc, ok := clk.(clock.WithDelayedExecution); ok {
		return dc.AfterFunc(d, f)
	}
	t := clk.NewTimer(d)
	stop := make(chan struct{})
	go func() {
		select {
		case <-t.C():
			f()
		case <-stop:
		}
	}()
	return &stoppableTimer{Timer: t, stop: stop}
}

type stoppableTimer struct {
	clock.Timer
	stop chan struct{}
}

func (t *stoppableTimer) Stop() bool {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	return t.Timer.Stop()
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// SandboxConfig returns a copy of the config the sandbox with the given ID
// (or ID prefix) was created with, or nil if there is no such sandbox: what
// a test of a CRI client checks the client asked for.
func (s *Server) SandboxConfig(id string) *runtimeapi.PodSandboxConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, err := s.lookupSandbox(id)
	if err != nil {
		return nil
	}
	return clone(sb.config)
}

// ContainerConfig returns a copy of the config the container with the
// given ID (or ID prefix) was created with, or nil if there is no such
// container.
func (s *Server) ContainerConfig(id string) *runtimeapi.ContainerConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.lookupContainer(id)
	if err != nil {
		return nil
	}
	return clone(c.config)
}
