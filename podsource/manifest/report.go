package manifest

import (
	"context"
	"fmt"
	"sync"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Event reasons a Reporter records on the Node.
const (
	// ReasonInvalid: a manifest cannot be used (YAML or JSON error, wrong
	// kind, invalid pod, a pod name another manifest already uses); its
	// pod is not run, or keeps running as last read.
	ReasonInvalid = "InvalidStaticPodManifest"
	// ReasonWarning: a manifest was used, but part of it was ignored
	// (unknown or duplicate fields, extra YAML documents, invalid items of
	// a list).
	ReasonWarning = "StaticPodManifestWarning"
	// ReasonUnavailable: a manifest could not be read (I/O error, HTTP
	// error, too large).
	ReasonUnavailable = "StaticPodManifestUnavailable"
)

// Reporter tells an operator about problems with static pod manifests: a
// log line and a Warning event on the Node, once per location (a file or a
// URL) while its problem stays the same, and a log line when it is gone.
// Sources call it on every read, so a problem that persists is not
// repeated every poll. Safe for concurrent use.
type Reporter struct {
	recorder record.EventRecorder
	node     func() *v1.ObjectReference

	mu       sync.Mutex
	reported map[string]problem
}

type problem struct{ reason, message string }

// maxEventMessage bounds an event's message (the API's limit for the
// message of an events.k8s.io Event's note is 1 KiB); the log line has it
// all.
const maxEventMessage = 1024

// NewReporter returns a Reporter recording events with recorder against
// the reference node returns at each event (see NodeReference); with a nil
// recorder or node, or when node returns nil, it only logs.
func NewReporter(recorder record.EventRecorder, node func() *v1.ObjectReference) *Reporter {
	return &Reporter{recorder: recorder, node: node, reported: make(map[string]problem)}
}

// Report reports that location has a problem: reason (one of the Reason
// constants) and err. Nothing happens when it is the problem last reported
// for location.
func (r *Reporter) Report(ctx context.Context, location, reason string, err error) {
	p := problem{reason: reason, message: err.Error()}
	r.mu.Lock()
	if r.reported[location] == p {
		r.mu.Unlock()
		return
	}
	r.reported[location] = p
	r.mu.Unlock()

	logger := klog.FromContext(ctx)
	if reason == ReasonWarning {
		logger.Info("Static pod manifest partly ignored", "location", location, "warning", p.message)
	} else {
		logger.Error(err, "Static pod manifest cannot be used", "location", location, "reason", reason)
	}
	var ref *v1.ObjectReference
	if r.recorder != nil && r.node != nil {
		ref = r.node()
	}
	if ref != nil {
		msg := fmt.Sprintf("Static pod manifest %s: %s", location, p.message)
		if len(msg) > maxEventMessage {
			cut := maxEventMessage - 3
			for cut > 0 && !utf8.RuneStart(msg[cut]) {
				cut--
			}
			msg = msg[:cut] + "..."
		}
		r.recorder.Event(ref, v1.EventTypeWarning, reason, msg)
	}
}

// Clear records that location has no problem; when it had one, it logs
// that the manifest is usable again.
func (r *Reporter) Clear(ctx context.Context, location string) {
	r.mu.Lock()
	_, had := r.reported[location]
	delete(r.reported, location)
	r.mu.Unlock()
	if had {
		klog.FromContext(ctx).Info("Static pod manifest is usable again", "location", location)
	}
}

// Retain forgets the locations keep returns false for (files that are
// gone), without logging.
func (r *Reporter) Retain(keep func(location string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for l := range r.reported {
		if !keep(l) {
			delete(r.reported, l)
		}
	}
}
