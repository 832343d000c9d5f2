package agenttest_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
)

// TestConcurrentStartsBindTheirPorts: agents started at the same time each
// serve healthz on the port their Config names (bound by Start at port 0,
// so none can take another's), and Configure reaches the Config before the
// agent is built.
func TestConcurrentStartsBindTheirPorts(t *testing.T) {
	for i := range 6 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			var configured bool
			n := agenttest.Start(t, agenttest.Options{Configure: func(cfg *agent.Config) {
				configured = true
				cfg.MinimumContainerTTLDuration = time.Minute
			}})
			if !configured || n.Config.MinimumContainerTTLDuration != time.Minute {
				t.Error("Configure did not change the agent's Config")
			}
			url := fmt.Sprintf("http://127.0.0.1:%d/healthz", *n.Config.Kubelet.HealthzPort)
			resp, err := http.Get(url)
			if err != nil {
				t.Fatalf("GET %s: %v", url, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || string(body) != "ok" {
				t.Errorf("GET %s: %s %q", url, resp.Status, body)
			}
		})
	}
}

// TestSharedClient starts a second agent on a clientset in use, as the
// Client option's doc allows: under -race, adding the UID reactor again
// while another goroutine calls the client is a data race (the fake's
// reaction chain is read under its lock, PrependReactor writes it without).
func TestSharedClient(t *testing.T) {
	client := fake.NewClientset()
	ctx := agenttest.Context(t)
	a := agenttest.Start(t, agenttest.Options{Name: "node-a", Client: client})
	a.WaitReady(ctx)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { // a user of the client the second Start does not wait for
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				_, _ = client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
			}
		}
	}()
	b := agenttest.Start(t, agenttest.Options{Name: "node-b", Client: client})
	close(stop)
	<-done
	b.WaitReady(ctx)
	pod, err := client.CoreV1().Pods("default").Create(ctx, agenttest.Pod("web", "busybox"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.UID == "" {
		t.Error("a pod created on the shared client got no UID")
	}
}
