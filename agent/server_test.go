package agent_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/prober"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/server"
	"github.com/nodekit/nodekit/stats"
)

// apiNode is an agent under test with its node API's address.
type apiNode struct {
	*agenttest.Node
	url      string
	client   *http.Client
	gatherer prometheus.Gatherer
}

// startAPINode starts an agent on fakecri whose node API lets anonymous
// requests through (AlwaysAllow), so the test reaches every endpoint with
// a plain HTTPS client.
func startAPINode(t *testing.T, extra ...fx.Option) *apiNode {
	t.Helper()
	var srv *server.Server
	var g prometheus.Gatherer
	n := agenttest.Start(t, agenttest.Options{
		Args:  []string{"--anonymous-auth=true", "--authorization-mode=AlwaysAllow"},
		Extra: append([]fx.Option{fx.Populate(&srv, &g)}, extra...),
	})
	addr, err := srv.Addr(agenttest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if addr == nil {
		t.Fatal("the node API does not listen")
	}
	return &apiNode{Node: n, url: "https://" + addr.String(), gatherer: g, client: &http.Client{
		Timeout:   20 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}}
}

func (n *apiNode) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := n.client.Get(n.url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// runPod runs a pod whose container logs a line and reports usage, and
// waits until it is Running.
func (n *apiNode) runPod(t *testing.T, ctx context.Context, name string) *v1.Pod {
	t.Helper()
	pod := agenttest.Pod(name, "busybox")
	pod.Annotations = map[string]string{fakecri.BehaviorAnnotation: "log hello from " + name + "; cpu 250m; memory 64Mi"}
	pod = n.CreatePod(ctx, pod)
	return n.WaitForPod(ctx, pod, agenttest.PodRunningAndReady)
}

// TestNodeAPIServesTheAgentsPodsStatsAndConfig reaches every endpoint the
// agent wires: the pods and container logs from the pod sources and the
// runtime, the stats provider's summary and resource metrics, /configz and
// the sync loop's health.
func TestNodeAPIServesTheAgentsPodsStatsAndConfig(t *testing.T) {
	n := startAPINode(t)
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	n.runPod(t, ctx, "web")
	// The stats provider serves a summary up to stats.DefaultMaxAge old (the
	// eviction manager sampled one at start), as the kubelet's cAdvisor
	// housekeeping: wait for one that has the pod.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*stats.DefaultMaxAge, true, func(context.Context) (bool, error) {
		_, body := n.get(t, "/stats/summary")
		var summary statsapi.Summary
		return json.Unmarshal([]byte(body), &summary) == nil && len(summary.Pods) == 1, nil
	}); err != nil {
		t.Fatalf("/stats/summary never listed the pod: %v", err)
	}

	for path, want := range map[string]string{
		"/healthz":                       "ok",
		"/healthz/syncloop":              "ok",
		"/containerLogs/default/web/app": "hello from web",
		"/metrics":                       `kubelet_node_name{node="node-a"} 1`,
		"/metrics/cadvisor":              `container_cpu_usage_seconds_total{container="app"`,
		"/metrics/resource":              `pod_memory_working_set_bytes{namespace="default",pod="web"}`,
	} {
		code, body := n.get(t, path)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s = %d, want 200 with %q; body:\n%.2000s", path, code, want, body)
		}
	}
	if code, body := n.get(t, "/containerLogs/default/web/nope"); code != http.StatusBadRequest && code != http.StatusNotFound {
		t.Errorf("GET the logs of a container the pod does not have = %d %q, want the kubelet's 400/404", code, body)
	}

	code, body := n.get(t, "/pods")
	var list v1.PodList
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil {
		t.Fatalf("GET /pods = %d, %v", code, err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "web" {
		t.Errorf("/pods lists %d pods, want default/web", len(list.Items))
	}

	code, body = n.get(t, "/configz")
	var configz struct {
		Kubelet struct {
			metav1.TypeMeta `json:",inline"`
			Port            int32  `json:"port"`
			Address         string `json:"address"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal([]byte(body), &configz); code != http.StatusOK || err != nil {
		t.Fatalf("GET /configz = %d, %v: %s", code, err, body)
	}
	if k := configz.Kubelet; k.Kind != "KubeletConfiguration" || k.APIVersion != "kubelet.config.k8s.io/v1beta1" || k.Port != n.Config.Kubelet.Port || k.Address != "127.0.0.1" {
		t.Errorf("/configz = %+v, want the agent's v1beta1 KubeletConfiguration", k)
	}

	code, body = n.get(t, "/stats/summary")
	var summary statsapi.Summary
	if err := json.Unmarshal([]byte(body), &summary); code != http.StatusOK || err != nil {
		t.Fatalf("GET /stats/summary = %d, %v", code, err)
	}
	if summary.Node.NodeName != "node-a" || len(summary.Pods) != 1 || summary.Pods[0].PodRef.Name != "web" {
		t.Errorf("summary node %q with %d pods, want node-a with default/web", summary.Node.NodeName, len(summary.Pods))
	}
	if code, _ := n.get(t, "/metrics/probes"); code != http.StatusOK {
		t.Errorf("GET /metrics/probes = %d, want 200", code)
	}

	// The node declares ExtendWebSocketsToKubelet: this server speaks
	// WebSockets for exec, attach and port-forward, so the API server
	// proxies them unchanged.
	node := n.WaitReady(ctx)
	if !slices.Contains(node.Status.DeclaredFeatures, "ExtendWebSocketsToKubelet") {
		t.Errorf("declaredFeatures = %v: the node API serves WebSockets", node.Status.DeclaredFeatures)
	}
}

// TestNodeAPIRefusesAnonymousByDefault: with the v1beta1 defaults
// (anonymous off, webhook authentication), a request without credentials
// gets 401.
func TestNodeAPIRefusesAnonymousByDefault(t *testing.T) {
	var srv *server.Server
	agenttest.Start(t, agenttest.Options{Extra: []fx.Option{fx.Populate(&srv)}})
	addr, err := srv.Addr(agenttest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get("https://" + addr.String() + "/pods")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous GET /pods = %d, want 401", resp.StatusCode)
	}
}

// TestNodeAPIOffWithEnableServerFalse: enableServer false builds no node
// API at all (the graph's *server.Server is nil, nothing of it registered)
// while the rest of the agent runs; the agent's registry is still served
// on the healthz port.
func TestNodeAPIOffWithEnableServerFalse(t *testing.T) {
	srv := &server.Server{}
	var g prometheus.Gatherer
	n := agenttest.Start(t, agenttest.Options{Extra: []fx.Option{
		fx.Decorate(func(c *agent.Config) *agent.Config {
			off := false
			c.Kubelet.EnableServer = &off
			return c
		}),
		fx.Populate(&srv, &g),
	}})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	if srv != nil {
		t.Error("enableServer false: the graph has a node API *server.Server, want nil")
	}
	byName := requireFamilies(t, g, map[string][]string{"kubelet_node_name": {"node"}, "go_goroutines": nil})
	if f := byName["kubelet_http_requests_total"]; f != nil {
		t.Error("enableServer false: the node API's kubelet_http_requests_total is registered")
	}
}

// TestMetricsNobodyServesAreNotKept: an agent that serves neither the
// node API nor the healthz port (as a fleet's) gathers nothing from its
// registries, and an embedder that gathers its metrics itself gets them
// all by replacing the registry.
func TestMetricsNobodyServesAreNotKept(t *testing.T) {
	unserved := func(c *agent.Config) *agent.Config {
		c.Kubelet.EnableServer = ptr.To(false)
		c.Kubelet.HealthzPort = ptr.To[int32](0)
		c.HealthzListener = nil
		return c
	}
	var g, probes prometheus.Gatherer
	n := agenttest.Start(t, agenttest.Options{Name: "unserved", Extra: []fx.Option{
		fx.Decorate(unserved), fx.Populate(&g),
		fx.Invoke(fx.Annotate(func(p prometheus.Gatherer) { probes = p }, fx.ParamTags(`name:"`+prober.MetricsRegistererName+`"`))),
	}})
	n.WaitReady(agenttest.Context(t))
	for name, g := range map[string]prometheus.Gatherer{"agent": g, "probe": probes} {
		families, err := g.Gather()
		if err != nil || len(families) != 0 {
			t.Errorf("the %s registry of an agent that serves no metrics gathered %d families (%v), want none", name, len(families), err)
		}
	}

	own := prometheus.NewRegistry()
	var got prometheus.Gatherer
	n = agenttest.Start(t, agenttest.Options{Name: "own-registry", Extra: []fx.Option{
		fx.Decorate(unserved),
		fx.Decorate(func(prometheus.Registerer) prometheus.Registerer { return own }),
		fx.Decorate(func(prometheus.Gatherer) prometheus.Gatherer { return own }),
		fx.Populate(&got),
	}})
	n.WaitReady(agenttest.Context(t))
	if got != prometheus.Gatherer(own) {
		t.Fatal("the graph's Gatherer is not the embedder's registry")
	}
	requireFamilies(t, own, map[string][]string{
		"kubelet_node_name":                    {"node"},
		"kubelet_running_pods":                 nil,
		"kubelet_pleg_relist_duration_seconds": nil,
	})
}

// dashboardMetrics are the families of the kubelet's /metrics that the
// common kubelet dashboards and alerts (kubernetes-mixin's kubelet
// dashboard, its KubeletDown/PLEG/pod start alerts) query, with the label
// names they group by. The test fails when the agent does not expose one.
var dashboardMetrics = map[string][]string{
	"kubelet_node_name":                           {"node"},
	"kubelet_running_pods":                        nil,
	"kubelet_running_containers":                  {"container_state"},
	"kubelet_pod_start_duration_seconds":          nil,
	"kubelet_pod_worker_duration_seconds":         {"operation_type"},
	"kubelet_pleg_relist_duration_seconds":        nil,
	"kubelet_pleg_relist_interval_seconds":        nil,
	"kubelet_runtime_operations_total":            {"operation_type"},
	"kubelet_runtime_operations_errors_total":     {"operation_type"},
	"kubelet_runtime_operations_duration_seconds": {"operation_type"},
	"rest_client_requests_total":                  {"code", "host", "method"},
	"rest_client_request_duration_seconds":        {"host", "verb"},
	"kubelet_http_requests_total":                 {"long_running", "method", "path", "server_type"},
	"process_cpu_seconds_total":                   nil,
	"process_resident_memory_bytes":               nil,
	"go_goroutines":                               nil,
}

// certificateMetrics are the serving certificate manager's, exposed with
// serverTLSBootstrap (the client certificate's are not: nodekit does not
// rotate its client certificate).
var certificateMetrics = map[string][]string{
	"kubelet_certificate_manager_server_ttl_seconds":      nil,
	"kubelet_certificate_manager_server_rotation_seconds": nil,
	"kubelet_server_expiration_renew_errors":              nil,
}

// TestDashboardMetrics runs a pod, has a runtime call fail, makes a
// client-go request and scrapes the node API once, then checks that the
// agent's registry holds every family a kubelet dashboard needs, with
// upstream's label names.
func TestDashboardMetrics(t *testing.T) {
	n := startAPINode(t)
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	n.runPod(t, ctx, "web")

	// A failed runtime call counts in kubelet_runtime_operations_errors_total.
	if err := n.CRI.SetError("ImageFsInfo", errors.New("disk on fire")); err != nil {
		t.Fatal(err)
	}
	wantFailure := func(ctx context.Context) (bool, error) {
		return counted(t, n.gatherer, "kubelet_runtime_operations_errors_total"), nil
	}
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n.get(t, "/stats/summary") // asks ImageFsInfo until the summary cache holds a failure's retry
		return wantFailure(ctx)
	}); err != nil {
		t.Fatalf("no kubelet_runtime_operations_errors_total after failing ImageFsInfo: %v", err)
	}
	_ = n.CRI.SetError("ImageFsInfo", nil)

	// The agent's clients here are fake; any client-go request in the
	// process is counted by the process-wide adapter.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"node-a"}}`))
	}))
	defer api.Close()
	kc, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node API's own request metrics.
	n.get(t, "/healthz")

	byName := requireFamilies(t, n.gatherer, dashboardMetrics)
	// One pod went Pending → Running once.
	if f := byName["kubelet_pod_start_duration_seconds"]; f != nil && f.Metric[0].GetHistogram().GetSampleCount() != 1 {
		t.Errorf("kubelet_pod_start_duration_seconds counted %d starts, want 1", f.Metric[0].GetHistogram().GetSampleCount())
	}
	// The PLEG's next relist (every second) counts the running pod.
	running := func(context.Context) (bool, error) {
		byName := requireFamilies(t, n.gatherer, nil)
		return gaugeOf(byName["kubelet_running_pods"], nil) == 1 &&
			gaugeOf(byName["kubelet_running_containers"], map[string]string{"container_state": "running"}) == 1, nil
	}
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, running); err != nil {
		t.Errorf("kubelet_running_pods and kubelet_running_containers{container_state=running} did not turn 1: %v", err)
	}
}

// TestCertificateManagerMetrics: with serverTLSBootstrap the serving
// certificate manager's series are on /metrics (here no CSR is ever
// approved, so the TTL is +Inf).
func TestCertificateManagerMetrics(t *testing.T) {
	var g prometheus.Gatherer
	var srv *server.Server
	n := agenttest.Start(t, agenttest.Options{Extra: []fx.Option{
		fx.Decorate(func(o server.Options) server.Options {
			o.TLS.Bootstrap = true
			return o
		}),
		fx.Populate(&g, &srv),
	}})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	if _, err := srv.Addr(ctx); err != nil {
		t.Fatal(err)
	}
	requireFamilies(t, g, certificateMetrics)
}

// requireFamilies gathers g and fails the test for each family of want it
// lacks or whose label names differ; it returns the families by name.
func requireFamilies(t *testing.T, g prometheus.Gatherer, want map[string][]string) map[string]*dto.MetricFamily {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	for name, labels := range want {
		f, ok := byName[name]
		if !ok || len(f.Metric) == 0 {
			t.Errorf("/metrics lacks %s", name)
			continue
		}
		var got []string
		for _, l := range f.Metric[0].Label {
			got = append(got, l.GetName())
		}
		sort.Strings(got)
		if !slices.Equal(got, labels) {
			t.Errorf("%s has labels %v, want %v as the kubelet's", name, got, labels)
		}
	}
	return byName
}

// TestProbeRegistryNameMatchesTheProber: the registry the node API serves
// on /metrics/probes is provided under the name the prober looks for.
func TestProbeRegistryNameMatchesTheProber(t *testing.T) {
	type probeRegistry struct {
		fx.In
		Registerer prometheus.Registerer `name:"probe_metrics"`
		Gatherer   prometheus.Gatherer   `name:"probe_metrics"`
	}
	cfg := agenttest.Config(t, "node-a", "unix:///nonexistent.sock")
	if err := fx.ValidateApp(fx.Supply(cfg), agent.Module, fx.Invoke(func(probeRegistry) {})); err != nil {
		t.Fatal(err)
	}
	if prober.MetricsRegistererName != "probe_metrics" {
		t.Errorf("the prober looks for %q, the agent provides probe_metrics", prober.MetricsRegistererName)
	}
}

func counted(t *testing.T, g prometheus.Gatherer, name string) bool {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.Metric) > 0 {
			return true
		}
	}
	return false
}

func gaugeOf(f *dto.MetricFamily, labels map[string]string) float64 {
	if f == nil {
		return -1
	}
	for _, m := range f.Metric {
		match := true
		for k, v := range labels {
			found := false
			for _, l := range m.Label {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			match = match && found
		}
		if match {
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
