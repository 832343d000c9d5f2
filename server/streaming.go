package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/proxy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/nodekit/nodekit/features"
)

// streamOptions are the stdin/stdout/stderr/tty flags of an exec or attach
// request.
type streamOptions struct {
	stdin, stdout, stderr, tty bool
}

// parseStreamOptions reads the flags as the kubelet's streaming server: a
// flag is on when its parameter is "1"; a TTY has no separate stderr; at
// least one stream is required.
func parseStreamOptions(r *http.Request) (streamOptions, error) {
	o := streamOptions{
		tty:    r.FormValue(v1.ExecTTYParam) == "1",
		stdin:  r.FormValue(v1.ExecStdinParam) == "1",
		stdout: r.FormValue(v1.ExecStdoutParam) == "1",
		stderr: r.FormValue(v1.ExecStderrParam) == "1",
	}
	if o.tty && o.stderr {
		o.stderr = false
	}
	if !o.stdin && !o.stdout && !o.stderr {
		return o, errors.New("you must specify at least 1 of stdin, stdout, stderr")
	}
	return o, nil
}

func isWebSocketRequest(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") && headerHasToken(r.Header, "Connection", "upgrade")
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// portForwardPorts parses the ports a WebSocket port-forward request names;
// SPDY requests, tunneled (SPDY over WebSocket) ones included when tunnel
// is on (ExtendWebSocketsToKubelet), name them per stream, so they have
// none here.
func portForwardPorts(r *http.Request, tunnel bool) ([]int32, error) {
	if !isWebSocketRequest(r) || (tunnel && wsstream.IsWebSocketRequestWithTunnelingProtocol(r)) {
		return nil, nil
	}
	values := r.URL.Query()[v1.PortHeader]
	if len(values) == 0 {
		return nil, fmt.Errorf("query parameter %q is required", v1.PortHeader)
	}
	var ports []int32
	for _, v := range values {
		if v == "" {
			return nil, fmt.Errorf("query parameter %q cannot be empty", v1.PortHeader)
		}
		for _, p := range strings.Split(v, ",") {
			port, err := strconv.ParseUint(p, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("unable to parse %q as a port: %v", v, err)
			}
			if port < 1 {
				return nil, fmt.Errorf("port %q must be > 0", v)
			}
			ports = append(ports, int32(port))
		}
	}
	return ports, nil
}

// writeStreamingError answers a failed CRI streaming call as the kubelet's
// streaming.WriteError: 404 for NotFound, 429 (Retry-After 60) for
// ResourceExhausted, else 500, with the error text.
func writeStreamingError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch grpcstatus.Code(err) {
	case codes.NotFound:
		code = http.StatusNotFound
	case codes.ResourceExhausted:
		w.Header().Set("Retry-After", "60")
		code = http.StatusTooManyRequests
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(err.Error()))
}

type proxyResponder struct{}

func (proxyResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	klog.FromContext(r.Context()).Error(err, "Error while proxying request")
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// proxyStream serves an upgrade request for subresource (exec, attach or
// portforward) with the runtime's streaming server at rawURL, as the
// kubelet does: a v5.channel.k8s.io WebSocket exec or attach is translated
// to SPDY with the streams of opts, a SPDY-over-WebSocket port-forward is
// tunneled (websocket.go; both counted in
// kubelet_websocket_streaming_requests_total), and any other upgrade (SPDY,
// the older WebSocket protocols) is proxied unchanged. With the
// ExtendWebSocketsToKubelet gate off, as the kubelet's, every upgrade is
// proxied unchanged.
func (s *Server) proxyStream(w http.ResponseWriter, r *http.Request, rawURL, subresource string, opts streamOptions) {
	u, err := url.Parse(rawURL)
	if err != nil {
		writeStreamingError(w, fmt.Errorf("parse streaming URL %q: %w", rawURL, err))
		return
	}
	translate := s.opts.Features.Enabled(features.ExtendWebSocketsToKubelet)
	switch {
	case translate && subresource != "portforward" && wsstream.IsWebSocketRequestWithStreamCloseProtocol(r):
		s.metrics.websocketStreams.WithLabelValues(subresource).Inc()
		translateRemoteCommand(w, r, u, opts)
	case translate && subresource == "portforward" && wsstream.IsWebSocketRequestWithTunnelingProtocol(r):
		s.metrics.websocketStreams.WithLabelValues(subresource).Inc()
		tunnelPortForward(w, r, u)
	default:
		proxy.NewUpgradeAwareHandler(u, nil, false, true, proxyResponder{}).ServeHTTP(w, r)
	}
}

// findContainer returns the ID of the running container named container
// of the running pod <name>_<namespace> (the newest such pod and
// container), as the kubelet's findContainer; "" when there is none.
func (s *Server) findContainer(ctx context.Context, namespace, name, container string) (string, error) {
	pods, err := s.runningPods(ctx)
	if err != nil {
		return "", err
	}
	for _, p := range pods {
		if p.name != name || p.namespace != namespace {
			continue
		}
		for _, c := range p.containers {
			if c.name == container {
				return c.id, nil
			}
		}
		return "", nil
	}
	return "", nil
}

func (s *Server) runtimeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.RuntimeRequestTimeout)
}

func (s *Server) requireRuntime(w http.ResponseWriter) bool {
	if s.opts.Runtime == nil {
		writeError(w, http.StatusNotImplemented, "no container runtime")
		return false
	}
	return true
}

// getExec serves /exec/{podNamespace}/{podID}[/{uid}]/{containerName}.
func (s *Server) getExec(w http.ResponseWriter, r *http.Request) {
	opts, err := parseStreamOptions(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ns, name, container := r.PathValue("podNamespace"), r.PathValue("podID"), r.PathValue("containerName")
	if _, ok := s.podByName(ns, name); !ok {
		writeError(w, http.StatusNotFound, "pod does not exist")
		return
	}
	if !s.requireRuntime(w) {
		return
	}
	ctx, cancel := s.runtimeCtx(r.Context())
	defer cancel()
	id, err := s.findContainer(ctx, ns, name, container)
	if err == nil && id == "" {
		err = fmt.Errorf("container not found (%q)", container)
	}
	if err != nil {
		writeStreamingError(w, err)
		return
	}
	resp, err := s.opts.Runtime.Exec(ctx, &runtimeapi.ExecRequest{
		ContainerId: id,
		Cmd:         r.URL.Query()[v1.ExecCommandParam],
		Tty:         opts.tty,
		Stdin:       opts.stdin,
		Stdout:      opts.stdout,
		Stderr:      opts.stderr,
	})
	if err != nil {
		writeStreamingError(w, err)
		return
	}
	cancel()
	s.proxyStream(w, r, resp.GetUrl(), "exec", opts)
}

// getAttach serves /attach/{podNamespace}/{podID}[/{uid}]/{containerName}.
// The TTY setting comes from the container's spec, as the kubelet's.
func (s *Server) getAttach(w http.ResponseWriter, r *http.Request) {
	opts, err := parseStreamOptions(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ns, name, uid, container := r.PathValue("podNamespace"), r.PathValue("podID"), r.PathValue("uid"), r.PathValue("containerName")
	pod, ok := s.podByName(ns, name)
	if !ok {
		writeError(w, http.StatusNotFound, "pod does not exist")
		return
	}
	if !s.requireRuntime(w) {
		return
	}
	fullName := name + "_" + ns
	ctx, cancel := s.runtimeCtx(r.Context())
	defer cancel()
	id, err := s.findContainer(ctx, ns, name, container)
	if err == nil && id == "" {
		err = fmt.Errorf("container %s not found in pod %s", container, fullName)
	}
	if err == nil && uid != "" && string(pod.UID) != uid {
		err = fmt.Errorf("pod %s not found", fullName)
	}
	var spec *v1.Container
	if err == nil {
		if spec = containerSpec(pod, container); spec == nil {
			err = fmt.Errorf("container %s not found in pod %s", container, fullName)
		}
	}
	if err != nil {
		writeStreamingError(w, err)
		return
	}
	resp, err := s.opts.Runtime.Attach(ctx, &runtimeapi.AttachRequest{
		ContainerId: id,
		Stdin:       opts.stdin,
		Stdout:      opts.stdout,
		Stderr:      opts.stderr,
		Tty:         spec.TTY,
	})
	if err != nil {
		writeStreamingError(w, err)
		return
	}
	cancel()
	s.proxyStream(w, r, resp.GetUrl(), "attach", opts)
}

// getPortForward serves /portForward/{podNamespace}/{podID}[/{uid}].
func (s *Server) getPortForward(w http.ResponseWriter, r *http.Request) {
	ports, err := portForwardPorts(r, s.opts.Features.Enabled(features.ExtendWebSocketsToKubelet))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ns, name, uid := r.PathValue("podNamespace"), r.PathValue("podID"), r.PathValue("uid")
	pod, ok := s.podByName(ns, name)
	if !ok {
		writeError(w, http.StatusNotFound, "pod does not exist")
		return
	}
	if uid != "" && string(pod.UID) != uid {
		writeError(w, http.StatusNotFound, "pod not found")
		return
	}
	if !s.requireRuntime(w) {
		return
	}
	ctx, cancel := s.runtimeCtx(r.Context())
	defer cancel()
	sandbox, err := s.podSandbox(ctx, pod)
	if err != nil {
		writeStreamingError(w, err)
		return
	}
	resp, err := s.opts.Runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: sandbox, Port: ports})
	if err != nil {
		writeStreamingError(w, err)
		return
	}
	cancel()
	s.proxyStream(w, r, resp.GetUrl(), "portforward", streamOptions{})
}

// podSandbox returns the newest ready sandbox of pod, found by name as the
// kubelet's GetPortForward ("pod not found" when the runtime runs none).
func (s *Server) podSandbox(ctx context.Context, pod *v1.Pod) (string, error) {
	sandboxes, err := s.opts.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{podUIDLabel: string(pod.UID)},
	})
	if err != nil {
		return "", fmt.Errorf("list pod sandboxes: %w", err)
	}
	var id string
	var created int64
	for _, sb := range sandboxes {
		md := sb.GetMetadata()
		if md.GetName() != pod.Name || md.GetNamespace() != pod.Namespace {
			continue
		}
		if id == "" || sb.GetCreatedAt() > created {
			id, created = sb.GetId(), sb.GetCreatedAt()
		}
	}
	if id == "" {
		return "", fmt.Errorf("pod not found (%q)", pod.Name+"_"+pod.Namespace)
	}
	return id, nil
}

// getRun serves POST /run/{podNamespace}/{podID}[/{uid}]/{containerName}
// ?cmd=<space-separated command>: the command's combined stdout and stderr.
func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	ns, name, container := r.PathValue("podNamespace"), r.PathValue("podID"), r.PathValue("containerName")
	if _, ok := s.podByName(ns, name); !ok {
		writeError(w, http.StatusNotFound, "pod does not exist")
		return
	}
	if !s.requireRuntime(w) {
		return
	}
	cmd := strings.Split(r.URL.Query().Get("cmd"), " ")
	ctx, cancel := s.runtimeCtx(r.Context())
	defer cancel()
	id, err := s.findContainer(ctx, ns, name, container)
	if err == nil && id == "" {
		err = fmt.Errorf("container not found (%q)", container)
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	stdout, stderr, err := s.opts.Runtime.ExecSync(ctx, id, cmd, 0)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, r, append(stdout, stderr...))
}

// containerSpec returns pod's container, init container or ephemeral
// container named name.
func containerSpec(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
			return &c
		}
	}
	return nil
}

// checkpoint serves POST /checkpoint/{podNamespace}/{podID}/{containerName}
// [?timeout=<seconds>]: the runtime checkpoints the running container to
// <CheckpointDir>/checkpoint-<pod>_<namespace>-<container>-<RFC 3339>.tar,
// answered as {"items":["<path>"]}, as the kubelet's (ContainerCheckpoint,
// on by default since 1.30).
func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request) {
	ns, name, container := r.PathValue("podNamespace"), r.PathValue("podID"), r.PathValue("containerName")
	pod, ok := s.podByName(ns, name)
	if !ok {
		writeError(w, http.StatusNotFound, "pod does not exist")
		return
	}
	if containerSpec(pod, container) == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("container %v does not exist", container))
		return
	}
	req := &runtimeapi.CheckpointContainerRequest{}
	if ts := r.URL.Query()["timeout"]; len(ts) > 0 {
		t, err := strconv.ParseInt(ts[len(ts)-1], 10, 64)
		if err != nil {
			writeError(w, http.StatusNotFound, "cannot parse value of timeout parameter")
			return
		}
		req.Timeout = t
	}
	if !s.requireRuntime(w) {
		return
	}
	fail := func(err error) {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("checkpointing of %v/%v/%v failed (%v)", ns, name, container, err))
	}
	ctx, cancel := s.runtimeCtx(r.Context())
	defer cancel()
	id, err := s.findContainer(ctx, ns, name, container)
	if err == nil && id == "" {
		err = fmt.Errorf("container %v not found", container)
	}
	if err != nil {
		fail(err)
		return
	}
	if err := os.MkdirAll(s.opts.CheckpointDir, 0o700); err != nil {
		fail(err)
		return
	}
	req.ContainerId = id
	req.Location = filepath.Join(s.opts.CheckpointDir, fmt.Sprintf("checkpoint-%s_%s-%s-%s.tar", name, ns, container, s.opts.Clock.Now().Format(time.RFC3339)))
	cctx := ctx
	if d := time.Duration(req.Timeout) * time.Second; d > s.opts.RuntimeRequestTimeout {
		var ccancel context.CancelFunc
		cctx, ccancel = context.WithTimeout(r.Context(), d)
		defer ccancel()
	}
	if err := s.opts.Runtime.CheckpointContainer(cctx, req); err != nil {
		fail(err)
		return
	}
	body, _ := json.Marshal(map[string][]string{"items": {req.Location}})
	writeJSON(w, r, body)
}
