package stats_test

import (
	"context"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/cgroupdriver"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/stats"
)

func TestModuleValidates(t *testing.T) {
	err := fx.ValidateApp(
		fx.NopLogger,
		fx.Supply(stats.Options{}, runtime.Options{Endpoint: "unix:///run/x.sock"}),
		runtime.Module,
		stats.Module,
		fx.Invoke(func(*stats.Provider) {}),
	)
	if err != nil {
		t.Fatal(err)
	}
}

// TestModuleFillsOptionsFromTheGraph wires the provider with the runtime
// and cgroupdriver modules: the CRI services, the cgroup manager (for the
// "pods" system container), a volume stats func and the clock come from
// the graph.
func TestModuleFillsOptionsFromTheGraph(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	h.runPod("default", "web", "uid-1", "memory 8Mi", "app")
	h.setCgroup("/kubepods", cgroupValues{cpu: 1e9, usage: gib, rss: gib / 2, limit: 4 * gib})
	o := h.options()
	o.Runtime, o.Images, o.Clock = nil, nil, nil
	var p *stats.Provider
	app := fxtest.New(t,
		fx.Supply(o,
			runtime.Options{Endpoint: h.endpoint},
			cgroupdriver.Options{FS: cgroupdriver.FSOptions{Root: h.cgroup, Version: 1}},
		),
		fx.Provide(
			func() clock.Clock { return h.clock },
			func() stats.VolumeStatsFunc {
				return func(types.UID) (stats.PodVolumeStats, bool) {
					return stats.PodVolumeStats{Ephemeral: []statsapi.VolumeStats{{Name: "v"}}}, true
				}
			},
		),
		runtime.Module,
		cgroupdriver.Module,
		stats.Module,
		fx.Populate(&p),
	)
	app.RequireStart()
	defer app.RequireStop()
	s, err := p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 1 || len(s.Pods[0].VolumeStats) != 1 {
		t.Fatalf("pods = %+v, want web with one volume", s.Pods)
	}
	if s.Node.Rlimit.Time.Time != h.clock.Now() {
		t.Errorf("summary stamped %v, want the graph's clock %v", s.Node.Rlimit.Time, h.clock.Now())
	}
	pods := findSystemContainer(t, s.Node, statsapi.SystemContainerPods)
	check(t, "pods.memory.availableBytes", val(pods.Memory.AvailableBytes), uint64(4*gib-gib))
}
