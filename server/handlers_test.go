package server

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestHealthz(t *testing.T) {
	var syncErr error
	o := baseOptions()
	o.SyncLoopHealthy = func() error { return syncErr }
	o.HealthChecks = []HealthCheck{{Name: "extra", Check: func(*http.Request) error { return nil }}}
	h := mustNew(t, o).Handler()

	for path, want := range map[string]string{
		"/healthz": "ok", "/healthz/ping": "ok", "/healthz/log": "ok", "/healthz/syncloop": "ok", "/healthz/extra": "ok",
		"/healthz?verbose":             "[+]ping ok\n[+]log ok\n[+]syncloop ok\n[+]extra ok\nhealthz check passed\n",
		"/healthz?verbose&exclude=log": "[+]ping ok\n[+]log excluded: ok\n[+]syncloop ok\n[+]extra ok\nhealthz check passed\n",
	} {
		if code, body, _ := do(t, h, "GET", path, nil); code != 200 || body != want {
			t.Errorf("GET %s: %d %q, want %q", path, code, body, want)
		}
	}
	syncErr = errors.New("sync loop took too long")
	code, body, _ := do(t, h, "GET", "/healthz", nil)
	if code != 500 || body != "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\n[+]extra ok\nhealthz check failed\n" {
		t.Errorf("failing /healthz: %d %q", code, body)
	}
	_, body, _ = do(t, h, "GET", "/metrics/slis", nil)
	for _, want := range []string{
		`kubernetes_healthcheck{name="syncloop",type="healthz"} 0`,
		`kubernetes_healthcheck{name="ping",type="healthz"} 1`,
		`kubernetes_healthchecks_total{name="syncloop",status="error",type="healthz"} 1`,
		`kubernetes_healthchecks_total{name="syncloop",status="success",type="healthz"} 3`,
		`kubernetes_healthchecks_total{name="ping",status="success",type="healthz"} 4`,
		`kubernetes_healthchecks_total{name="log",status="success",type="healthz"} 3`, // excluded once
	} {
		contains(t, "/metrics/slis", body, want)
	}
	if code, body, _ := do(t, h, "DELETE", "/metrics/slis", nil); code != 200 || body != "metrics reset\n" {
		t.Errorf("DELETE /metrics/slis: %d %q", code, body)
	}
	if _, body, _ := do(t, h, "GET", "/metrics/slis", nil); strings.Contains(body, "kubernetes_healthcheck") {
		t.Errorf("after reset: %q", body)
	}
	code, body, _ = do(t, h, "GET", "/healthz/syncloop", nil)
	if code != 500 || body != "internal server error: sync loop took too long\n" {
		t.Errorf("failing /healthz/syncloop: %d %q", code, body)
	}
}

func TestPods(t *testing.T) {
	api := testPod("default", "web", "c")
	static := testPod("kube-system", "etcd-node-a", "etcd")
	static.Annotations = map[string]string{configSourceAnnotation: "file"}
	o := baseOptions(api, static)
	o.PodStatus = func(uid types.UID) (v1.PodStatus, bool) {
		return v1.PodStatus{Phase: v1.PodRunning}, true
	}
	h := mustNew(t, o).Handler()
	code, body, hdr := do(t, h, "GET", "/pods", nil)
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("/pods: %d %v", code, hdr)
	}
	if !strings.HasPrefix(body, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[`) {
		t.Errorf("/pods body starts %q", body[:min(len(body), 80)])
	}
	var list v1.PodList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 || list.Items[0].Status.Phase != "" || list.Items[1].Status.Phase != v1.PodRunning {
		t.Errorf("pods %+v: want the static pod with the agent's status only", list.Items)
	}
	if static.Status.Phase != "" {
		t.Error("the caller's static pod was modified")
	}
	if code, body, hdr := do(t, h, "POST", "/pods", nil); code != 405 || hdr.Get("Allow") != "GET" || body != "Method Not Allowed" {
		t.Errorf("POST /pods: %d %q %v", code, body, hdr)
	}
	// No pods: "items":null, as the kubelet's encoding of an empty list.
	code, body, _ = do(t, mustNew(t, baseOptions()).Handler(), "GET", "/pods", nil)
	if code != 200 || strings.TrimSpace(body) != `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":null}` {
		t.Errorf("empty /pods: %d %q", code, body)
	}
}

func TestRunningPods(t *testing.T) {
	rt := &fakeRuntime{}
	older, newer := testPod("default", "old", "a"), testPod("default", "new", "b", "c")
	rt.addPod(older, 100)
	rt.addPod(newer, 200)
	rt.containers = append(rt.containers, &runtimeapi.Container{Id: "exited", State: runtimeapi.ContainerState_CONTAINER_EXITED, Metadata: &runtimeapi.ContainerMetadata{Name: "x"}})
	o := baseOptions()
	o.Runtime = rt
	code, body, _ := do(t, mustNew(t, o).Handler(), "GET", "/runningpods/", nil)
	if code != 200 {
		t.Fatalf("/runningpods/: %d %q", code, body)
	}
	var list v1.PodList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 || list.Items[0].Name != "new" || list.Items[0].UID != newer.UID || len(list.Items[0].Spec.Containers) != 2 || list.Items[1].Spec.Containers[0].Image != "img-a" {
		t.Errorf("running pods %+v", list.Items)
	}
	if code, body, _ := do(t, mustNew(t, baseOptions()).Handler(), "GET", "/runningpods/", nil); code != 501 {
		t.Errorf("/runningpods/ without a runtime: %d %q", code, body)
	}
}

func TestConfigzMetricsStats(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "kubelet_test_total", Help: "x"})
	reg.MustRegister(c)
	c.Inc()
	probes := prometheus.NewRegistry()
	probes.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "prober_probe_total", Help: "x"}))
	o := baseOptions()
	o.Configz = func() any { return map[string]any{"kind": "KubeletConfiguration", "maxPods": 110} }
	o.Metrics = reg
	o.ProbeMetrics = probes
	o.Summary = func(context.Context) (*statsapi.Summary, error) {
		return &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "full"}}, nil
	}
	o.CPUAndMemory = func(context.Context) (*statsapi.Summary, error) {
		return &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "cpu-mem"}}, nil
	}
	h := mustNew(t, o).Handler()

	code, body, hdr := do(t, h, "GET", "/configz", nil)
	if code != 200 || body != `{"kubeletconfig":{"kind":"KubeletConfiguration","maxPods":110}}` || hdr.Get("Content-Type") != "application/json" {
		t.Errorf("/configz: %d %q %v", code, body, hdr)
	}
	if _, body, _ := do(t, h, "GET", "/metrics", nil); !strings.Contains(body, "kubelet_test_total 1") {
		t.Errorf("/metrics: %q", body)
	}
	if _, body, _ := do(t, h, "GET", "/metrics/probes", nil); !strings.Contains(body, "prober_probe_total 0") || strings.Contains(body, "kubelet_test_total") {
		t.Errorf("/metrics/probes: %q", body)
	}
	if code, body, _ := do(t, h, "GET", "/metrics/cadvisor", nil); code != 200 || body != "" {
		t.Errorf("/metrics/cadvisor without a gatherer: %d %q", code, body)
	}
	code, body, _ = do(t, h, "GET", "/stats/summary", nil)
	if code != 200 || !strings.Contains(body, "\"nodeName\": \"full\"") || !strings.HasPrefix(body, "{\n \"node\": {") {
		t.Errorf("/stats/summary: %d %q", code, body)
	}
	if _, body, _ := do(t, h, "GET", "/stats/summary?only_cpu_and_memory=true", nil); !strings.Contains(body, "cpu-mem") {
		t.Errorf("only_cpu_and_memory: %q", body)
	}
	if _, body, _ := do(t, h, "POST", "/stats/summary", strings.NewReader("only_cpu_and_memory=true")); !strings.Contains(body, "full") {
		t.Errorf("POST /stats/summary without a form content type: %q", body)
	}
	o.Summary = func(context.Context) (*statsapi.Summary, error) { return nil, errors.New("no cgroups") }
	if code, body, _ := do(t, mustNew(t, o).Handler(), "GET", "/stats/summary", nil); code != 500 || body != "Internal Error: no cgroups" {
		t.Errorf("failing summary: %d %q", code, body)
	}
}

func TestRoutesReplaceAddRemove(t *testing.T) {
	o := baseOptions()
	o.Routes = []Route{
		{Path: "/pods", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("mine")) })},
		{Path: "/custom/{name}", Methods: []string{"PUT"}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("hello " + r.PathValue("name")))
		})},
		{Path: "/configz"}, // removed
	}
	h := mustNew(t, o).Handler()
	if _, body, _ := do(t, h, "GET", "/pods", nil); body != "mine" {
		t.Errorf("replaced /pods: %q", body)
	}
	if code, body, _ := do(t, h, "PUT", "/custom/x", nil); code != 200 || body != "hello x" {
		t.Errorf("added route: %d %q", code, body)
	}
	if code, _, _ := do(t, h, "GET", "/configz", nil); code != 404 {
		t.Errorf("removed /configz: %d", code)
	}
	if code, body, _ := do(t, h, "GET", "/nothing/here", nil); code != 404 || body != "404 page not found\n" {
		t.Errorf("unknown path: %d %q", code, body)
	}
	o.Routes = []Route{{Path: "/a", Handler: http.NotFoundHandler()}, {Path: "/a", Handler: http.NotFoundHandler()}}
	if _, err := New(o); err == nil {
		t.Error("two routes with one path accepted")
	}
	o.Routes = []Route{{Path: "/exec/{a}/{b}/{c}", Handler: http.NotFoundHandler()}}
	if _, err := New(o); err == nil {
		t.Error("a route conflicting with a default one accepted")
	}
}

func TestDebuggingHandlersDisabled(t *testing.T) {
	o := baseOptions()
	o.DisableDebuggingHandlers = true
	h := mustNew(t, o).Handler()
	for _, p := range []string{"/exec/ns/p/c", "/containerLogs/ns/p/c", "/logs/", "/runningpods/", "/debug/pprof/"} {
		if code, body, _ := do(t, h, "GET", p, nil); code != 405 || body != "Debug endpoints are disabled.\n" {
			t.Errorf("GET %s: %d %q", p, code, body)
		}
	}
	if code, _, _ := do(t, h, "GET", "/configz", nil); code != 404 {
		t.Errorf("/configz with debugging off: %d, want 404", code)
	}
	o = baseOptions()
	o.DisableSystemLogHandler = true
	o.DisableProfilingHandler = true
	h = mustNew(t, o).Handler()
	if code, body, _ := do(t, h, "GET", "/logs/x", nil); code != 405 || body != "logs endpoint is disabled.\n" {
		t.Errorf("/logs/ disabled: %d %q", code, body)
	}
	if code, body, _ := do(t, h, "GET", "/debug/pprof/", nil); code != 405 || body != "profiling endpoint is disabled.\n" {
		t.Errorf("pprof disabled: %d %q", code, body)
	}
}

func TestNodeLogs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "syslog"), []byte("node log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := baseOptions()
	o.NodeLogDir = dir
	h := mustNew(t, o).Handler()
	if code, body, _ := do(t, h, "GET", "/logs/syslog", nil); code != 200 || body != "node log\n" {
		t.Errorf("/logs/syslog: %d %q", code, body)
	}
	if code, body, _ := do(t, h, "GET", "/logs/", nil); code != 200 || !strings.Contains(body, `<a href="syslog">syslog</a>`) || !strings.Contains(body, `<a href="pods/">pods/</a>`) {
		t.Errorf("/logs/ listing: %d %q", code, body)
	}
	if code, _, _ := do(t, h, "GET", "/logs/missing", nil); code != 404 {
		t.Errorf("/logs/missing: %d", code)
	}
	if code, _, _ := do(t, h, "GET", "/logs/../../etc/passwd", nil); code == 200 {
		t.Error("path traversal served a file")
	}
}

func TestReadOnlyServer(t *testing.T) {
	o := baseOptions(testPod("default", "p", "c"))
	o.ReadOnlyPort = 10255
	o.Authentication = AuthnOptions{DisableWebhook: true} // secure port: no anonymous
	s := mustNew(t, o)
	ro := s.ReadOnlyHandler()
	for _, p := range []string{"/healthz", "/healthz/ping", "/pods", "/metrics", "/metrics/resource", "/metrics/cadvisor", "/metrics/probes", "/metrics/slis"} {
		if code, _, _ := do(t, ro, "GET", p, nil); code != 200 {
			t.Errorf("read-only GET %s: %d", p, code)
		}
	}
	if code, _, _ := do(t, ro, "GET", "/stats/summary", nil); code != 500 {
		t.Errorf("read-only /stats/summary without stats: %d, want 500", code)
	}
	for _, p := range []string{"/exec/ns/p/c", "/containerLogs/ns/p/c", "/logs/", "/runningpods/", "/run/ns/p/c"} {
		if code, body, _ := do(t, ro, "POST", p, nil); code != 405 || body != "Debug endpoints are disabled.\n" {
			t.Errorf("read-only %s: %d %q", p, code, body)
		}
	}
	if code, _, _ := do(t, ro, "GET", "/configz", nil); code != 404 {
		t.Errorf("read-only /configz: %d, want 404", code)
	}
	if code, _, _ := do(t, s.Handler(), "GET", "/pods", nil); code != 401 {
		t.Errorf("secure /pods without credentials: %d, want 401", code)
	}
	if mustNew(t, baseOptions()).ReadOnlyHandler() != nil {
		t.Error("read-only handler without a read-only port")
	}
}

func TestHTTPMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := baseOptions()
	o.Registerer = reg
	o.Metrics = reg
	h := mustNew(t, o).Handler()
	do(t, h, "GET", "/pods", nil)
	do(t, h, "GET", "/metrics/probes", nil)
	do(t, h, "BREW", "/nope", nil)
	_, body, _ := do(t, h, "GET", "/metrics", nil)
	for _, want := range []string{
		`kubelet_http_requests_total{long_running="false",method="GET",path="pods",server_type="readwrite"} 1`,
		`kubelet_http_requests_total{long_running="false",method="GET",path="metrics/probes",server_type="readwrite"} 1`,
		`kubelet_http_requests_total{long_running="false",method="other",path="other",server_type="readwrite"} 1`,
		`kubelet_http_inflight_requests{long_running="false",method="GET",path="metrics",server_type="readwrite"} 1`,
		`kubelet_http_requests_duration_seconds_count{long_running="false",method="GET",path="pods",server_type="readwrite"} 1`,
	} {
		contains(t, "metrics", body, want)
	}
	if rootPath("/exec/a/b/c") != "exec" || rootPath("/metrics/cadvisor") != "metrics/cadvisor" || rootPath("/") != "" {
		t.Error("rootPath")
	}
}

func TestOptionsValidation(t *testing.T) {
	for name, mut := range map[string]func(*Options){
		"no node name":             func(o *Options) { o.NodeName = "" },
		"no pods":                  func(o *Options) { o.Pods = nil },
		"bad address":              func(o *Options) { o.Address = "node" },
		"bad port":                 func(o *Options) { o.Port = 70000 },
		"cert without key":         func(o *Options) { o.TLS.CertFile = "x" },
		"bad mode":                 func(o *Options) { o.Authorization.Mode = "RBAC" },
		"token webhook, no client": func(o *Options) { o.Authentication.DisableWebhook = false },
		"SAR webhook, no client":   func(o *Options) { o.Authorization.Mode = "" },
		"bootstrap, no client":     func(o *Options) { o.TLS.Bootstrap = true },
	} {
		o := baseOptions()
		mut(&o)
		if _, err := New(o); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

func TestRunServesReadOnlyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := baseOptions(testPod("default", "p", "c"))
	o.Port = -1
	o.ReadOnlyPort = 10255
	o.ReadOnlyListener = ln
	s, _ := runServerNoTLS(t, o)
	addr, _ := s.ReadOnlyAddr(context.Background())
	resp, err := http.Get("http://" + addr.String() + "/pods")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("read-only /pods over HTTP: %d", resp.StatusCode)
	}
}

// runServerNoTLS runs s (secure port off) until the test ends.
func runServerNoTLS(t *testing.T, o Options) (*Server, context.CancelFunc) {
	t.Helper()
	s := mustNew(t, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	if _, err := s.Addr(ctx); err != nil {
		t.Fatal(err)
	}
	return s, cancel
}
