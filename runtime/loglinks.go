package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// ext4MaxFileNameLen is the longest file name ext4 takes, to which the
// kubelet truncates a container's log link.
const ext4MaxFileNameLen = 255

// logLinkSuffix ends every container log link's name.
const logLinkSuffix = ".log"

// ContainerLogLink returns the path of the link the kubelet makes in
// containerLogsDir (its /var/log/containers) to a container's log file:
// <pod>_<namespace>_<container>-<containerID>.log, the name before the
// suffix cut to keep the whole within ext4's 255 bytes, as the kubelet's
// legacyLogSymlink. Log shippers (fluent-bit, fluentd, promtail, vector,
// the OpenTelemetry filelog receiver) read these links by default.
func ContainerLogLink(containerLogsDir, podName, namespace, container, containerID string) string {
	name := fmt.Sprintf("%s_%s_%s-%s", podName, namespace, container, containerID)
	if len(name) > ext4MaxFileNameLen-len(logLinkSuffix) {
		name = name[:ext4MaxFileNameLen-len(logLinkSuffix)]
	}
	return filepath.Join(containerLogsDir, name+logLinkSuffix)
}

// containerIDFromLogLink returns the container ID (or, for a truncated
// name, its prefix) a log link's name ends with, as the kubelet's
// getContainerIDFromLegacyLogSymlink: what follows the last '-', without
// the suffix, at least 6 characters (the shortest prefix a runtime takes).
func containerIDFromLogLink(link string) (string, error) {
	base := filepath.Base(link)
	id, ok := strings.CutSuffix(base[strings.LastIndexByte(base, '-')+1:], logLinkSuffix)
	if !ok {
		return "", fmt.Errorf("%q does not end with %q", link, logLinkSuffix)
	}
	if len(id) < 6 {
		return "", fmt.Errorf("container ID %q in %q is too short", id, link)
	}
	return id, nil
}

// linkContainerLog makes the log link of container id, whose log file is
// logPath, after it started, as the kubelet: only when the log file exists
// (a link to nothing would only wait for the garbage collector); a failure
// is logged and does not fail the container. ContainerLogsDir is made when
// missing.
func (m *PodManager) linkContainerLog(ctx context.Context, podName, namespace, container, id, logPath string) {
	link := ContainerLogLink(m.opts.ContainerLogsDir, podName, namespace, container, id)
	if _, err := os.Stat(logPath); errors.Is(err, fs.ErrNotExist) {
		return
	}
	err := os.Symlink(logPath, link)
	if errors.Is(err, fs.ErrNotExist) {
		// The directory is made on the first link.
		if err = os.MkdirAll(m.opts.ContainerLogsDir, 0o755); err == nil {
			err = os.Symlink(logPath, link)
		}
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to create the container's log link", "pod", klog.KRef(namespace, podName), "container", container, "containerID", id, "path", link, "containerLogPath", logPath)
	}
}

// unlinkContainerLog removes the log link of the container whose status is
// st, as the kubelet's removeContainerLog: its name comes from the
// container's labels, trusted only for a link right in ContainerLogsDir (a
// name with a path in it must not make it remove a file elsewhere).
func (m *PodManager) unlinkContainerLog(ctx context.Context, st *runtimeapi.ContainerStatus) {
	labels := st.GetLabels()
	link := ContainerLogLink(m.opts.ContainerLogsDir, labels[LabelPodName], labels[LabelPodNamespace], labels[LabelContainerName], st.GetId())
	if filepath.Dir(link) != filepath.Clean(m.opts.ContainerLogsDir) {
		klog.FromContext(ctx).Info("Ignoring a container's labels that name no log link in the directory", "containerID", st.GetId(), "path", link)
		return
	}
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		klog.FromContext(ctx).Error(err, "Cannot remove a container's log link", "containerID", st.GetId(), "path", link)
	}
}

// removeDeadLogLinks removes the log links in ContainerLogsDir whose target
// is gone, but not those of a container the runtime says has not exited:
// a log rotation leaves the link dangling for a moment. As the kubelet's
// container garbage collector, a link whose container the runtime does not
// know, or whose name holds no container ID, goes; one whose status comes
// back empty stays.
func (m *PodManager) removeDeadLogLinks(ctx context.Context) {
	logger := klog.FromContext(ctx)
	links, _ := filepath.Glob(filepath.Join(m.opts.ContainerLogsDir, "*"+logLinkSuffix))
	for _, link := range links {
		if _, err := os.Stat(link); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if id, err := containerIDFromLogLink(link); err != nil {
			logger.V(4).Info("Unable to obtain the container ID of a log link", "err", err)
		} else if resp, err := m.rs.ContainerStatus(ctx, id, false); err != nil {
			logger.Info("Error getting the status of a log link's container", "containerID", id, "err", err)
		} else if st := resp.GetStatus(); st == nil {
			logger.V(4).Info("The status of a log link's container is empty", "containerID", id)
			continue
		} else if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
			logger.V(5).Info("Container is still running, not removing its log link", "containerID", id, "path", link)
			continue
		}
		if err := os.Remove(link); err != nil {
			logger.Error(err, "Failed to remove a dead container log link", "path", link)
		} else {
			logger.V(4).Info("Removed a dead container log link", "path", link)
		}
	}
}
