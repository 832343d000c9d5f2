package agent_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/server"
	"github.com/nodekit/nodekit/status"
	"github.com/nodekit/nodekit/status/podstatus"
)

// manifest is a static pod "web" whose container has VERSION=version in
// its environment.
func manifest(version string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: example.com/web:1.0
    env: [{name: VERSION, value: %q}]
`, version)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// criClient talks to the node's runtime as crictl would.
func criClient(t *testing.T, n *agenttest.Node) runtimeapi.RuntimeServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(n.Config.Kubelet.ContainerRuntimeEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// containers returns the runtime's containers of pod name (namespace
// default), with their status.
func containers(ctx context.Context, t *testing.T, cri runtimeapi.RuntimeServiceClient, name string) []*runtimeapi.ContainerStatus {
	t.Helper()
	resp, err := cri.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "default"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var out []*runtimeapi.ContainerStatus
	for _, c := range resp.Containers {
		st, err := cri.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st.Status)
	}
	return out
}

func running(cs []*runtimeapi.ContainerStatus) []*runtimeapi.ContainerStatus {
	var out []*runtimeapi.ContainerStatus
	for _, c := range cs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			out = append(out, c)
		}
	}
	return out
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func envOf(n *agenttest.Node, c *runtimeapi.ContainerStatus, name string) string {
	for _, kv := range n.CRI.ContainerConfig(c.Id).GetEnvs() {
		if kv.Key == name {
			return string(kv.Value)
		}
	}
	return ""
}

// A static pod from the manifest directory runs, shows up as a mirror pod
// owned by the Node with its status, comes back when its mirror pod is
// deleted (without the static pod restarting), is replaced — the new
// version starting only once the old one stopped — when its manifest is
// edited, and goes with its mirror pod when the manifest is removed.
func TestStaticPodsFromTheManifestDirectory(t *testing.T) {
	dir := agenttest.TempDir(t)
	path := filepath.Join(dir, "web.yaml")
	writeFile(t, path, manifest("1"))
	n := agenttest.Start(t, agenttest.Options{Args: []string{"--pod-manifest-path=" + dir}})
	ctx := agenttest.Context(t)
	cri := criClient(t, n)
	node := n.WaitReady(ctx)

	ref := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-node-a"}}
	m := n.WaitForPod(ctx, ref, agenttest.PodRunningAndReady)
	hash := m.Annotations[podsource.ConfigMirrorAnnotationKey]
	if hash == "" || m.Annotations[podsource.ConfigSourceAnnotationKey] != podsource.FileSource {
		t.Errorf("mirror pod annotations %v", m.Annotations)
	}
	if len(m.OwnerReferences) != 1 || m.OwnerReferences[0].Kind != "Node" || m.OwnerReferences[0].UID != node.UID {
		t.Errorf("mirror pod owners %+v, want the Node %s", m.OwnerReferences, node.UID)
	}
	first := running(containers(ctx, t, cri, "web-node-a"))
	if len(first) != 1 || envOf(n, first[0], "VERSION") != "1" {
		t.Fatalf("running containers %v, want one of version 1", first)
	}

	// Deleting the mirror pod brings it back; the static pod keeps running.
	if err := n.Client.CoreV1().Pods("default").Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	back := n.WaitForPod(ctx, ref, func(p *v1.Pod) bool { return p != nil && p.UID != m.UID && agenttest.PodRunningAndReady(p) })
	if back.Annotations[podsource.ConfigMirrorAnnotationKey] != hash {
		t.Errorf("recreated mirror pod's hash %q, want %q", back.Annotations[podsource.ConfigMirrorAnnotationKey], hash)
	}
	if now := running(containers(ctx, t, cri, "web-node-a")); len(now) != 1 || now[0].Id != first[0].Id {
		t.Errorf("after the mirror pod's deletion the running containers are %v, want %s still", now, first[0].Id)
	}

	// An edited manifest is a new pod: the old one stops, then the new one
	// starts, and the mirror pod follows.
	writeFile(t, path, manifest("2"))
	edited := n.WaitForPod(ctx, ref, func(p *v1.Pod) bool {
		return p != nil && p.Annotations[podsource.ConfigMirrorAnnotationKey] != hash && agenttest.PodRunningAndReady(p)
	})
	var now []*runtimeapi.ContainerStatus
	waitFor(ctx, t, "the new version's container", func() bool {
		now = running(containers(ctx, t, cri, "web-node-a"))
		return len(now) == 1 && envOf(n, now[0], "VERSION") == "2"
	})
	var old *runtimeapi.ContainerStatus
	for _, c := range containers(ctx, t, cri, "web-node-a") {
		if c.Id == first[0].Id {
			old = c
		}
	}
	if old != nil && (old.State != runtimeapi.ContainerState_CONTAINER_EXITED || old.FinishedAt > now[0].CreatedAt) {
		t.Errorf("the old version (state %v, finished %d) still ran when the new one was created (%d)", old.State, old.FinishedAt, now[0].CreatedAt)
	}
	t.Logf("edited manifest: mirror pod hash %s -> %s", hash, edited.Annotations[podsource.ConfigMirrorAnnotationKey])

	// Removing the manifest removes the pod and its mirror pod.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	n.WaitForPod(ctx, ref, agenttest.PodGone)
	waitFor(ctx, t, "the containers to stop", func() bool { return len(running(containers(ctx, t, cri, "web-node-a"))) == 0 })
}

// With the API server unreachable (here: refusing to register the node and
// to list services),
// the static pod runs all the same; its mirror pod appears once the node
// registers.
func TestStaticPodsRunBeforeTheNodeRegisters(t *testing.T) {
	dir := agenttest.TempDir(t)
	writeFile(t, filepath.Join(dir, "web.yaml"), manifest("1"))
	client := fake.NewClientset()
	var down atomic.Bool
	down.Store(true)
	refuse := func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		return false, nil, nil
	}
	client.PrependReactor("create", "nodes", refuse)
	// Nor can the services be listed: the static pod does not wait for
	// them.
	client.PrependReactor("list", "services", refuse)
	n := agenttest.Start(t, agenttest.Options{Client: client, Args: []string{"--pod-manifest-path=" + dir}})
	ctx := agenttest.Context(t)
	cri := criClient(t, n)
	waitFor(ctx, t, "the static pod's container", func() bool { return len(running(containers(ctx, t, cri, "web-node-a"))) == 1 })
	if pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Fatalf("pods in the API before the node registered: %v, %v", pods, err)
	}
	down.Store(false)
	ref := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-node-a"}}
	n.WaitForPod(ctx, ref, agenttest.PodRunningAndReady)
}

// Pods served at the manifest URL (with the configured headers) run and go
// as the served list changes.
func TestStaticPodsFromTheManifestURL(t *testing.T) {
	var mu sync.Mutex
	body := podList("a", "b")
	var badHeader string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if got := r.Header.Values("X-Token"); len(got) != 2 || got[0] != "one" || got[1] != "two" {
			badHeader = fmt.Sprint(got)
		}
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	n := agenttest.Start(t, agenttest.Options{Args: []string{
		"--manifest-url=" + srv.URL, "--manifest-url-header=X-Token:one,X-Token:two", "--http-check-frequency=200ms",
	}})
	ctx := agenttest.Context(t)
	a := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a-node-a"}}
	b := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b-node-a"}}
	n.WaitForPod(ctx, a, agenttest.PodRunningAndReady)
	n.WaitForPod(ctx, b, agenttest.PodRunningAndReady)

	mu.Lock()
	body = podList("a")
	mu.Unlock()
	n.WaitForPod(ctx, b, agenttest.PodGone)
	if p := n.WaitForPod(ctx, a, func(p *v1.Pod) bool { return p != nil }); p.Annotations[podsource.ConfigSourceAnnotationKey] != podsource.HTTPSource {
		t.Errorf("pod a: source %q", p.Annotations[podsource.ConfigSourceAnnotationKey])
	}
	mu.Lock()
	defer mu.Unlock()
	if badHeader != "" {
		t.Errorf("a request carried X-Token %s, want [one two]", badHeader)
	}
}

func podList(names ...string) string {
	var items []string
	for _, name := range names {
		items = append(items, fmt.Sprintf(`{"metadata":{"name":%q},"spec":{"containers":[{"name":"app","image":"example.com/%s:1.0"}]}}`, name, name))
	}
	return `{"apiVersion":"v1","kind":"PodList","items":[` + strings.Join(items, ",") + `]}`
}

// Without an API server the agent runs the static pods and keeps their
// statuses locally, for the node API's /pods.
func TestStandaloneRunsStaticPods(t *testing.T) {
	dir := agenttest.TempDir(t)
	writeFile(t, filepath.Join(dir, "web.yaml"), manifest("1"))
	var (
		statuses *podstatus.Manager
		store    *pods.Store
		watch    *status.NodeWatch
	)
	n := agenttest.Start(t, agenttest.Options{
		Standalone: true,
		Args:       []string{"--pod-manifest-path=" + dir},
		Extra:      []fx.Option{fx.Populate(&statuses, &store, &watch)},
	})
	ctx := agenttest.Context(t)
	var uid string
	waitFor(ctx, t, "the static pod to run", func() bool {
		for _, p := range store.Active() {
			if st, ok := statuses.GetPodStatus(p.UID); ok && p.Name == "web-node-a" && st.Phase == v1.PodRunning {
				uid = string(p.UID)
				return true
			}
		}
		return false
	})
	if got := running(containers(ctx, t, criClient(t, n), "web-node-a")); len(got) != 1 {
		t.Errorf("%d running containers of the static pod, want 1", len(got))
	}
	node, ok := watch.Node()
	if !ok || node.Name != "node-a" {
		t.Fatalf("the local node is not known: %v", node)
	}
	if q := node.Status.Allocatable[v1.ResourcePods]; q.Value() != 110 {
		t.Errorf("local node's allocatable pods = %s", q.String())
	}
	t.Logf("standalone: pod web-node-a (%s) Running", uid)
}

// A standalone graph builds without the API clients, and CoreFor picks it
// when the configuration has no kubeconfig.
func TestStandaloneGraphIsValid(t *testing.T) {
	cfg := agenttest.Config(t, "node-a", "unix:///nonexistent.sock")
	if cfg.KubeconfigPath != "" {
		t.Fatal("agenttest.Config sets a kubeconfig")
	}
	if err := fx.ValidateApp(fx.Supply(cfg), agent.CoreFor(cfg), agent.CRI); err != nil {
		t.Fatal(err)
	}
	clients := fx.Invoke(func(*agent.Clients) {})
	if err := fx.ValidateApp(fx.Supply(cfg), agent.CoreFor(cfg), agent.CRI, clients); err == nil {
		t.Error("the core without a kubeconfig has API clients")
	}
	connected := *cfg
	connected.KubeconfigPath = "/etc/kubernetes/kubelet.conf"
	if err := fx.ValidateApp(fx.Supply(&connected), agent.CoreFor(&connected), agent.CRI, clients); err != nil {
		t.Errorf("the core with a kubeconfig: %v", err)
	}
}

// A standalone node serves its static pods on the kubelet API's /pods when
// its authorization needs no API server (AlwaysAllow), and with the secure
// defaults (Webhook authorization, which no API server can answer) runs
// them without serving the secure port.
func TestStandaloneNodeAPI(t *testing.T) {
	dir := agenttest.TempDir(t)
	writeFile(t, filepath.Join(dir, "web.yaml"), manifest("1"))
	var srv *server.Server
	var statuses *podstatus.Manager
	agenttest.Start(t, agenttest.Options{
		Standalone: true,
		Args:       []string{"--pod-manifest-path=" + dir, "--anonymous-auth=true", "--authorization-mode=AlwaysAllow"},
		Extra:      []fx.Option{fx.Populate(&srv, &statuses)},
	})
	ctx := agenttest.Context(t)
	addr, err := srv.Addr(ctx)
	if err != nil || addr == nil {
		t.Fatalf("standalone node API address = %v, %v; want one", addr, err)
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var list v1.PodList
	waitFor(ctx, t, "/pods to list the running static pod", func() bool {
		resp, err := client.Get("https://" + addr.String() + "/pods")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		list = v1.PodList{}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&list) != nil {
			return false
		}
		return len(list.Items) == 1 && list.Items[0].Name == "web-node-a" && list.Items[0].Status.Phase == v1.PodRunning
	})
	p := list.Items[0]
	if p.Annotations[podsource.ConfigSourceAnnotationKey] != "file" || p.Spec.NodeName != "node-a" {
		t.Errorf("/pods: static pod source %q node %q, want file on node-a", p.Annotations[podsource.ConfigSourceAnnotationKey], p.Spec.NodeName)
	}
	t.Logf("standalone /pods: %s/%s %s", p.Namespace, p.Name, p.Status.Phase)

	// The secure defaults: the pods run, the secure port is not served.
	var secure *server.Server
	dir2 := agenttest.TempDir(t)
	writeFile(t, filepath.Join(dir2, "web.yaml"), manifest("1"))
	agenttest.Start(t, agenttest.Options{
		Standalone: true,
		Args:       []string{"--pod-manifest-path=" + dir2},
		Extra:      []fx.Option{fx.Populate(&secure, &statuses)},
	})
	if addr, err := secure.Addr(ctx); err != nil || addr != nil {
		t.Errorf("standalone node API with Webhook authorization listens on %v (%v); want nothing served", addr, err)
	}
}

// The kubelet API's /pods of a node with an API server lists a static pod
// once, as run (config.source "file", the pod's own UID), not its mirror
// pod, next to the API server's pods.
func TestNodeAPIListsStaticPodsNotMirrorPods(t *testing.T) {
	dir := agenttest.TempDir(t)
	writeFile(t, filepath.Join(dir, "web.yaml"), manifest("1"))
	var srv *server.Server
	n := agenttest.Start(t, agenttest.Options{
		Args:  []string{"--pod-manifest-path=" + dir, "--anonymous-auth=true", "--authorization-mode=AlwaysAllow"},
		Extra: []fx.Option{fx.Populate(&srv)},
	})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	mirrorPod := n.WaitForPod(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-node-a"}}, agenttest.PodRunningAndReady)
	api := n.WaitForPod(ctx, n.CreatePod(ctx, agenttest.Pod("api", "busybox")), agenttest.PodRunningAndReady)
	addr, err := srv.Addr(ctx)
	if err != nil || addr == nil {
		t.Fatalf("node API address = %v, %v", addr, err)
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get("https://" + addr.String() + "/pods")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list v1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /pods = %d, %v", resp.StatusCode, err)
	}
	got := map[string]v1.Pod{}
	for _, p := range list.Items {
		got[p.Name] = p
	}
	static, ok := got["web-node-a"]
	if len(list.Items) != 2 || !ok || got["api"].UID != api.UID {
		t.Fatalf("/pods lists %d pods %v, want web-node-a and api", len(list.Items), got)
	}
	if static.UID == mirrorPod.UID || podsource.IsMirrorPod(&static) || static.Annotations[podsource.ConfigSourceAnnotationKey] != podsource.FileSource {
		t.Errorf("/pods lists the static pod as UID %s annotations %v; want the static pod (source file), not the mirror pod %s", static.UID, static.Annotations, mirrorPod.UID)
	}
}
