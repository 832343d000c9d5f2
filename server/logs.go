package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// parsePodLogOptions decodes query parameters as the API machinery decodes
// v1.PodLogOptions: a bool is true unless "0" or "false" (an empty value is
// true), integers are base 10, sinceTime is RFC 3339.
func parsePodLogOptions(q url.Values) (*v1.PodLogOptions, error) {
	o := &v1.PodLogOptions{}
	boolean := func(name string) bool {
		v, ok := q[name]
		if !ok || len(v) == 0 {
			return false
		}
		return !(v[0] == "0" || strings.EqualFold(v[0], "false"))
	}
	integer := func(name string) (*int64, error) {
		v, ok := q[name]
		if !ok || len(v) == 0 {
			return nil, nil
		}
		i, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil {
			return nil, err
		}
		return &i, nil
	}
	o.Container = q.Get("container")
	o.Follow = boolean("follow")
	o.Previous = boolean("previous")
	o.Timestamps = boolean("timestamps")
	o.InsecureSkipTLSVerifyBackend = boolean("insecureSkipTLSVerifyBackend")
	var err error
	if o.SinceSeconds, err = integer("sinceSeconds"); err != nil {
		return nil, err
	}
	if o.TailLines, err = integer("tailLines"); err != nil {
		return nil, err
	}
	if o.LimitBytes, err = integer("limitBytes"); err != nil {
		return nil, err
	}
	if v, ok := q["sinceTime"]; ok {
		t := metav1.Time{}
		s := ""
		if len(v) > 0 {
			s = v[0]
		}
		if err := t.UnmarshalQueryParameter(s); err != nil {
			return nil, err
		}
		o.SinceTime = &t
	}
	if v, ok := q["stream"]; ok && len(v) > 0 {
		s := v[0]
		o.Stream = &s
	}
	return o, nil
}

// validPodLogOptions is the API's ValidatePodLogOptions.
func validPodLogOptions(o *v1.PodLogOptions) bool {
	if o.TailLines != nil && *o.TailLines < 0 {
		return false
	}
	if o.LimitBytes != nil && *o.LimitBytes < 1 {
		return false
	}
	if o.SinceSeconds != nil && o.SinceTime != nil {
		return false
	}
	if o.SinceSeconds != nil && *o.SinceSeconds < 1 {
		return false
	}
	if o.Stream != nil {
		switch *o.Stream {
		case v1.LogStreamStdout, v1.LogStreamStderr, v1.LogStreamAll:
		default:
			return false
		}
		if *o.Stream != v1.LogStreamAll && o.TailLines != nil {
			return false
		}
	}
	return true
}

// flushWriter flushes after every write, as the kubelet's flushwriter.
type flushWriter struct {
	w http.ResponseWriter
	f http.Flusher
}

func (fw flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	if fw.f != nil {
		fw.f.Flush()
	}
	return n, err
}

// getContainerLogs serves /containerLogs/{podNamespace}/{podID}/{containerName}
// with the kubelet's query parameters, status codes and error texts.
func (s *Server) getContainerLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, container := r.PathValue("podNamespace"), r.PathValue("podID"), r.PathValue("containerName")
	q := r.URL.Query()
	if tail := q.Get("tail"); tail != "" {
		q["tailLines"] = []string{tail}
		if tail == "all" {
			delete(q, "tailLines")
		}
	}
	opts, err := parsePodLogOptions(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, `{"message": "Unable to decode query."}`)
		return
	}
	if !validPodLogOptions(opts) {
		writeError(w, http.StatusUnprocessableEntity, `{"message": "Invalid request."}`)
		return
	}
	pod, ok := s.podByName(ns, name)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("pod %q does not exist", name))
		return
	}
	if containerSpec(pod, container) == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("container %q not found in pod %q", container, name))
		return
	}
	if opts.Stream != nil && *opts.Stream != v1.LogStreamAll {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unable to return the given log stream: %q. Please enable PodLogsQuerySplitStreams feature gate in kubelet", *opts.Stream))
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Transfer-Encoding", "chunked")
	if err := s.containerLogs(r.Context(), pod, container, opts, w, flusher); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
	}
}

// containerLogs finds the container instance the options ask for and
// streams its log. Until it returns nil or writes, no response is
// committed; once the container is known, the 200 is committed (as the
// kubelet's zero-byte write) and later errors follow the output.
func (s *Server) containerLogs(ctx context.Context, pod *v1.Pod, container string, o *v1.PodLogOptions, w http.ResponseWriter, flusher http.Flusher) error {
	status := pod.Status
	if s.opts.PodStatus != nil {
		if st, ok := s.opts.PodStatus(pod.UID); ok {
			status = st
		}
	}
	cid, err := logContainerID(pod.Name, &status, container, o.Previous)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	if s.opts.Runtime == nil {
		return fmt.Errorf("unable to retrieve container logs for %v: no container runtime", cid)
	}
	id := cid
	if _, after, found := strings.Cut(cid, "://"); found {
		id = after
	}
	sctx, cancel := s.runtimeCtx(ctx)
	resp, err := s.opts.Runtime.ContainerStatus(sctx, id, false)
	cancel()
	if err != nil || resp.GetStatus() == nil {
		return fmt.Errorf("unable to retrieve container logs for %v", cid)
	}
	lo := &logOptions{tailLines: o.TailLines, limitBytes: o.LimitBytes, follow: o.Follow, timestamps: o.Timestamps}
	now := s.opts.Clock.Now()
	if o.SinceSeconds != nil {
		lo.since = now.Add(-time.Duration(*o.SinceSeconds) * time.Second)
	}
	if o.SinceTime != nil && o.SinceTime.After(lo.since) {
		lo.since = o.SinceTime.Time
	}
	var out io.Writer = w
	var flush func()
	if o.Follow && flusher != nil {
		out = flushWriter{w: w, f: flusher}
		flush = flusher.Flush
	}
	running := func(ctx context.Context) (bool, error) {
		ctx, cancel := s.runtimeCtx(ctx)
		defer cancel()
		resp, err := s.opts.Runtime.ContainerStatus(ctx, id, false)
		if err != nil {
			// A runtime that is down may well have the container running.
			if grpcstatus.Code(err) == codes.Unavailable {
				return true, nil
			}
			return false, err
		}
		return resp.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING, nil
	}
	return readLogs(ctx, resp.GetStatus().GetLogPath(), lo, s.opts.ReadRotatedLogs, running, s.opts.Clock, out, out, flush)
}

// logContainerID picks the container instance whose log to read, with the
// kubelet's error texts (validateContainerLogStatus).
func logContainerID(podName string, st *v1.PodStatus, container string, previous bool) (string, error) {
	cs, found := findStatus(st.ContainerStatuses, container)
	if !found {
		cs, found = findStatus(st.InitContainerStatuses, container)
	}
	if !found {
		cs, found = findStatus(st.EphemeralContainerStatuses, container)
	}
	if !found {
		return "", fmt.Errorf("container %q in pod %q is not available", container, podName)
	}
	last := cs.LastTerminationState
	waiting, running, terminated := cs.State.Waiting, cs.State.Running, cs.State.Terminated
	switch {
	case previous:
		if last.Terminated == nil || last.Terminated.ContainerID == "" {
			return "", fmt.Errorf("previous terminated container %q in pod %q not found", container, podName)
		}
		return last.Terminated.ContainerID, nil
	case running != nil:
		return cs.ContainerID, nil
	case terminated != nil:
		if terminated.ContainerID != "" {
			return terminated.ContainerID, nil
		}
		if last.Terminated != nil && last.Terminated.ContainerID != "" {
			return last.Terminated.ContainerID, nil
		}
		return "", fmt.Errorf("container %q in pod %q is terminated", container, podName)
	case last.Terminated != nil:
		if last.Terminated.ContainerID == "" {
			return "", fmt.Errorf("container %q in pod %q is terminated", container, podName)
		}
		return last.Terminated.ContainerID, nil
	case waiting != nil:
		switch waiting.Reason {
		case "ErrImagePull":
			return "", fmt.Errorf("container %q in pod %q is waiting to start: image can't be pulled", container, podName)
		case "ImagePullBackOff":
			return "", fmt.Errorf("container %q in pod %q is waiting to start: trying and failing to pull image", container, podName)
		default:
			return "", fmt.Errorf("container %q in pod %q is waiting to start: %v", container, podName, waiting.Reason)
		}
	}
	return "", fmt.Errorf("container %q in pod %q is waiting to start - no logs yet", container, podName)
}

func findStatus(statuses []v1.ContainerStatus, name string) (v1.ContainerStatus, bool) {
	for _, s := range statuses {
		if s.Name == name {
			return s, true
		}
	}
	return v1.ContainerStatus{}, false
}
