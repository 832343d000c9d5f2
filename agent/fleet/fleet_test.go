package fleet_test

import (
	"context"
	"testing"

	"github.com/nodekit/nodekit/agent/fleet"
)

func TestStartRefusesIncompleteOptions(t *testing.T) {
	kubeconfig := func(int) string { return "/nonexistent" }
	for name, o := range map[string]fleet.Options{
		"no names":         {Dir: t.TempDir(), Kubeconfig: kubeconfig},
		"no directory":     {Names: []string{"a"}, Kubeconfig: kubeconfig},
		"no credentials":   {Names: []string{"a"}, Dir: t.TempDir()},
		"both credentials": {Names: []string{"a"}, Dir: t.TempDir(), Kubeconfig: kubeconfig, BootstrapKubeconfig: "/b"},
	} {
		if f, err := fleet.Start(context.Background(), o); err == nil {
			f.Stop() //nolint:errcheck // the test fails anyway
			t.Errorf("%s: Start succeeded", name)
		}
	}
}
