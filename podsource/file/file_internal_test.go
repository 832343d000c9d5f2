package file

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"
)

// Without change notifications, the directory is read every check period.
func TestPeriodicReadWithoutWatch(t *testing.T) {
	dir := t.TempDir()
	clk := testingclock.NewFakeClock(time.Now())
	src, err := New(Options{Path: dir, NodeName: "node-a", Clock: clk, CheckFrequency: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	src.watch = false
	out := make(chan []*v1.Pod)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	receive := func() []*v1.Pod {
		t.Helper()
		select {
		case pods := <-out:
			return pods
		case <-time.After(wait.ForeverTestTimeout):
			t.Fatal("no snapshot")
			return nil
		}
	}
	waitForTimer := func() {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true,
			func(context.Context) (bool, error) { return clk.HasWaiters(), nil }); err != nil {
			t.Fatal("the source is not waiting for its period")
		}
	}
	if pods := receive(); len(pods) != 0 {
		t.Fatalf("first snapshot %v", pods)
	}
	waitForTimer()
	data := "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}]}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	// Nothing is read before the period elapses.
	clk.Step(6 * time.Second)
	select {
	case pods := <-out:
		t.Fatalf("snapshot %v before the period", pods)
	case <-time.After(100 * time.Millisecond):
	}
	clk.Step(time.Second)
	if pods := receive(); len(pods) != 1 || pods[0].Name != "a-node-a" {
		t.Fatalf("snapshot %v", pods)
	}
	// An unchanged directory sends nothing; a removal is seen at the next
	// period.
	waitForTimer()
	clk.Step(7 * time.Second)
	waitForTimer()
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	clk.Step(7 * time.Second)
	if pods := receive(); len(pods) != 0 {
		t.Fatalf("snapshot %v after the removal", pods)
	}
}
