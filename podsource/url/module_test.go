package url_test

import (
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/podsource"
	podurl "github.com/nodekit/nodekit/podsource/url"
)

func TestModuleAddsTheSourceToTheGroup(t *testing.T) {
	srv := newServer(t, podYAML("web", "nginx"))
	var cfg *podsource.Config
	app := fxtest.New(t,
		fx.Supply(podurl.Options{URL: srv.URL, NodeName: nodeName}),
		podurl.Module,
		podsource.Module,
		fx.Populate(&cfg),
	)
	app.RequireStart()
	defer app.RequireStop()
	select {
	case u := <-cfg.Updates():
		if u.Op != podsource.OpAdd || u.Source != "http" || len(u.Pods) != 1 || u.Pods[0].Name != "web-node-a" {
			t.Errorf("update %v %s %v", u.Op, u.Source, u.Pods)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no update")
	}
}

func TestModuleWithoutURLAddsNothing(t *testing.T) {
	var cfg *podsource.Config
	app := fxtest.New(t,
		fx.Supply(podurl.Options{NodeName: nodeName}),
		podurl.Module,
		podsource.Module,
		fx.Populate(&cfg),
	)
	app.RequireStart()
	defer app.RequireStop()
	if !cfg.AllReady() {
		t.Error("the URL source was added without a URL")
	}
}
