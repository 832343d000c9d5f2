package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestStartQueueGrantsEarliestBoundFirst(t *testing.T) {
	q := newStartQueue(1)
	ctx := context.Background()
	if err := q.acquire(ctx, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	base := time.Unix(1000, 0)
	// Ask in an order that is not the bound order: 3 s, 1 s, 2 s, then
	// another pod bound at 1 s, which comes after the first one.
	bounds := []time.Duration{3, 1, 2, 1}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i, b := range bounds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.acquire(ctx, base.Add(b*time.Second)); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			q.release()
		}()
		waitWaiting(t, q, i+1)
	}
	q.release()
	wg.Wait()
	if want := []int{1, 3, 2, 0}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("turns went to %v, want %v (earliest bound first, then first come)", order, want)
	}
}

// waitWaiting waits until n acquires wait in q.
func waitWaiting(t *testing.T, q *startQueue, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		got := len(q.waiting)
		q.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acquires waiting, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStartQueueBoundsConcurrency(t *testing.T) {
	const limit, pods = 3, 20
	q := newStartQueue(limit)
	var mu sync.Mutex
	running, peak := 0, 0
	var wg sync.WaitGroup
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.acquire(context.Background(), time.Unix(int64(i), 0)); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			q.release()
		}()
	}
	wg.Wait()
	if peak > limit {
		t.Fatalf("%d pods held a turn at once, want at most %d", peak, limit)
	}
	if q.free != limit || len(q.waiting) != 0 {
		t.Fatalf("after all released: %d free, %d waiting; want %d and 0", q.free, len(q.waiting), limit)
	}
}

func TestStartQueueCanceledWaiterLeavesNoTrace(t *testing.T) {
	q := newStartQueue(1)
	if err := q.acquire(context.Background(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- q.acquire(ctx, time.Time{}) }()
	waitWaiting(t, q, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled acquire returned %v, want context.Canceled", err)
	}
	q.release()
	if q.free != 1 || len(q.waiting) != 0 {
		t.Fatalf("%d free, %d waiting; want the one turn free", q.free, len(q.waiting))
	}
}

func TestStartTurnPausesAndResumes(t *testing.T) {
	q := newStartQueue(1)
	ctx := context.Background()
	a := &startTurn{q: q, bound: time.Unix(1, 0)}
	if err := a.resume(ctx); err != nil {
		t.Fatal(err)
	}
	// While a pulls, b (bound later) takes the turn; a, resuming, waits
	// for it, then goes ahead of c, bound later than a but waiting longer.
	a.pause()
	b := &startTurn{q: q, bound: time.Unix(2, 0)}
	if err := b.resume(ctx); err != nil {
		t.Fatal(err)
	}
	c := &startTurn{q: q, bound: time.Unix(3, 0)}
	cDone := make(chan struct{})
	go func() {
		if err := c.resume(ctx); err != nil {
			t.Error(err)
		}
		close(cDone)
	}()
	waitWaiting(t, q, 1)
	aDone := make(chan struct{})
	go func() {
		if err := a.resume(ctx); err != nil {
			t.Error(err)
		}
		close(aDone)
	}()
	waitWaiting(t, q, 2)
	b.pause()
	<-aDone
	select {
	case <-cDone:
		t.Fatal("the pod bound later got the turn before the one resuming after its pull")
	default:
	}
	a.pause()
	<-cDone
	c.pause()
	c.pause() // pausing twice gives back one turn
	if q.free != 1 {
		t.Fatalf("%d free turns, want 1", q.free)
	}
	var none *startTurn
	none.pause()
	if err := none.resume(ctx); err != nil {
		t.Fatal(err)
	}
	if newStartQueue(-1) != nil {
		t.Fatal("a negative limit made a queue, want no bound")
	}
}

func TestBoundTime(t *testing.T) {
	created := time.Unix(100, 0)
	scheduled := time.Unix(105, 0)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	if got := boundTime(pod); !got.Equal(created) {
		t.Fatalf("unscheduled pod: bound %v, want its creation %v", got, created)
	}
	pod.Status.Conditions = []v1.PodCondition{
		{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(scheduled)},
	}
	if got := boundTime(pod); !got.Equal(scheduled) {
		t.Fatalf("scheduled pod: bound %v, want %v", got, scheduled)
	}
}

// A turn's wait is observed on its clock: nothing for a turn taken at
// once, the time the turn was held by another for one that waited.
func TestStartTurnWaitIsObserved(t *testing.T) {
	q := newStartQueue(1)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(100, 0))
	waited := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "wait", Buckets: []float64{1, 5}})
	a := &startTurn{q: q, bound: time.Unix(1, 0), clock: clk, waited: waited}
	if err := a.resume(ctx); err != nil {
		t.Fatal(err)
	}
	b := &startTurn{q: q, bound: time.Unix(2, 0), clock: clk, waited: waited}
	bDone := make(chan struct{})
	go func() {
		if err := b.resume(ctx); err != nil {
			t.Error(err)
		}
		close(bDone)
	}()
	waitWaiting(t, q, 1)
	clk.Step(3 * time.Second)
	a.pause()
	<-bDone
	m := &dto.Metric{}
	if err := waited.Write(m); err != nil {
		t.Fatal(err)
	}
	if h := m.GetHistogram(); h.GetSampleCount() != 2 || h.GetSampleSum() != 3 {
		t.Fatalf("observed %d waits summing %gs, want 2 summing 3s (0 for the first turn, 3 for the second)", h.GetSampleCount(), h.GetSampleSum())
	}
}
