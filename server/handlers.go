package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Labels and annotations the kubelet and the CRI backend set.
const (
	configSourceAnnotation = "kubernetes.io/config.source"
	apiserverSource        = "api"
	podUIDLabel            = "io.kubernetes.pod.uid"
	podNameLabel           = "io.kubernetes.pod.name"
	podNamespaceLabel      = "io.kubernetes.pod.namespace"
	containerNameLabel     = "io.kubernetes.container.name"
)

var (
	getOnly      = []string{http.MethodGet}
	getOrPost    = []string{http.MethodGet, http.MethodPost}
	postOnly     = []string{http.MethodPost}
	podListCodec = scheme.Codecs.LegacyCodec(v1.SchemeGroupVersion)
)

// defaultRoutes are the kubelet's endpoints, as enabled by the options.
func (s *Server) defaultRoutes() []Route {
	o := s.opts
	checks := append([]HealthCheck{
		{Name: "ping", Check: func(*http.Request) error { return nil }},
		// The kubelet's "log" check watches klog's flush daemon; nodekit
		// logs through logr with nothing that can block, so it passes.
		{Name: "log", Check: func(*http.Request) error { return nil }},
		{Name: "syncloop", Check: func(*http.Request) error {
			if o.SyncLoopHealthy == nil {
				return nil
			}
			return o.SyncLoopHealthy()
		}},
	}, o.HealthChecks...)
	routes := []Route{
		{Path: healthzPath, Handler: healthzHandler("healthz", checks, s.slis), ReadOnly: true},
		{Path: "/metrics/slis", Handler: s.slis.handler(), ReadOnly: true},
		{Path: podsPath, Methods: getOnly, Handler: http.HandlerFunc(s.getPods), ReadOnly: true},
		{Path: "/stats/summary", Methods: getOrPost, Handler: http.HandlerFunc(s.getSummary), ReadOnly: true},
		{Path: metricsPath, Handler: metricsHandler(o.Metrics), ReadOnly: true},
		{Path: "/metrics/cadvisor", Handler: metricsHandler(o.CadvisorMetrics), ReadOnly: true},
		{Path: "/metrics/resource", Handler: metricsHandler(o.ResourceMetrics), ReadOnly: true},
		{Path: "/metrics/probes", Handler: metricsHandler(o.ProbeMetrics), ReadOnly: true},
	}
	for _, c := range checks {
		routes = append(routes, Route{Path: healthzPath + "/" + c.Name, Handler: checkHandler(c.Check), ReadOnly: true})
	}
	if o.DisableDebuggingHandlers {
		return append(routes, disabledRoutes(false)...)
	}
	if o.DisableSystemLogHandler {
		routes = append(routes, Route{Path: logsPath, Handler: disabled("logs endpoint is disabled.")})
	} else {
		routes = append(routes, Route{Path: logsPath, Methods: getOnly, Handler: http.StripPrefix(logsPath, http.FileServer(http.Dir(o.NodeLogDir)))})
	}
	if o.DisableProfilingHandler {
		routes = append(routes, Route{Path: "/debug/pprof/", Handler: disabled("profiling endpoint is disabled.")})
	} else {
		routes = append(routes, Route{Path: "/debug/pprof/", Methods: getOnly, Handler: http.HandlerFunc(servePprof)})
	}
	exec := http.HandlerFunc(s.getExec)
	attach := http.HandlerFunc(s.getAttach)
	pf := http.HandlerFunc(s.getPortForward)
	run := http.HandlerFunc(s.getRun)
	routes = append(routes,
		Route{Path: "/run/{podNamespace}/{podID}/{containerName}", Methods: postOnly, Handler: run},
		Route{Path: "/run/{podNamespace}/{podID}/{uid}/{containerName}", Methods: postOnly, Handler: run},
		Route{Path: "/exec/{podNamespace}/{podID}/{containerName}", Methods: getOrPost, Handler: exec},
		Route{Path: "/exec/{podNamespace}/{podID}/{uid}/{containerName}", Methods: getOrPost, Handler: exec},
		Route{Path: "/attach/{podNamespace}/{podID}/{containerName}", Methods: getOrPost, Handler: attach},
		Route{Path: "/attach/{podNamespace}/{podID}/{uid}/{containerName}", Methods: getOrPost, Handler: attach},
		Route{Path: "/portForward/{podNamespace}/{podID}", Methods: getOrPost, Handler: pf},
		Route{Path: "/portForward/{podNamespace}/{podID}/{uid}", Methods: getOrPost, Handler: pf},
		Route{Path: "/containerLogs/{podNamespace}/{podID}/{containerName}", Methods: getOnly, Handler: http.HandlerFunc(s.getContainerLogs)},
		Route{Path: configzPath, Handler: http.HandlerFunc(s.getConfigz)},
		Route{Path: runningPodsPath, Methods: getOnly, Handler: http.HandlerFunc(s.getRunningPods)},
		Route{Path: "/checkpoint/{podNamespace}/{podID}/{containerName}", Methods: postOnly, Handler: http.HandlerFunc(s.checkpoint)},
	)
	return routes
}

// disabledRoutes answer 405 "Debug endpoints are disabled." on the
// debugging paths, as the kubelet with enableDebuggingHandlers off and its
// read-only server.
func disabledRoutes(readOnly bool) []Route {
	h := disabled("Debug endpoints are disabled.")
	var rs []Route
	for _, p := range []string{"/run/", "/exec/", "/attach/", "/portForward/", "/containerLogs/", runningPodsPath, "/debug/pprof/", logsPath} {
		rs = append(rs, Route{Path: p, Handler: h, ReadOnly: readOnly})
	}
	return rs
}

func disabled(msg string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, msg, http.StatusMethodNotAllowed)
	})
}

// errExcluded marks a check skipped with ?exclude=.
var errExcluded = errors.New("excluded")

// healthzHandler runs every check as the API server's healthz root
// handler: "ok", or with ?verbose each check's line; on failure 500 with
// the failed checks' reasons withheld. ?exclude=<name> skips a check. Each
// result is recorded in the SLI metrics.
func healthzHandler(name string, checks []HealthCheck, slis *sliMetrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var excluded []string
		verbose := false
		if r.URL.RawQuery != "" {
			q := r.URL.Query()
			excluded = q["exclude"]
			_, verbose = q["verbose"]
		}
		var buf [8]error
		results := buf[:0]
		failed := false
		for _, c := range checks {
			if slices.Contains(excluded, c.Name) {
				results = append(results, errExcluded)
				continue
			}
			err := c.Check(r)
			slis.observe(c.Name, name, err)
			if err != nil {
				klog.FromContext(r.Context()).V(2).Info("Health check failed", "check", c.Name, "err", err)
				failed = true
			}
			results = append(results, err)
		}
		if !failed && !verbose && len(excluded) == 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			_, _ = w.Write([]byte("ok"))
			return
		}
		var out strings.Builder
		for i, c := range checks {
			switch err := results[i]; {
			case err == errExcluded:
				fmt.Fprintf(&out, "[+]%s excluded: ok\n", c.Name)
				excluded = slices.DeleteFunc(excluded, func(e string) bool { return e == c.Name })
			case err != nil:
				fmt.Fprintf(&out, "[-]%s failed: reason withheld\n", c.Name)
			default:
				fmt.Fprintf(&out, "[+]%s ok\n", c.Name)
			}
		}
		if len(excluded) > 0 {
			quoted := make([]string, len(excluded))
			for i, e := range excluded {
				quoted[i] = fmt.Sprintf("%q", e)
			}
			fmt.Fprintf(&out, "warn: some health checks cannot be excluded: no matches for %s\n", strings.Join(quoted, ","))
		}
		if failed {
			http.Error(w, out.String()+name+" check failed", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !verbose {
			_, _ = w.Write([]byte("ok"))
			return
		}
		_, _ = w.Write([]byte(out.String() + name + " check passed\n"))
	})
}

func checkHandler(check func(*http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := check(r); err != nil {
			http.Error(w, fmt.Sprintf("internal server error: %v", err), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
}

func metricsHandler(g prometheus.Gatherer) http.Handler {
	if g == nil {
		g = prometheus.NewRegistry()
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// pods returns Options.Pods with static pods carrying the status the agent
// computed, as the kubelet's GetPods (the originals are not modified).
func (s *Server) pods() []*v1.Pod {
	pods := s.opts.Pods()
	if s.opts.PodStatus == nil {
		return pods
	}
	var out []*v1.Pod
	for i, p := range pods {
		if src, ok := p.Annotations[configSourceAnnotation]; !ok || src == apiserverSource {
			continue
		}
		st, ok := s.opts.PodStatus(p.UID)
		if !ok {
			continue
		}
		if out == nil {
			out = slices.Clone(pods)
		}
		c := *p
		c.Status = st
		out[i] = &c
	}
	if out == nil {
		return pods
	}
	return out
}

func (s *Server) podByName(namespace, name string) (*v1.Pod, bool) {
	for _, p := range s.opts.Pods() {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return nil, false
}

func encodePods(pods []*v1.Pod) ([]byte, error) {
	list := &v1.PodList{}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	return runtime.Encode(podListCodec, list)
}

func writeJSON(w http.ResponseWriter, r *http.Request, data []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(data); err != nil {
		klog.FromContext(r.Context()).Error(err, "Error writing response")
	}
}

// getPods serves /pods: the node's pods as a v1 PodList.
func (s *Server) getPods(w http.ResponseWriter, r *http.Request) {
	data, err := encodePods(s.pods())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, r, data)
}

// getRunningPods serves /runningpods/: the pods the runtime runs (ready
// sandboxes and running containers), newest first, as bare v1 Pods with
// name, namespace, UID and containers' names and images.
func (s *Server) getRunningPods(w http.ResponseWriter, r *http.Request) {
	if s.opts.Runtime == nil {
		writeError(w, http.StatusNotImplemented, "no container runtime")
		return
	}
	pods, err := s.runningPods(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	apiPods := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		ap := &v1.Pod{}
		ap.UID, ap.Name, ap.Namespace = p.uid, p.name, p.namespace
		for _, c := range p.containers {
			ap.Spec.Containers = append(ap.Spec.Containers, v1.Container{Name: c.name, Image: c.image})
		}
		apiPods = append(apiPods, ap)
	}
	data, err := encodePods(apiPods)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, r, data)
}

type runningContainer struct {
	id, name, image string
	createdAt       int64
}

type runningPod struct {
	uid             types.UID
	name, namespace string
	createdAt       int64
	containers      []runningContainer
}

// runningPods lists the runtime's running pods as the kubelet's
// GetPods(all=false): ready sandboxes and running containers grouped by pod
// UID, newest pod first, containers newest first.
func (s *Server) runningPods(ctx context.Context) ([]*runningPod, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.RuntimeRequestTimeout)
	defer cancel()
	sandboxes, err := s.opts.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	containers, err := s.opts.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	byUID := map[types.UID]*runningPod{}
	var order []*runningPod
	get := func(uid types.UID, name, ns string) *runningPod {
		p := byUID[uid]
		if p == nil {
			p = &runningPod{uid: uid, name: name, namespace: ns}
			byUID[uid] = p
			order = append(order, p)
		}
		return p
	}
	for _, sb := range sandboxes {
		md := sb.GetMetadata()
		if md == nil {
			continue
		}
		p := get(types.UID(md.GetUid()), md.GetName(), md.GetNamespace())
		if sb.GetCreatedAt() > p.createdAt {
			p.createdAt = sb.GetCreatedAt()
		}
	}
	slices.SortStableFunc(containers, func(a, b *runtimeapi.Container) int {
		if a.GetCreatedAt() != b.GetCreatedAt() {
			if a.GetCreatedAt() > b.GetCreatedAt() {
				return -1
			}
			return 1
		}
		return strings.Compare(a.GetId(), b.GetId())
	})
	for _, c := range containers {
		if c.GetMetadata() == nil {
			continue
		}
		l := c.GetLabels()
		p := get(types.UID(l[podUIDLabel]), l[podNameLabel], l[podNamespaceLabel])
		name := l[containerNameLabel]
		if name == "" {
			name = c.GetMetadata().GetName()
		}
		p.containers = append(p.containers, runningContainer{id: c.GetId(), name: name, image: c.GetImage().GetImage(), createdAt: c.GetCreatedAt()})
	}
	slices.SortStableFunc(order, func(a, b *runningPod) int {
		switch {
		case a.createdAt > b.createdAt:
			return -1
		case a.createdAt < b.createdAt:
			return 1
		}
		return 0
	})
	return order, nil
}

// getConfigz serves /configz: {"kubeletconfig": <Configz()>}.
func (s *Server) getConfigz(w http.ResponseWriter, r *http.Request) {
	configs := map[string]any{}
	if s.opts.Configz != nil {
		configs["kubeletconfig"] = s.opts.Configz()
	}
	b, err := json.Marshal(configs)
	if err != nil {
		http.Error(w, fmt.Sprintf("error marshaling json: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b)
}

// getSummary serves /stats/summary (?only_cpu_and_memory=true for the CPU
// and memory subset), indented JSON as go-restful writes it.
func (s *Server) getSummary(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		s.summaryError(w, r, fmt.Errorf("parse form failed: %w", err))
		return
	}
	get := s.opts.Summary
	if v, ok := r.Form["only_cpu_and_memory"]; ok && len(v) == 1 && v[0] == "true" {
		get = s.opts.CPUAndMemory
	}
	if get == nil {
		s.summaryError(w, r, fmt.Errorf("stats not available"))
		return
	}
	summary, err := get(r.Context())
	if err != nil {
		s.summaryError(w, r, err)
		return
	}
	data, err := json.MarshalIndent(summary, "", " ")
	if err != nil {
		s.summaryError(w, r, err)
		return
	}
	writeJSON(w, r, data)
}

func (s *Server) summaryError(w http.ResponseWriter, r *http.Request, err error) {
	klog.FromContext(r.Context()).Error(err, "HTTP InternalServerError serving", "request", "/stats/summary")
	writeError(w, http.StatusInternalServerError, fmt.Sprintf("Internal Error: %v", err))
}

func servePprof(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, "/debug/pprof/") {
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "cmdline":
		pprof.Cmdline(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r)
	}
}
