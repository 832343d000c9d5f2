package podsource_test

import (
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/podsource"
)

func TestModuleMergesTheSourceGroup(t *testing.T) {
	mine := newChanSource("mine")
	extra := newChanSource("extra")
	var cfg *podsource.Config
	app := fxtest.New(t,
		fx.Supply(podsource.Options{Sources: []podsource.Source{extra}}),
		fx.Provide(
			func() clock.Clock { return testingclock.NewFakeClock(t0) },
		),
		podsource.AsSource(func() podsource.Source { return mine }),
		// A source turned off by configuration contributes nil.
		podsource.AsSource(func() podsource.Source { return nil }),
		podsource.Module,
		fx.Populate(&cfg),
	)
	app.RequireStart()
	mine.send(t, pod("uid-a", "a"))
	extra.send(t)
	seen := map[string]int{}
	for range 2 {
		select {
		case u := <-cfg.Updates():
			seen[u.Source] = len(u.Pods)
			if u.Source == "mine" && u.Pods[0].Annotations[podsource.ConfigFirstSeenAnnotationKey] != t0.Format(time.RFC3339Nano) {
				t.Errorf("the graph's clock was not used: %v", u.Pods[0].Annotations)
			}
		case <-time.After(wait.ForeverTestTimeout):
			t.Fatal("no update")
		}
	}
	if seen["mine"] != 1 || seen["extra"] != 0 || len(seen) != 2 {
		t.Errorf("updates per source = %v", seen)
	}
	app.RequireStop()
	if _, open := <-cfg.Updates(); open {
		t.Error("Updates still open after stop")
	}
}

func TestModuleWithoutOptionsValidates(t *testing.T) {
	if err := fx.ValidateApp(fx.NopLogger, podsource.Module, fx.Invoke(func(*podsource.Config) {})); err != nil {
		t.Fatal(err)
	}
}

func TestModuleRejectsDuplicateSources(t *testing.T) {
	app := fx.New(
		fx.NopLogger,
		podsource.AsSource(func() podsource.Source { return newChanSource("api") }),
		podsource.AsSource(func() podsource.Source { return newChanSource("api") }),
		podsource.Module,
	)
	if app.Err() == nil {
		t.Fatal("two sources named api were accepted")
	}
}
