package url_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/manifest"
	podurl "github.com/nodekit/nodekit/podsource/url"
)

const nodeName = "node-a"

// server serves a body that the test changes, and counts requests.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	status   int
	body     []byte
	requests int
	headers  []http.Header
}

func newServer(t *testing.T, body string) *server {
	s := &server{status: http.StatusOK, body: []byte(body)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.requests++
		s.headers = append(s.headers, r.Header.Clone())
		w.WriteHeader(s.status)
		_, _ = w.Write(s.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) serve(status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, []byte(body)
}

func (s *server) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

type harness struct {
	srv *server
	clk *testingclock.FakeClock
	out chan []*v1.Pod
	rec *record.FakeRecorder
}

const period = 20 * time.Second

func start(t *testing.T, srv *server, mutate ...func(*podurl.Options)) *harness {
	t.Helper()
	h := &harness{srv: srv, clk: testingclock.NewFakeClock(time.Now()), out: make(chan []*v1.Pod), rec: record.NewFakeRecorder(50)}
	opts := podurl.Options{URL: srv.URL + "/pods", NodeName: nodeName, Clock: h.clk, Recorder: h.rec}
	for _, m := range mutate {
		m(&opts)
	}
	src, err := podurl.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, h.out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(wait.ForeverTestTimeout):
			t.Error("Run did not return")
		}
	})
	return h
}

// poll makes the source fetch once more and waits for the request.
func (h *harness) poll(t *testing.T) {
	t.Helper()
	n := h.srv.count()
	ctx := context.Background()
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return h.clk.HasWaiters(), nil }); err != nil {
		t.Fatal("the source is not waiting for its period")
	}
	h.clk.Step(period)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return h.srv.count() > n, nil }); err != nil {
		t.Fatal("no request")
	}
}

// quiet proves the last fetch sent no snapshot: the source fetches again,
// which it could not do while blocked sending one.
func (h *harness) quiet(t *testing.T) {
	t.Helper()
	h.poll(t)
}

func (h *harness) next(t *testing.T, names ...string) []*v1.Pod {
	t.Helper()
	select {
	case pods := <-h.out:
		var got []string
		for _, p := range pods {
			got = append(got, p.Namespace+"/"+p.Name)
		}
		if pods == nil || !slices.Equal(got, names) {
			t.Fatalf("snapshot %v, want %v", got, names)
		}
		return pods
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("no snapshot, want %v", names)
		return nil
	}
}

func (h *harness) event(t *testing.T, parts ...string) {
	t.Helper()
	select {
	case e := <-h.rec.Events:
		for _, p := range parts {
			if !strings.Contains(e, p) {
				t.Errorf("event %q does not contain %q", e, p)
			}
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("no event with %v", parts)
	}
}

func (h *harness) noEvent(t *testing.T) {
	t.Helper()
	select {
	case e := <-h.rec.Events:
		t.Errorf("unexpected event %q", e)
	default:
	}
}

func podYAML(name, image string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec: {containers: [{name: c, image: %s}]}\n", name, image)
}

func podList(items ...string) string {
	return `{"apiVersion":"v1","kind":"PodList","items":[` + strings.Join(items, ",") + `]}`
}

func item(name, image string) string {
	return fmt.Sprintf(`{"metadata":{"name":%q},"spec":{"containers":[{"name":"c","image":%q}]}}`, name, image)
}

func TestPodThenPodList(t *testing.T) {
	srv := newServer(t, podYAML("web", "nginx:1"))
	h := start(t, srv, func(o *podurl.Options) {
		o.Header = http.Header{"Authorization": {"Bearer t"}, "X-Node": {"a", "b"}}
	})
	pods := h.next(t, "default/web-node-a")
	p := pods[0]
	if p.Spec.NodeName != nodeName || p.Annotations[podsource.ConfigHashAnnotationKey] != string(p.UID) || len(p.Spec.Tolerations) != 0 ||
		p.Spec.Containers[0].ImagePullPolicy != v1.PullIfNotPresent {
		t.Errorf("pod not completed: %v %+v", p.Annotations, p.Spec)
	}
	srv.mu.Lock()
	hdr := srv.headers[0]
	srv.mu.Unlock()
	if hdr.Get("Authorization") != "Bearer t" || !slices.Equal(hdr.Values("X-Node"), []string{"a", "b"}) {
		t.Errorf("request headers %v", hdr)
	}

	// The same body again: nothing.
	h.poll(t)
	h.quiet(t)

	srv.serve(http.StatusOK, podList(item("web", "nginx:1"), item("db", "postgres:16")))
	h.poll(t)
	pods = h.next(t, "default/web-node-a", "default/db-node-a")
	if pods[0].UID != p.UID {
		t.Error("the same pod in a list got another UID")
	}
	h.noEvent(t)

	// An empty body: no pods.
	srv.serve(http.StatusOK, "")
	h.poll(t)
	h.next(t)
}

func TestFailuresKeepThePods(t *testing.T) {
	srv := newServer(t, podYAML("web", "nginx:1"))
	h := start(t, srv)
	h.next(t, "default/web-node-a")

	srv.serve(http.StatusInternalServerError, "oops")
	h.poll(t)
	h.event(t, "Warning StaticPodManifestUnavailable", srv.URL+"/pods", "HTTP 500")
	h.quiet(t) // also: the same failure is not reported again
	h.noEvent(t)

	// 10 MiB is the most the source reads.
	srv.serve(http.StatusOK, podYAML("web", "nginx:2")+"#"+strings.Repeat("x", manifest.MaxSize))
	h.poll(t)
	h.event(t, "StaticPodManifestUnavailable", "larger than 10485760 bytes")
	h.quiet(t)

	srv.serve(http.StatusOK, "apiVersion: v1\nkind: Pod\nmetadata: [\n")
	h.poll(t)
	h.event(t, "Warning InvalidStaticPodManifest", "YAML")
	h.quiet(t)

	// Fixed: used again.
	srv.serve(http.StatusOK, podYAML("web", "nginx:2"))
	h.poll(t)
	pods := h.next(t, "default/web-node-a")
	if pods[0].Spec.Containers[0].Image != "nginx:2" {
		t.Errorf("image %s", pods[0].Spec.Containers[0].Image)
	}
}

func TestInvalidListItemsLeaveTheOthersAlone(t *testing.T) {
	srv := newServer(t, podList(item("a", "nginx:1"), item("b", "nginx:1")))
	h := start(t, srv)
	first := h.next(t, "default/a-node-a", "default/b-node-a")

	// b becomes invalid (it keeps its last pod), c is new and invalid, a
	// changes, d is new, and a second d is dropped.
	srv.serve(http.StatusOK, podList(item("a", "nginx:2"), item("b", ""), item("c", ""), item("d", "x"), item("d", "y")))
	h.poll(t)
	pods := h.next(t, "default/a-node-a", "default/d-node-a", "default/b-node-a")
	if pods[0].Spec.Containers[0].Image != "nginx:2" || pods[2] != first[1] || pods[1].Spec.Containers[0].Image != "x" {
		t.Errorf("pods %v", pods)
	}
	h.event(t, "Warning InvalidStaticPodManifest", "items[1]: spec.containers[0].image: Required value (the pod keeps running as last read)",
		"items[2]: spec.containers[0].image: Required value", "pod default/d-node-a appears twice")
}

func TestNothingIsSentBeforeAUsableBody(t *testing.T) {
	srv := newServer(t, "")
	srv.serve(http.StatusNotFound, "")
	h := start(t, srv)
	h.event(t, "HTTP 404")
	h.quiet(t)
	srv.serve(http.StatusOK, podYAML("web", "nginx"))
	h.poll(t)
	h.next(t, "default/web-node-a")
}

func TestNewValidates(t *testing.T) {
	for name, opts := range map[string]podurl.Options{
		"no URL":   {NodeName: nodeName},
		"not http": {URL: "file:///etc/pods", NodeName: nodeName},
		"no host":  {URL: "http://", NodeName: nodeName},
		"no node":  {URL: "http://h/p"},
		"negative": {URL: "http://h/p", NodeName: nodeName, CheckFrequency: -1},
	} {
		if _, err := podurl.New(opts); err == nil {
			t.Errorf("%s: New accepted %+v", name, opts)
		}
	}
	src, err := podurl.New(podurl.Options{URL: "https://h/p", NodeName: nodeName})
	if err != nil || src.Name() != podsource.HTTPSource {
		t.Errorf("New = %v, %v", src, err)
	}
}

func TestCredentialsInTheURLAreNotShown(t *testing.T) {
	srv := newServer(t, "")
	srv.serve(http.StatusForbidden, "")
	withSecrets := strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1) + "/pods?token=t0ken"
	h := start(t, srv, func(o *podurl.Options) { o.URL = withSecrets })
	select {
	case e := <-h.rec.Events:
		if strings.Contains(e, "s3cret") || strings.Contains(e, "t0ken") || !strings.Contains(e, "user:xxxxx@") || !strings.Contains(e, "HTTP 403") {
			t.Errorf("event %q", e)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no event")
	}
	// The same for a connection error, whose message quotes the URL.
	srv.Close()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return h.clk.HasWaiters(), nil }); err != nil {
		t.Fatal("the source is not waiting for its period")
	}
	h.clk.Step(period)
	select {
	case e := <-h.rec.Events:
		if strings.Contains(e, "s3cret") || strings.Contains(e, "t0ken") || !strings.Contains(e, "Get http://user:xxxxx@") {
			t.Errorf("event %q", e)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no event")
	}
}
