package bench

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// stampedEvent is a watch event with the time it was received.
type stampedEvent struct {
	watch.Event
	at time.Time
}

// openFunc opens a watch from a resource version.
type openFunc func(ctx context.Context, resourceVersion string) (watch.Interface, error)

// resumingWatch delivers the events of a watch stamped with the time they
// arrived, read by its own goroutine so a busy consumer never looks slow to
// the apiserver. When the apiserver closes the watch anyway (it closes
// watchers it finds slow under load), it opens a new one from the last
// resource version delivered, so no event is lost; events in the gap arrive
// late. When the apiserver no longer has that version (410 Gone), it opens
// one from the current state instead, whose objects arrive as ADDED events
// (deletions in the gap are missed). Any other error event or a failed
// reopen ends it: the error is delivered on Err and Events is closed.
type resumingWatch struct {
	events   chan stampedEvent
	err      error // set before events is closed
	restarts atomic.Int32
	cancel   context.CancelFunc
	done     sync.WaitGroup
}

// watchResuming starts watching from resourceVersion (which must be a real
// one, from a list). Stop must be called.
func watchResuming(ctx context.Context, resourceVersion string, open openFunc) (*resumingWatch, error) {
	// Every watch is opened with the context Stop cancels, which closes it.
	ctx, cancel := context.WithCancel(ctx)
	w, err := open(ctx, resourceVersion)
	if err != nil {
		cancel()
		return nil, err
	}
	r := &resumingWatch{events: make(chan stampedEvent, 1024), cancel: cancel}
	r.done.Add(1)
	go r.run(ctx, w, resourceVersion, open)
	return r, nil
}

func (r *resumingWatch) run(ctx context.Context, w watch.Interface, rv string, open openFunc) {
	defer r.done.Done()
	defer close(r.events)
	for {
		for ev := range w.ResultChan() {
			at := time.Now()
			if ev.Type == watch.Error {
				w.Stop()
				if status, ok := ev.Object.(*metav1.Status); ok && status.Code == http.StatusGone {
					// The apiserver's watch window moved past rv (under
					// load, with many writers): start over from the current
					// state, which arrives as ADDED events.
					rv = ""
					break
				}
				r.err = fmt.Errorf("watch: %v", ev.Object)
				return
			}
			if m, err := meta.Accessor(ev.Object); err == nil {
				rv = m.GetResourceVersion()
			}
			select {
			case r.events <- stampedEvent{Event: ev, at: at}:
			case <-ctx.Done():
				w.Stop()
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		r.restarts.Add(1)
		var err error
		if w, err = open(ctx, rv); err != nil {
			if ctx.Err() == nil {
				r.err = fmt.Errorf("resume watch from %s: %w", rv, err)
			}
			return
		}
	}
}

// Events delivers the events; it is closed when the watch ends (see Err).
func (r *resumingWatch) Events() <-chan stampedEvent { return r.events }

// Err says why Events was closed: nil when the context ended or Stop was
// called. Read it only after Events was closed.
func (r *resumingWatch) Err() error { return r.err }

// Restarts is how many times the watch was resumed.
func (r *resumingWatch) Restarts() int { return int(r.restarts.Load()) }

// Stop ends the watch and waits for its goroutine.
func (r *resumingWatch) Stop() {
	r.cancel()
	r.done.Wait()
}
