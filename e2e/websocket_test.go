package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// testWebSockets checks ExtendWebSocketsToKubelet end to end: the node
// declares it, so the API server proxies WebSocket exec, attach and
// port-forward to the node unchanged (apiserver_websocket_streaming_requests_total
// {proxy_type="proxied_to_kubelet"}), and the node serves them itself
// (kubelet_websocket_streaming_requests_total). It runs after the kubectl
// exec, attach and port-forward subtests, whose kubectl (v1.37: WebSockets
// first, SPDY only after a failed upgrade) must have used WebSockets; then
// it runs an exec and a port-forward with client-go's WebSocket clients
// alone, which have no SPDY fallback.
func (n *apiNode) testWebSockets(t *testing.T, p apiPods) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	node, err := env.cp.Client().CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(node.Status.DeclaredFeatures, "ExtendWebSocketsToKubelet") {
		t.Fatalf("declaredFeatures = %v, want ExtendWebSocketsToKubelet", node.Status.DeclaredFeatures)
	}
	nodeCount := func(subresource string) float64 {
		return metricValue(t, n.agent, "kubelet_websocket_streaming_requests_total", map[string]string{"subresource": subresource})
	}
	apiserverCount := func(subresource string) float64 {
		m, err := cluster.ParseMetrics(strings.NewReader(mustKubectl(t, "get", "--raw", "/metrics")))
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("apiserver_websocket_streaming_requests_total", map[string]string{"subresource": subresource, "proxy_type": "proxied_to_kubelet"})
	}
	// kubectl exec (twice), cp (an exec), attach and port-forward ran
	// before: each reached the node as a WebSocket.
	before := map[string]float64{}
	for sub, atLeast := range map[string]float64{"exec": 3, "attach": 1, "portforward": 1} {
		before[sub] = nodeCount(sub)
		t.Logf("kubectl's %s requests served as WebSockets by the node: %v", sub, before[sub])
		if before[sub] < atLeast {
			t.Errorf("kubelet_websocket_streaming_requests_total{subresource=%q} = %v after kubectl's, want >= %v", sub, before[sub], atLeast)
		}
	}
	apiExec, apiPF := apiserverCount("exec"), apiserverCount("portforward")

	cfg := env.cp.AdminConfig()
	// exec over v5.channel.k8s.io only: stdin, its close, stdout, stderr
	// and the exit code all cross the node's translation to the runtime's
	// SPDY.
	execURL := env.cp.Client().CoreV1().RESTClient().Post().Resource("pods").Namespace(n.ns).Name(p.logger.Name).
		SubResource("exec").VersionedParams(&v1.PodExecOptions{
		Command: []string{"sh", "-c", "cat; echo to-stderr >&2; exit 5"}, Stdin: true, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec).URL()
	ex, err := remotecommand.NewWebSocketExecutorForProtocols(cfg, "GET", execURL.String(), "v5.channel.k8s.io")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("over websockets\n"), Stdout: &stdout, Stderr: &stderr})
	var exitErr exec.CodeExitError
	if !errors.As(err, &exitErr) || exitErr.Code != 5 || stdout.String() != "over websockets\n" || stderr.String() != "to-stderr\n" {
		t.Errorf("v5 WebSocket exec: stdout %q, stderr %q, err %v; want the stdin back, to-stderr and exit code 5", stdout.String(), stderr.String(), err)
	} else {
		t.Logf("v5 WebSocket exec: stdout %q, stderr %q, exit code %d", stdout.String(), stderr.String(), exitErr.Code)
	}

	// port-forward as SPDY tunneled in WebSocket messages, no fallback.
	pfURL := env.cp.Client().CoreV1().RESTClient().Post().Resource("pods").Namespace(n.ns).Name(p.web.Name).SubResource("portforward").URL()
	if err := getThroughTunnel(ctx, cfg, pfURL); err != nil {
		t.Errorf("SPDY-over-WebSocket port-forward: %v", err)
	}

	if got := nodeCount("exec") - before["exec"]; got != 1 {
		t.Errorf("the node counted %v WebSocket execs for the client's one", got)
	}
	if got := nodeCount("portforward") - before["portforward"]; got != 1 {
		t.Errorf("the node counted %v WebSocket port-forwards for the client's one", got)
	}
	// The API server's counters are the whole cluster's: they grow by at
	// least this node's requests.
	if got := apiserverCount("exec") - apiExec; got < 1 {
		t.Errorf("apiserver_websocket_streaming_requests_total{exec,proxied_to_kubelet} grew by %v, want >= 1", got)
	}
	if got := apiserverCount("portforward") - apiPF; got < 1 {
		t.Errorf("apiserver_websocket_streaming_requests_total{portforward,proxied_to_kubelet} grew by %v, want >= 1", got)
	}
}

// getThroughTunnel forwards a local port to the web pod's 8080 over a
// SPDY-over-WebSocket tunnel and fetches its page through it.
func getThroughTunnel(ctx context.Context, cfg *rest.Config, u *url.URL) error {
	dialer, err := portforward.NewSPDYOverWebsocketDialer(u, cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan struct{})
	var out, errOut bytes.Buffer
	pf, err := portforward.NewOnAddressesWithContext(ctx, dialer, []string{"127.0.0.1"}, []string{"0:8080"}, ready, &out, &errOut)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return fmt.Errorf("forward: %v (%s)", err, errOut.String())
	case <-ctx.Done():
		return ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{}).DialContext, DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/index.html", ports[0].Local), nil)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET: %v (%s)", err, errOut.String())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "nodekit-httpd-ok\n" {
		return fmt.Errorf("GET = %d %q, want the pod's page", resp.StatusCode, body)
	}
	return nil
}
