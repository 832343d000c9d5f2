package agent_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
)

// TestAgentImagePulls checks the image pull manager's wiring on fakecri:
// with KubeletEnsureSecretPulledImages (on by default) the records open
// at start and a pull is recorded under <root-dir>/image_manager/pulled
// in the kubelet's format; with the gate off there is no record at all.
func TestAgentImagePulls(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("gate %v", on), func(t *testing.T) {
			n := agenttest.Start(t, agenttest.Options{Configure: func(cfg *agent.Config) {
				if !on {
					// As a configuration file with the gate off says.
					cfg.Kubelet.FeatureGates = map[string]bool{"KubeletEnsureSecretPulledImages": false}
					cfg.Kubelet.ImagePullCredentialsVerificationPolicy = ""
				}
			}})
			ctx := agenttest.Context(t)
			n.WaitReady(ctx)
			dir := filepath.Join(n.Config.RootDir, "image_manager", "pulled")
			if _, err := os.Stat(dir); (err == nil) != on {
				t.Fatalf("%s at start: %v", dir, err)
			}
			pod := n.CreatePod(ctx, agenttest.Pod("pulls", "registry.example/team/app:1"))
			n.WaitForPod(ctx, pod, agenttest.PodRunningAndReady)
			records, err := os.ReadDir(dir)
			switch {
			case !on && !errors.Is(err, os.ErrNotExist):
				t.Errorf("records with the gate off: %v, %v", records, err)
			case on && (err != nil || len(records) != 1):
				t.Errorf("records after a pull: %v, %v; want one", records, err)
			case on:
				data, err := os.ReadFile(filepath.Join(dir, records[0].Name()))
				if err != nil || !strings.Contains(string(data), `"credentialMapping":{"registry.example/team/app":{"nodePodsAccessible":true}}`) {
					t.Errorf("the record of an anonymous pull: %s, %v", data, err)
				}
			}
		})
	}
}
