package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// Annotations of static and mirror pods (podsource's constants).
const (
	configMirrorAnnotation = "kubernetes.io/config.mirror"
	configSourceAnnotation = "kubernetes.io/config.source"
)

// TestStaticPodsOnContainerd runs a node agent with a manifest directory
// and a manifest URL on a containerd of its own, starting it while the API
// server is unreachable for it (its kubeconfig goes through a proxy that
// refuses connections until the test lets them through): the static pod
// runs without the API server; once it is reachable the node registers and
// the mirror pod appears with the pod's status; deleting the mirror pod
// brings it back without restarting the pod; editing the manifest replaces
// the pod (the new version starts once the old one stopped); the pods
// served on 127.0.0.1 come and go with the served list; removing the
// manifest removes the pod and its mirror pod.
func TestStaticPodsOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	const name = "ctr-static"
	ctx := t.Context()
	cgroupRoot := newCgroupRoot(t, name)
	c := startNodeContainerd(t, name)
	cri := dialCRI(t, c)
	ns := newNamespace(t, name)

	manifests := t.TempDir()
	manifestPath := filepath.Join(manifests, "web.yaml")
	writeManifest(t, manifestPath, staticManifest(ns, "web", "1"))
	served := newManifestServer(t, ns, "http-a")
	proxy := newAPIProxy(t, env.cp.Server)

	agent, err := env.cp.NewAgent(cluster.AgentOptions{
		Binary:          env.agent,
		NodeName:        name,
		RuntimeEndpoint: c.Endpoint,
		CgroupDriver:    "cgroupfs",
		ExtraArgs: []string{
			"--cgroup-root=" + cgroupRoot,
			"--pod-manifest-path=" + manifests,
			"--manifest-url=" + served.URL(),
			"--manifest-url-header=X-Node:" + name,
			"--http-check-frequency=2s",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pointKubeconfigAt(agent.Kubeconfig, proxy.URL()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	startAgentNode(t, agent)

	// The API server is unreachable: the static pod runs all the same.
	web := "web-" + name
	first := waitForContainers(t, cri.Runtime, ns, web, "the static pod to run without the API server", func(cs []*runtimeapi.ContainerStatus) bool {
		return len(runningStatuses(cs)) == 1
	})
	runningAfter := time.Since(start)
	if refused := proxy.refused.Load(); refused == 0 {
		t.Errorf("the agent never tried the API server while it was down")
	}
	if _, err := env.cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node %s exists before the agent could reach the API server: %v", name, err)
	}
	t.Logf("static pod running %v after the agent started, API server unreachable (%d connections refused)",
		runningAfter.Round(time.Millisecond), proxy.refused.Load())

	// The API server becomes reachable: the node registers, the mirror pod
	// appears with the pod's status.
	proxy.up()
	up := time.Now()
	waitForNode(t, name, "Ready", readyTimeout, isReady)
	mirror := waitForAPIPod(t, ns, web, "the mirror pod, Running", func(p *v1.Pod) bool {
		return p != nil && p.Status.Phase == v1.PodRunning && isPodReady(p)
	})
	t.Logf("mirror pod Running %v after the API server became reachable", time.Since(up).Round(time.Millisecond))
	hash := mirror.Annotations[configMirrorAnnotation]
	if hash == "" || mirror.Annotations[configSourceAnnotation] != "file" {
		t.Errorf("mirror pod annotations %v", mirror.Annotations)
	}
	if len(mirror.OwnerReferences) != 1 || mirror.OwnerReferences[0].Kind != "Node" || mirror.OwnerReferences[0].Name != name {
		t.Errorf("mirror pod owners %+v, want the Node", mirror.OwnerReferences)
	}

	// Deleting the mirror pod brings it back; the pod keeps running.
	if err := env.cp.Client().CoreV1().Pods(ns).Delete(ctx, web, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	back := waitForAPIPod(t, ns, web, "the mirror pod to come back", func(p *v1.Pod) bool {
		return p != nil && p.UID != mirror.UID && p.DeletionTimestamp == nil && p.Status.Phase == v1.PodRunning
	})
	t.Logf("mirror pod back %v after its deletion (UID %s -> %s)", time.Since(deleted).Round(time.Millisecond), mirror.UID, back.UID)
	if now := runningStatuses(listContainers(t, cri.Runtime, ns, web)); len(now) != 1 || now[0].Id != first[0].Id {
		t.Errorf("deleting the mirror pod restarted the static pod: running %v, was %s", statusIDs(now), first[0].Id)
	}

	// Editing the manifest replaces the pod with the new spec.
	writeManifest(t, manifestPath, staticManifest(ns, "web", "2"))
	edited := time.Now()
	var replaced []*runtimeapi.ContainerStatus
	replaced = waitForContainers(t, cri.Runtime, ns, web, "the edited pod's container", func(cs []*runtimeapi.ContainerStatus) bool {
		r := runningStatuses(cs)
		return len(r) == 1 && r[0].Id != first[0].Id
	})
	newest := runningStatuses(replaced)[0]
	if got := strings.Join(containerCommand(t, cri.Runtime, newest.Id), " "); !strings.Contains(got, "version=2") {
		t.Errorf("the new container runs %q, want the edited command", got)
	}
	for _, old := range replaced {
		if old.Id == first[0].Id && (old.State != runtimeapi.ContainerState_CONTAINER_EXITED || old.FinishedAt > newest.CreatedAt) {
			t.Errorf("the old version (state %v, finished at %d) still ran when the new one was created (%d)", old.State, old.FinishedAt, newest.CreatedAt)
		}
	}
	newMirror := waitForAPIPod(t, ns, web, "the mirror pod of the edited manifest", func(p *v1.Pod) bool {
		return p != nil && p.Annotations[configMirrorAnnotation] != hash && p.Status.Phase == v1.PodRunning
	})
	t.Logf("edited manifest: new container running and mirror pod updated %v after the edit (hash %s -> %s)",
		time.Since(edited).Round(time.Millisecond), hash, newMirror.Annotations[configMirrorAnnotation])

	// The HTTP source: its pod runs and is mirrored; a new list replaces it.
	httpA, httpB := "http-a-"+name, "http-b-"+name
	waitForAPIPod(t, ns, httpA, "the URL's pod, Running", func(p *v1.Pod) bool { return p != nil && p.Status.Phase == v1.PodRunning })
	if h := served.header(); h != name {
		t.Errorf("the manifest URL was fetched with X-Node %q, want %q", h, name)
	}
	served.set("http-b")
	changed := time.Now()
	waitForAPIPod(t, ns, httpB, "the URL's new pod, Running", func(p *v1.Pod) bool { return p != nil && p.Status.Phase == v1.PodRunning })
	waitForAPIPod(t, ns, httpA, "the URL's removed pod to go", func(p *v1.Pod) bool { return p == nil })
	waitForContainers(t, cri.Runtime, ns, httpA, "the removed pod's containers to stop", func(cs []*runtimeapi.ContainerStatus) bool {
		return len(runningStatuses(cs)) == 0
	})
	t.Logf("manifest URL: pod added and pod removed %v after the served list changed", time.Since(changed).Round(time.Millisecond))

	// Removing the manifest removes the pod and its mirror pod.
	if err := os.Remove(manifestPath); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	waitForAPIPod(t, ns, web, "the mirror pod to go", func(p *v1.Pod) bool { return p == nil })
	waitForContainers(t, cri.Runtime, ns, web, "the static pod's containers to stop", func(cs []*runtimeapi.ContainerStatus) bool {
		return len(runningStatuses(cs)) == 0
	})
	t.Logf("manifest removed: pod stopped and mirror pod deleted %v later", time.Since(removed).Round(time.Millisecond))
}

// staticManifest is a static pod in namespace ns running BusyboxImage with
// a command that names version.
func staticManifest(ns, name, version string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {app: %s}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "echo version=%s; exec sleep 3600"]
`, name, ns, name, cluster.BusyboxImage, version)
}

// writeManifest replaces path's content at once (write, then rename), as an
// operator's tooling does.
func writeManifest(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// manifestServer serves a PodList of BusyboxImage pods on 127.0.0.1 and
// remembers the X-Node header of the last request.
type manifestServer struct {
	srv *httptest.Server
	ns  string

	mu     sync.Mutex
	names  []string
	xNode  string
	served int
}

func newManifestServer(t *testing.T, ns string, names ...string) *manifestServer {
	s := &manifestServer{ns: ns, names: names}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *manifestServer) URL() string { return s.srv.URL + "/pods.yaml" }

func (s *manifestServer) set(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names = names
}

func (s *manifestServer) header() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.xNode
}

func (s *manifestServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.xNode = r.Header.Get("X-Node")
	s.served++
	fmt.Fprintln(w, "apiVersion: v1\nkind: PodList\nitems:")
	for _, name := range s.names {
		var item strings.Builder
		for i, line := range strings.Split(strings.TrimSpace(staticManifest(s.ns, name, "1")), "\n") {
			if i == 0 {
				item.WriteString("- " + line + "\n")
			} else {
				item.WriteString("  " + line + "\n")
			}
		}
		fmt.Fprint(w, item.String())
	}
}

// apiProxy forwards TCP connections to the API server once up is called,
// and refuses them (closes them at once) before: for one agent the API
// server is down, for the rest of the suite it is not.
type apiProxy struct {
	ln      net.Listener
	target  string
	open    atomic.Bool
	refused atomic.Int64
	wg      sync.WaitGroup
}

func newAPIProxy(t *testing.T, server string) *apiProxy {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{ln: ln, target: u.Host}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

// URL is the proxy's https URL; the API server's certificate names
// 127.0.0.1, so TLS goes through unchanged.
func (p *apiProxy) URL() string { return "https://" + p.ln.Addr().String() }

func (p *apiProxy) up() { p.open.Store(true) }

func (p *apiProxy) serve() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.open.Load() {
			p.refused.Add(1)
			conn.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer conn.Close()
			upstream, err := net.Dial("tcp", p.target)
			if err != nil {
				return
			}
			defer upstream.Close()
			done := make(chan struct{}, 2)
			go func() { io.Copy(upstream, conn); done <- struct{}{} }()
			go func() { io.Copy(conn, upstream); done <- struct{}{} }()
			<-done
		}()
	}
}

// pointKubeconfigAt makes the kubeconfig at path talk to server.
func pointKubeconfigAt(path, server string) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	if len(cfg.Clusters) == 0 {
		return errors.New("kubeconfig " + path + " has no cluster")
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// listContainers returns the runtime's containers of pod ns/name with
// their status, as crictl ps -a shows them.
func listContainers(t *testing.T, rs runtimeapi.RuntimeServiceClient, ns, name string) []*runtimeapi.ContainerStatus {
	t.Helper()
	resp, err := rs.ListContainers(t.Context(), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{labelPodName: name, labelPodNamespace: ns},
	}})
	if err != nil {
		t.Fatalf("list containers of %s/%s: %v", ns, name, err)
	}
	var out []*runtimeapi.ContainerStatus
	for _, c := range resp.Containers {
		st, err := rs.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, st.Status)
	}
	return out
}

func runningStatuses(cs []*runtimeapi.ContainerStatus) []*runtimeapi.ContainerStatus {
	var out []*runtimeapi.ContainerStatus
	for _, c := range cs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			out = append(out, c)
		}
	}
	return out
}

func statusIDs(cs []*runtimeapi.ContainerStatus) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Id)
	}
	return out
}

// containerCommand returns the container's command and arguments as the
// runtime runs them (the OCI spec's process.args of crictl inspect).
func containerCommand(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string) []string {
	t.Helper()
	resp, err := rs.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		RuntimeSpec specs.Spec `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &v); err != nil || v.RuntimeSpec.Process == nil {
		t.Fatalf("no runtimeSpec.process in the verbose status of %s: %v", id, err)
	}
	return v.RuntimeSpec.Process.Args
}

// waitForAPIPod polls pod ns/name until cond holds and returns it; cond
// gets nil while the pod does not exist. On timeout it fails the test.
func waitForAPIPod(t *testing.T, ns, name, what string, cond func(*v1.Pod) bool) *v1.Pod {
	t.Helper()
	var last *v1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		pod, err := env.cp.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			pod = nil
		case err != nil:
			return false, nil
		}
		last = pod
		return cond(pod), nil
	})
	if err != nil {
		desc := "gone"
		if last != nil {
			desc = describePod(t, last)
		}
		t.Fatalf("pod %s/%s: %s: not within %s: %v\n%s", ns, name, what, podTimeout, err, desc)
	}
	return last
}

// waitForContainers polls the pod's containers in the runtime until cond
// holds and returns them; on timeout it fails the test with what it saw.
func waitForContainers(t *testing.T, rs runtimeapi.RuntimeServiceClient, ns, name, what string, cond func([]*runtimeapi.ContainerStatus) bool) []*runtimeapi.ContainerStatus {
	t.Helper()
	var last []*runtimeapi.ContainerStatus
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		last = listContainers(t, rs, ns, name)
		return cond(last), nil
	})
	if err != nil {
		var states []string
		for _, c := range last {
			states = append(states, c.Id[:12]+"="+c.State.String())
		}
		t.Fatalf("waiting for %s: %v; containers of %s/%s: %v", what, err, ns, name, states)
	}
	return last
}
