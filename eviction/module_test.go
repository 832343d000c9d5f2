package eviction_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/eviction"
)

// TestModuleWiresTheGraph gives the module its funcs and a signal through
// the graph and checks that Run evicts with them, sets its condition in the
// graph's *Pressure, and stops with the app.
func TestModuleWiresTheGraph(t *testing.T) {
	var mu sync.Mutex
	var killed []string
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = "p", "default", types.UID("uid-p")
	summary := &statsapi.Summary{
		Node: statsapi.NodeStats{Memory: &statsapi.MemoryStats{AvailableBytes: ptr.To[uint64](1 << 30), WorkingSetBytes: ptr.To[uint64](1 << 30)}},
		Pods: []statsapi.PodStats{{PodRef: statsapi.PodReference{Name: "p", Namespace: "default", UID: "uid-p"}}},
	}
	custom := eviction.Signal{
		Name: "custom.available", Resource: "example.com/thing", Condition: "ThingPressure",
		Observe: func(*statsapi.Summary) (eviction.Observation, bool) {
			return eviction.Observation{Available: 1, Capacity: 100}, true
		},
		Rank: func([]*v1.Pod, eviction.PodStatsFunc) {},
	}
	var m *eviction.Manager
	var pressure *eviction.Pressure
	reg := prometheus.NewPedanticRegistry()
	app := fxtest.New(t,
		fx.Supply(eviction.Options{Thresholds: eviction.ThresholdConfig{Hard: map[string]string{"custom.available": "10"}}}),
		fx.Provide(
			func() eviction.SummaryFunc {
				return func(context.Context) (*statsapi.Summary, error) { return summary, nil }
			},
			func() eviction.ActivePodsFunc { return func() []*v1.Pod { return []*v1.Pod{pod} } },
			func() eviction.KillPodFunc {
				return func(_ context.Context, p *v1.Pod, _ *int64, _ func(*v1.PodStatus)) error {
					mu.Lock()
					defer mu.Unlock()
					killed = append(killed, p.Name)
					return nil
				}
			},
			func() eviction.PodCleanedUpFunc { return func(types.UID) bool { return true } },
			func() prometheus.Registerer { return reg },
			func() logr.Logger { return logr.Discard() },
		),
		eviction.AsSignal(custom),
		eviction.Module,
		fx.Populate(&m, &pressure),
	)
	app.RequireStart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(killed)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no eviction through the module's graph")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !m.UnderPressure("ThingPressure") {
		t.Error("the group's signal set no condition")
	}
	if !pressure.UnderPressure("ThingPressure") {
		t.Error("the graph's *Pressure, which admission reads, does not show the Manager's condition")
	}
	app.RequireStop()
	if mfs, err := reg.Gather(); err != nil || len(mfs) == 0 {
		t.Errorf("metrics not registered on the graph's registerer: %v", err)
	}
}

func TestModuleFailsWithoutRequiredFuncs(t *testing.T) {
	app := fx.New(fx.NopLogger, fx.Supply(eviction.Options{}), eviction.Module)
	if app.Err() == nil {
		t.Error("the module started without Summary, ActivePods and KillPod")
	}
}
