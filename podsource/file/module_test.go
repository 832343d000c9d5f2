package file_test

import (
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/file"
)

func TestModuleAddsTheSourceToTheGroup(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", manifestYAML("a", "nginx"))
	var cfg *podsource.Config
	app := fxtest.New(t,
		fx.Supply(file.Options{Path: dir, NodeName: nodeName}),
		file.Module,
		podsource.Module,
		fx.Populate(&cfg),
	)
	app.RequireStart()
	defer app.RequireStop()
	select {
	case u := <-cfg.Updates():
		if u.Op != podsource.OpAdd || u.Source != "file" || len(u.Pods) != 1 || u.Pods[0].Name != "a-node-a" {
			t.Errorf("update %v %s %v", u.Op, u.Source, u.Pods)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no update")
	}
}

func TestModuleWithoutPathAddsNothing(t *testing.T) {
	var cfg *podsource.Config
	app := fxtest.New(t,
		fx.Supply(file.Options{NodeName: nodeName}),
		file.Module,
		podsource.Module,
		fx.Populate(&cfg),
	)
	app.RequireStart()
	defer app.RequireStop()
	if !cfg.AllReady() {
		t.Error("a Config without sources is not ready: the file source was added")
	}
}
