package agent_test

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/pods"
)

// TestAgentFeatureGatesOff: a CRI agent whose --feature-gates turn off
// ExtendWebSocketsToKubelet and InPlacePodLevelResourcesVerticalScaling
// declares neither feature, as a kubelet with those gates off, and keeps
// the others it implements.
func TestAgentFeatureGatesOff(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{Args: []string{
		"--feature-gates=ExtendWebSocketsToKubelet=false,InPlacePodLevelResourcesVerticalScaling=false"}})
	want := []string{"InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}
	n.WaitForNode(agenttest.Context(t), func(n *v1.Node) bool { return slices.Equal(n.Status.DeclaredFeatures, want) })
}

// emptyBackend is a pods.PodBackend that runs no pod.
type emptyBackend struct{}

func (emptyBackend) CreatePod(context.Context, *v1.Pod) error { return nil }
func (emptyBackend) UpdatePod(context.Context, *v1.Pod) error { return nil }
func (emptyBackend) DeletePod(context.Context, *v1.Pod) error { return nil }
func (emptyBackend) GetPodStatus(context.Context, string, string) (*v1.PodStatus, error) {
	return nil, pods.ErrPodNotFound
}
func (emptyBackend) GetPods(context.Context) ([]*v1.Pod, error) { return nil, nil }

// wsBackend is an emptyBackend that says it implements WebSockets to the
// node.
type wsBackend struct{ emptyBackend }

func (wsBackend) SupportedNodeFeatures() []string { return []string{"ExtendWebSocketsToKubelet"} }

// TestPodBackendDeclaresItsOwnFeatures: an agent whose pods a PodBackend
// runs declares none of the CRI path's features (in-place resize, restart
// of all containers, WebSockets), only those the backend says it supports
// whose gates are on.
func TestPodBackendDeclaresItsOwnFeatures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend func() pods.PodBackend
		args    []string
		want    []string
	}{
		{"a backend that says nothing", func() pods.PodBackend { return emptyBackend{} }, nil, []string{}},
		{"a backend with WebSockets", func() pods.PodBackend { return wsBackend{} }, nil, []string{"ExtendWebSocketsToKubelet"}},
		{"a backend with WebSockets, gate off", func() pods.PodBackend { return wsBackend{} },
			[]string{"--feature-gates=ExtendWebSocketsToKubelet=false"}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A kubelet ran the node before and declared all of the CRI
			// path's features.
			client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "kubelets-node"},
				Status: v1.NodeStatus{DeclaredFeatures: pods.CRIFeatures()}})
			n := agenttest.Start(t, agenttest.Options{Runtime: agent.PodBackend(tc.backend), Args: tc.args, Client: client})
			// (An empty declaration reads back as none.)
			n.WaitForNode(agenttest.Context(t), func(n *v1.Node) bool { return slices.Equal(n.Status.DeclaredFeatures, tc.want) })
		})
	}
}
