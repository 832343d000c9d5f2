package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/cgroupdriver"
)

// versionDriver is a cgroup driver that only knows its version.
type versionDriver struct {
	cgroupdriver.Driver
	v int
}

func (d versionDriver) Version() (int, error) { return d.v, nil }

// TestCheckSwap: with a swap device listed in /proc/swaps the agent
// refuses to start with the kubelet's message unless failSwapOn is
// false; without one, or without the file, it starts; LimitedSwap needs
// cgroup v2.
func TestCheckSwap(t *testing.T) {
	dir := t.TempDir()
	const header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	off := write("off", header)
	on := write("on", header+"/swap.img                               file\t\t2097148\t\t0\t\t-2\n")
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name       string
		swaps      string
		failSwapOn bool
		behavior   string
		cgroup     int
		want       string
	}{
		{name: "swap off", swaps: off, failSwapOn: true, cgroup: 2},
		{name: "no /proc/swaps", swaps: missing, failSwapOn: true, cgroup: 2},
		{name: "swap on", swaps: on, failSwapOn: true, cgroup: 2, want: "running with swap on is not supported, please disable swap or set --fail-swap-on flag to false"},
		{name: "swap on, failSwapOn false", swaps: on, cgroup: 2},
		{name: "swap on, LimitedSwap", swaps: on, behavior: "LimitedSwap", cgroup: 2},
		{name: "LimitedSwap on cgroup v1", swaps: on, behavior: "LimitedSwap", cgroup: 1, want: "LimitedSwap but it is only supported with cgroupv2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{}
			cfg.Kubelet.FailSwapOn = ptr.To(tc.failSwapOn)
			cfg.Kubelet.MemorySwap.SwapBehavior = tc.behavior
			err := checkSwapWith(tc.swaps, cfg, versionDriver{v: tc.cgroup}, logr.Discard())
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("checkSwap: %v, want %q", err, tc.want)
			}
		})
	}
}
