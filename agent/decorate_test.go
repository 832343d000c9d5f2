package agent_test

import (
	"testing"

	"go.uber.org/fx"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/lease"
)

// TestDecoratorScope pins down what the package doc tells embedders: a
// decorator at the top level reaches nodekit's modules, one inside an
// fx.Module of the embedder's own does not.
func TestDecoratorScope(t *testing.T) {
	cfg := agenttest.Config(t, "node-a", "unix:///nonexistent.sock")
	shorter := fx.Decorate(func(o lease.Options) lease.Options {
		o.LeaseDurationSeconds = 20
		return o
	})
	for name, tc := range map[string]struct {
		opt  fx.Option
		want int32
	}{
		"top level":           {shorter, 20},
		"inside a module":     {fx.Module("mine", shorter), cfg.Kubelet.NodeLeaseDurationSeconds},
		"no decorator at all": {fx.Options(), cfg.Kubelet.NodeLeaseDurationSeconds},
	} {
		t.Run(name, func(t *testing.T) {
			var got lease.Options
			client := fake.NewClientset()
			app := fx.New(fx.NopLogger, fx.Supply(cfg), agent.Module, tc.opt,
				fx.Replace(&agent.Clients{Client: client, Heartbeat: client}),
				fx.Invoke(func(o lease.Options) { got = o }))
			if err := app.Err(); err != nil {
				t.Fatal(err)
			}
			if got.LeaseDurationSeconds != tc.want {
				t.Errorf("lease duration %d, want %d", got.LeaseDurationSeconds, tc.want)
			}
		})
	}
}
