package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/internal/testenv"
)

// TestPodsOnContainerd16 is the containerd 1.6 lane: the suite runs on
// containerd 2, and the pod lifecycle table (TestPodsOnContainerd's) runs
// here once more on Debian's containerd 1.6, which nodes still run (no
// container events: the PLEG relists; no CDI).
func TestPodsOnContainerd16(t *testing.T) {
	requireContainerd(t)
	if err := cluster.CheckContainerdSeries(cluster.ContainerdSeries16); err != nil {
		testenv.Unavailable(t, "the containerd 1.6 lane: %v", err)
	}
	t.Parallel()
	n := newContainerdPodNodeWith(t, "ctr16-pods", nodeOptions{containerdSeries: cluster.ContainerdSeries16})
	// A healthy start logs no Error line: RuntimeConfig and the container
	// event stream, which containerd 1.6 answers Unimplemented, are optional
	// in the CRI (cri-client's error lines for them are V(4) info lines).
	log, err := os.ReadFile(n.agent.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(log)) {
		if strings.HasPrefix(line, "E") {
			t.Errorf("an Error line on a healthy start on containerd 1.6: %s", line)
		}
	}
	for _, tc := range append(append([]podTest{}, podTests...), containerdNodeStatusTests...) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, n)
		})
	}
}
