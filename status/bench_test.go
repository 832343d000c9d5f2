package status

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"
)

// benchReporter is a registered node with the default setters, 30 images
// and 2 runtime handlers, read from a prepared store as from the informer.
// It works on a testing.TB so that a test can print the patch sizes.
func benchReporter(b testing.TB, runtimeErr *error) (*Reporter, *testingclock.FakeClock, context.Context) {
	b.Helper()
	ctx := klog.NewContext(context.Background(), logr.Discard())
	images := make([]*runtimeapi.Image, 30)
	for i := range images {
		images[i] = &runtimeapi.Image{
			Id:          fmt.Sprintf("sha256:%064d", i),
			RepoTags:    []string{fmt.Sprintf("registry.example.com/team/app-%d:v1.2.%d", i, i)},
			RepoDigests: []string{fmt.Sprintf("registry.example.com/team/app-%d@sha256:%064d", i, i)},
			Size:        uint64(10_000_000 + i*1_000_000),
		}
	}
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	setters, err := DefaultSetters(SetterOptions{
		Hostname: "bench-node", NodeIPs: []net.IP{net.ParseIP("127.0.0.5")},
		Machine:        machineFunc(testMachine()),
		RuntimeVersion: func(context.Context) (string, string, error) { return "containerd", "1.6.20", nil },
		RuntimeHealth:  func(context.Context) (error, error) { return *runtimeErr, nil },
		ListImages:     func(context.Context) ([]*runtimeapi.Image, error) { return images, nil },
		RuntimeHandlers: func(context.Context) ([]*runtimeapi.RuntimeHandler, error) {
			return []*runtimeapi.RuntimeHandler{{Name: ""}, {Name: "runc"}}, nil
		},
		Clock: clk,
	})
	if err != nil {
		b.Fatal(err)
	}
	client := fake.NewClientset()
	r, err := New(Options{Client: client, NodeName: "bench-node", Setters: setters, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	created, err := client.CoreV1().Nodes().Create(ctx, r.initialNode(ctx), metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// Answer patches at once, so the benchmarks measure the reporter and not
	// the fake clientset's object tracker.
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, created, nil
	})
	if err := r.node.informer.GetStore().Add(created); err != nil {
		b.Fatal(err)
	}
	r.jitter = func() float64 { return 0.5 }
	r.lastReport = clk.Now()
	return r, clk, ctx
}

// BenchmarkStatusCycleIdle is the common cycle: read from the informer, run
// every setter, compare, send nothing.
func BenchmarkStatusCycleIdle(b *testing.B) {
	var runtimeErr error
	r, clk, ctx := benchReporter(b, &runtimeErr)
	b.ReportAllocs()
	for b.Loop() {
		clk.Step(time.Second)
		patched, err := r.tryUpdate(ctx, 0)
		if err != nil || patched {
			b.Fatalf("patched %v, err %v", patched, err)
		}
		r.lastReport = clk.Now()
	}
}

// BenchmarkStatusCycleReport is a forced report (only heartbeats moved); it
// reports the size of that patch, the one an idle node sends every 5 minutes.
func BenchmarkStatusCycleReport(b *testing.B) {
	var runtimeErr error
	r, clk, ctx := benchReporter(b, &runtimeErr)
	b.ReportAllocs()
	for b.Loop() {
		clk.Step(r.opts.ReportFrequency)
		if patched, err := r.tryUpdate(ctx, 0); err != nil || !patched {
			b.Fatalf("patched %v, err %v", patched, err)
		}
	}
	reportPatchBytes(b, r, patchReasonReport)
}

// BenchmarkStatusCycleReadyFlip is a cycle in which Ready flips; it reports
// the size of that patch.
func BenchmarkStatusCycleReadyFlip(b *testing.B) {
	var runtimeErr error
	r, clk, ctx := benchReporter(b, &runtimeErr)
	down := errors.New("container runtime not ready: RuntimeReady=false reason:ContainerdDown message:containerd is not running")
	b.ReportAllocs()
	for b.Loop() {
		clk.Step(defaultUpdateFrequency)
		runtimeErr = down // the store keeps the Ready node: every cycle is a flip
		if patched, err := r.tryUpdate(ctx, 0); err != nil || !patched {
			b.Fatalf("patched %v, err %v", patched, err)
		}
	}
	reportPatchBytes(b, r, patchReasonChanged)
}

func reportPatchBytes(b *testing.B, r *Reporter, reason string) {
	n := testutil.ToFloat64(r.metrics.patches.WithLabelValues(reason))
	bytes := testutil.ToFloat64(r.metrics.patchBytes.WithLabelValues(reason))
	if n == 0 {
		b.Fatalf("no %s patch sent", reason)
	}
	b.ReportMetric(bytes/n, "patch-bytes")
	b.Logf("typical %s patch: %.0f bytes", reason, bytes/n)
}

// TestTypicalPatchSizes prints (with -v) the size of the two typical patches
// of the benchmark node and keeps them in check: what an idle node sends
// every ReportFrequency must stay small.
func TestTypicalPatchSizes(t *testing.T) {
	var runtimeErr error
	r, clk, ctx := benchReporter(t, &runtimeErr)
	size := func(reason string) float64 {
		t.Helper()
		if patched, err := r.tryUpdate(ctx, 0); err != nil || !patched {
			t.Fatalf("patched %v, err %v", patched, err)
		}
		return testutil.ToFloat64(r.metrics.patchBytes.WithLabelValues(reason))
	}
	clk.Step(r.opts.ReportFrequency)
	report := size(patchReasonReport)
	clk.Step(defaultUpdateFrequency)
	runtimeErr = errors.New("container runtime not ready: RuntimeReady=false reason:ContainerdDown message:containerd is not running")
	flip := size(patchReasonChanged)
	t.Logf("typical patches of a node with 4 conditions and 30 images: forced report %.0f bytes, Ready flip %.0f bytes", report, flip)
	if report == 0 || report > 1024 {
		t.Errorf("a heartbeat-only report patch is %.0f bytes, want 1..1024", report)
	}
	if flip <= report || flip > 2048 {
		t.Errorf("a Ready flip patch is %.0f bytes, want more than the report's %.0f and at most 2048", flip, report)
	}
}
