package agenttest_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

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
