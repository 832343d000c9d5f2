package e2e

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestFeatureGates: the agent takes --feature-gates as the kubelet does.
// An unknown gate stops it at start with the kubelet's error; gates turned
// off switch the node features it declares in the API server
// (status.declaredFeatures, which the scheduler matches), as on a kubelet
// with those gates off.
func TestFeatureGates(t *testing.T) {
	requireCluster(t)
	t.Parallel()

	t.Run("unknown gate", func(t *testing.T) {
		n, err := startFakeNode(t.Context(), "gates-unknown-node", nodeOptions{extraArgs: []string{"--feature-gates=NoSuchGate=true"}})
		if err == nil {
			_ = n.stop()
			t.Fatal("the agent started with an unknown feature gate")
		}
		if !strings.Contains(err.Error(), "unrecognized feature gate: NoSuchGate") {
			t.Errorf("start with an unknown gate: %v\nwant the kubelet's error, unrecognized feature gate: NoSuchGate", err)
		}
	})

	t.Run("gates off", func(t *testing.T) {
		const name = "gates-off-node"
		newNode(t, name, nodeOptions{extraArgs: []string{
			"--feature-gates=ExtendWebSocketsToKubelet=false,InPlacePodLevelResourcesVerticalScaling=false"}})
		want := []string{"InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}
		waitForNode(t, name, "Ready, declaring the features whose gates are on", readyTimeout, func(n *v1.Node) bool {
			return isReady(n) && slices.Equal(n.Status.DeclaredFeatures, want)
		})
	})
}
