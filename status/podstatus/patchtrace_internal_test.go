package podstatus

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestPatchPhasesWhenTheAnswerComesBeforeTheWrittenHook: over HTTP/2 the
// read loop can take the answer before the writing goroutine reports the
// request written, or the writer reports it only after the answer was
// returned; the phases still add up to the round trip, the write ending
// at the first byte. A hook never reached otherwise, or a connection
// obtained before the request was sent, is no trace.
func TestPatchPhasesWhenTheAnswerComesBeforeTheWrittenHook(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// trace has each hook run at its millisecond after t0; 0 is a hook
	// that never ran.
	trace := func(gotConn, wrote, firstByte int) *patchTrace {
		tr := &patchTrace{clock: clocktesting.NewFakePassiveClock(t0)}
		for _, h := range []struct {
			at   int
			hook interface{ Store(int64) }
		}{{gotConn, &tr.gotConn}, {wrote, &tr.wrote}, {firstByte, &tr.firstByte}} {
			if h.at != 0 {
				h.hook.Store(t0.Add(time.Duration(h.at) * time.Millisecond).UnixNano())
			}
		}
		return tr
	}
	sent, answered := t0, t0.Add(20*time.Millisecond)
	ms := time.Millisecond
	for _, c := range []struct {
		name                      string
		gotConn, wrote, firstByte int
		want                      [len(patchPhases)]time.Duration
	}{
		{"in order", 1, 3, 15, [...]time.Duration{1 * ms, 2 * ms, 12 * ms, 5 * ms}},
		{"written reported after the first byte", 1, 17, 15, [...]time.Duration{1 * ms, 14 * ms, 0, 5 * ms}},
		{"written reported after the answer", 1, 0, 15, [...]time.Duration{1 * ms, 14 * ms, 0, 5 * ms}},
	} {
		got, ok := trace(c.gotConn, c.wrote, c.firstByte).phases(sent, answered)
		if !ok || got != c.want {
			t.Errorf("%s: phases = %v, %v; want %v, true", c.name, got, ok, c.want)
		}
		var sum time.Duration
		for _, d := range got {
			sum += d
		}
		if sum != answered.Sub(sent) {
			t.Errorf("%s: phases add up to %v, want the round trip %v", c.name, sum, answered.Sub(sent))
		}
	}
	if _, ok := trace(1, 0, 0).phases(sent, answered); ok {
		t.Error("phases of a trace whose write and answer hooks never ran: ok, want no trace")
	}
	if _, ok := trace(-1, 3, 15).phases(sent, answered); ok {
		t.Error("phases of a connection obtained before the request was sent: ok, want no trace")
	}
}
