package agent_test

import (
	"strings"
	"testing"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
)

// An embedder's shared ServiceLister replaces the agent's own: the
// containers get its services' variables and the node never lists
// Services itself.
func TestSharedServiceLister(t *testing.T) {
	shared := agent.ServiceLister(func() ([]*v1.Service, error) {
		return []*v1.Service{{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
			Spec:       v1.ServiceSpec{ClusterIP: "10.0.0.9", Ports: []v1.ServicePort{{Name: "pg", Port: 5432, Protocol: v1.ProtocolTCP}}},
		}}, nil
	})
	node := agenttest.Start(t, agenttest.Options{Extra: []fx.Option{fx.Replace(shared)}})
	ctx := agenttest.Context(t)
	node.WaitReady(ctx)
	pod := node.WaitForPod(ctx, node.CreatePod(ctx, agenttest.Pod("web", "busybox")), agenttest.PodRunningAndReady)
	id := pod.Status.ContainerStatuses[0].ContainerID
	id = id[strings.Index(id, "://")+3:]
	envs := map[string]string{}
	for _, kv := range node.CRI.ContainerConfig(id).GetEnvs() {
		envs[kv.Key] = string(kv.Value)
	}
	if envs["DB_SERVICE_HOST"] != "10.0.0.9" || envs["DB_SERVICE_PORT"] != "5432" {
		t.Errorf("container env has DB_SERVICE_HOST=%q DB_SERVICE_PORT=%q, want the shared lister's service 10.0.0.9:5432",
			envs["DB_SERVICE_HOST"], envs["DB_SERVICE_PORT"])
	}
	for _, a := range node.Client.Actions() {
		if a.GetResource().Resource == "services" {
			t.Errorf("the agent %s services itself though a ServiceLister was given", a.GetVerb())
		}
	}
}
