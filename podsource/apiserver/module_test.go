package apiserver_test

import (
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/apiserver"
)

func TestModuleAddsTheSourceToTheGroup(t *testing.T) {
	client := fake.NewClientset(newPod("default", "mine", "uid-1", nodeName))
	var cfg *podsource.Config
	app := fxtest.New(t,
		fx.Supply(apiserver.Options{NodeName: nodeName}),
		fx.Provide(func() kubernetes.Interface { return client }),
		apiserver.Module,
		podsource.Module,
		fx.Populate(&cfg),
	)
	app.RequireStart()
	defer app.RequireStop()
	select {
	case u := <-cfg.Updates():
		if u.Op != podsource.OpAdd || u.Source != "api" || len(u.Pods) != 1 || u.Pods[0].Name != "mine" {
			t.Errorf("update = %+v", u)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no update from the graph's client")
	}
}

func TestModuleRequiresANodeName(t *testing.T) {
	app := fx.New(fx.NopLogger,
		fx.Supply(apiserver.Options{}),
		fx.Provide(func() kubernetes.Interface { return fake.NewClientset() }),
		apiserver.Module,
		podsource.Module,
		fx.Invoke(func(*podsource.Config) {}),
	)
	if app.Err() == nil {
		t.Fatal("a source without a node name was accepted")
	}
}
