package runtime

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nodekit/nodekit/podstate"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Limits of a termination message, as the kubelet's.
const (
	maxTerminationMessageBytes    = 4096
	maxTerminationMessageLogBytes = 2048
	maxTerminationMessageLogLines = 80
)

// GetPodStatus asks the runtime for the pod with the given UID: its
// sandboxes (newest first), its containers (newest first) and its IPs (the
// newest sandbox's, if it is ready; the node's IPs for a sandbox in the
// node's network namespace). name and namespace label the result (the
// runtime may no longer know them). A pod the runtime does not have yields
// an empty status, not an error. TimeStamp is taken before the runtime is
// asked, so the status is at least as new as it says. It blocks for
// 2 + sandboxes + containers CRI calls; the result belongs to the caller.
func (m *PodManager) GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*podstate.PodStatus, error) {
	st := &podstate.PodStatus{ID: uid, Name: name, Namespace: namespace, TimeStamp: m.clock.Now()}
	selector := map[string]string{LabelPodUID: string(uid)}
	sandboxes, err := m.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("get status of pod %s/%s: list sandboxes: %w", namespace, name, err)
	}
	slices.SortFunc(sandboxes, newerSandboxFirst)

	for i, sb := range sandboxes {
		resp, err := m.rs.PodSandboxStatus(ctx, sb.GetId(), false)
		if status.Code(err) == codes.NotFound {
			continue // removed since the list
		}
		if err != nil {
			return nil, fmt.Errorf("get status of pod %s/%s: sandbox %s: %w", namespace, name, sb.GetId(), err)
		}
		if resp.GetStatus() == nil {
			return nil, fmt.Errorf("get status of pod %s/%s: sandbox %s: the runtime returned no status", namespace, name, sb.GetId())
		}
		st.Sandboxes = append(st.Sandboxes, sandboxStatus(resp.GetStatus()))
		if i == 0 && resp.GetStatus().GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			st.IPs = m.sandboxIPs(ctx, namespace, name, resp.GetStatus())
		}
	}

	containers, err := m.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("get status of pod %s/%s: list containers: %w", namespace, name, err)
	}
	ids := make([][2]string, len(containers))
	for i, c := range containers {
		ids[i] = [2]string{c.GetId(), c.GetPodSandboxId()}
	}
	if err := m.readContainers(ctx, st, ids); err != nil {
		return nil, err
	}
	return st, nil
}

// readContainers adds to st the status of each container of ids (its ID
// and its sandbox's), newest first; one removed meanwhile is left out.
func (m *PodManager) readContainers(ctx context.Context, st *podstate.PodStatus, ids [][2]string) error {
	rt := m.runtimeType(ctx)
	for _, c := range ids {
		resp, err := m.rs.ContainerStatus(ctx, c[0], false)
		if status.Code(err) == codes.NotFound {
			continue
		}
		if err != nil {
			return fmt.Errorf("get status of pod %s/%s: container %s: %w", st.Namespace, st.Name, c[0], err)
		}
		if resp.GetStatus() == nil {
			return fmt.Errorf("get status of pod %s/%s: container %s: the runtime returned no status", st.Namespace, st.Name, c[0])
		}
		st.Containers = append(st.Containers, m.containerStatus(ctx, resp.GetStatus(), c[1], rt))
	}
	// Newest first; instances created within the clock's resolution are
	// told apart by their restart count.
	slices.SortStableFunc(st.Containers, func(a, b *podstate.ContainerStatus) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.RestartCount, a.RestartCount))
	})
	return nil
}

// sandboxIPs returns the IPs of a ready sandbox: the node's for a sandbox in
// the node's network namespace, the sandbox's own otherwise. Unparseable
// IPs are dropped with a log line.
func (m *PodManager) sandboxIPs(ctx context.Context, namespace, name string, sb *runtimeapi.PodSandboxStatus) []string {
	if sb.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE {
		ips := make([]string, len(m.opts.NodeIPs))
		for i, ip := range m.opts.NodeIPs {
			ips[i] = ip.String()
		}
		return ips
	}
	var ips []string
	candidates := []string{sb.GetNetwork().GetIp()}
	for _, ip := range sb.GetNetwork().GetAdditionalIps() {
		candidates = append(candidates, ip.GetIp())
	}
	for _, ip := range candidates {
		if ip == "" {
			continue
		}
		if net.ParseIP(ip) == nil {
			klog.FromContext(ctx).Info("Pod sandbox reported an unparseable IP", "pod", klog.KRef(namespace, name), "ip", ip)
			continue
		}
		ips = append(ips, ip)
	}
	return ips
}

// containerStatus converts a CRI container status, reading the termination
// message of an exited container from its termination message file or, when
// its policy says so, from the tail of its log.
func (m *PodManager) containerStatus(ctx context.Context, cs *runtimeapi.ContainerStatus, sandboxID, runtimeType string) *podstate.ContainerStatus {
	rec := readRecorded(ctx, cs.GetLabels(), cs.GetAnnotations())
	out := &podstate.ContainerStatus{
		ID:           cs.GetId(),
		Type:         runtimeType,
		Name:         rec.name,
		State:        containerState(cs.GetState()),
		CreatedAt:    time.Unix(0, cs.GetCreatedAt()),
		Image:        cs.GetImage().GetImage(),
		ImageRef:     cs.GetImageRef(),
		ImageID:      cs.GetImageRef(),
		Hash:         rec.hash,
		RestartCount: rec.restartCount,
		SandboxID:    sandboxID,
		LogPath:      cs.GetLogPath(),
		Resources:    m.actuatedResources(cs.GetId(), rec.resources),
		Reported:     reportedResources(cs.GetResources().GetLinux()),
	}
	if out.Name == "" {
		out.Name = cs.GetMetadata().GetName()
	}
	if cs.GetImageId() != "" {
		out.ImageID = cs.GetImageId()
	}
	if cs.GetState() != runtimeapi.ContainerState_CONTAINER_CREATED && cs.GetStartedAt() > 0 {
		out.StartedAt = time.Unix(0, cs.GetStartedAt())
	}
	if cs.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		return out
	}
	out.FinishedAt = time.Unix(0, cs.GetFinishedAt())
	out.ExitCode = int(cs.GetExitCode())
	out.Reason = cs.GetReason()
	out.Message = cs.GetMessage()
	msg, fallback := terminationMessage(cs, rec.terminationMessagePath)
	if fallback && rec.terminationMessagePolicy == v1.TerminationMessageFallbackToLogsOnError && out.ExitCode != 0 && out.Reason != "ContainerCannotRun" {
		msg = tailLog(cs.GetLogPath())
	}
	if msg != "" {
		if out.Message != "" {
			out.Message += ": "
		}
		out.Message += msg
	}
	return out
}

// terminationMessage reads the file mounted at the container's termination
// message path. fallback is true when it is missing or empty.
func terminationMessage(cs *runtimeapi.ContainerStatus, path string) (string, bool) {
	if path == "" {
		return "", true
	}
	for _, mnt := range cs.GetMounts() {
		if mnt.GetContainerPath() != path {
			continue
		}
		data, err := readAtMost(mnt.GetHostPath(), maxTerminationMessageBytes)
		if os.IsNotExist(err) {
			return "", true
		}
		if err != nil {
			return fmt.Sprintf("Error on reading termination log %s: %v", mnt.GetHostPath(), err), false
		}
		return string(data), len(data) == 0
	}
	return "", true
}

// readAtMost reads the last max bytes of a file.
func readAtMost(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > max {
		if _, err := f.Seek(fi.Size()-max, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// tailLog returns the last lines of a CRI-format container log (at most 80
// lines and 2048 bytes), the messages only.
func tailLog(path string) string {
	if path == "" {
		return ""
	}
	data, err := readAtMost(path, 64<<10)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > maxTerminationMessageLogLines {
		lines = lines[len(lines)-maxTerminationMessageLogLines:]
	}
	var b strings.Builder
	for _, l := range lines {
		// <timestamp> <stream> <tag> <message>
		parts := strings.SplitN(string(l), " ", 4)
		if len(parts) < 4 {
			continue
		}
		b.WriteString(parts[3])
		if parts[2] == "F" {
			b.WriteByte('\n')
		}
	}
	s := b.String()
	if len(s) > maxTerminationMessageLogBytes {
		s = s[len(s)-maxTerminationMessageLogBytes:]
	}
	return s
}

// newerSandboxFirst orders sandboxes newest first: by creation time, then
// (for sandboxes created within the clock's resolution) by attempt.
func newerSandboxFirst(a, b *runtimeapi.PodSandbox) int {
	return cmp.Or(cmp.Compare(b.GetCreatedAt(), a.GetCreatedAt()),
		cmp.Compare(b.GetMetadata().GetAttempt(), a.GetMetadata().GetAttempt()), cmp.Compare(b.GetId(), a.GetId()))
}

// newerContainerFirst orders containers newest first: by creation time,
// then by attempt (the restart count).
func newerContainerFirst(a, b *runtimeapi.Container) int {
	return cmp.Or(cmp.Compare(b.GetCreatedAt(), a.GetCreatedAt()),
		cmp.Compare(b.GetMetadata().GetAttempt(), a.GetMetadata().GetAttempt()), cmp.Compare(b.GetId(), a.GetId()))
}

// sandboxStatus converts a CRI sandbox status to the runtime-neutral one.
func sandboxStatus(sb *runtimeapi.PodSandboxStatus) *podstate.SandboxStatus {
	return &podstate.SandboxStatus{
		ID:              sb.GetId(),
		Attempt:         sb.GetMetadata().GetAttempt(),
		Ready:           sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY,
		HostNetwork:     sb.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE,
		IP:              sb.GetNetwork().GetIp(),
		NetworkReported: sb.GetNetwork() != nil,
		CreatedAt:       time.Unix(0, sb.GetCreatedAt()),
	}
}

func containerState(s runtimeapi.ContainerState) podstate.ContainerState {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return podstate.ContainerStateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return podstate.ContainerStateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return podstate.ContainerStateExited
	}
	return podstate.ContainerStateUnknown
}

func sandboxState(s runtimeapi.PodSandboxState) podstate.ContainerState {
	if s == runtimeapi.PodSandboxState_SANDBOX_READY {
		return podstate.ContainerStateRunning
	}
	return podstate.ContainerStateExited
}

// ListPods returns the pods the runtime has, found by the pod UID label the
// agent puts on sandboxes and containers; sandboxes and containers without
// it are not the agent's and are left out. With all false only ready
// sandboxes and running containers are listed. It blocks for two CRI calls;
// the result belongs to the caller.
func (m *PodManager) ListPods(ctx context.Context, all bool) ([]podstate.RunningPod, error) {
	sbFilter, cFilter := &runtimeapi.PodSandboxFilter{}, &runtimeapi.ContainerFilter{}
	if !all {
		sbFilter.State = &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
		cFilter.State = &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	}
	sandboxes, err := m.rs.ListPodSandbox(ctx, sbFilter)
	if err != nil {
		return nil, fmt.Errorf("list pods: list sandboxes: %w", err)
	}
	containers, err := m.rs.ListContainers(ctx, cFilter)
	if err != nil {
		return nil, fmt.Errorf("list pods: list containers: %w", err)
	}
	pods := map[types.UID]*podstate.RunningPod{}
	get := func(labels map[string]string) *podstate.RunningPod {
		uid := types.UID(labels[LabelPodUID])
		if uid == "" {
			return nil
		}
		p := pods[uid]
		if p == nil {
			p = &podstate.RunningPod{ID: uid}
			pods[uid] = p
		}
		if p.Name == "" {
			p.Name, p.Namespace = labels[LabelPodName], labels[LabelPodNamespace]
		}
		return p
	}
	slices.SortFunc(sandboxes, newerSandboxFirst)
	slices.SortFunc(containers, newerContainerFirst)
	for _, sb := range sandboxes {
		if p := get(sb.GetLabels()); p != nil {
			p.Sandboxes = append(p.Sandboxes, podstate.RunningContainer{ID: sb.GetId(), Name: sb.GetMetadata().GetName(), State: sandboxState(sb.GetState()), CreatedAt: time.Unix(0, sb.GetCreatedAt())})
		}
	}
	for _, c := range containers {
		if p := get(c.GetLabels()); p != nil {
			name := c.GetLabels()[LabelContainerName]
			if name == "" {
				name = c.GetMetadata().GetName()
			}
			p.Containers = append(p.Containers, podstate.RunningContainer{ID: c.GetId(), Name: name, State: containerState(c.GetState()), SandboxID: c.GetPodSandboxId(), CreatedAt: time.Unix(0, c.GetCreatedAt())})
		}
	}
	out := make([]podstate.RunningPod, 0, len(pods))
	for _, p := range pods {
		out = append(out, *p) // sandboxes and containers were added newest first
	}
	slices.SortFunc(out, func(a, b podstate.RunningPod) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
