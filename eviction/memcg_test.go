package eviction

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeMemcg records armed thresholds; Fire makes one's Wait return.
type fakeMemcg struct {
	mu    sync.Mutex
	armed []*fakeWaiter
	err   error
}

type fakeWaiter struct {
	dir      string
	usage    int64
	events   chan struct{}
	closed   chan struct{}
	closeOne sync.Once
}

func (f *fakeMemcg) open(dir string, usage int64) (memcgWaiter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	w := &fakeWaiter{dir: dir, usage: usage, events: make(chan struct{}), closed: make(chan struct{})}
	f.armed = append(f.armed, w)
	return w, nil
}

func (f *fakeMemcg) list() []*fakeWaiter {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*fakeWaiter(nil), f.armed...)
}

func (w *fakeWaiter) Wait() error {
	select {
	case <-w.events:
		return nil
	case <-w.closed:
		return errors.New("closed")
	}
}

func (w *fakeWaiter) Close() error { w.closeOne.Do(func() { close(w.closed) }); return nil }

func (w *fakeWaiter) isClosed() bool {
	select {
	case <-w.closed:
		return true
	default:
		return false
	}
}

func memcgHarness(t *testing.T, f *fakeMemcg) *harness {
	opts := hardOnly(map[string]string{"memory.available": "100Mi"})
	opts.Thresholds.EnforceNodeAllocatable = []string{"pods"}
	opts.KernelMemcgNotification = true
	opts.PodCgroupRoot = "/kubepods"
	h := newHarness(t, opts)
	h.m.memcg = &memcgNotifiers{open: f.open, armed: map[int]memcgWaiter{}}
	return h
}

func TestMemcgThresholdsArmed(t *testing.T) {
	f := &fakeMemcg{}
	h := memcgHarness(t, f)
	// Node: capacity 4Gi (1Gi available + 3Gi working set), usage 3.5Gi
	// (0.5Gi inactive file). Pods: limit 2Gi (512Mi + 1.5Gi).
	fine := func() {
		h.set(node{memAvail: 1 * Gi, memWS: 3 * Gi, memUsage: 3*Gi + 512*Mi, podsAvail: 512 * Mi, podsWS: 1536 * Mi}.summary(h.clock.Now()))
	}
	fine()
	h.sync()
	armed := f.list()
	got := ""
	for _, w := range armed {
		got += fmt.Sprintf("%s=%d ", w.dir, w.usage)
	}
	want := fmt.Sprintf("/sys/fs/cgroup/memory=%d /sys/fs/cgroup/memory/kubepods=%d ", 4*Gi-100*Mi+512*Mi, 2*Gi-100*Mi)
	if got != want {
		t.Fatalf("armed %s\nwant  %s", got, want)
	}
	// Not re-armed within the refresh interval, re-armed after it.
	h.clock.Step(10 * time.Second)
	fine()
	h.sync()
	if n := len(f.list()); n != 2 {
		t.Fatalf("%d thresholds armed within 10s, want 2", n)
	}
	h.clock.Step(time.Second)
	fine()
	h.sync()
	if n := len(f.list()); n != 4 {
		t.Fatalf("%d thresholds armed after 11s, want 4", n)
	}
	if !armed[0].isClosed() || !armed[1].isClosed() {
		t.Error("the old thresholds were not disarmed")
	}
	h.m.memcg.closeAll()
	for _, w := range f.list() {
		if !w.isClosed() {
			t.Errorf("%s left armed", w.dir)
		}
	}
}

func TestMemcgCrossingStartsAPass(t *testing.T) {
	f := &fakeMemcg{}
	h := memcgHarness(t, f)
	x := newPod("x")
	h.set(node{memAvail: 1 * Gi, memWS: 3 * Gi}.summary(h.clock.Now()), x)
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error)
	go func() { done <- h.m.Run(ctx) }()
	eventually(t, "the interval wait", func() bool { return h.summaryCalls() == 1 && h.clock.Waiters() == 1 })
	// Memory runs low between two intervals; the kernel says so.
	h.set(node{memAvail: 50 * Mi, memWS: 4 * Gi}.summary(h.clock.Now().Add(time.Second), podStats(x, podUse{memWS: 1 * Gi})), x)
	f.list()[0].events <- struct{}{}
	eventually(t, "an eviction without the clock moving", func() bool { return len(h.kills()) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, w := range f.list() {
		if !w.isClosed() {
			t.Errorf("%s still armed after Run returned", w.dir)
		}
	}
}

func TestMemcgUnsupportedIsDisabled(t *testing.T) {
	f := &fakeMemcg{err: fmt.Errorf("x: %w", errMemcgUnsupported)}
	h := memcgHarness(t, f)
	h.set(node{memAvail: 1 * Gi, memWS: 3 * Gi}.summary(h.clock.Now()))
	h.sync()
	if !h.m.memcg.disabled {
		t.Fatal("notifier not disabled on an unsupported kernel")
	}
	f.err = nil
	h.clock.Step(time.Minute)
	h.sync()
	if n := len(f.list()); n != 0 {
		t.Errorf("%d thresholds armed after the kernel said no", n)
	}
}

func TestMemcgIncompleteStats(t *testing.T) {
	if _, err := memcgUsageThreshold(ThresholdValue{}, nil); err == nil {
		t.Error("no error without memory stats")
	}
}

func TestMemcgRearmedWhenTheLayoutSettles(t *testing.T) {
	f := &fakeMemcg{}
	opts := hardOnly(map[string]string{"memory.available": "100Mi", "imagefs.available": "10%"})
	opts.KernelMemcgNotification = true
	h := newHarness(t, opts)
	h.m.memcg = &memcgNotifiers{open: f.open, armed: map[int]memcgWaiter{}}
	h.set(node{memAvail: 1 * Gi, memWS: 1 * Gi}.summary(h.clock.Now()))
	h.sync()
	first := f.list()
	if len(first) != 1 {
		t.Fatalf("%d armed, want 1", len(first))
	}
	// The layout becomes known (thresholds are rebuilt): the notifier is
	// re-armed at once for the rebuilt thresholds, the old one disarmed.
	h.clock.Step(time.Second)
	h.set(node{memAvail: 1 * Gi, memWS: 1 * Gi, nodefsAvail: 1 * Gi, nodefsCap: 10 * Gi, imgAvail: 1 * Gi, imgCap: 20 * Gi}.summary(h.clock.Now()))
	h.sync()
	if all := f.list(); len(all) != 2 || !first[0].isClosed() || all[1].isClosed() {
		t.Errorf("armed %d, first closed %v", len(all), first[0].isClosed())
	}
	h.m.memcg.closeAll()
}
