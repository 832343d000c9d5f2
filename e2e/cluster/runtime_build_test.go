package cluster

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRuntimeModulesPinned: each module BuildContainerd2 builds is pinned
// by its module under e2e/tools, at a release (no pseudo-version).
func TestRuntimeModulesPinned(t *testing.T) {
	src, err := LocateSource()
	if err != nil {
		t.Fatal(err)
	}
	for dir, module := range map[string]string{"containerd": containerdModule, "runc": runcModule, "crictl": crictlModule} {
		v, _, err := requiredVersions(filepath.Join(src.Tools, dir, "go.mod"), module, module)
		if err != nil {
			t.Errorf("e2e/tools/%s: %v", dir, err)
			continue
		}
		if !strings.HasPrefix(v, "v") || strings.Count(v, "-") > 0 {
			t.Errorf("e2e/tools/%s pins %s %s, want a release", dir, module, v)
		}
	}
}

// TestDefaultContainerdSeries: $NODEKIT_E2E_CONTAINERD picks the series,
// 1.6 when unset; any other value is a mistake that panics.
func TestDefaultContainerdSeries(t *testing.T) {
	for env, want := range map[string]ContainerdSeries{"": ContainerdSeries16, "2": ContainerdSeries2, "1.6": ContainerdSeries16} {
		t.Setenv(ContainerdSeriesEnv, env)
		if got := DefaultContainerdSeries(); got != want {
			t.Errorf("%s=%q: DefaultContainerdSeries() = %q, want %q", ContainerdSeriesEnv, env, got, want)
		}
	}
	t.Setenv(ContainerdSeriesEnv, "1.7")
	defer func() {
		if recover() == nil {
			t.Errorf("%s=1.7: DefaultContainerdSeries did not panic", ContainerdSeriesEnv)
		}
	}()
	DefaultContainerdSeries()
}
