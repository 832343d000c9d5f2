package cgroupdriver_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/nodekit/nodekit/cgroupdriver"
)

// TestCreatedPodCgroupLogVerbosity: a pod cgroup's creation, which the
// kubelet does not log, is logged at --v=4, not at the usual --v=2 (a line
// per pod start).
func TestCreatedPodCgroupLogVerbosity(t *testing.T) {
	for _, tc := range []struct {
		v      int
		logged bool
	}{{2, false}, {4, true}} {
		root := fakeCgroupV1()
		defer os.RemoveAll(root)
		m, err := cgroupdriver.New(cgroupdriver.Options{CgroupDriver: cgroupdriver.DriverCgroupfs, FS: cgroupdriver.FSOptions{Root: root}})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(tc.v), textlogger.Output(&out)))
		if _, err := m.EnsurePod(klog.NewContext(context.Background(), logger), burstablePod()); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), `"Created pod cgroup"`); got != tc.logged {
			t.Errorf("at --v=%d: logged %v, want %v:\n%s", tc.v, got, tc.logged, out.String())
		}
	}
}

// BenchmarkEnsurePodAtV2 creates a pod cgroup per iteration on a fake
// cgroup v1 tree with the agent's usual --v=2 logger (to io.Discard): the
// cgroup share of a pod start, its directories and files included.
func BenchmarkEnsurePodAtV2(b *testing.B) {
	root := fakeCgroupV1()
	defer os.RemoveAll(root)
	m, err := cgroupdriver.New(cgroupdriver.Options{CgroupDriver: cgroupdriver.DriverCgroupfs, FS: cgroupdriver.FSOptions{Root: root}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(2), textlogger.Output(io.Discard))))
	pod := burstablePod()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		pod.UID = types.UID(fmt.Sprintf("uid-%d", i))
		if _, err := m.EnsurePod(ctx, pod); err != nil {
			b.Fatal(err)
		}
	}
}
