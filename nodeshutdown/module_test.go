package nodeshutdown_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/nodeshutdown"
)

// chanSource signals a shutdown for each value sent.
type chanSource chan struct{}

func (s chanSource) Watch(ctx context.Context, handle func(context.Context, bool)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s:
			handle(ctx, true)
		}
	}
}

// TestModule: the Manager takes its funcs from the graph, watches the
// sources of the SourceGroup and records a shutdown in the graph's *Gate.
func TestModule(t *testing.T) {
	src := make(chanSource)
	killed := make(chan string, 1)
	var m *nodeshutdown.Manager
	var gate *nodeshutdown.Gate
	app := fxtest.New(t,
		fx.Supply(nodeshutdown.Options{GracePeriod: 10 * time.Second}),
		fx.Provide(
			func() nodeshutdown.ActivePodsFunc {
				return func() []*v1.Pod { return []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p"}}} }
			},
			func() nodeshutdown.KillPodFunc {
				return func(_ context.Context, pod *v1.Pod, _ *int64, _ func(*v1.PodStatus)) error {
					killed <- pod.Name
					return nil
				}
			},
		),
		nodeshutdown.AsSource(func() nodeshutdown.Source { return src }),
		nodeshutdown.Module,
		fx.Populate(&m, &gate),
	)
	app.RequireStart()
	defer app.RequireStop()
	src <- struct{}{}
	if name := <-killed; name != "p" {
		t.Errorf("killed %s, want p", name)
	}
	if m.ShutdownStatus() == nil || gate.ShutdownStatus() == nil {
		t.Error("the node does not report the shutdown in the graph's *Gate")
	}
}
