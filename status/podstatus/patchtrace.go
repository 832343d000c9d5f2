package podstatus

import (
	"context"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Phases of a pod start's status PATCH on the agent's side, the label
// values of nodekit_pod_start_status_patch_phase_duration_seconds. Each
// ends where the next begins; together they are the PATCH's round trip
// (nodekit_pod_start_status_patch_duration_seconds).
const (
	// phaseConnection: sent → a connection obtained (httptrace GotConn):
	// the client's rate limiter, building the request, the connection
	// pool.
	phaseConnection = "connection"
	// phaseWrite: → the request written (WroteRequest): a stream on the
	// shared HTTP/2 connection, its write lock, headers and body, flow
	// control.
	phaseWrite = "write"
	// phaseAnswer: → the answer's first byte as the client's connection
	// read loop took it (GotFirstResponseByte): the network both ways, the
	// API server (its audit log's received → answered is inside), and
	// the read loop reaching the answer's frame.
	phaseAnswer = "answer"
	// phaseRead: → Patch returned: the body, its decoding, the writer's
	// goroutine waking.
	phaseRead = "read"
)

// patchPhases are the phases in order.
var patchPhases = [...]string{phaseConnection, phaseWrite, phaseAnswer, phaseRead}

// patchTrace records when one request reached each phase's end through
// net/http/httptrace; its hooks run on the HTTP transport's goroutines
// (the read loop's among them), hence the atomics.
type patchTrace struct {
	clock clock.PassiveClock
	// gotConn, wrote and firstByte are UnixNano times, 0 until reached.
	gotConn, wrote, firstByte atomic.Int64
}

// trace returns ctx with hooks that record t's times for the request made
// with it.
func (t *patchTrace) trace(ctx context.Context) context.Context {
	now := func() int64 { return t.clock.Now().UnixNano() }
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:              func(httptrace.GotConnInfo) { t.gotConn.CompareAndSwap(0, now()) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { t.wrote.CompareAndSwap(0, now()) },
		GotFirstResponseByte: func() { t.firstByte.CompareAndSwap(0, now()) },
	})
}

// phases are the durations of the phases (patchPhases' order) of a
// request sent at sent and answered at answered, and false when a hook
// was not reached (a client that is not HTTP, as a fake clientset) or
// the times are out of order otherwise (a retried request). Over HTTP/2
// the request is written by a goroutine of its own, which can report it
// written after the connection's read loop took the answer's first byte,
// or only after the answer was returned (the server answered while the
// writer waited for a CPU): the write phase then ends at the first byte
// and the answer phase is empty.
func (t *patchTrace) phases(sent, answered time.Time) ([len(patchPhases)]time.Duration, bool) {
	times := [...]int64{sent.UnixNano(), t.gotConn.Load(), t.wrote.Load(), t.firstByte.Load(), answered.UnixNano()}
	const wrote, firstByte = 2, 3
	if times[firstByte] != 0 && (times[wrote] == 0 || times[wrote] > times[firstByte]) {
		times[wrote] = times[firstByte]
	}
	var d [len(patchPhases)]time.Duration
	for i := range d {
		if times[i+1] == 0 || times[i+1] < times[i] {
			return d, false
		}
		d[i] = time.Duration(times[i+1] - times[i])
	}
	return d, true
}
