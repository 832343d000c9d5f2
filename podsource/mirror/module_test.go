package mirror_test

import (
	"context"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/podsource/mirror"
)

func TestModuleUsesTheGraphsClient(t *testing.T) {
	cs := fake.NewClientset()
	var c *mirror.Client
	fxtest.New(t,
		fx.Supply(mirror.Options{NodeName: nodeName, Node: func() (*v1.Node, bool) { return node(), true }}),
		fx.Provide(func() kubernetes.Interface { return cs }),
		mirror.Module,
		fx.Populate(&c),
	).RequireStart().RequireStop()
	if err := c.Create(context.Background(), static("h1")); err != nil {
		t.Fatal(err)
	}
	if len(cs.Actions()) != 1 {
		t.Errorf("actions %v", cs.Actions())
	}
}
