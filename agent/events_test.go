package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
)

// fakeSink records what is written to it; fail, when set, answers each
// write instead.
type fakeSink struct {
	mu      sync.Mutex
	created []*v1.Event
	patched []*v1.Event
	fail    func() error
	block   chan struct{} // when set, each write waits for it to close
}

func (s *fakeSink) write(e *v1.Event, patch bool) (*v1.Event, error) {
	if s.block != nil {
		<-s.block
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		if err := s.fail(); err != nil {
			return nil, err
		}
	}
	c := e.DeepCopy()
	c.ResourceVersion = "1"
	// The caller keeps c: the sink keeps a copy of its own.
	if patch {
		s.patched = append(s.patched, c.DeepCopy())
	} else {
		s.created = append(s.created, c.DeepCopy())
	}
	return c, nil
}

func (s *fakeSink) Create(e *v1.Event) (*v1.Event, error)          { return s.write(e, false) }
func (s *fakeSink) Update(e *v1.Event) (*v1.Event, error)          { return s.write(e, true) }
func (s *fakeSink) Patch(e *v1.Event, _ []byte) (*v1.Event, error) { return s.write(e, true) }
func (s *fakeSink) counts() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.created), len(s.patched)
}
func (s *fakeSink) first() *v1.Event  { s.mu.Lock(); defer s.mu.Unlock(); return s.created[0] }
func idle(r *eventRecorder) bool      { r.mu.Lock(); defer r.mu.Unlock(); return !r.working }
func pendingLen(r *eventRecorder) int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.pending) }
func testPod() *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1", ResourceVersion: "7"}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func stopNow(t *testing.T, stop func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestEventRecorderSendsWhatClientGoSends: the event written is
// client-go's recorder's, field for field but its name and timestamps.
func TestEventRecorderSendsWhatClientGoSends(t *testing.T) {
	source := v1.EventSource{Component: "kubelet", Host: "node-a"}
	ours := &fakeSink{}
	r, stop := newEventRecorder(scheme.Scheme, source, logr.Discard(), writeEvents(ours, time.Millisecond))
	defer stopNow(t, stop)
	r.AnnotatedEventf(testPod(), map[string]string{"a": "b"}, v1.EventTypeWarning, "BackOff", "Back-off %s", "restarting")

	theirs := &fakeSink{}
	b := record.NewBroadcaster()
	defer b.Shutdown()
	b.StartRecordingToSink(theirs)
	b.NewRecorder(scheme.Scheme, source).AnnotatedEventf(testPod(), map[string]string{"a": "b"}, v1.EventTypeWarning, "BackOff", "Back-off %s", "restarting")

	waitFor(t, "both events written", func() bool {
		a, _ := ours.counts()
		b, _ := theirs.counts()
		return a == 1 && b == 1
	})
	got, want := ours.first(), theirs.first()
	for _, e := range []*v1.Event{got, want} {
		e.Name, e.FirstTimestamp, e.LastTimestamp = "", metav1.Time{}, metav1.Time{}
	}
	if got.String() != want.String() {
		t.Errorf("event written:\n%s\nclient-go's:\n%s", got, want)
	}
}

// TestEventRecorderRunsOnlyWhileEventsArePending: no goroutine before the
// first event or after the last one is written; a repeated event is
// aggregated into a patch of the first, as client-go's correlator does.
func TestEventRecorderRunsOnlyWhileEventsArePending(t *testing.T) {
	sink := &fakeSink{}
	r, stop := newEventRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: "n"}, logr.Discard(), writeEvents(sink, time.Millisecond))
	defer stopNow(t, stop)
	if r.done != nil {
		t.Fatal("a goroutine started before any event")
	}
	r.Event(testPod(), v1.EventTypeNormal, "Pulled", "pulled")
	r.Event(testPod(), v1.EventTypeNormal, "Pulled", "pulled")
	waitFor(t, "the event created and patched", func() bool { c, p := sink.counts(); return c == 1 && p == 1 })
	waitFor(t, "the goroutine to end", func() bool { return idle(r) })
	<-r.done
	if r.pending != nil {
		t.Errorf("queue kept after the events were written: cap %d", cap(r.pending))
	}
	r.Event(testPod(), v1.EventTypeNormal, "Started", "started")
	waitFor(t, "a later event written", func() bool { c, _ := sink.counts(); return c == 2 })
}

// TestEventRecorderRetries: transport errors are retried, a rejection is
// not.
func TestEventRecorderRetries(t *testing.T) {
	fails := 2
	sink := &fakeSink{}
	sink.fail = func() error {
		if fails > 0 {
			fails--
			return errors.New("connection refused")
		}
		return nil
	}
	r, stop := newEventRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: "n"}, logr.Discard(), writeEvents(sink, time.Millisecond))
	defer stopNow(t, stop)
	r.Event(testPod(), v1.EventTypeNormal, "Pulled", "pulled")
	waitFor(t, "the event written after two failures", func() bool { c, _ := sink.counts(); return c == 1 })

	rejected := 0
	sink.mu.Lock()
	sink.fail = func() error { rejected++; return apierrors.NewForbidden(v1.Resource("events"), "x", errors.New("no")) }
	sink.mu.Unlock()
	r.Event(testPod(), v1.EventTypeNormal, "Killing", "killing")
	waitFor(t, "the goroutine to end", func() bool { return idle(r) })
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if rejected != 1 {
		t.Errorf("a rejected event was tried %d times, want 1", rejected)
	}
}

// TestEventRecorderQueueAndStop: at most maxQueuedEvents wait, the rest
// are dropped; stop drops what waits and ends the retries.
func TestEventRecorderQueueAndStop(t *testing.T) {
	sink := &fakeSink{block: make(chan struct{})}
	r, stop := newEventRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: "n"}, logr.Discard(), writeEvents(sink, time.Hour))
	r.Event(testPod(), v1.EventTypeNormal, "First", "held by the sink")
	waitFor(t, "the first event taken", func() bool { return pendingLen(r) == 0 })
	for range maxQueuedEvents + 5 {
		r.Event(testPod(), v1.EventTypeNormal, "More", "queued")
	}
	if n := pendingLen(r); n != maxQueuedEvents {
		t.Errorf("%d events pending, want %d", n, maxQueuedEvents)
	}
	close(sink.block)
	stopNow(t, stop)
	if n := pendingLen(r); n != 0 {
		t.Errorf("%d events pending after stop", n)
	}
	r.Event(testPod(), v1.EventTypeNormal, "Late", "after stop")
	if n := pendingLen(r); n != 0 || !idle(r) {
		t.Errorf("an event after stop was queued (%d pending)", n)
	}
}

// TestEventRecorderStopDoesNotWaitPastItsContext: a write that hangs (an
// API server gone) does not hold the agent's stop beyond its deadline.
func TestEventRecorderStopDoesNotWaitPastItsContext(t *testing.T) {
	sink := &fakeSink{block: make(chan struct{})}
	defer close(sink.block)
	r, stop := newEventRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: "n"}, logr.Discard(), writeEvents(sink, time.Hour))
	r.Event(testPod(), v1.EventTypeNormal, "Hangs", "held by the sink")
	waitFor(t, "the event taken", func() bool { return pendingLen(r) == 0 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := stop(ctx); err != nil {
		t.Errorf("stop = %v, want nil", err)
	}
}
