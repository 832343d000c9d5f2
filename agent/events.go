package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	recordutil "k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/clock"
)

// Limits of the event queue, as client-go's event broadcaster's.
const (
	// maxQueuedEvents events wait to be written at most; more are dropped
	// (and logged), as the broadcaster drops them when its queue is full.
	maxQueuedEvents = 1000
	// maxTriesPerEvent writes of an event are tried before it is given up.
	maxTriesPerEvent = 12
	// eventRetryPeriod is the wait between two tries (the first one a
	// random part of it, so that the nodes of a cluster do not retry in
	// step after an API server outage).
	eventRetryPeriod = 10 * time.Second
)

// eventRecorder is a record.EventRecorder that makes events exactly as
// client-go's (record.NewBroadcaster().NewRecorder: the same reference,
// name, timestamps, source and reporting fields) and hands them, one at a
// time and in order, to handle, as the broadcaster's watcher does.
//
// client-go's broadcaster allocates its two queues of 1,000 events up
// front (about 64 KiB) and keeps two goroutines for its lifetime, whether
// or not an event is ever recorded: a sizeable share of an idle agent,
// many of which may share a process (agent/fleet). This one holds its
// pending events in a slice that grows with them and is released once
// they are handled, and runs a goroutine only while events are pending.
type eventRecorder struct {
	scheme *runtime.Scheme
	source v1.EventSource
	clock  clock.PassiveClock
	logger logr.Logger
	// handle writes (or logs) one event; ctx ends at stop.
	handle func(ctx context.Context, e *v1.Event)

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	pending []*v1.Event
	working bool // a goroutine is handling pending
	done    chan struct{}
}

// newEventRecorder returns a recorder of events from source that hands
// them to handle (with logger in its context), and a func that stops it
// (see stop).
func newEventRecorder(scheme *runtime.Scheme, source v1.EventSource, logger logr.Logger, handle func(context.Context, *v1.Event)) (*eventRecorder, func(context.Context) error) {
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), logger))
	r := &eventRecorder{scheme: scheme, source: source, clock: clock.RealClock{}, logger: logger, handle: handle, ctx: ctx, cancel: cancel}
	return r, r.stop
}

// Event records an event about object, as record.EventRecorder's.
func (r *eventRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.generate(object, nil, eventtype, reason, message)
}

// Eventf is Event with a formatted message.
func (r *eventRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.generate(object, nil, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf is Eventf with annotations on the event.
func (r *eventRecorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.generate(object, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// generate makes the event as client-go's recorder does and queues it.
func (r *eventRecorder) generate(object runtime.Object, annotations map[string]string, eventtype, reason, message string) {
	ref, err := reference.GetReference(r.scheme, object)
	if err != nil {
		r.logger.Error(err, "Could not construct reference, will not report event", "object", object, "eventType", eventtype, "reason", reason, "message", message)
		return
	}
	if !recordutil.ValidateEventType(eventtype) {
		r.logger.Error(nil, "Unsupported event type", "eventType", eventtype)
		return
	}
	t := metav1.Time{Time: r.clock.Now()}
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	e := &v1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:        recordutil.GenerateEventName(ref.Name, t.UnixNano()),
			Namespace:   namespace,
			Annotations: annotations,
		},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      t,
		LastTimestamp:       t,
		Count:               1,
		Type:                eventtype,
		Source:              r.source,
		ReportingInstance:   r.source.Host,
		ReportingController: r.source.Component,
	}
	r.enqueue(e)
}

// enqueue adds e to the pending events and starts a goroutine to handle
// them unless one runs. It never blocks.
func (r *eventRecorder) enqueue(e *v1.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.ctx.Err() != nil:
		r.logger.Error(nil, "Unable to record event (will not retry!): the recorder is stopped", "event", e)
		return
	case len(r.pending) >= maxQueuedEvents:
		r.logger.Error(nil, "Unable to record event: too many queued events, dropped event", "event", e)
		return
	}
	r.pending = append(r.pending, e)
	if !r.working {
		r.working = true
		r.done = make(chan struct{})
		go r.work(r.done)
	}
}

// work handles the pending events in order until none is left or the
// recorder stops, then returns (releasing the queue).
func (r *eventRecorder) work(done chan struct{}) {
	defer close(done)
	for {
		r.mu.Lock()
		if len(r.pending) == 0 || r.ctx.Err() != nil {
			r.pending, r.working = nil, false
			r.mu.Unlock()
			return
		}
		e := r.pending[0]
		r.pending[0] = nil
		r.pending = r.pending[1:]
		r.mu.Unlock()
		r.handle(r.ctx, e)
	}
}

// stop drops the pending events, cuts the retries of the one being handled
// short and waits, until ctx ends, for the goroutine handling it (a write
// in flight ends with its client's timeout); a write still in flight then
// is logged and left to finish, as client-go's broadcaster leaves it, and
// stop returns nil. Later events are dropped.
func (r *eventRecorder) stop(ctx context.Context) error {
	r.cancel()
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		r.logger.Info("Stopped the event recorder with an event write still in flight")
		return nil
	}
}

// writeEvents returns the handler that writes events to sink as client-go's
// StartRecordingToSink does: through an EventCorrelator (client-go's
// defaults: aggregation of similar events, a spam filter per source and
// object, counts of repeated events sent as patches), each write tried up
// to maxTriesPerEvent times retryPeriod (eventRetryPeriod) apart while the
// API server cannot be reached; an event the server rejects is not retried.
func writeEvents(sink record.EventSink, retryPeriod time.Duration) func(context.Context, *v1.Event) {
	correlator := record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{})
	return func(ctx context.Context, event *v1.Event) {
		logger := logr.FromContextOrDiscard(ctx)
		// The correlator changes the event: work on a copy.
		eventCopy := *event
		result, err := correlator.EventCorrelate(&eventCopy)
		if err != nil {
			logger.Error(err, "Event correlation failed")
		}
		if result.Skip {
			return
		}
		for tries := 1; ; tries++ {
			if writeEvent(logger, sink, result.Event, result.Patch, result.Event.Count > 1, correlator) {
				return
			}
			if tries >= maxTriesPerEvent {
				logger.Error(nil, "Unable to write event (retry limit exceeded!)", "event", event)
				return
			}
			delay := retryPeriod
			if tries == 1 {
				delay = time.Duration(float64(delay) * rand.Float64())
			}
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				logger.Error(nil, "Unable to write event (the recorder is stopped)", "event", event)
				return
			case <-t.C:
			}
		}
	}
}

// writeEvent writes event to sink, a patch of the existing event when
// update (a new event if that one is gone). It returns true when the event
// was written or is not to be retried.
func writeEvent(logger logr.Logger, sink record.EventSink, event *v1.Event, patch []byte, update bool, correlator *record.EventCorrelator) bool {
	var written *v1.Event
	var err error
	if update {
		written, err = sink.Patch(event, patch)
	}
	if !update || recordutil.IsKeyNotFoundError(err) {
		event.ResourceVersion = ""
		written, err = sink.Create(event)
	}
	if err == nil {
		// The server's name and resourceVersion for the next patch.
		correlator.UpdateState(written)
		return true
	}
	switch err.(type) {
	case *restclient.RequestConstructionError:
		logger.Error(err, "Unable to construct event (will not retry!)", "event", event)
		return true
	case *apierrors.StatusError:
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, v1.NamespaceTerminatingCause) {
			logger.V(5).Info("Server rejected event (will not retry!)", "event", event, "err", err)
		} else {
			logger.Error(err, "Server rejected event (will not retry!)", "event", event)
		}
		return true
	}
	// Transport errors and unexpected answers: retried.
	logger.Error(err, "Unable to write event (may retry after sleeping)", "event", event)
	return false
}
